"""Cards by name: total memory as PyTorch reports it and compute capability (``gpus.json``).

``find_gpu("RTX 4070")`` -> a ``Gpu``; an unknown name raises ``UnknownGpu`` whose one-line message
lists the closest names. The card's capability picks the attention kernel (``kernels``), its memory
the budget. Never imports torch.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .units import DEFAULT_GPU_MEMORY, GiB

TABLE = Path(__file__).with_name("gpus.json")
# a card of --gpu-memory only: the guide's readers have Ampere or newer (bfloat16, flash attention)
DEFAULT_CAPABILITY = (8, 6)


class UnknownGpu(ValueError):
    """A --gpu name that is not in the table (the message names the closest ones)."""


@dataclass(frozen=True)
class Gpu:
    name: str
    total_memory: int  # bytes, as torch.cuda.get_device_properties(0).total_memory
    capability: tuple[int, int]
    source: str | None = None

    def describe(self) -> str:
        major, minor = self.capability
        return f"{self.name} ({self.total_memory / GiB:.2f} GiB, compute capability {major}.{minor})"


def indefinite_article(number: str) -> str:
    """'a' or 'an' before a number as English reads it aloud: an 8, an 11, an 18, an 80; a 12, a 110."""
    whole = number.split(".")[0]
    if whole.startswith("8") or whole in ("11", "18") or (len(whole) in (5, 6) and whole[:2] in ("11", "18")):
        return "an"
    return "a"


def default_gpu(total_memory: int = DEFAULT_GPU_MEMORY) -> Gpu:
    """A card known by its memory only: assumed Ampere or newer."""
    size = f"{total_memory / GiB:.2f}"
    return Gpu(f"{indefinite_article(size)} {size} GiB card", total_memory, DEFAULT_CAPABILITY)


def _key(name: str) -> str:
    text = name.lower()
    for word in ("nvidia", "geforce", "tesla"):
        text = text.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", text)


@cache
def gpus() -> tuple[Gpu, ...]:
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    return tuple(
        Gpu(c["name"], int(round(c["total_memory_gib"] * GiB)), tuple(c["compute_capability"]), c["source"])
        for c in data["cards"]
    )


@cache
def _index() -> dict[str, Gpu]:
    out = {}
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    for gpu, row in zip(gpus(), data["cards"], strict=True):
        for name in [row["name"], *row["aliases"]]:
            out.setdefault(_key(name), gpu)
    return out


def find_gpu(name: str) -> Gpu:
    index = _index()
    key = _key(name)
    if key in index:
        return index[key]
    close = difflib.get_close_matches(key, list(index), n=4, cutoff=0.5)
    names = list(dict.fromkeys(index[k].name for k in close))
    hint = f"; closest: {', '.join(names)}" if names else ""
    raise UnknownGpu(f"unknown GPU {name!r}{hint} (or give its memory with --gpu-memory)")
