"""A phase of nanoGPT's training, set up and run under the allocation tracker.

``run_phase`` makes the state that exists before the phase (the weights; in a later phase AdamW's
state and train.py's stale logits; a resumed run's checkpoint) and registers it with the tracker,
then runs the phase's own code (``loop.train_step`` or ``estimate_loss``) tracked. ``predict`` (one
GPU) and ``distributed`` (one rank) call it inside their fake mode and CUDA model.

A first phase and the same phase later differ only in that state, and a first step in its optimizer
step (AdamW's state created in it): ``run_phase``'s `later` tracker sees the later one in the same
run, so that their common forward and backward run once. Never imports torch.cuda.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from .. import loop
from ..config import TrainConfig
from .tracker import AllocationTracker


class _CudaScaler(torch.amp.GradScaler):
    """train.py's GradScaler as CUDA builds it: ``enabled=(dtype == 'float16')``.

    ``GradScaler('cuda')`` disables itself on a CPU-only build, so the same algorithm runs as the CPU
    scaler; on fake tensors its inf check has no value, and the optimizer step is taken.
    """

    def __init__(self, dtype: str):
        super().__init__("cpu", enabled=(dtype == "float16"))

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        from torch._subclasses.fake_tensor import FakeTensor

        if any(isinstance(v, FakeTensor) for v in optimizer_state["found_inf_per_device"].values()):
            return optimizer.step(*args, **kwargs)
        return super()._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)


def fake_batch(batch: int, block: int, vocab: int):
    return torch.randint(0, vocab, (batch, block)), torch.randint(0, vocab, (batch, block))


def run_phase(
    model,
    config: TrainConfig,
    phase: str,
    tracker: AllocationTracker,
    state: str,
    ctx,
    batch_size: int,
    eval_iters: int = 1,
    stale_logits: bool = True,
    probe_logits: bool = False,
    one_micro_step: bool = False,
    checkpoint_on_card: bool = True,
    later: AllocationTracker | None = None,
):
    """Set up nanoGPT's state before `phase` (registering it with the tracker), then run the phase tracked.

    `later` (state "first" only, ``_later_too``): a second tracker that sees the same phase as a
    later one (state "training"): the state that exists by then (AdamW's, the stale logits) made and
    registered with it alone, and, in a train step, a second optimizer with that state whose step it
    alone sees, after the first step's (``_Both``). The forward and backward, the same code on the
    same tensors in both, then run once for both.

    `probe_logits`: take the stale logits from a forward of the model itself (a reader's model.py),
    instead of assuming nanoGPT's (B, T, V).
    The train step runs at most two micro-steps: the second (gradients alive from the first) stands for
    every later one. `one_micro_step=True` runs that second micro-step alone, its gradients made
    beforehand: the same peak for half the work (the batch-size search runs many predictions).
    """
    cfg_block = model.config.block_size if hasattr(model, "config") else config.block_size
    vocab = tracker.vocab_size
    trackers = [tracker] if later is None else [tracker, later]
    params = list(model.parameters())
    tracker.grads_of = params
    tracker.register(params, "weights")
    tracker.register(model.buffers(), "weights")
    optimizer = loop.make_optimizer(model, config, "cuda")
    stale_dtype = loop.PTDTYPE[config.dtype]
    block = min(config.block_size, cfg_block)
    resumed = config.init_from == "resume"
    checkpoint_weights = []
    if resumed and checkpoint_on_card:
        # train.py keeps the checkpoint's weights referenced (its global `state_dict`) for the whole
        # run: on the card when torch.load put them there (map_location=device; ``moments``)
        checkpoint_weights = [torch.empty_like(t) for t in [*params, *model.buffers()]]  # shared once
        tracker.register(checkpoint_weights, "weights")
    if state == "training" or resumed:
        # AdamW's state exists after the first step (or, resumed, from the checkpoint); make it
        # without tracking the step itself
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tracker.register([t for s in optimizer.state.values() for t in s.values()], "optimizer_state")
    later_optimizer = None
    if later is not None:
        later_optimizer, stale = _later_state(model, config, later, stale_logits, block, stale_dtype)
    train_state = loop.TrainState(model, optimizer, _CudaScaler(config.dtype), ctx)
    if later is not None:
        train_state.logits = stale  # the later run's: alive until the first forward returns
        del stale
        if phase == "train_step":
            train_state.optimizer = _Both(optimizer, later_optimizer)
    if state == "training" and stale_logits:
        # the last micro-step's logits are still referenced (docs/en/beyond.md#drop-stale-logits)
        if probe_logits:
            # a reader's model: what its forward really returns in training (a chunked loss may
            # return None), computed without a graph, as the tensor train.py's `logits` holds
            with torch.no_grad(), ctx:
                returned = model(*fake_batch(config.batch_size, block, vocab))[0]
            train_state.logits = returned if isinstance(returned, torch.Tensor) else None
            del returned  # train_state holds it, as train.py's global does, and lets it go alike
        else:
            train_state.logits = torch.empty(config.batch_size, block, vocab, dtype=stale_dtype)
        if train_state.logits is not None:
            tracker.register([train_state.logits], "logits_and_loss")

    if phase == "train_step":

        def get_batch(split):
            return fake_batch(batch_size, block, vocab)

        train_state.X, train_state.Y = get_batch("train")
        for t in trackers:
            t.register([train_state.X, train_state.Y], "activations")
        micro_steps = min(config.gradient_accumulation_steps, 2)
        with tracker, later or nullcontext():
            for t in trackers:
                t.moment = "forward_backward"
            if one_micro_step and micro_steps == 2:
                for p in params:  # what the first micro-step leaves behind
                    p.grad = torch.zeros_like(p)
                micro_steps = 1
            _train_step_tracked(train_state, get_batch, micro_steps, config.grad_clip, tracker, later)
    elif phase == "estimate_loss":
        eval_block = min(config.eval_block, block)

        def get_batch(split):
            return fake_batch(batch_size, eval_block, vocab)

        with tracker, later or nullcontext():
            if config.eval_batch_size and config.eval_batch_size < batch_size:
                loop.estimate_loss_batched(model, get_batch, eval_iters, ctx, config.eval_batch_size)
            else:
                loop.estimate_loss(model, get_batch, eval_iters, ctx)
    else:
        raise ValueError(f"unknown phase {phase!r} (known: train_step, estimate_loss)")
    del checkpoint_weights  # alive until here, as train.py's state_dict


def _train_step_tracked(train_state, get_batch, gas, grad_clip, tracker, later=None):
    """loop.train_step, with the optimizer's new tensors tagged as optimizer state (`later`: the
    second tracker, whose own optimizer steps after the first one, each step seen by its tracker)."""
    opt = train_state.optimizer
    pairs = (
        [(opt, tracker, None)]
        if later is None
        else [(opt.first, tracker, later), (opt.later, later, tracker)]
    )
    originals = [(o, o.step) for o, _, _ in pairs]

    def tracked(original, own, other):
        def step(*a, **k):
            own.tag_new, own.moment = "optimizer_state", "optimizer_step"
            if other is not None:
                other.paused = True
            try:
                return original(*a, **k)
            finally:
                own.tag_new, own.moment = None, "forward_backward"
                if other is not None:
                    other.paused = False
                if own._pending:  # a peak in the step: its picture while the gradients are still .grad
                    own._snapshot()

        return step

    for o, own, other in pairs:
        o.step = tracked(o.step, own, other)
    try:
        loop.train_step(train_state, get_batch, gas, grad_clip)
    finally:
        for o, original in originals:
            o.step = original


class _Both:
    """The optimizer of a train step seen by two trackers (``run_phase``'s `later`): the first
    step's AdamW (no state yet: its step creates it), then a later step's (its state made before).
    Only where the GradScaler is off (not float16): it then calls ``step()`` and nothing else."""

    def __init__(self, first, later):
        self.first, self.later = first, later

    def step(self):
        self.first.step()
        self.later.step()

    def zero_grad(self, set_to_none: bool = True):
        self.first.zero_grad(set_to_none=set_to_none)
        self.later.zero_grad(set_to_none=set_to_none)


def _later_state(model, config, later, stale_logits, block, stale_dtype):
    """Register with `later` what a later phase has alive (as ``run_phase`` does in state
    "training", in its order): the weights, AdamW's state (made by an untracked step) and train.py's
    stale logits. Returns that optimizer and the stale logits (None without them)."""
    params = list(model.parameters())
    later.grads_of = params
    later.register(params, "weights")
    later.register(model.buffers(), "weights")
    optimizer = loop.make_optimizer(model, config, "cuda")
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    later.register([t for s in optimizer.state.values() for t in s.values()], "optimizer_state")
    stale = None
    if stale_logits:
        stale = torch.empty(config.batch_size, block, later.vocab_size, dtype=stale_dtype)
        later.register([stale], "logits_and_loss")
    return optimizer, stale
