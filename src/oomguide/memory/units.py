"""Sizes and the card, under the engine's name: ``oomguide.units``, re-exported.

The arithmetic lives outside this package so that ``oomguide explain`` can read a message without
importing ``oomguide.memory`` (its ``__init__`` imports torch). Never imports torch.
"""

from __future__ import annotations

from ..units import (
    CONTEXT_BYTES,
    DEFAULT_GPU_MEMORY,
    GiB,
    MiB,
    block_size,
    fmt_bytes,
    gib,
    parse_size,
    segment_size,
    usable_bytes,
)

__all__ = [
    "CONTEXT_BYTES",
    "DEFAULT_GPU_MEMORY",
    "GiB",
    "MiB",
    "block_size",
    "fmt_bytes",
    "gib",
    "parse_size",
    "segment_size",
    "usable_bytes",
]
