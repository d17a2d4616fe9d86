"""What ``torch.compile`` changes in the memory of nanoGPT's forward and backward
(docs/en/estimate-loss-oom.md#problem-analysis).

Method: a rule-based model, applied on the same fake-tensor run as the eager prediction. Compiling
the model with Inductor for every prediction would take minutes on a CPU and its CPU lowering is not
CUDA's, so the prediction runs the model eagerly and changes, through a TorchFunctionMode that
replaces ``CudaAutocast``, exactly the allocations that Inductor's generated code does not make:

1. **The loss is fused.** ``F.cross_entropy`` becomes one reduction over the logits: the forward
   writes a float32 log-sum-exp per row and the scalar loss, never the (N, V) log-probabilities nor
   CUDA autocast's float32 copy of them (``cuda_model``); what it keeps for backward is the logits (an
   output of the graph anyway) and that log-sum-exp. The backward writes one (N, V) gradient in the
   logits' dtype (softmax minus the one-hot target, computed from the logits and the log-sum-exp in
   one kernel), which the ``lm_head`` matmul backward then reads.
2. **Casts are fused into their producers.** A normalisation on autocast's float32 list whose result
   feeds a matmul (every LayerNorm of a GPT) is written directly in the autocast dtype: no float32
   result next to its low-precision copy. Autocast's weight-cast cache does not exist in a compiled
   graph: each low-precision weight copy is made where it is used and freed after its last use (in
   evaluation); in training the copies the backward needs are kept, as eager autograd keeps them.

3. **The graph's outputs get a gradient each.** ``torch.compile`` runs the whole forward as one
   autograd Function (AOTAutograd's ``CompiledFunction``, torch/_functorch/_aot_autograd/
   runtime_wrappers.py), whose outputs are everything the model returns. nanoGPT's ``GPT.forward``
   returns the logits beside the loss; the loss's backward never reaches the logits output, so
   autograd hands the compiled backward a zero tensor of the logits' size and dtype for it (the
   tangent of an output no gradient reached), and the backward graph reads it where it computes
   the logits' gradient, in the fused loss's backward kernel. At that kernel three (N, V) buffers
   are alive: the forward's logits, that zero tangent, and the gradient it writes.
   ``graph_outputs`` puts that boundary around a model: each output the loss does not reach gets
   its zero tangent at the start of the backward, freed by the fused loss's backward (or at the end
   of the backward, for a model without it). A model that returns only its loss (nanochat) has none.

Evidence. Points 1 and 2 were checked against Inductor itself: ``tests/test_engine.py`` compiles a
small GPT on the CPU (float32, real tensors), records the CPU allocator's allocations with the
profiler, and compares the peak of an evaluation forward and of a train step with this model's
prediction for the same run. Point 3 is CUDA's: in the caching allocator's history of nanoGPT's
``config/train_gpt2.py`` compiled on an H100 (PyTorch 2.11, batch 12, bfloat16), three
[12288, 50304] bfloat16 blocks are live at the backward's peak (the forward's ``lm_head`` output,
a block with no Python frame, allocated by autograd itself, and the backward graph's at the
``cross_entropy`` line); the compiled train steps measured there exceed the prediction without
point 3 by one such buffer (B x T x V x 2 bytes) at batch 12 and 32 in bfloat16 and float16, and
for the eval-oom-12gb page's run, and by nothing for shakespeare_char's 65-token vocabulary.
Inductor's CPU code generation, which frees the tangent differently, is not the evidence for it.
Compiled evaluations (no backward) are unchanged by point 3 and were within 1.5% of that GPU.

Limits (not modelled): the activations Inductor's partitioner keeps for backward inside the Blocks
are taken to be eager autograd's (the partitioner recomputes some pointwise results instead, so a
compiled train step may need somewhat less than predicted); buffer reuse inside a graph; the memory
compilation itself takes (autotuning workspaces, the compile cache), and CUDA graphs
(``mode='reduce-overhead'``), which keep their own pool. On real CPU tensors (``fake=False``) the
fused loss computes its values in row chunks, whose small temporaries the tracker sees.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor

from .cuda_model import CudaAutocast, map_arguments

_CHUNK_ROWS = 256  # rows per chunk when the fused loss computes real values
# the zero tangents of graph outputs the loss does not reach (point 3), alive until the fused loss's
# backward has written its gradient, or until the backward pass ends
_TANGENTS: list = []
_NORMS = {F.layer_norm, F.group_norm} | ({F.rms_norm} if hasattr(F, "rms_norm") else set())


class _FusedCrossEntropy(torch.autograd.Function):
    """cross_entropy as one Inductor reduction: keeps the logits and a float32 log-sum-exp per row."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction):
        n = logits.shape[0]
        lse = logits.new_empty(n, dtype=torch.float32)
        valid = target != ignore_index
        if isinstance(logits, FakeTensor):
            loss = logits.new_empty((), dtype=torch.float32) if reduction != "none" else lse.new_empty(n)
        else:
            picked = logits.new_empty(n, dtype=torch.float32)
            for start in range(0, n, _CHUNK_ROWS):
                rows = slice(start, start + _CHUNK_ROWS)
                chunk = logits[rows].float()
                lse[rows] = torch.logsumexp(chunk, dim=1)
                picked[rows] = chunk.gather(1, target[rows].clamp(min=0)[:, None])[:, 0]
                del chunk
            per_row = (lse - picked) * valid
            if reduction == "none":
                loss = per_row
            elif reduction == "sum":
                loss = per_row.sum()
            else:
                loss = per_row.sum() / valid.sum()
        ctx.save_for_backward(logits, target, lse)
        ctx.ignore_index, ctx.reduction = ignore_index, reduction
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        logits, target, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)  # the one (N, V) buffer the fused backward writes
        _TANGENTS.clear()  # the kernel that wrote it read the tangents: their last use
        if isinstance(logits, FakeTensor):
            return grad, None, None, None
        valid = target != ctx.ignore_index
        if ctx.reduction == "mean":
            scale = grad_loss / valid.sum()
            scale = scale.expand(logits.shape[0])
        elif ctx.reduction == "sum":
            scale = grad_loss.expand(logits.shape[0])
        else:
            scale = grad_loss
        for start in range(0, logits.shape[0], _CHUNK_ROWS):
            rows = slice(start, start + _CHUNK_ROWS)
            chunk = torch.exp(logits[rows].float() - lse[rows, None])
            idx = target[rows].clamp(min=0)
            chunk[torch.arange(chunk.shape[0]), idx] -= 1.0
            chunk *= (scale[rows] * valid[rows])[:, None]
            grad[rows] = chunk.to(grad.dtype)
            del chunk
        return grad, None, None, None


def fused_cross_entropy(input, target, ignore_index=-100, reduction="mean"):
    """``F.cross_entropy(input (N, V), target (N,))`` with the memory of Inductor's fused loss."""
    return _FusedCrossEntropy.apply(input, target, ignore_index, reduction)


class _GraphOutputs(torch.autograd.Function):
    """The outputs of a compiled graph (point 3): aliases of the model's outputs whose backward
    makes, for each output no gradient reached, the zero tangent autograd gives the compiled backward."""

    @staticmethod
    def forward(ctx, *outputs):
        ctx.set_materialize_grads(False)  # made here instead, to keep each alive as the graph does
        ctx.meta = [(o.shape, o.dtype, o.device) for o in outputs]
        return tuple(o.view_as(o) for o in outputs)

    @staticmethod
    def backward(ctx, *grads):
        for grad, (shape, dtype, device) in zip(grads, ctx.meta):
            if grad is None:
                _TANGENTS.append(torch.zeros(shape, dtype=dtype, device=device))
        if _TANGENTS:
            torch.autograd.Variable._execution_engine.queue_callback(_TANGENTS.clear)
        return grads


def _through_graph_outputs(module, args, output):
    """A forward hook: the model's differentiable tensor outputs pass through ``_GraphOutputs``."""
    if isinstance(output, torch.Tensor):
        return _through_graph_outputs(module, args, (output,))[0] if output.requires_grad else output
    if not isinstance(output, tuple):
        return output
    where = [i for i, o in enumerate(output) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not where or not torch.is_grad_enabled():
        return output
    passed = _GraphOutputs.apply(*(output[i] for i in where))
    out = list(output)
    for i, t in zip(where, passed):
        out[i] = t
    return tuple(out)


def graph_outputs(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with its forward's outputs as a compiled graph's (point 3 of the module docstring)."""
    model.register_forward_hook(_through_graph_outputs)
    return model


class CompiledAutocast(CudaAutocast):
    """``torch.compile``'d code under CUDA autocast (or under none, for float32), on any tensors.

    Lower-precision ops cast as CUDA autocast does, but without the weight-cast cache (point 2 of the
    module docstring); float32-list norms write the autocast dtype; cross_entropy is fused (point 1).
    """

    def __init__(self, dtype: torch.dtype | None):
        super().__init__(dtype or torch.float32)
        self.autocast = dtype is not None and dtype != torch.float32

    def _cast(self, value, to):
        def cast(t):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype in (to, torch.float64):
                return t
            return t.to(to)

        return map_arguments(cast, value)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.cross_entropy:
            return self._compiled_cross_entropy(*args, **kwargs)
        if not self.autocast:
            return func(*args, **kwargs)
        if func in _NORMS:
            # computed in float32 as autocast does; the float32 result dies here, only its cast lives on
            args, kwargs = self._cast((args, kwargs), torch.float32)
            return func(*args, **kwargs).to(self.dtype)
        return super().__torch_function__(func, types, args, kwargs)

    def _compiled_cross_entropy(
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
        if (
            input.dim() != 2
            or weight is not None
            or label_smoothing
            or size_average is not None
            or reduce is not None
        ):
            # outside the nanoGPT shape: CUDA autocast's eager path (an upper bound for the fused one)
            return super()._cross_entropy(
                input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing
            )
        return fused_cross_entropy(input, target, ignore_index, reduction)


def compiled_context(dtype: str):
    """train.py's ``ctx`` around a ``torch.compile``'d model, reproduced on CPU tensors for the prediction."""
    from .. import loop

    return CompiledAutocast(None if dtype == "float32" else loop.PTDTYPE[dtype])
