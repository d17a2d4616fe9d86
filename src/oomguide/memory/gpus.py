"""The card: by name (``gpus.json``), or by its memory and compute capability.

``find_gpu("RTX 4070")`` -> a ``Gpu``: total memory as PyTorch reports it and compute capability.
An unknown name raises ``UnknownGpu`` whose one-line message lists the closest names; a name
that several cards share (a card sold with two memory sizes, "RTX 4060 Ti") raises
``AmbiguousGpu`` listing them. ``resolve_card(name, gpu_memory, capability)`` is what
``--gpu``/``--gpu-memory``/``--capability`` mean together; ``card_memory`` and
``parse_capability`` read those options' values. The card's capability picks the attention kernel
(``kernels``), its memory the budget. Never imports torch.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..units import card_memory, check_memory  # noqa: F401  (read by cli's options, re-exported)
from .units import DEFAULT_GPU_MEMORY, GiB

TABLE = Path(__file__).with_name("gpus.json")
# a card of --gpu-memory only: the guide's readers have Ampere or newer (bfloat16, flash attention);
# the output says it is assumed, and --capability sets it
DEFAULT_CAPABILITY = (8, 6)


class UnknownGpu(ValueError):
    """A --gpu name that is not in the table (the message names the closest ones)."""


class AmbiguousGpu(UnknownGpu):
    """A --gpu name that several cards share, such as one sold with two memory sizes (the message lists them)."""


@dataclass(frozen=True)
class Gpu:
    name: str
    total_memory: int  # bytes, as torch.cuda.get_device_properties(0).total_memory
    capability: tuple[int, int]
    source: str | None = None
    memory_gb: float | None = None  # the size it is sold with
    capability_assumed: bool = False  # a card of --gpu-memory without --capability

    def describe(self) -> str:
        major, minor = self.capability
        return f"{self.name} ({self.total_memory / GiB:.2f} GiB, compute capability {major}.{minor})"


def indefinite_article(number: str) -> str:
    """'a' or 'an' before a number as English reads it aloud: an 8, an 11, an 18, an 80; a 12, a 110."""
    whole = number.split(".")[0]
    if whole.startswith("8") or whole in ("11", "18") or (len(whole) in (5, 6) and whole[:2] in ("11", "18")):
        return "an"
    return "a"


def default_gpu(total_memory: int = DEFAULT_GPU_MEMORY, capability: tuple[int, int] | None = None) -> Gpu:
    """A card known by its memory: with `capability`, or assumed Ampere or newer (and marked so)."""
    size = f"{total_memory / GiB:.2f}"
    name = f"{indefinite_article(size)} {size} GiB card"
    if capability is None:
        return Gpu(name, total_memory, DEFAULT_CAPABILITY, capability_assumed=True)
    return Gpu(name, total_memory, tuple(capability))


def parse_capability(text: str) -> tuple[int, int]:
    """'8.6' -> (8, 6): a compute capability as NVIDIA's CUDA GPUs table writes it."""
    match = re.fullmatch(r"\s*(\d{1,2})\.(\d)\s*", str(text))
    if not match or int(match.group(1)) < 3:
        raise ValueError(
            f"cannot read compute capability {text!r}: write major.minor as NVIDIA's CUDA GPUs table does, "
            "e.g. 8.6 (RTX 30 series), 7.5 (T4, RTX 20 series) or 6.0 (P100)"
        )
    return int(match.group(1)), int(match.group(2))


def resolve_card(
    name: str | None = None,
    gpu_memory: int | None = None,
    capability: tuple[int, int] | None = None,
) -> Gpu:
    """The card that --gpu, --gpu-memory and --capability describe.

    A name is looked up in the table (its memory and capability win over `gpu_memory`; a
    `capability` that contradicts the card's is refused); without one, the card is `gpu_memory`
    bytes (default 11.69 GiB) of `capability`, or of an assumed 8.6 when none is given.
    """
    if name:
        gpu = find_gpu(name)
        if capability is not None and tuple(capability) != gpu.capability:
            raise ValueError(
                f"--capability {'.'.join(map(str, capability))} contradicts --gpu {name!r}: the "
                f"{gpu.name} has compute capability {'.'.join(map(str, gpu.capability))}"
            )
        return gpu
    total = DEFAULT_GPU_MEMORY if gpu_memory is None else gpu_memory
    check_memory(total)
    return default_gpu(total, capability)


def _key(name: str) -> str:
    """A name as the table matches it: case, spaces, vendor words, "RTX"/"GTX" before a number, the
    form factor (SXM4, PCIe, HBM3) and the spelling of a size (16G, 16 GB, 16GiB) do not matter."""
    text = name.lower()
    text = re.sub(r"\b(\d+)\s*(?:gib|gb|g)\b", r"\1gb", text)
    text = re.sub(r"\b(?:nvidia|geforce|tesla|gpu|sxm\d*|pcie|hbm\d*e?)\b", "", text)
    text = re.sub(r"\b[rg]tx\s*(?=\d)", "", text)
    return re.sub(r"[^a-z0-9]", "", text)


def _rows() -> list[dict]:
    return json.loads(TABLE.read_text(encoding="utf-8"))["cards"]


@cache
def gpus() -> tuple[Gpu, ...]:
    return tuple(
        Gpu(
            c["name"],
            int(round(c["total_memory_gib"] * GiB)),
            tuple(c["compute_capability"]),
            c["source"],
            c.get("memory_gb"),
        )
        for c in _rows()
    )


@cache
def _index() -> dict[str, tuple[Gpu, ...]]:
    """Each name and alias -> the cards it names (more than one: the name is ambiguous)."""
    out: dict[str, tuple[Gpu, ...]] = {}
    for gpu, row in zip(gpus(), _rows(), strict=True):
        for name in [row["name"], *row["aliases"]]:
            cards = out.get(_key(name), ())
            if gpu not in cards:
                out[_key(name)] = (*cards, gpu)
    return out


def _sold_as(gpu: Gpu) -> str:
    """The card's name, with the memory it is sold with unless the name says it."""
    if not gpu.memory_gb or f"{gpu.memory_gb:g}GB" in gpu.name.replace(" ", ""):
        return gpu.name
    return f"{gpu.name} ({gpu.memory_gb:g} GB)"


def find_gpu(name: str) -> Gpu:
    index = _index()
    key = _key(name)
    cards = index.get(key, ())
    if len(cards) == 1:
        return cards[0]
    if cards:
        choices = " or ".join(_sold_as(gpu) for gpu in cards)
        raise AmbiguousGpu(
            f"GPU {name!r} names cards of different memory: give one of {choices} with --gpu, "
            "or the card's memory with --gpu-memory"
        )
    close = difflib.get_close_matches(key, list(index), n=4, cutoff=0.5)
    names = list(dict.fromkeys(gpu.name for k in close for gpu in index[k]))
    hint = f"; closest: {', '.join(names)}" if names else ""
    raise UnknownGpu(f"unknown GPU {name!r}{hint} (or give its memory with --gpu-memory)")
