"""The kernels CUDA runs, chosen explicitly for a prediction on fake CPU tensors (PyTorch's
aten/src/ATen/native/transformers/sdp_utils_cpp.cpp: the CPU's flash attention refuses dropout).

On the CPU, ``F.scaled_dot_product_attention`` with dropout takes the math path (the full
(B, nh, T, T) matrix) and ``F.dropout`` keeps a mask in the input's dtype. On CUDA:

- SDPA's backend follows PyTorch's ``sdp_utils.cpp`` (priority flash, memory-efficient, math):
  flash attention needs compute capability 8.0 or newer, float16/bfloat16, no attention mask and a
  head size that is a multiple of 8 up to 256; memory-efficient attention runs from 5.0 on, in
  float32 and float16, and in bfloat16 only from 8.0 on. Both keep the output and a float32
  log-sum-exp per row, and regenerate the dropout mask from the RNG in backward (no mask stored).
  Otherwise the math path runs: ``_scaled_dot_product_attention_math`` upcasts float16/bfloat16
  inputs to float32 (unless ``allow_fp16_bf16_reduction_math_sdp``) and keeps the softmax of the
  (B, nh, T, T) scores, plus, with dropout, a 1-byte mask and the dropped matrix.
- ``F.dropout`` in training is ``native_dropout``: the output and a 1-byte (bool) mask.

``CudaKernels(capability)`` is a TorchFunctionMode that makes these choices; ``sdpa_backend`` says
which attention kernel a card runs. Never imports torch.cuda.

**Names.** A prediction names an allocation by the op that made it (``tracker.Allocation``): the op
CUDA runs, never a CPU kernel. Flash and memory-efficient attention run the CPU's flash kernel (the
same allocations) inside ``cuda_names``, where ``cuda_op_name`` gives the tracker CUDA's names
(``CUDA_ATTENTION_OPS``), forward and backward; the math path runs ops that CUDA runs under the same
names (its softmax is aten's ``_safe_softmax``).
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

HALF = (torch.float16, torch.bfloat16)

# The ops CUDA's F.scaled_dot_product_attention runs per backend (aten/src/ATen/native/transformers/
# attention.cpp, scaled_dot_product_attention: at::_scaled_dot_product_flash_attention and
# at::_scaled_dot_product_efficient_attention), and their backward (tools/autograd/derivatives.yaml).
CUDA_ATTENTION_OPS = {
    "flash": ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward"),
    "efficient": (
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
    ),
}
# The CPU's flash kernel that stands for both in the prediction: the output and a float32
# log-sum-exp per row forward, the three input gradients backward
_CPU_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_CPU_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

_NAMES = threading.local()  # .names: {CPU op: CUDA op} while a CPU kernel stands for a CUDA one


def cuda_op_name(op: str) -> str:
    """The name of the CUDA op that `op` (an ATen op the prediction runs now) stands for."""
    names = getattr(_NAMES, "names", None)
    return names.get(op, op) if names else op


@contextmanager
def cuda_names(backend: str):
    """Within: the CPU flash kernel's ops are named as `backend` ("flash", "efficient") on CUDA."""
    forward, backward = CUDA_ATTENTION_OPS[backend]
    outer = getattr(_NAMES, "names", None)
    _NAMES.names = {_CPU_FORWARD.__name__: forward, _CPU_BACKWARD.__name__: backward}
    try:
        yield
    finally:
        _NAMES.names = outer


def sdpa_backend(
    capability: tuple[int, int],
    dtype: torch.dtype,
    head_dim: int,
    has_mask: bool = False,
    dropout_p: float = 0.0,
) -> str:
    """'flash', 'efficient' or 'math': the attention kernel CUDA picks on a card of this compute capability."""
    sm = capability[0] * 10 + capability[1]
    flash = sm >= 80 and dtype in HALF and not has_mask and head_dim % 8 == 0 and head_dim <= 256
    if flash and sm in (86, 89) and head_dim > 192 and dropout_p > 0:
        flash = False  # sm86/sm89: no flash backward for head sizes over 192
    if flash:
        return "flash"
    alignment = 4 if dtype == torch.float32 else 8
    efficient = (
        sm >= 50 and head_dim % alignment == 0 and dtype in (torch.float32, torch.float16, torch.bfloat16)
    )
    if efficient and dtype == torch.bfloat16 and sm < 80:
        efficient = False
    return "efficient" if efficient else "math"


class CudaKernels(TorchFunctionMode):
    """Run attention and dropout with the memory of the kernels CUDA would pick on `capability`."""

    def __init__(self, capability: tuple[int, int] = (8, 0)):
        super().__init__()
        self.capability = tuple(capability)
        self.used: set[str] = set()  # the attention backends this run took

    def fresh(self) -> CudaKernels:
        """The same choices in a new mode (checkpoint's recomputation enters it again in backward)."""
        twin = CudaKernels(self.capability)
        twin.used = self.used
        return twin

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return self._attention(*args, **kwargs)
        if func is F.dropout:
            return self._dropout(*args, **kwargs)
        return func(*args, **kwargs)

    @staticmethod
    def _dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0.0 or input.numel() == 0:
            return F.dropout(input, p, training, inplace)
        out, _mask = torch.native_dropout(input, p, True)  # the fused CUDA kernel: a bool mask
        return out

    def _attention(
        self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
    ):
        backend = sdpa_backend(
            self.capability,
            query.dtype,
            query.size(-1),
            attn_mask is not None,
            dropout_p if query.requires_grad else 0.0,
        )
        self.used.add(backend)
        if backend != "math":
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                # made additive in the query's dtype first, as CUDA's scaled_dot_product_attention does
                # for memory-efficient attention (attention.cpp, convert_boolean_attn_mask)
                neg_inf = torch.scalar_tensor(float("-inf"), dtype=query.dtype, device=query.device)
                attn_mask = torch.where(attn_mask, 0.0, neg_inf)
            return _FusedAttention.apply(backend, query, key, value, attn_mask, is_causal, scale)
        return _math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)


class _FusedAttention(torch.autograd.Function):
    """Flash or memory-efficient attention: the output and a float32 log-sum-exp per row, kept for
    backward with the inputs; the dropout mask is never stored (regenerated from the RNG), which the
    CPU's flash kernel without dropout reproduces. Its ops run named as CUDA's (``cuda_names``).

    Saves what autograd's node of the CPU kernel saves (derivatives.yaml,
    _scaled_dot_product_flash_attention_for_cpu: query, key, value, output, logsumexp, attn_mask)."""

    @staticmethod
    def forward(ctx, backend, query, key, value, attn_mask, is_causal, scale):
        with cuda_names(backend):
            out, lse = _CPU_FORWARD(query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
        ctx.save_for_backward(query, key, value, out, lse, attn_mask)
        ctx.backend, ctx.is_causal, ctx.scale = backend, is_causal, scale
        ctx.set_materialize_grads(False)  # an unused output: no backward kernel runs, as in aten
        return out

    @staticmethod
    def backward(ctx, grad_out):
        if grad_out is None:
            return None, None, None, None, None, None, None
        query, key, value, out, lse, attn_mask = ctx.saved_tensors
        with cuda_names(ctx.backend):
            grads = _CPU_BACKWARD(
                grad_out,
                query,
                key,
                value,
                out,
                lse,
                0.0,
                ctx.is_causal,
                attn_mask=attn_mask,
                scale=ctx.scale,
            )
        return None, *grads, None, None, None


def _math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """aten's _scaled_dot_product_attention_math, with CUDA's dropout."""
    origin = query.dtype
    if origin in HALF and not _reduction_allowed():
        query, key, value = query.float(), key.float(), value.float()
    factor = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(query.size(-1)))
    scores = (query * factor) @ (key.transpose(-2, -1) * factor)
    length, source = query.size(-2), key.size(-2)
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool).tril()
        attn_mask = torch.zeros(length, source, dtype=scores.dtype).masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=scores.dtype).masked_fill(~attn_mask, float("-inf"))
        scores = scores + attn_mask
    # aten's math path normalises with _safe_softmax (zeros, not NaN, for a fully masked row): the
    # op CUDA runs, with softmax's output and backward (_softmax_backward_data)
    weights = torch.ops.aten._safe_softmax(scores, -1)
    if dropout_p > 0.0:
        weights, _mask = torch.native_dropout(weights, dropout_p, True)
    return (weights @ value).to(origin)


def _reduction_allowed() -> bool:
    """torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp (False by default)."""
    getter = getattr(torch._C, "_get_math_sdp_allow_fp16_bf16_reduction", None)
    return bool(getter()) if getter else False


# cuBLAS's workspace (aten/src/ATen/cuda/CublasHandlePool.cpp, ``parseChosenWorkspaceSize`` and
# ``getCurrentCUDABlasHandle``): the first matrix product a thread runs gets its cuBLAS handle a
# workspace from the caching allocator, kept for the process's life. Handles are per thread, so the
# forward (the main thread) and the backward (autograd's device thread) hold one each. Default size:
# 32 MiB on compute capability 9.x and newer ("32MiB for Hopper and Blackwell"), else ":4096:2:16:8"
# (2 x 4096 KiB + 8 x 16 KiB); ``CUBLAS_WORKSPACE_CONFIG=:SIZE_KIB:COUNT[...]`` sets it. In the
# caching allocator's history of nanoGPT on an H100 they are the two 32 MiB blocks allocated at the
# first matrix products and never freed.
BLAS_OPS = frozenset(
    (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "addmv",
        "mv",
        "dot",
        "vdot",
        "_addmm_activation",
        "_scaled_mm",
    )
)


def cublas_workspace_bytes(capability: tuple[int, int], environ=None) -> int:
    """The bytes of one cuBLAS handle's workspace on a card of `capability`."""
    import os
    import re

    config = (os.environ if environ is None else environ).get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", config)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return 4096 * 8 * 1024 if capability[0] >= 9 else 4096 * 1024 * 2 + 16 * 1024 * 8


def blas_thread() -> str:
    """Which thread's cuBLAS handle an op runs with: "backward" inside autograd's engine, else "forward"."""
    return "backward" if torch._C._current_graph_task_id() != -1 else "forward"
