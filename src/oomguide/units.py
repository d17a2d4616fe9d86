"""Sizes and the card: bytes <-> GiB/MiB, the default 12 GB card, the CUDA context set aside, and
how the caching allocator rounds a request.

Pure arithmetic: never imports torch, nor anything that does. ``oomguide explain`` reads a message
with these alone; ``oomguide.memory`` (whose ``__init__`` imports torch) re-exports them.
"""

from __future__ import annotations

import re

GiB = 1024**3
MiB = 1024**2
DEFAULT_GPU_MEMORY = int(11.69 * GiB)  # what PyTorch reports as total capacity of a 12 GB card
# The CUDA context and libraries live outside PyTorch's allocator ("a few hundred MiB";
# https://github.com/pytorch/pytorch/issues/58466, docs/en/verify.md#gpu-memory).
# The 224.90 MiB of the message that article A analyses is not that: it is memory PyTorch reserved
# but had not allocated. That message's non-PyTorch share of the process is 7.04 GiB in use - 6.78 GiB
# allocated - 224.90 MiB reserved-but-unallocated = about 41 MiB (give or take 10 MiB for the
# two-decimal rounding), a context loaded lazily; cuBLAS/cuDNN workspaces and eager module loading
# make it a few hundred MiB. The predictor sets this much aside:
CONTEXT_BYTES = 256 * MiB


def usable_bytes(gpu_memory: int, context_bytes: int = CONTEXT_BYTES) -> int:
    """What the caching allocator can get on a card of `gpu_memory` bytes (the CUDA context set aside)."""
    return gpu_memory - context_bytes


_UNITS = {"gib": GiB, "gb": 1000**3, "mib": MiB, "mb": 1000**2, "g": GiB, "m": MiB}


def parse_size(text: str) -> int:
    """'11.69GiB', '12GB', '3686MiB' -> bytes. GiB/MiB are powers of 1024, GB/MB of 1000."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]+)\s*", str(text))
    if not match:
        raise ValueError(
            f"cannot read size {text!r}: write a number and a unit, e.g. 11.69GiB, 12GB or 4096MiB"
        )
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit {match.group(2)!r} in {text!r} (use GiB, GB, MiB or MB)")
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"size must be above zero, got {text!r}")
    return size


def gib(nbytes: float) -> float:
    return nbytes / GiB


def fmt_bytes(nbytes: float) -> str:
    if nbytes >= GiB:
        return f"{nbytes / GiB:.2f} GiB"
    return f"{nbytes / MiB:.2f} MiB"


def block_size(nbytes: int) -> int:
    """Bytes the caching allocator books for a tensor: rounded up to 512 (``kMinBlockSize``, ``round_size``
    in PyTorch's c10/cuda/CUDACachingAllocator.cpp)."""
    return max(512, -(-nbytes // 512) * 512)


def segment_size(nbytes: int) -> int:
    """The size an OOM message prints as "Tried to allocate": the segment the allocator asks CUDA for.

    Up to 1 MiB: a 2 MiB segment; below 10 MiB: a 20 MiB segment; above: rounded up to 2 MiB
    (``get_allocation_size`` in c10/cuda/CUDACachingAllocator.cpp: kSmallSize, kSmallBuffer,
    kMinLargeAlloc, kLargeBuffer, kRoundLarge).
    """
    size = block_size(nbytes)
    if size <= MiB:
        return 2 * MiB
    if size < 10 * MiB:
        return 20 * MiB
    return -(-size // (2 * MiB)) * (2 * MiB)


def card_memory(text: str) -> int:
    """--gpu-memory's value in bytes: a size above the CUDA context that ``usable_bytes`` sets aside."""
    if str(text).lstrip().startswith("-"):
        raise ValueError(f"a card's memory cannot be negative, got {text!r}: give its total, e.g. 11.69GiB")
    size = parse_size(text)
    check_memory(size, text)
    return size


def check_memory(size: int, text: str | None = None) -> None:
    """A ValueError (one line) when a card of `size` bytes leaves nothing for PyTorch."""
    if size <= CONTEXT_BYTES:
        given = repr(text) if text is not None else fmt_bytes(size)
        raise ValueError(
            f"a card of {given} leaves nothing for PyTorch once the {fmt_bytes(CONTEXT_BYTES)} of the CUDA "
            "context are set aside: give the card's total memory as PyTorch reports it, e.g. 11.69GiB"
        )
