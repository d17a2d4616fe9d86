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
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

HALF = (torch.float16, torch.bfloat16)


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
            # flash / memory-efficient: output + float32 log-sum-exp; the dropout mask is never stored,
            # which the CPU's flash kernel (without dropout) reproduces
            out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale
            )
            return out[0]
        return _math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)


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
    weights = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights, _mask = torch.native_dropout(weights, dropout_p, True)
    return (weights @ value).to(origin)


def _reduction_allowed() -> bool:
    """torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp (False by default)."""
    getter = getattr(torch._C, "_get_math_sdp_allow_fp16_bf16_reduction", None)
    return bool(getter()) if getter else False
