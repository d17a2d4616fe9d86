"""A prediction of a CUDA run names its allocations by the ops CUDA runs, never by a CPU kernel.

The prediction runs on (fake) CPU tensors, where flash and memory-efficient attention are computed by
the CPU's ``_scaled_dot_product_flash_attention_for_cpu``; the largest and the failing allocation
(``oomguide check``'s "largest allocation" and "Tried to allocate ...", the JSON's
``largest_allocation`` and ``failing_allocation``) name the op the card runs instead: the one
``kernels.sdpa_backend`` picks for its compute capability and dtype.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from oomguide import memory
from oomguide.cli import main
from oomguide.config import load_config
from oomguide.memory import kernels, tracker

SMALL = ["n_layer=2", "n_head=4", "n_embd=128", "block_size=256", "vocab_size=512", "batch_size=4"]
FLASH, EFFICIENT = kernels.CUDA_ATTENTION_OPS["flash"], kernels.CUDA_ATTENTION_OPS["efficient"]
ATTENTION_OPS = {*FLASH, *EFFICIENT}

# (compute capability, dtype, the attention kernel the card runs)
CARDS = [
    ((8, 6), "bfloat16", "flash"),  # an RTX 30xx
    ((7, 5), "float16", "efficient"),  # a T4: no flash below sm80
    ((8, 6), "float32", "efficient"),  # flash has no float32
    ((6, 0), "bfloat16", "math"),  # a P100: no memory-efficient bfloat16 below sm80
    ((3, 7), "float32", "math"),  # a K80: nothing fused below sm50
]


def _cpu_spelling(name: str) -> bool:
    return "_for_cpu" in name or "cpu" in name.lower()


@pytest.mark.parametrize(("capability", "dtype", "backend"), [c for c in CARDS if c[2] != "math"])
def test_failing_attention_allocation_is_named_by_the_cuda_op(capability, dtype, backend):
    """The first allocation over the budget in attention, forward and backward: CUDA's op."""
    forward, backward = kernels.CUDA_ATTENTION_OPS[backend]
    dtype = getattr(torch, dtype)
    q, k, v = (torch.randn(2, 4, 64, 32, dtype=dtype, requires_grad=True) for _ in range(3))

    def full(*alive):
        """A tracker of a card already full with `alive`: the next allocation fails."""
        run = tracker.AllocationTracker()
        run.register(alive, "activations")
        run.budget = run.current
        return run

    with kernels.CudaKernels(capability) as chosen, full(q, k, v) as forward_run:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert chosen.used == {backend}
    assert forward_run.failing.describe() == f"{forward} -> {str(dtype)[6:]}[2, 4, 64, 32]"
    grad = torch.ones_like(out)
    with full(q, k, v, out, grad) as backward_run:
        out.backward(grad)
    assert backward_run.failing.describe() == f"{backward} -> {str(dtype)[6:]}[2, 4, 64, 32]"
    assert q.grad.shape == k.grad.shape == v.grad.shape == q.shape


def _allocation_names(monkeypatch) -> set[str]:
    """The names of every allocation the tracker describes from now on (largest and failing among them)."""
    names: set[str] = set()

    class Recorded(tracker.Allocation):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            names.add(self.op)

    monkeypatch.setattr(tracker, "Allocation", Recorded)
    return names


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(("capability", "dtype", "backend"), CARDS)
def test_every_allocation_is_named_by_an_op_the_card_runs(monkeypatch, capability, dtype, backend, compiled):
    """Each allocation of a train step (with dropout) and of an evaluation names an ATen op, never a
    CPU kernel; the attention ops named are those of the card's kernel, forward and backward."""
    names = _allocation_names(monkeypatch)
    config = load_config([], [*SMALL, f"dtype={dtype}", "dropout=0.1"])
    for phase, state in (("train_step", "training"), ("estimate_loss", "first")):
        result = memory.predict(
            config, phase, 2 * memory.GiB, state=state, capability=capability, compiled=compiled
        )
        assert result.attention == backend
    assert not [n for n in names if _cpu_spelling(n)], sorted(names)
    assert all(hasattr(torch.ops.aten, n) for n in names), sorted(names)
    if backend == "math":
        assert not names & ATTENTION_OPS
        assert {"bmm", "_safe_softmax", "_softmax_backward_data"} <= names
    else:
        assert names & ATTENTION_OPS == set(kernels.CUDA_ATTENTION_OPS[backend])


# The math path's (B, nh, T, T) scores outgrow everything else at T=1024 with a small vocabulary
ATTENTION_HEAVY = [
    "n_layer=2",
    "n_head=8",
    "n_embd=256",
    "block_size=1024",
    "vocab_size=512",
    "batch_size=4",
    "compile=False",
]


@pytest.mark.parametrize(("capability", "dtype", "backend"), CARDS)
def test_check_json_names_the_ops_the_card_runs(capsys, capability, dtype, backend):
    """`oomguide check --capability X.Y --json`: no CPU kernel in the output; on the math path the
    largest allocation is the attention's scores, computed by bmm as aten's math implementation does."""
    args = ["check", *[f"--set={s}" for s in ATTENTION_HEAVY], f"--set=dtype={dtype}"]
    args += ["--gpu-memory", "12GiB", "--capability", ".".join(map(str, capability))]
    assert main([*args, "--json", "--no-search"]) in (0, 1)
    out = capsys.readouterr().out
    assert "_for_cpu" not in out
    result = json.loads(out)
    for phase in result["phases"].values():
        assert phase["attention"] == backend
        assert not _cpu_spelling(phase["largest_allocation"])
        assert not _cpu_spelling(phase["failing_allocation"] or "")
    if backend == "math":
        heads, block, batch = 8, 1024, 4
        scores = f"bmm -> float32[{batch * heads}, {block}, {block}]"
        assert result["phases"]["train_step"]["largest_allocation"] == scores


def _nanogpt_configs() -> list[Path]:
    root = os.environ.get("OOMGUIDE_NANOGPT")
    return sorted((Path(root) / "config").glob("*.py")) if root else []


# the default card (8.6 assumed: flash), a 7.5 card in float16 (memory-efficient), a 6.0 card (math);
# the batch-size search prints no allocation names: the two others skip it
KERNEL_CHOICES = {
    "default": [],
    "sm75-float16": ["--gpu-memory", "16GiB", "--capability", "7.5", "--set", "dtype=float16", "--no-search"],
    "sm60": ["--gpu-memory", "16GiB", "--capability", "6.0", "--no-search"],
}


@pytest.mark.skipif(not _nanogpt_configs(), reason="needs a nanoGPT checkout: OOMGUIDE_NANOGPT=PATH")
@pytest.mark.parametrize("card", list(KERNEL_CHOICES))
@pytest.mark.parametrize("config", _nanogpt_configs(), ids=lambda p: p.name)
def test_nanogpt_configs_print_no_cpu_kernel(capsys, config, card):
    """Every config of nanoGPT's config/ as `oomguide check --json` predicts it (train_gpt2.py with
    batch_size=32, as issue 18 ran it), on each attention kernel: no CPU kernel's name in the output."""
    extra = ["--set", "batch_size=32"] if config.name == "train_gpt2.py" else []
    assert main(["check", str(config), *extra, *KERNEL_CHOICES[card], "--json"]) in (0, 1)
    out = capsys.readouterr().out
    assert json.loads(out)["phases"]
    assert "_for_cpu" not in out
