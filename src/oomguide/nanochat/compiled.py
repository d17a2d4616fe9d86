"""What ``torch.compile`` changes in nanochat's logits: the fused loss, with the cast and the softcap fused in.

nanochat's GPT.forward (nanochat/gpt.py) ends with ``logits = self.lm_head(x)``, a slice to the
vocabulary, ``logits.float()``, ``softcap * torch.tanh(logits / softcap)`` and ``F.cross_entropy``.
Run eagerly, each of those pointwise steps writes a (B, T, V) float32 tensor. Inductor fuses the
chain into the loss's reduction: the compiled forward keeps the matmul's (B*T, V) output in the
compute dtype and a float32 log-sum-exp per row, and its backward writes one (B*T, V) gradient in
the compute dtype, which the matmul's backward reads (the (65536, 65536) bfloat16 buffer of
nanochat issue #443 at device batch 32, sequence 2048 and vocabulary 65536).

``CompiledHead`` models exactly that on the eager run: the cast and the scalar pointwise ops on the
logits return an alias of their input (no new buffer; the gradient passes through), and
``F.cross_entropy`` is oomguide's fused loss (``memory.compiled``). What a training step keeps for
its backward is not eager autograd's but the compiled partition's (``partition``).
Never imports torch.cuda.
"""

from __future__ import annotations

import weakref

import torch

from ..memory.compiled import CompiledAutocast

_HALF = (torch.bfloat16, torch.float16)


class _Alias(torch.autograd.Function):
    """A fused pointwise step: the same buffer, the gradient passed through."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        return grad


class CompiledHead(CompiledAutocast):
    """Inductor's fused loss over nanochat's logits (cast, softcap and cross_entropy in one)."""

    def __init__(self, vocab_sizes):
        super().__init__(None)
        self.vocab_sizes = set(vocab_sizes)
        self.head: dict = {}  # id -> weak reference: the logits' fused chain

    def _fused(self, t) -> bool:
        return isinstance(t, torch.Tensor) and (self._in_head(t) or self._logits(t))

    def _logits(self, t) -> bool:
        return t.dim() >= 2 and t.shape[-1] in self.vocab_sizes and t.dtype in _HALF

    def _in_head(self, t) -> bool:
        ref = self.head.get(id(t))
        return ref is not None and ref() is t

    def _alias(self, t):
        out = _Alias.apply(t)
        self.head[id(out)] = weakref.ref(out)
        return out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        first = args[0] if args else None
        if func in (torch.Tensor.float, torch.Tensor.to) and self._fused(first):
            wanted = kwargs.get("dtype", args[1] if len(args) > 1 else torch.float32)
            if func is torch.Tensor.float or wanted == torch.float32:
                return self._alias(first)
        if func is torch.Tensor.__getitem__ and self._logits(first) and _keeps_all(first, args[1]):
            return self._alias(first)  # logits[..., :vocab_size] with nothing padded: the same tensor
        if func in _POINTWISE and len(args) >= 1:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if len(tensors) == 1 and self._in_head(tensors[0]) and not kwargs:
                return self._alias(tensors[0])
        return super().__torch_function__(func, types, args, kwargs)


def _keeps_all(t, index) -> bool:
    """Whether ``t[index]`` is all of `t` (``[..., :n]`` with n at least the last dimension)."""
    if not (isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis):
        return False
    last = index[1]
    return isinstance(last, slice) and last.start in (None, 0) and last.step in (None, 1) and (
        last.stop is None or last.stop >= t.shape[-1]
    )


_POINTWISE = {
    torch.tanh,
    torch.Tensor.tanh,
    torch.Tensor.__truediv__,
    torch.Tensor.__mul__,
    torch.Tensor.__rmul__,
    torch.Tensor.div,
    torch.Tensor.mul,
    torch.div,
    torch.mul,
}
