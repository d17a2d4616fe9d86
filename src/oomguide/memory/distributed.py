"""Several GPUs: the per-rank memory of nanoGPT under DDP and under FSDP2 (docs/en/multi-gpu.md).

Every rank runs the same code on its own batch, so one rank's peak is the answer.

- **DDP**, as nanoGPT's train.py runs it: each rank holds the whole model, gradients and AdamW
  state, ``gradient_accumulation_steps`` is divided by the world size, and DDP's reducer keeps
  gradient buckets: flat tensors as large as every gradient together, allocated when the model
  is wrapped and alive from then on. With ``gradient_as_bucket_view=True`` the gradients are views
  into the buckets instead of tensors of their own. The reducer cannot run on fake tensors, so it
  is modelled here: its buckets are laid out by DDP's own bucketing function, registered with the
  tracker, and (views) a hook after each gradient's accumulation does what the reducer does.
- **FSDP2** runs for real: the model is built on the meta device, ``fully_shard`` wraps each Block
  and then the model (mixed precision: parameters gathered in the autocast dtype, gradients reduced
  in float32), with the fake process group standing for the other ranks; ``to_empty`` inside
  ``FakeTensorMode(allow_non_fake_inputs=True)`` gives it fake CPU storage. The train step and
  ``estimate_loss`` then run as on one GPU, watched by the same tracker; a DTensor counts as its
  local shard.

Never imports torch.cuda and never needs a GPU.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import loop
from ..config import ConfigError, TrainConfig
from ..model import GPT
from . import batches, prefetch, reserved
from .compiled import compiled_context
from .cuda_model import block_size, cuda_autocast_context, segment_size
from .gpus import DEFAULT_CAPABILITY
from .kernels import CudaKernels, cublas_workspace_bytes
from .models import ModelSource, no_init
from .phases import fake_batch, run_phase
from .predict import PHASES, PhaseResult, _blas_threads_before, second_batch
from .tracker import AllocationTracker, as_judged
from .units import CONTEXT_BYTES, usable_bytes

STRATEGIES = ("ddp", "fsdp")
_LATER: OrderedDict = OrderedDict()  # a later phase's run made beside the first one (``predict``)
# DDP's defaults: a small first bucket (so the first all-reduce starts early), then 25 MiB buckets
FIRST_BUCKET_BYTES = 1024 * 1024
BUCKET_CAP_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class Parallel:
    """How many processes train, and how: ``torchrun --nproc_per_node=world_size`` with `strategy`."""

    world_size: int = 1
    strategy: str | None = None  # None: DDP when world_size > 1, as nanoGPT does
    gradient_as_bucket_view: bool = False  # DDP only

    def __post_init__(self):
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size <= 0:
            raise ValueError(
                f"the number of processes must be a whole number above zero, got {self.world_size!r}"
            )
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r} (known: {', '.join(STRATEGIES)})")
        if self.strategy is not None and self.world_size == 1:
            raise ValueError(
                f"strategy {self.strategy!r} needs more than one process (--nproc-per-node 2 or more)"
            )
        if self.strategy is None and self.world_size > 1:
            object.__setattr__(self, "strategy", "ddp")

    @property
    def single(self) -> bool:
        return self.world_size == 1


def per_rank_config(config: TrainConfig, parallel: Parallel) -> TrainConfig:
    """train.py under torchrun: each rank does ``gradient_accumulation_steps // world_size`` micro-steps."""
    if parallel.single:
        return config
    gas = config.gradient_accumulation_steps
    if gas % parallel.world_size:
        raise ConfigError(
            f"gradient_accumulation_steps={gas} is not divisible by {parallel.world_size} processes "
            "(nanoGPT's train.py asserts that it is)"
        )
    return config.replace(gradient_accumulation_steps=gas // parallel.world_size)


def tokens_per_iter(config: TrainConfig, parallel: Parallel) -> int:
    """train.py's ``tokens_per_iter``: micro-steps per rank x ranks x batch_size x block_size."""
    rank = per_rank_config(config, parallel)
    return rank.gradient_accumulation_steps * parallel.world_size * config.batch_size * config.block_size


# --- DDP ------------------------------------------------------------------------------------


def bucket_layout(
    model: torch.nn.Module, bucket_cap_bytes: int = BUCKET_CAP_BYTES
) -> list[list[torch.Tensor]]:
    """The parameters of each of DDP's gradient buckets.

    DDP takes the parameters that need a gradient (a shared one once). It starts with one bucket
    for all of them and, after the first iteration, rebuilds them in the order the gradients became
    ready, cut by its own function: the first up to 1 MiB, the others up to the cap. Here the order
    is the reverse parameter order (DDP's own approximation); either way the buckets together hold
    a copy of every gradient, and only the allocator's 512-byte rounding depends on the cut.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    indices, _ = dist._compute_bucket_assignment_by_size(
        list(reversed(params)), [FIRST_BUCKET_BYTES, bucket_cap_bytes], [False] * len(params)
    )
    ordered = list(reversed(params))
    return [[ordered[i] for i in bucket] for bucket in indices]


def bucket_bytes(model: torch.nn.Module, bucket_cap_bytes: int = BUCKET_CAP_BYTES) -> list[int]:
    """Bytes of each gradient bucket, as DDP's logging data reports them (``bucket_sizes``)."""
    return [
        sum(p.numel() * p.element_size() for p in bucket) for bucket in bucket_layout(model, bucket_cap_bytes)
    ]


def _ddp_buckets(model, tracker: AllocationTracker, as_view: bool, micro_steps: int) -> list[torch.Tensor]:
    """Allocate the reducer's buckets (registered as ``ddp_buckets``) and, for views, alias the gradients.

    nanoGPT syncs gradients only in the last of its `micro_steps` (``require_backward_grad_sync``);
    in the others the reducer is idle and the gradients are tensors of their own, even with
    ``gradient_as_bucket_view=True``. In the syncing micro-step the reducer copies each gradient into
    its bucket as autograd finishes it and, for views, makes the bucket slice the gradient.
    The train step runs at most two micro-steps (``run_phase``): the second stands for a middle
    one (no sync) when there are more than two, since the last one's peak is never higher.
    """
    buckets = []
    forwards = [0]

    def syncing() -> bool:
        return micro_steps <= 2 and forwards[0] == min(micro_steps, 2)

    model.register_forward_pre_hook(lambda module, args: forwards.__setitem__(0, forwards[0] + 1))
    for params in bucket_layout(model):
        flat = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        buckets.append(flat)
        if not as_view:
            continue  # the copy into the bucket allocates nothing
        offset = 0
        for p in params:
            view = flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()

            def to_bucket(param, view=view):
                if syncing() and param.grad is not None and param.grad.data_ptr() != view.data_ptr():
                    view.copy_(param.grad)
                    param.grad = view

            p.register_post_accumulate_grad_hook(to_bucket)
    tracker.register(buckets, "ddp_buckets")
    return buckets


# --- FSDP2 ----------------------------------------------------------------------------------


def _fake_mesh(world_size: int):
    """A device mesh of `world_size` ranks over the fake process group; this process is rank 0."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_backend() != "fake":
            raise RuntimeError("a real process group is initialised: predict in a process of its own")
        if dist.get_world_size() != world_size:
            dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    return init_device_mesh("cpu", (world_size,))


def blocks_of(model: torch.nn.Module) -> list[torch.nn.Module]:
    """nanoGPT's transformer Blocks (``model.transformer.h``), each one FSDP unit."""
    try:
        return list(model.transformer.h)
    except AttributeError:
        return [m for m in model.modules() if type(m).__name__ == "Block"]


def shard(model: torch.nn.Module, mesh, dtype: str) -> torch.nn.Module:
    """``fully_shard`` each Block, then the model; parameters gathered in the autocast dtype."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=loop.PTDTYPE[dtype], reduce_dtype=torch.float32)
    for block in blocks_of(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


class _ShardAdamW:
    """nanoGPT's AdamW over FSDP2's parameters, stepped on their local shards.

    A step over DTensor parameters runs the same kernels on the local shards; stepping the shards
    directly allocates the same state and temporaries, without DTensor's per-op dispatch, which
    would dominate the prediction's time.
    """

    def __init__(self, model, config):
        self.pairs = [(p, p.to_local().detach()) for p in model.parameters() if p.requires_grad]
        shards = [local for _, local in self.pairs]
        groups = [
            {"params": [s for (p, s) in self.pairs if p.dim() >= 2], "weight_decay": config.weight_decay},
            {"params": [s for (p, s) in self.pairs if p.dim() < 2], "weight_decay": 0.0},
        ]
        assert sum(len(g["params"]) for g in groups) == len(shards)
        self.optimizer = torch.optim.AdamW(
            groups, lr=config.learning_rate, betas=(config.beta1, config.beta2), fused=True
        )
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state

    def shards(self) -> list[torch.Tensor]:
        """The local shards, each with its gradient's shard as ``.grad`` (what clipping and the step see)."""
        for p, local in self.pairs:
            local.grad = None if p.grad is None else p.grad.to_local().detach()
        return [local for _, local in self.pairs]

    def step(self):
        self.shards()
        self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True):
        for p, local in self.pairs:
            p.grad = None
            local.grad = None


def _run_fsdp_phase(
    model, config, phase, tracker, state, ctx, batch_size, eval_iters, stale_logits, later=None
):
    """``run_phase`` for a sharded model: nanoGPT's state before `phase`, then the phase, tracked.

    The train step runs one micro-step, with the gradients of the earlier micro-steps already in
    place when there are any: that is every later micro-step of train.py's loop (reduce-scattered
    gradients from before, the last logits alive), whose peak is the step's, followed by clipping
    and the optimizer step. `later` (state "first" only): a second tracker that sees the same phase
    as a later one (state "training"), as ``run_phase``'s does: its own state and optimizer step.
    """

    vocab = tracker.vocab_size
    block = min(config.block_size, model.config.block_size if hasattr(model, "config") else config.block_size)
    params = [p for p in model.parameters()]
    trackers = [tracker] if later is None else [tracker, later]
    views = [(tracker, state)] + ([] if later is None else [(later, "training")])
    optimizers = {}
    train_state = loop.TrainState(model, None, loop.make_scaler(config.dtype, "cpu"), ctx)
    for t, t_state in views:
        t.grads_of = params
        t.register(params, "weights")
        t.register(model.buffers(), "weights")
        optimizer = optimizers[t] = _ShardAdamW(model, config)
        if t_state == "training":
            for _, local in optimizer.pairs:
                local.grad = torch.zeros_like(local)
            optimizer.optimizer.step()
            optimizer.zero_grad()
            t.register([x for s in optimizer.state.values() for x in s.values()], "optimizer_state")
            if stale_logits:
                train_state.logits = torch.empty(
                    config.batch_size, block, vocab, dtype=loop.PTDTYPE[config.dtype]
                )
                t.register([train_state.logits], "logits_and_loss")
    first = optimizers[tracker]
    train_state.optimizer = first if later is None else _BothShards(first, optimizers[later])
    # clip_grad_norm_ over DTensors computes the same norms on the shards, then all-reduces a scalar
    train_state.clip_parameters = first.shards
    if phase == "train_step":
        if config.gradient_accumulation_steps > 1:
            for p in params:
                p.grad = torch.zeros_like(p)
            for t in trackers:
                t.register([p.grad for p in params], "gradients")

        def get_batch(split):
            return fake_batch(batch_size, block, vocab)

        train_state.X, train_state.Y = get_batch("train")
        for t in trackers:
            t.register([train_state.X, train_state.Y], "activations")
        for t, optimizer in optimizers.items():
            others = [o for o in trackers if o is not t]
            optimizer.optimizer.step = _tag_step(optimizer.optimizer.step, t, others)
        with tracker, later or _nothing():
            loop.train_step(train_state, get_batch, 1, config.grad_clip)
    else:
        eval_block = min(config.eval_block, block)

        def get_batch(split):
            return fake_batch(batch_size, eval_block, vocab)

        with tracker, later or _nothing():
            if config.eval_batch_size and config.eval_batch_size < batch_size:
                loop.estimate_loss_batched(model, get_batch, eval_iters, ctx, config.eval_batch_size)
            else:
                loop.estimate_loss(model, get_batch, eval_iters, ctx)


def _tag_step(original, tracker, others):
    """The optimizer's step with its new tensors tagged as optimizer state, seen by `tracker` alone."""

    def step(*a, **k):
        tracker.tag_new = "optimizer_state"
        for o in others:
            o.paused = True
        try:
            return original(*a, **k)
        finally:
            tracker.tag_new = None
            for o in others:
                o.paused = False

    return step


class _BothShards:
    """The first step's and a later step's ``_ShardAdamW`` (``phases._Both`` for FSDP2): each steps in turn."""

    def __init__(self, first, later):
        self.first, self.later = first, later

    def step(self):
        self.first.step()
        self.later.step()

    def zero_grad(self, set_to_none: bool = True):
        self.first.zero_grad(set_to_none)
        self.later.zero_grad(set_to_none)


# --- the prediction -------------------------------------------------------------------------


def predict(
    config: TrainConfig,
    phase: str,
    gpu_memory: int | None,
    parallel: Parallel,
    *,
    batch_size: int | None = None,
    source: ModelSource | None = None,
    state: str = "training",
    context_bytes: int = CONTEXT_BYTES,
    seed: int = 0,
    eval_iters: int = 1,
    stale_logits: bool = True,
    fake: bool = True,
    search: bool = False,
    capability: tuple[int, int] = DEFAULT_CAPABILITY,
    compiled: bool = False,
    alloc_conf=None,
) -> PhaseResult:
    """One rank's peak of `phase` when `parallel.world_size` processes train with `parallel.strategy`.

    Same arguments and result as ``memory.predict``; the breakdown adds ``ddp_buckets`` under DDP.
    ``fake=False`` runs on real CPU tensors (FSDP2: in the real process group the caller set up),
    to check the prediction against a real run. `search=True` (the batch-size search): the peak
    and verdict may come from two runs at other batch sizes (``batches``), under DDP and FSDP2 alike
    (issue 23: FSDP2's traces are affine in the batch size too; every later run checks it).
    `capability`: the card's compute capability, which picks CUDA's attention kernel (``kernels``).
    `compiled=True`: the model as torch.compile runs it (``compiled``'s rules, as for one process:
    nanoGPT's train.py compiles before it wraps the model in DDP). The verdict is on reserved memory,
    the rank's phase replayed through the caching allocator from an empty cache (``reserved``; one
    process also replays the step that ran before the phase).
    """
    if parallel.single:
        from .predict import predict as predict_single

        return predict_single(
            config,
            phase,
            gpu_memory,
            batch_size=batch_size,
            source=source,
            state=state,
            context_bytes=context_bytes,
            seed=seed,
            eval_iters=eval_iters,
            stale_logits=stale_logits,
            capability=capability,
            compiled=compiled,
            alloc_conf=alloc_conf,
            search=search,
        )
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
    source = source or ModelSource()
    asked = config
    config = per_rank_config(config, parallel)
    batch = batch_size or config.batch_size
    run_config = config if batch_size is None else config.replace(batch_size=batch)
    budget = None if gpu_memory is None else usable_bytes(gpu_memory, context_bytes)
    family = None
    if fake and source.path is None and source.gpt_class is GPT:
        if not (phase == "estimate_loss" and config.eval_batch_size):  # as many chunks as b needs
            values = sorted((k, v) for k, v in config.values.items() if k != "batch_size")
            family = repr(
                (values, phase, state, seed, eval_iters, stale_logits, parallel, capability, compiled)
            )
    if search and family is not None and budget is not None:
        runs = batches.family(family)
        if not runs.ready(batch) and len(runs.runs) == 1 and not runs.broken and batch != 1:
            second = second_batch(next(iter(runs.runs)))
            if not prefetch.collect(family, second, batches.remember) and second != batch:
                options = dict(
                    source=source,
                    state=state,
                    seed=seed,
                    eval_iters=eval_iters,
                    capability=capability,
                    compiled=compiled,
                )
                predict(asked, phase, None, parallel, batch_size=second, stale_logits=stale_logits, **options)
        if runs.ready(batch):
            trace = as_judged(runs.traces(batch)[-1], budget)
            fits = reserved.fits([trace], budget, gpu_memory, alloc_conf)
            return PhaseResult(
                phase, "predicted", batch, runs.peak(batch), 0, "", budget_bytes=budget, fits=fits
            )

    gpt_config = run_config.gpt_config()
    key = repr((phase, batch, budget, repr(run_config), parallel, seed, eval_iters, stale_logits))
    key += repr((tuple(capability), compiled, source.gpt_class, source.path, fake))
    kept = _LATER.pop(key, None) if state == "training" else None
    if kept is not None:
        return _judged(*kept, gpu_memory, alloc_conf, family)
    tracker = AllocationTracker(vocab_size=gpt_config.vocab_size, budget=budget)
    # a first phase also makes the same phase's later run (``run_phase``'s and ``_run_fsdp_phase``'s
    # `later`): on fake tensors, oomguide's GPT, nothing resumed; DDP's float16 step (GradScaler) alone
    later = None
    if (
        state == "first"
        and fake
        and (parallel.strategy == "fsdp" or phase == "estimate_loss" or run_config.dtype != "float16")
        and source.path is None
        and source.gpt_class is GPT
        and run_config.init_from != "resume"
    ):
        later = AllocationTracker(vocab_size=gpt_config.vocab_size, budget=budget)
    ctx = compiled_context(config.dtype) if compiled else cuda_autocast_context(config.dtype)
    kernels = CudaKernels(capability)
    torch.manual_seed(seed)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if parallel.strategy == "fsdp":
            if fake:
                mesh = _fake_mesh(parallel.world_size)
            else:
                from torch.distributed.device_mesh import init_device_mesh

                mesh = init_device_mesh("cpu", (dist.get_world_size(),))
            with torch.device("meta"), no_init():
                model = source.build(gpt_config, compiled)
            shard(model, mesh, config.dtype)
            mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else _nothing()
            with mode, kernels:
                model.to_empty(device="cpu")
                model.train()
                _workspaces(model, kernels, fake, phase, state, tracker, later)
                _run_fsdp_phase(
                    model, run_config, phase, tracker, state, ctx, batch, eval_iters, stale_logits, later
                )
        else:
            with FakeTensorMode(allow_non_fake_inputs=False) if fake else _nothing(), kernels:
                with no_init() if fake else _nothing():
                    model = source.build(gpt_config, compiled)
                model.train()
                _workspaces(model, kernels, fake, phase, state, tracker, later)
                buckets = _ddp_buckets(  # alive as long as DDP is
                    model, tracker, parallel.gradient_as_bucket_view, run_config.gradient_accumulation_steps
                )
                if later is not None:
                    later.register(buckets, "ddp_buckets")
                run_phase(
                    model,
                    run_config,
                    phase,
                    tracker,
                    state,
                    ctx,
                    batch,
                    eval_iters,
                    stale_logits,
                    later=later,
                )
                del buckets
    if later is not None:
        _LATER[key] = (
            _result(later, phase, batch, budget, kernels),
            later.trace,
            later.peak,
            budget,
        )
        while len(_LATER) > 8:
            _LATER.popitem(last=False)
    return _judged(
        _result(tracker, phase, batch, budget, kernels),
        tracker.trace,
        tracker.peak,
        budget,
        gpu_memory,
        alloc_conf,
        family,
    )


def _workspaces(model, kernels, fake, phase, state, tracker, later) -> None:
    """cuBLAS's workspaces of a rank, as one GPU's (``predict._blas_threads_before``), on fake tensors."""
    like = next(model.parameters(), None)
    like = getattr(like, "_local_tensor", like)  # FSDP2: the DTensor's local shard
    workspace = cublas_workspace_bytes(kernels.capability) if fake else 0
    tracker.workspaces(workspace, _blas_threads_before(phase, state), like)
    if later is not None:
        later.workspaces(workspace, ("forward", "backward"), like)


def _result(tracker, phase, batch, budget, kernels) -> PhaseResult:
    """A rank's tracked run's result, before the allocator's view."""
    result = PhaseResult(
        phase=phase,
        mode="predicted",
        batch_size=batch,
        peak_bytes=tracker.peak,
        largest_allocation_bytes=tracker.largest.nbytes,
        largest_allocation=tracker.largest.describe(),
        breakdown=tracker.breakdown(),
        budget_bytes=budget,
    )
    result.attention = ", ".join(sorted(kernels.used)) or None
    if budget is not None:
        result.fits = tracker.failing is None
        if tracker.failing is not None:
            result.failing_allocation_bytes = segment_size(tracker.failing.nbytes)
            result.failing_allocation = tracker.failing.describe()
            result.allocated_at_failure_bytes = tracker.allocated_at_failure
    return result


def _judged(result, trace, peak, budget, gpu_memory, alloc_conf, family) -> PhaseResult:
    """The allocator's view of a rank's run, and the run filed with its family (``batches``)."""
    judged = as_judged(trace, budget)
    reserved.judge(result, [judged], 0, gpu_memory, alloc_conf)
    if family is not None:
        batches.remember(family, result.batch_size, [trace], peak)
        if budget is not None and reserved.fits([judged], budget, gpu_memory, alloc_conf) != result.fits:
            batches.family(family).broken = True  # the verdict from the trace is not the run's
    return result


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def modelled_bucket_bytes(config: TrainConfig, source: ModelSource | None = None) -> int:
    """The bytes the allocator books for DDP's buckets of `config`'s model (each bucket rounded up to 512)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    source = source or ModelSource()
    with FakeTensorMode(), warnings.catch_warnings(), no_init():
        warnings.simplefilter("ignore")
        model = source.build(config.gpt_config())
        return sum(block_size(n) for n in bucket_bytes(model))


def describe(config: TrainConfig, parallel: Parallel, source: ModelSource | None = None) -> dict:
    """What ``oomguide check`` reports about the processes besides each phase's peak."""
    out = {
        "world_size": parallel.world_size,
        "strategy": parallel.strategy,
        "gradient_as_bucket_view": parallel.gradient_as_bucket_view,
        "gradient_accumulation_steps_per_rank": per_rank_config(config, parallel).gradient_accumulation_steps,
        "tokens_per_iter": tokens_per_iter(config, parallel),
    }
    if parallel.strategy == "ddp":
        out["ddp_bucket_bytes"] = modelled_bucket_bytes(config, source)
    return out
