"""`oomguide explain` on the message of a capped process: "… 11.44 GiB allowed; …".

A process capped with ``torch.cuda.set_per_process_memory_fraction`` (``pytest examples
--gpu-memory``, a reader who shares a GPU) prints what it was allowed and every other process on the
card. Where the card had more free memory than the cap left, the cap stopped the allocation: the
diagnosis compares with what was allowed, and closing other processes is not the advice. The
messages are the form PyTorch 2.11 printed on an H100 capped to a 12 GB card (issue 30).
"""

from __future__ import annotations

import re

import pytest

from oomguide import explain as ex
from oomguide import units

HINT = (
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)


def message(request, free, processes, this, allowed, allocated, cached) -> str:
    """PyTorch 2.1+'s message; `allowed` None: the same without a cap."""
    others = " ".join(f"Process {pid} has {size} memory in use." for pid, size in processes)
    cap = f" {allowed} allowed;" if allowed else ""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {request}. GPU 0 has a total "
        f"capacity of 79.18 GiB of which {free} is free. Including non-PyTorch memory, this process has "
        f"{this} memory in use. {others}{cap} Of the allocated memory {allocated} is allocated by PyTorch, "
        f"and {cached} is reserved by PyTorch but unallocated. {HINT}"
    )


# config/train_gpt2.py --compile=False --batch_size=8, capped to a 12 GB card: the second iteration
BATCH_8 = dict(
    request="1.54 GiB",
    free="40.85 GiB",
    processes=[(2163, "518.00 MiB"), (2453, "15.66 GiB"), (2422, "10.37 GiB"), (2460, "832.00 MiB")],
    this="10.94 GiB",
    allowed="11.44 GiB",
    allocated="7.81 GiB",
    cached="2.40 GiB",
)
# the estimate-loss-oom page's situation, capped to a 12 GB card: the first estimate_loss()
PAGE_A = dict(
    request="6.14 GiB",
    free="67.71 GiB",
    processes=[(506, "1.54 GiB"), (1782, "1.02 GiB"), (1781, "1.02 GiB")],
    this="7.85 GiB",
    allowed="11.44 GiB",
    allocated="6.80 GiB",
    cached="383.24 MiB",
)


def sections(result) -> list[str]:
    return [f"{page}#{anchor}" for page, anchor in result.sections]


def test_the_allowed_memory_is_the_limit():
    """12 GB, batch 8: other processes hold 27 GiB of a card with 40 GiB free. Uncapped, that would be
    the advice; capped, the cap stopped it, and what it left plus the cache could hold the request:
    expandable segments (the run fits with them, measured)."""
    result = ex.explain(message(**BATCH_8))
    assert result.diagnosis == ["allowed_limit", "fragmentation"]
    assert "estimate-loss-oom#hardware-setup" not in sections(result)
    assert sections(result)[0] == "estimate-loss-oom#expandable-segments"
    figs = result.figures
    assert figs.allowed == pytest.approx(units.parse_size("11.44GiB"), abs=units.MiB)
    assert result.limit == {"allowed_bytes": figs.allowed, "room_bytes": figs.allowed - figs.reserved}
    assert result.card_bytes == figs.allowed + units.CONTEXT_BYTES  # the card the cap emulates
    # the same figures without the cap: the card's free memory and the other processes decide
    uncapped = ex.explain(message(**dict(BATCH_8, allowed=None)))
    assert "allowed_limit" not in uncapped.diagnosis and "other_processes" in uncapped.diagnosis


def test_page_a_capped_names_its_cause():
    """The page's situation: the request does not fit in what the cap left, cache included; not other
    processes (the card had 67 GiB free)."""
    result = ex.explain(message(**PAGE_A))
    assert result.diagnosis == ["allowed_limit", "too_little_memory"]
    assert "estimate-loss-oom#hardware-setup" not in sections(result)


def test_a_cap_with_the_card_short_is_the_card():
    """Where the card had less free than the cap left, the card (and its other processes) stopped it."""
    result = ex.explain(message(**dict(BATCH_8, free="500.00 MiB")))
    assert "allowed_limit" not in result.diagnosis and "other_processes" in result.diagnosis
    assert result.limit is None


@pytest.mark.parametrize("lang", ["en", "ja", "zh", "de", "fr"])
def test_the_answer_says_what_was_allowed(lang):
    text = ex.render(ex.explain(message(**BATCH_8)), lang)
    line = next(ln for ln in text.splitlines() if "11.44 GiB" in ln and "40.85 GiB" in ln)
    # reserved by PyTorch, and what the cap left (computed sizes, written as the language writes them)
    assert re.search(r"10[.,]21\s?Gi?[Bo]", line) and re.search(r"1[.,]23\s?Gi?[Bo]", line), line
    assert "nvidia-smi" not in text
