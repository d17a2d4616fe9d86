"""Predict the CUDA memory of a phase of nanoGPT's training on fake tensors, and search batch sizes.

The real model code runs on fake CPU tensors (``FakeTensorMode``, docs/en/verify.md#cpu-path) under the
CUDA model (``cuda_model``), watched by
the ``AllocationTracker``. Never imports torch.cuda and never needs a GPU.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import torch

from ..config import TrainConfig
from ..model import GPT
from . import batches, moments, prefetch, reserved
from .allocator import AllocConf
from .compiled import compiled_context
from .cuda_model import _recompute_under, cuda_autocast_context, segment_size
from .gpus import DEFAULT_CAPABILITY
from .kernels import CudaKernels, cublas_workspace_bytes
from .models import ModelSource, PredictionError, no_init
from .phases import run_phase
from .tracker import AllocationTracker
from .units import CONTEXT_BYTES, usable_bytes

PHASES = ("train_step", "estimate_loss")  # the phases of training, at any batch size
MOMENTS = ("resume", "sample")  # loading a checkpoint, sample.py (``moments``): no batch
STATES = ("first", "training")

# What `oomguide check` reports: resuming (init_from='resume': the checkpoint loaded), the first
# estimate_loss() (iteration 0, before any optimizer step), the first step (AdamW's state created in
# it), a later train step, and a later estimate_loss() (AdamW state and train.py's stale logits
# alive); with --sample, sample.py (``moments``).
CHECKS = {
    "resume": ("resume", "first"),
    "estimate_loss_first": ("estimate_loss", "first"),
    "first_step": ("train_step", "first"),
    "train_step": ("train_step", "training"),
    "estimate_loss": ("estimate_loss", "training"),
    "sample": ("sample", "first"),
}


def checks_run(config: TrainConfig, sample: bool = False) -> list[str]:
    """The CHECKS a run goes through: sample.py's generation (`sample`); train.py resumed (the
    checkpoint loaded with AdamW's state in it, so no first step creates it); an ``eval_only`` run
    stops after the first estimate_loss() (train.py's ``if iter_num == 0 and eval_only: break``; a
    resumed run starts later, so it trains on); else from scratch or gpt2*, with the first step."""
    if sample:
        return ["sample"]
    if config.init_from == "resume":
        return ["resume", "estimate_loss_first", "train_step", "estimate_loss"]
    if config.eval_only:
        return ["estimate_loss_first"]
    return ["estimate_loss_first", "first_step", "train_step", "estimate_loss"]


@dataclass
class PhaseResult:
    phase: str
    mode: str  # "predicted" (fake tensors, CUDA modelled) or "measured" (a real CUDA run)
    batch_size: int
    peak_bytes: int
    largest_allocation_bytes: int
    largest_allocation: str
    budget_bytes: int | None = None
    fits: bool | None = None
    failing_allocation_bytes: int | None = None  # "Tried to allocate" of the OOM message
    failing_allocation: str | None = None
    allocated_at_failure_bytes: int | None = None
    failing_forward: int | None = None  # which forward of the phase (1, 2, ...) the failure comes in
    breakdown: dict = field(default_factory=dict)
    reserved_bytes: int | None = None  # the allocator's reserved peak (predicted: on a card with room)
    reserved_at_failure_bytes: int | None = None
    reserved_within_budget_bytes: int | None = None  # reserved peak under the budget (allocator gives back)
    allocated_fits: bool | None = None  # the verdict on allocated bytes alone (before the allocator model)
    alloc_conf: str | None = None  # the PYTORCH_CUDA_ALLOC_CONF the prediction assumed
    attention: str | None = None  # the SDPA kernel the card runs: flash, efficient or math
    baseline_bytes: int | None = None  # measured: what earlier code had allocated (subtracted from the peak)
    # where in the phase's code the peak and the failing allocation come (the tracker's moments:
    # forward_backward, optimizer_step, torch_load, model_to_device, optimizer_load_state_dict, generate)
    peak_moment: str | None = None
    failing_moment: str | None = None
    # on a card: "fits" (``fits`` is True only then), "borderline" or "does_not_fit" (``reserved.decide``),
    # and for a borderline phase the verdict with expandable_segments:True
    verdict: str | None = None
    verdict_with_expandable_segments: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def predict(
    config: TrainConfig,
    phase: str,
    gpu_memory: int | None = None,
    *,
    batch_size: int | None = None,
    source: ModelSource | None = None,
    state: str = "training",
    fake: bool = True,
    context_bytes: int = CONTEXT_BYTES,
    seed: int = 0,
    eval_iters: int = 1,
    stale_logits: bool = True,
    compiled: bool = False,
    peak_only: bool = False,
    alloc_conf: AllocConf | None = None,
    capability: tuple[int, int] = DEFAULT_CAPABILITY,
    search: bool = False,
    checkpoint_on_card: bool = True,
    sample=None,
) -> PhaseResult:
    """Predict the CUDA memory of `phase` for `config`, by running the model code on fake tensors.

    `batch_size` defaults to the phase's batch (``batch_size``; ``estimate_loss`` evaluates batches
    of the training batch_size, chunked by ``eval_batch_size`` if set). `state`: "training" (an
    evaluation or step during training: AdamW state and the last logits alive) or "first" (the first
    ``estimate_loss`` at iteration 0: only the weights). ``fake=False`` runs the same on real CPU
    tensors (slow at full scale; used to check the prediction). `eval_iters`: batches per split in
    ``estimate_loss``; one is enough for its peak, since the val split's first forward already runs
    with the train split's last logits alive (the loop variable), as every later batch does.
    `stale_logits=False` (state "training"): no (B, T, V) logits left over from the last training
    micro-step, as after train.py drops them (docs/en/beyond.md#drop-stale-logits), or with a model that
    returns no such logits.
    `peak_only=True` (the batch-size search): the peak and whether it fits are exact, the failing
    allocation may not be the first one (the train step runs only its second micro-step).
    `compiled=True`: the model as ``torch.compile`` runs it (``compiled``: fused loss, fused casts);
    the CLI passes the config's ``compile``, the guide's figures are eager unless a page says so.
    ``init_from='resume'``: AdamW's state is loaded from the checkpoint before the first evaluation,
    and train.py keeps the checkpoint's weights referenced (``state_dict``) for the whole run.
    `alloc_conf`: the caching allocator's settings (default: PYTORCH_CUDA_ALLOC_CONF from the
    environment); ``fits`` is decided on reserved memory (``reserved``). `capability`: the card's
    compute capability, which picks CUDA's attention kernel (``kernels``).
    `search=True` (the batch-size search): only ``peak_bytes`` and ``fits`` are wanted; they may come
    from the traces of real predictions at two other batch sizes (``batches``), exactly as a run
    would give them; the other figures are then left empty.
    `checkpoint_on_card` (``init_from='resume'`` and sample.py's resume): whether ``torch.load`` puts
    the checkpoint on the card (``map_location=device``, nanoGPT's code) or not (``map_location='cpu'``).
    Phases ``resume`` and ``sample`` (state "first") are ``moments``'; `sample` is sample.py's settings
    (``sample_config.SampleConfig``), `config` then the model it loads.
    """
    if phase not in (*PHASES, *MOMENTS):
        raise ValueError(f"unknown phase {phase!r} (known: {', '.join((*PHASES, *MOMENTS))})")
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}")
    if phase in MOMENTS and state != "first":
        raise ValueError(f"phase {phase!r} has no state before it: state='first'")
    if phase == "sample" and sample is None:
        raise ValueError("phase 'sample' needs sample.py's settings (sample=)")
    source = source or ModelSource()
    batch = 1 if phase == "sample" else batch_size or config.batch_size  # sample.py: batch 1
    budget = None if gpu_memory is None else usable_bytes(gpu_memory, context_bytes)
    run = dict(source=source, state=state, fake=fake, seed=seed, eval_iters=eval_iters)
    run.update(stale_logits=stale_logits, compiled=compiled, peak_only=peak_only, capability=capability)
    run.update(checkpoint_on_card=checkpoint_on_card, sample=sample)
    family = _family(config, phase, run)
    if search and family is not None and gpu_memory is not None:
        found = _derived(family, config, phase, gpu_memory, batch, budget, alloc_conf, run)
        if found is not None:
            return found
    result, traces, peak = _run(config, phase, batch, budget, run_config_of(config, batch_size, batch), **run)
    reserved.judge(result, traces, len(traces) - 1, gpu_memory, alloc_conf)
    if family is not None:
        batches.remember(family, batch, traces, peak)
    return result


def run_config_of(config: TrainConfig, batch_size: int | None, batch: int) -> TrainConfig:
    """The config a run at `batch` reads (`batch_size`: the one asked for, None for the config's)."""
    return config if batch_size is None else config.replace(batch_size=batch)


def _family(config: TrainConfig, phase: str, run: dict) -> str | None:
    """The key under which runs that differ only in the batch size are filed (``batches``), or None
    where a run may change with the batch size otherwise than in sizes: a reader's model, real
    tensors, estimate_loss in chunks of eval_batch_size (as many chunks as the batch size needs)."""
    source = run["source"]
    if phase in MOMENTS:
        return None  # no batch
    if not run["fake"] or source.path is not None or source.gpt_class is not GPT:
        return None
    if phase == "estimate_loss" and config.eval_batch_size:
        return None
    values = sorted((k, v) for k, v in config.values.items() if k != "batch_size")
    return repr((values, phase, *(run[k] for k in sorted(run) if k not in ("source", "sample"))))


_LATER: OrderedDict = OrderedDict()  # key -> (result, trace, peak) of a later phase run beside a first one


def _later_key(phase, batch, budget, run_config, run) -> str:
    """What a run's result depends on, for a later phase (state "training") run beside the first."""
    source = run["source"]
    options = sorted(
        (k, tuple(v) if k == "capability" else v)
        for k, v in run.items()
        if k not in ("source", "sample", "state")
    )
    return repr((phase, batch, budget, repr(run_config), source.gpt_class, source.path, options))


def _later_too(phase, state, run_config, run) -> bool:
    """Whether the run of `phase` in state "first" also gives the same phase's later run (``phases.run_phase``'s
    `later`): oomguide's GPT on fake tensors, trained from scratch (nothing resumed), and, for a
    train step, no GradScaler (float16 runs its unscale_ and found_inf per optimizer)."""
    source = run["source"]
    if state != "first" or not run["fake"] or source.path is not None or source.gpt_class is not GPT:
        return False
    if run_config.init_from == "resume":
        return False
    return phase == "estimate_loss" or (phase == "train_step" and run_config.dtype != "float16")


def _run(config, phase, batch, budget, run_config, **run):
    """Run `phase` tracked (after the training step before it, for a later estimate_loss): the result
    without the allocator's view, the traces for it (warm-up first), and the tracker's peak.

    A first estimate_loss or first step also makes the same phase's later run (``_later_too``): its
    result waits in ``_LATER`` for the prediction that asks for it."""
    state = run["state"]
    if state == "training":
        kept = _LATER.pop(_later_key(phase, batch, budget, run_config, run), None)
        if kept is not None:
            result, trace, peak = kept
            warm_key = _warm_key(run_config, batch, run)
            warmup = trace if phase == "train_step" else reserved.cached_warmup(warm_key)
            if warmup is not None:
                return result, [warmup, trace], peak
    later = (
        _later_key(phase, batch, budget, run_config, run)
        if _later_too(phase, state, run_config, run)
        else None
    )
    return _run_tracked(config, phase, batch, budget, run_config, later=later, **run)


def _warm_key(run_config, batch, run) -> tuple:
    source = run["source"]
    return (
        repr(run_config),
        batch,
        source.gpt_class,
        source.path,
        run["stale_logits"],
        run["fake"],
        tuple(run["capability"]),
        run["compiled"],
        run["peak_only"],
    )


def _run_tracked(
    config,
    phase,
    batch,
    budget,
    run_config,
    *,
    source,
    state,
    fake,
    seed,
    eval_iters,
    stale_logits,
    compiled,
    peak_only,
    capability,
    checkpoint_on_card=True,
    sample=None,
    later=None,
):
    """``_run``'s tracked run; `later`: the key under which the same phase's later run is kept."""
    gpt_config = config.gpt_config()
    tracker = AllocationTracker(vocab_size=gpt_config.vocab_size, budget=budget)
    later_tracker = AllocationTracker(vocab_size=gpt_config.vocab_size, budget=budget) if later else None
    counted = [t for t in (tracker, later_tracker) if t is not None]
    ctx = compiled_context(config.dtype) if compiled else cuda_autocast_context(config.dtype)
    torch.manual_seed(seed)
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode(allow_non_fake_inputs=False)
    else:
        mode = nullcontext()
    kernels = CudaKernels(capability)
    if phase == "sample":
        moments.load_dynamo()
    run = dict(source=source, stale_logits=stale_logits, fake=fake, capability=kernels.capability)
    warm_key = _warm_key(run_config, batch, dict(run, compiled=compiled, peak_only=peak_only))
    with mode, warnings.catch_warnings(), kernels:
        # GradScaler('cuda') on a CPU-only build warns that it disables itself
        warnings.simplefilter("ignore")
        with no_init() if fake else nullcontext():
            model = source.build(gpt_config, compiled)
        model.train()

        def count(*_):
            for t in counted:
                t.forwards += 1

        model.register_forward_pre_hook(count)
        like = next(model.parameters(), None)
        workspace = cublas_workspace_bytes(kernels.capability)
        tracker.workspaces(workspace, _blas_threads_before(phase, state), like)
        if later_tracker is not None:
            later_tracker.workspaces(workspace, ("forward", "backward"), like)
        warmup = None
        try:
            if phase == "estimate_loss" and state == "training":
                warmup = reserved.cached_warmup(warm_key)
                if warmup is None:  # a training step ran before this evaluation: its segments are cached
                    step_tracker = AllocationTracker(vocab_size=gpt_config.vocab_size)
                    step_tracker.workspaces(workspace, ("forward", "backward"), like)
                    with _recompute_under(ctx, kernels.fresh):
                        run_phase(
                            model,
                            run_config,
                            "train_step",
                            step_tracker,
                            state,
                            ctx,
                            batch,
                            1,
                            stale_logits,
                            bool(source.path),
                            checkpoint_on_card=checkpoint_on_card,
                        )
                    warmup = step_tracker.trace
                    reserved.remember_warmup(warm_key, warmup)
                    tracker.forwards = 0  # the hook counted the warm-up's forwards
            if phase == "resume":
                moments.run_resume(model, run_config, tracker, checkpoint_on_card)
            elif phase == "sample":
                own = bool(source.path) and hasattr(model, "generate")
                moments.run_sample(model, sample, tracker, ctx, checkpoint_on_card, own)
            else:
                with _recompute_under(ctx, kernels.fresh):
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
                        bool(source.path),
                        one_micro_step=peak_only,
                        checkpoint_on_card=checkpoint_on_card,
                        later=later_tracker,
                    )
        except Exception as exc:
            if source.path is None:
                raise
            # a reader's model.py may do what fake tensors cannot (data-dependent code, .item() in
            # the forward, a custom kernel): one line naming the file and the error
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise PredictionError(
                f"{source.path}: the model cannot run on fake tensors in {phase}: "
                f"{exc.__class__.__name__}: {first}"
            ) from None
        if phase == "train_step" and state == "training":
            reserved.remember_warmup(warm_key, tracker.trace)
            warmup = tracker.trace  # the step before this one
        if later_tracker is not None:
            if phase == "train_step":
                reserved.remember_warmup(warm_key, later_tracker.trace)  # a later evaluation's warm-up
            made = (
                _result(later_tracker, phase, batch, budget, kernels),
                later_tracker.trace,
                later_tracker.peak,
            )
            _LATER[later] = made
            while len(_LATER) > 8:
                _LATER.popitem(last=False)
    result = _result(tracker, phase, batch, budget, kernels)
    traces = [tracker.trace] if warmup is None else [warmup, tracker.trace]
    return result, traces, tracker.peak


def _blas_threads_before(phase: str, state: str) -> tuple:
    """The threads whose cuBLAS workspace an earlier phase of train.py made (``kernels.BLAS_OPS``):
    the first estimate_loss() runs train.py's first matrix products (on the main thread), the first
    step's backward the first on autograd's thread; resuming and sample.py start with none."""
    if phase in MOMENTS or (phase == "estimate_loss" and state == "first"):
        return ()
    if phase == "train_step" and state == "first":
        return ("forward",)
    return ("forward", "backward")


def _result(tracker, phase, batch, budget, kernels) -> PhaseResult:
    """A tracked run's result, without the allocator's view."""
    result = PhaseResult(
        phase=phase,
        mode="predicted",
        batch_size=batch,
        peak_bytes=tracker.peak,
        largest_allocation_bytes=tracker.largest.nbytes,
        largest_allocation=tracker.largest.describe(),
        breakdown=tracker.breakdown(),
        budget_bytes=budget,
        peak_moment=tracker.peak_moment,
    )
    if budget is not None:
        result.fits = tracker.failing is None
        if tracker.failing is not None:
            result.failing_allocation_bytes = segment_size(tracker.failing.nbytes)
            result.failing_allocation = tracker.failing.describe()
            result.allocated_at_failure_bytes = tracker.allocated_at_failure
            result.failing_forward = tracker.failing_forward
            result.failing_moment = tracker.failing_moment
    result.attention = ", ".join(sorted(kernels.used)) or None
    return result


def _derived(family, config, phase, gpu_memory, batch, budget, alloc_conf, run) -> PhaseResult | None:
    """The peak and verdict of `batch` from the family's traces (None: a real prediction is needed).

    A family with one run gets its second at the next batch size (the same for every phase, so that a
    later estimate_loss finds that batch size's training step among the warm-ups)."""
    runs = batches.family(family)
    if batch == 1 and 1 not in runs.runs:
        return None
    if not runs.ready(batch) and len(runs.runs) == 1 and not runs.broken:
        (only,) = runs.runs
        second = second_batch(only)
        if not prefetch.collect(family, second, batches.remember) and second != batch:
            # its traces are what is wanted: no verdict of its own
            _, traces, peak = _run(config, phase, second, None, run_config_of(config, second, second), **run)
            batches.remember(family, second, traces, peak)
    if not runs.ready(batch):
        return None
    traces = runs.traces(batch)
    peak = runs.peak(batch)
    result = PhaseResult(phase, "predicted", batch, peak, 0, "", budget_bytes=budget)
    result.fits = reserved.fits(traces, budget, gpu_memory, alloc_conf, peak=peak)
    return None if result.fits is None else result


def second_batch(first: int) -> int:
    """The batch size of a family's second run: the next one (2 after 1), the same for every phase."""
    return first + 1 if first >= 2 else 2


def batch_size_of(config: TrainConfig, phase: str) -> int:
    """The batch size a phase runs with: ``batch_size`` (``estimate_loss`` draws batches of it too)."""
    return config.batch_size
