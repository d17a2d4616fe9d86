"""What CUDA does differently from the fake-CPU run, in one place (docs/en/verify.md#cpu-path; sources:
c10/cuda/CUDACachingAllocator.cpp, ATen/autocast_mode.h, aten/src/ATen/native/LossNLL.cpp).

- the caching allocator's arithmetic: 512-byte blocks, the segment an OOM message names
  (``block_size``, ``segment_size``: torch-free, in ``oomguide.units``, so that explain reads a
  message without torch; re-exported here);
- CUDA autocast's op lists (``CudaAutocast``), its weight-cast cache and CUDA's cross_entropy path;
- checkpointed recomputation under that autocast.

Never touches a GPU and never imports torch.cuda: it models CUDA on any tensors.
"""

from __future__ import annotations

import functools
from contextlib import ExitStack, contextmanager, nullcontext

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from .. import loop, versions
from .units import block_size, segment_size  # noqa: F401  (re-exported: the allocator's rounding)

# what pytree takes as a leaf among a call's arguments (the fast path of map_arguments)
_LEAF_TYPES = (
    int,
    float,
    bool,
    str,
    type(None),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


def map_arguments(fn, value):
    """``tree_map(fn, value)`` for a call's ``(args, kwargs)``; without pytree's walk when no argument
    is a container (the usual call), with it otherwise: the same result either way."""
    if isinstance(value, tuple) and len(value) == 2 and type(value[0]) is tuple and type(value[1]) is dict:
        args, kwargs = value
        if all(isinstance(a, torch.Tensor) or type(a) in _LEAF_TYPES for a in args) and all(
            isinstance(v, torch.Tensor) or type(v) in _LEAF_TYPES for v in kwargs.values()
        ):
            return tuple(fn(a) for a in args), {k: fn(v) for k, v in kwargs.items()}
    return tree_map(fn, value)


def _spellings(op: str) -> list:
    """The Python functions that reach ATen op `op`: F.op, torch.op, Tensor.op, torch.linalg.<rest>."""
    owners = [F, torch, torch.Tensor]
    if op.startswith("linalg_"):
        owners, op = [torch.linalg], op[len("linalg_") :]
    return [getattr(owner, op) for owner in owners if hasattr(owner, op)]


def _ops(names: str, *extra: str) -> set:
    out = set()
    for name in names.split():
        out.update(_spellings(name))
    for name in extra:  # operators: Tensor.__matmul__ ...
        out.add(getattr(torch.Tensor, name))
    return out


# CUDA autocast's lists as ATen/autocast_mode.h declares them (torch 2.13; tests/test_predict_checks.py
# reads the installed header and fails when an op is missing here). Ops with no Python spelling
# (_convolution, the SDPA kernels, fused RNN cells) are reached through the functions listed.
_LOWER = _ops(
    "addbmm addmm addmv addr baddbmm bmm chain_matmul conv1d conv2d conv3d conv_tbc conv_transpose1d "
    "conv_transpose2d conv_transpose3d einsum gru_cell linalg_multi_dot linalg_vecdot linear lstm_cell "
    "matmul mm mv prelu rnn_relu_cell rnn_tanh_cell scaled_dot_product_attention",
    "__matmul__",
    "__rmatmul__",
)
_FLOAT32 = _ops(
    "acos asin binary_cross_entropy_with_logits cdist cosh cosine_embedding_loss cosine_similarity dist "
    "erfinv exp expm1 frobenius_norm group_norm hinge_embedding_loss huber_loss kl_div l1_loss "
    "layer_norm log log10 log1p log2 logsumexp margin_ranking_loss mse_loss multi_margin_loss "
    "multilabel_margin_loss native_layer_norm nll_loss nll_loss2d nuclear_norm pdist poisson_nll_loss "
    "pow reciprocal renorm rms_norm rsqrt sinh smooth_l1_loss soft_margin_loss softplus tan "
    "triplet_margin_loss upsample_bicubic2d upsample_bilinear2d upsample_linear1d upsample_nearest1d "
    "upsample_nearest2d upsample_nearest3d upsample_trilinear3d norm normalize",
    "__pow__",
    "__rpow__",
)
# float32 unless the call names a dtype (autocast's "fp32_set_opt_dtype")
_FLOAT32_UNLESS_DTYPE = _ops(
    "cumprod cumsum linalg_matrix_norm linalg_vector_norm log_softmax prod softmax sum"
)


class CudaAutocast(TorchFunctionMode):
    """``torch.autocast('cuda', dtype)`` as CUDA does it, usable on fake CPU tensors.

    Casts the floating-point arguments of CUDA autocast's lower-precision ops to `dtype` and of its
    float32 ops to float32, caches the low-precision copies of leaf weights for the duration of the
    context (as autocast does), and runs ``F.cross_entropy`` the way CUDA does (LossNLL.cpp).
    """

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.cache: dict[int, torch.Tensor] = {}

    def __exit__(self, *exc):
        self.cache.clear()
        return super().__exit__(*exc)

    def _cast(self, value, to):
        def cast(t):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype in (to, torch.float64):
                return t
            if to == self.dtype and t.dtype == torch.float32 and t.is_leaf and t.requires_grad:
                if id(t) not in self.cache:
                    self.cache[id(t)] = t.to(to)
                return self.cache[id(t)]
            return t.to(to)

        return map_arguments(cast, value)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.cross_entropy:
            return self._cross_entropy(*args, **kwargs)
        if func in _LOWER:
            args, kwargs = self._cast((args, kwargs), self.dtype)
        elif func in _FLOAT32:
            args, kwargs = self._cast((args, kwargs), torch.float32)
        elif func in _FLOAT32_UNLESS_DTYPE and kwargs.get("dtype") is None:
            first = args[0]
            if isinstance(first, torch.Tensor) and first.dtype in (torch.float16, torch.bfloat16):
                kwargs = dict(kwargs, dtype=torch.float32)
        return func(*args, **kwargs)

    def _cross_entropy(
        self,
        input,
        target,
        weight=None,
        size_average=None,
        ignore_index=-100,
        reduce=None,
        reduction="mean",
        label_smoothing=0.0,
    ):
        if input.dtype not in (torch.float16, torch.bfloat16):
            return F.cross_entropy(
                input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing
            )
        if size_average is not None or reduce is not None:
            reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
        # cross_entropy_loss is not on CUDA's lists: its log_softmax keeps the input dtype (explicitly),
        # and nll_loss (nll_loss2d for (N, C, d...) input), on the float32 list, casts the
        # log-probabilities to a float32 copy. The same with label smoothing, whose extra term sums the
        # low-precision log-probabilities over the classes (sum: float32 under autocast).
        class_dim = 1 if input.dim() >= 2 else 0
        logprobs = torch.log_softmax(input, class_dim, dtype=input.dtype)
        nll = F.nll_loss(logprobs.float(), target, weight, ignore_index=ignore_index, reduction=reduction)
        if not label_smoothing:
            return nll
        if weight is not None:
            shape = [1] * input.dim()
            shape[class_dim] = -1
            smooth = -(logprobs * weight.view(shape)).sum(class_dim, dtype=torch.float32)
        else:
            smooth = -logprobs.sum(class_dim, dtype=torch.float32)
        ignored = target == ignore_index
        smooth = smooth.masked_fill(ignored, 0.0)
        if reduction == "mean":
            if weight is not None:
                smooth = smooth.sum() / weight.gather(0, target.masked_select(~ignored).flatten()).sum()
            else:
                smooth = smooth.sum() / (~ignored).sum()
        elif reduction == "sum":
            smooth = smooth.sum()
        return (1.0 - label_smoothing) * nll + smooth * (label_smoothing / input.size(class_dim))


@contextmanager
def _recompute_under(ctx, *modes):
    """Recompute checkpointed code under `ctx` in backward, however the model calls checkpoint.

    torch.utils.checkpoint re-enters torch.autocast for the recomputation, but not a TorchFunctionMode
    such as CudaAutocast: without this, the recomputed tensors come out float32 and checkpoint fails.
    A model may call ``torch.utils.checkpoint.checkpoint`` or a name it imported
    (``from torch.utils.checkpoint import checkpoint``), so the hook sits below both: the
    non-reentrant path's generator (which takes the recomputation's context), and the reentrant
    path's backward (which recomputes). `modes`: factories of further TorchFunctionModes the
    recomputation must run under too (the kernels' choices, ``kernels.CudaKernels``).
    """
    import torch.utils.checkpoint as ckpt

    if not isinstance(ctx, CudaAutocast) and not modes:
        yield
        return
    hook = versions.checkpoint_recompute_hook()  # renamed in PyTorch 2.14
    generator = getattr(ckpt, hook)
    reentrant_backward = ckpt.CheckpointFunction.backward

    @contextmanager
    def recompute():
        with ExitStack() as stack:
            for make in modes:
                stack.enter_context(make())
            if isinstance(ctx, CudaAutocast):  # eager or compiled (CompiledAutocast), as the forward ran
                stack.enter_context(type(ctx)(ctx.dtype))
            yield

    def contexts():
        return nullcontext(), recompute()

    if hook.endswith("_impl"):  # (fn, args, kwargs, *, context_fn=..., ...)

        @functools.wraps(generator)
        def with_autocast(fn, args, kwargs, **options):
            if options.get("context_fn", ckpt.noop_context_fn) is ckpt.noop_context_fn:
                options["context_fn"] = contexts
            return generator(fn, args, kwargs, **options)

    else:  # (fn, preserve_rng_state, context_fn, ..., *args, **kwargs)

        @functools.wraps(generator)
        def with_autocast(fn, preserve_rng_state=True, context_fn=ckpt.noop_context_fn, *args, **kwargs):
            if context_fn is ckpt.noop_context_fn:
                context_fn = contexts
            return generator(fn, preserve_rng_state, context_fn, *args, **kwargs)

    def backward(bctx, *grads):
        with recompute():
            return reentrant_backward(bctx, *grads)

    setattr(ckpt, hook, with_autocast)
    ckpt.CheckpointFunction.backward = staticmethod(backward)
    try:
        yield
    finally:
        setattr(ckpt, hook, generator)
        ckpt.CheckpointFunction.backward = staticmethod(reentrant_backward)


def cuda_autocast_context(dtype: str):
    """train.py's ``ctx`` for a CUDA run, reproduced on CPU tensors for the prediction."""
    return nullcontext() if dtype == "float32" else CudaAutocast(loop.PTDTYPE[dtype])
