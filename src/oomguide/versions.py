"""Which PyTorch a prediction models, and whether oomguide was verified on it.

The predictor runs PyTorch's own code on fake tensors, so what it predicts is what *this* PyTorch
allocates: fake tensors, autocast and the SDPA kernels are PyTorch internals that change between
releases. The range below is the one pyproject.toml declares; its two ends were run once
(``tests/test_engine.py`` and the examples' predictions, README "Verified PyTorch versions").
Behaviour that differs inside the range is chosen by :func:`release` of the running torch, here
and nowhere else, so a reader can find every version switch in one file.

Never imports torch.cuda or touches a GPU; importing this module imports torch only when asked.
"""

from __future__ import annotations

import re

# pyproject.toml: torch>=2.5,<2.16 (both ends verified; keep the two in step)
VERIFIED_MIN = (2, 5)
VERIFIED_MAX = (2, 15)

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def torch_version() -> str:
    """The running torch's version string, local label included (``2.13.0+cpu``, ``2.5.1+cu124``)."""
    import torch

    return str(torch.__version__)


def release(version: str | None = None) -> tuple[int, int, int]:
    """(major, minor, micro) of a torch version string; pre-release and local labels are dropped.

    >>> release("2.6.0a0+git1234")
    (2, 6, 0)
    """
    text = torch_version() if version is None else version
    match = _RELEASE.match(text.strip())
    if not match:
        raise ValueError(f"cannot read a PyTorch version from {text!r}")
    major, minor, micro = match.groups()
    return int(major), int(minor), int(micro or 0)


def verified(version: str | None = None) -> bool:
    """Whether oomguide was verified on this torch's minor release."""
    return VERIFIED_MIN <= release(version)[:2] <= VERIFIED_MAX


def verified_ends() -> tuple[str, str]:
    """The oldest and the newest verified minor release, as PyTorch numbers them ("2.5", "2.15")."""
    return f"{VERIFIED_MIN[0]}.{VERIFIED_MIN[1]}", f"{VERIFIED_MAX[0]}.{VERIFIED_MAX[1]}"


def verified_range() -> str:
    """The range for ``--json``: "2.5-2.15", ASCII for a program to read. A line for a person writes it
    as its language writes a range (``check_render``'s "torch_range": 2.5–2.15, 2.5〜2.15)."""
    return "-".join(verified_ends())


def describe(version: str | None = None) -> dict:
    """What `oomguide check --json` reports about the PyTorch its prediction models."""
    text = torch_version() if version is None else version
    return {"torch_version": text, "torch_verified": verified(text), "torch_verified_range": verified_range()}


def line(version: str | None = None) -> str:
    """One line for `oomguide check`'s human output."""
    text = torch_version() if version is None else version
    shown = "\u2013".join(verified_ends())  # 2.5–2.15, as English writes a range
    if verified(text):
        return f"PyTorch {text} (oomguide is verified on {shown})"
    return (
        f"PyTorch {text}: OUTSIDE the range oomguide is verified on ({shown}); "
        "the prediction follows this PyTorch's code but was never checked on it"
    )


# --- behaviour that differs inside the range ---------------------------------------------------
def checkpoint_recompute_hook() -> str:
    """The function of ``torch.utils.checkpoint`` whose ``context_fn`` sets the context of the
    non-reentrant recomputation, and that ``checkpoint()`` calls.

    Up to 2.13: ``_checkpoint_without_reentrant_generator(fn, preserve_rng_state, context_fn, ...,
    *args, **kwargs)``. From 2.14: ``checkpoint()`` calls
    ``_checkpoint_without_reentrant_generator_impl(fn, args, kwargs, *, context_fn=..., ...)``;
    the old name is kept as a wrapper that ``checkpoint()`` no longer goes through, so a hook on
    it never runs (on 2.15.0 every grad_checkpoint prediction failed with a CheckpointError).
    """
    if release()[:2] >= (2, 14):
        return "_checkpoint_without_reentrant_generator_impl"
    return "_checkpoint_without_reentrant_generator"
