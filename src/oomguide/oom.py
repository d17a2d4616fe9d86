"""Read a PyTorch CUDA out-of-memory message and explain it (placeholder until explain lands)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("file", nargs="?", default="-", metavar="FILE", help="a file with the message, or - for stdin")


def run(args) -> int:
    raise NotImplementedError("oomguide explain is not written yet")
