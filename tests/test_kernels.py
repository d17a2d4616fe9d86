"""CUDA's kernels chosen explicitly (memory.kernels), the card table, and the CLI's --gpu / --alloc-conf."""

from __future__ import annotations

import pytest
import torch

from oomguide import memory
from oomguide.cli import main
from oomguide.config import load_config
from oomguide.memory.gpus import UnknownGpu, find_gpu
from oomguide.memory.kernels import sdpa_backend

SMALL = ["n_layer=2", "n_head=4", "n_embd=128", "block_size=256", "vocab_size=512", "batch_size=4"]


@pytest.mark.parametrize(
    ("capability", "dtype", "backend"),
    [
        ((8, 0), torch.bfloat16, "flash"),  # flash: sm80+, fp16/bf16
        ((9, 0), torch.float16, "flash"),
        ((8, 6), torch.float32, "efficient"),  # flash has no fp32; mem-efficient does
        ((7, 5), torch.float16, "efficient"),  # T4: no flash below sm80
        ((7, 5), torch.bfloat16, "math"),  # mem-efficient has no bf16 below sm80
        ((7, 0), torch.bfloat16, "math"),  # V100
    ],
)
def test_sdpa_backend_per_capability_and_dtype(capability, dtype, backend):
    assert sdpa_backend(capability, dtype, 64) == backend


def test_dropout_adds_only_one_byte_masks_on_cuda():
    """Dropout 0.1 with flash attention: the peak grows by the 1-byte masks of the dropout layers
    (embedding + two per block, each (B, T, C)), not by an attention matrix."""
    base = load_config([], SMALL)
    dropped = base.replace(dropout=0.1)
    a = memory.predict(base, "train_step", capability=(8, 0))
    b = memory.predict(dropped, "train_step", capability=(8, 0))
    masks = (1 + 2 * base.n_layer) * base.batch_size * base.block_size * base.n_embd
    assert b.peak_bytes - a.peak_bytes == masks
    assert a.attention == b.attention == "flash"


def test_math_attention_stores_the_matrix_in_float32():
    """bf16 on a T4: the math path keeps the float32 softmax of (B, nh, T, T) per layer."""
    config = load_config([], SMALL)
    flash = memory.predict(config, "train_step", capability=(8, 0))
    math = memory.predict(config, "train_step", capability=(7, 5))
    assert math.attention == "math"
    matrix = config.batch_size * config.n_head * config.block_size**2 * 4
    assert math.peak_bytes - flash.peak_bytes >= config.n_layer * matrix


def test_gpu_table():
    t4, a100 = find_gpu("T4"), find_gpu("a100-40gb")
    assert t4.capability == (7, 5) and a100.capability == (8, 0)
    assert find_gpu("NVIDIA GeForce RTX 4070").name == find_gpu("rtx4070").name
    with pytest.raises(UnknownGpu, match="GeForce RTX 4070"):
        find_gpu("RTX 4075")


def test_check_gpu_and_alloc_conf_bad_input(capsys):
    assert main(["check", "--gpu", "RTX 4075", "--no-search"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "closest" in err
    assert main(["check", "--alloc-conf", "expandable_segments:yes", "--no-search"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "expandable_segments" in err


def test_check_env_alloc_conf_is_read(monkeypatch, capsys):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:5")
    assert main(["check", "--no-search"]) == 2
    assert "PYTORCH_CUDA_ALLOC_CONF" in capsys.readouterr().err


def test_check_gpu_picks_the_attention_kernel(capsys):
    import json

    args = ["check", *[f"--set={s}" for s in SMALL], "--set=dtype=bfloat16", "--no-search", "--json"]
    args += ["--phase", "train_step"]
    main([*args, "--gpu", "T4"])
    t4 = json.loads(capsys.readouterr().out)
    main([*args, "--gpu", "A100-40GB"])
    a100 = json.loads(capsys.readouterr().out)
    assert t4["phases"]["train_step"]["attention"] == "math"
    assert a100["phases"]["train_step"]["attention"] == "flash"
    assert t4["phases"]["train_step"]["peak_bytes"] > a100["phases"]["train_step"]["peak_bytes"]
    assert t4["gpu_memory_bytes"] == find_gpu("T4").total_memory


@pytest.mark.parametrize(("capability", "dtype"), [((8, 6), torch.float32), ((7, 5), torch.float16)])
def test_boolean_mask_on_memory_efficient_attention(capability, dtype):
    """A boolean attn_mask with memory-efficient attention: made additive as CUDA does, the same result
    and gradients as PyTorch's own attention (the CPU kernel takes no boolean mask)."""
    import torch.nn.functional as F

    from oomguide.memory.kernels import CudaKernels

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.rand(2, 1, 16, 16) > 0.3
    mask[..., 0] = True  # no fully masked row
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected_grads = torch.autograd.grad(expected.float().sum(), (q, k, v))
    with CudaKernels(capability) as kernels:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert kernels.used == {"efficient"}
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.float().sum(), (q, k, v))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)
