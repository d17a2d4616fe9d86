"""How much GPU memory a phase of nanoGPT's training takes: measured on CUDA, predicted anywhere.

Prediction (no GPU needed): the real model code runs on fake tensors (FACTS 17), which carry
shapes and dtypes but no data. A dispatch mode sees every tensor the ops create and, through
weak references to their storages, when each one is freed, so it knows the live bytes after
every allocation, the peak, the largest allocation and the first one that would not fit a budget.

A CPU-only PyTorch cannot run fake *CUDA* tensors, so the prediction runs on fake CPU tensors and
models what CUDA does differently:

- autocast: CUDA's lists, not the CPU's (``CudaAutocast``); in particular ``cross_entropy`` runs
  ``log_softmax`` in the logits' dtype and ``nll_loss`` on a float32 copy (FACTS 12);
- AdamW is the fused one, as nanoGPT uses on CUDA;
- the caching allocator rounds every block up to 512 bytes; an OOM message names the request
  rounded to the allocator's segment size (2 MiB steps for large blocks, FACTS 19).

Not modelled: the CUDA context (outside PyTorch's allocator; ``CONTEXT_BYTES`` is set aside for it),
kernels' private workspaces, fragmentation, and torch.compile.

Measurement (CUDA only): ``measure`` runs the same phase on the GPU, capped to a budget with
``torch.cuda.set_per_process_memory_fraction``; all CUDA calls of oomguide are in this module.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from . import loop
from .config import TrainConfig
from .model import GPT, GPTConfig

GiB = 1024**3
MiB = 1024**2
DEFAULT_GPU_MEMORY = int(11.69 * GiB)  # what PyTorch reports as total capacity of a 12 GB card
# The CUDA context and libraries live outside PyTorch's allocator: 224.90 MiB in the report that
# article A analyses (FACTS 15 calls it "a few hundred MiB"). The predictor sets this much aside.
CONTEXT_BYTES = 256 * MiB
PHASES = ("train_step", "estimate_loss")
CATEGORIES = ("weights", "gradients", "optimizer_state", "activations", "logits_and_loss")


class MemoryError_(RuntimeError):
    """A model or config that cannot be run for a prediction (the message names the problem)."""


# --------------------------------------------------------------------------------------------
# the CUDA caching allocator's arithmetic
# --------------------------------------------------------------------------------------------
def block_size(nbytes: int) -> int:
    """Bytes the caching allocator books for a tensor: rounded up to 512."""
    return max(512, -(-nbytes // 512) * 512)


def segment_size(nbytes: int) -> int:
    """The size an OOM message prints as "Tried to allocate": the segment the allocator asks CUDA for.

    Up to 1 MiB: a 2 MiB segment; below 10 MiB: a 20 MiB segment; above: rounded up to 2 MiB.
    """
    size = block_size(nbytes)
    if size <= MiB:
        return 2 * MiB
    if size < 10 * MiB:
        return 20 * MiB
    return -(-size // (2 * MiB)) * (2 * MiB)


# --------------------------------------------------------------------------------------------
# CUDA autocast, on any device
# --------------------------------------------------------------------------------------------
def _ops(*names):
    out = set()
    for name in names:
        owner, _, attr = name.rpartition(".")
        obj = {"F": F, "torch": torch, "Tensor": torch.Tensor}[owner]
        if hasattr(obj, attr):
            out.add(getattr(obj, attr))
    return out


# CUDA autocast's lower-precision list and float32 list (PyTorch's amp page), the ops a GPT uses.
_LOWER = _ops(
    "F.linear",
    "torch.matmul",
    "Tensor.matmul",
    "Tensor.__matmul__",
    "Tensor.__rmatmul__",
    "torch.mm",
    "Tensor.mm",
    "torch.bmm",
    "Tensor.bmm",
    "torch.baddbmm",
    "Tensor.baddbmm",
    "torch.addmm",
    "Tensor.addmm",
    "torch.addbmm",
    "F.scaled_dot_product_attention",
    "F.conv1d",
    "F.conv2d",
    "F.conv3d",
)
_FLOAT32 = _ops(
    "F.layer_norm",
    "F.group_norm",
    "F.nll_loss",
    "F.mse_loss",
    "F.l1_loss",
    "F.smooth_l1_loss",
    "F.kl_div",
    "F.binary_cross_entropy_with_logits",
    "torch.exp",
    "Tensor.exp",
    "torch.log",
    "Tensor.log",
    "torch.pow",
    "Tensor.pow",
    "Tensor.__pow__",
    "torch.rsqrt",
    "Tensor.rsqrt",
    "torch.norm",
    "Tensor.norm",
    "F.normalize",
    "torch.logsumexp",
    "Tensor.logsumexp",
    "torch.cumsum",
    "Tensor.cumsum",
)
# float32 unless the call names a dtype (autocast's "fp32_set_opt_dtype")
_FLOAT32_UNLESS_DTYPE = _ops(
    "F.softmax", "F.log_softmax", "torch.softmax", "torch.log_softmax", "Tensor.softmax", "Tensor.log_softmax"
)


class CudaAutocast(TorchFunctionMode):
    """``torch.autocast('cuda', dtype)`` as CUDA does it, usable on fake CPU tensors.

    Casts the floating-point arguments of CUDA autocast's lower-precision ops to `dtype` and of its
    float32 ops to float32, caches the low-precision copies of leaf weights for the duration of the
    context (as autocast does), and runs ``F.cross_entropy`` the way CUDA does (FACTS 12).
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

        return tree_map(cast, value)

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
        if input.dtype not in (torch.float16, torch.bfloat16) or label_smoothing or input.dim() != 2:
            return F.cross_entropy(
                input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing
            )
        # cross_entropy_loss is not on CUDA's lists: its log_softmax keeps the input dtype (explicitly),
        # and nll_loss, on the float32 list, casts the log-probabilities to a float32 copy.
        logprobs = torch.log_softmax(input, 1, dtype=input.dtype)
        return F.nll_loss(logprobs.float(), target, weight, size_average, ignore_index, reduce, reduction)


@contextmanager
def _recompute_under(ctx):
    """Recompute oomguide.model's checkpointed Blocks (grad_checkpoint) under `ctx` in backward.

    torch.utils.checkpoint re-enters torch.autocast for the recomputation, but not a TorchFunctionMode
    such as CudaAutocast: without this, the recomputed tensors come out float32 and checkpoint fails.
    """
    from . import model as model_module

    original = model_module.checkpoint
    original_torch = torch.utils.checkpoint.checkpoint  # code that calls torch.utils.checkpoint.checkpoint
    if isinstance(ctx, CudaAutocast):
        model_module.checkpoint = functools.partial(
            original, context_fn=lambda: (nullcontext(), CudaAutocast(ctx.dtype))
        )
        torch.utils.checkpoint.checkpoint = functools.partial(
            original_torch, context_fn=lambda: (nullcontext(), CudaAutocast(ctx.dtype))
        )
    try:
        yield
    finally:
        model_module.checkpoint = original
        torch.utils.checkpoint.checkpoint = original_torch


def cuda_autocast_context(dtype: str):
    """train.py's ``ctx`` for a CUDA run, reproduced on CPU tensors for the prediction."""
    return nullcontext() if dtype == "float32" else CudaAutocast(loop.PTDTYPE[dtype])


# --------------------------------------------------------------------------------------------
# the tracker
# --------------------------------------------------------------------------------------------
@dataclass
class Allocation:
    nbytes: int
    op: str
    shape: tuple
    dtype: str

    def describe(self) -> str:
        return f"{self.op} -> {self.dtype}{list(self.shape)}"


@dataclass
class _Live:
    ref: StorageWeakRef
    nbytes: int
    tag: str


class AllocationTracker(TorchDispatchMode):
    """Live bytes of every storage the ops create, as the CUDA caching allocator would count them.

    ``budget``: the bytes the allocator may hold; the first allocation beyond it is recorded in
    ``failing`` (the "Tried to allocate" of the OOM message), and tracking goes on to the full peak.
    """

    def __init__(self, vocab_size: int | None = None, budget: int | None = None):
        super().__init__()
        self.vocab_size = vocab_size
        self.budget = budget
        self.live: dict[int, _Live] = {}
        self.current = 0
        self.peak = 0
        self.peak_live: list[tuple[int, int, str]] = []
        self.peak_grad_keys: set[int] = set()
        self.largest: Allocation | None = None
        self.failing: Allocation | None = None
        self.allocated_at_failure = 0
        self.grads_of: list[torch.nn.Parameter] = []
        self.weight_keys: set[int] = set()
        self.tag_new = None  # overrides the tag of new storages (e.g. "optimizer_state")

    # storages that exist before tracking starts
    def register(self, tensors, tag: str) -> None:
        for t in tensors:
            if isinstance(t, torch.Tensor):
                key = self._add(t, tag)
                if tag == "weights" and key is not None:
                    self.weight_keys.add(key)

    def _add(self, t: torch.Tensor, tag: str):
        storage = t.untyped_storage()
        ref = StorageWeakRef(storage)
        entry = self.live.get(ref.cdata)
        if entry is not None and not entry.ref.expired():
            return None
        nbytes = block_size(storage.nbytes()) if storage.nbytes() else 0
        self.live[ref.cdata] = _Live(ref, nbytes, tag)
        self.current += nbytes
        return ref.cdata

    def _sweep(self) -> None:
        dead = [k for k, e in self.live.items() if e.ref.expired()]
        for k in dead:
            self.current -= self.live.pop(k).nbytes

    def _tag(self, func, t: torch.Tensor, args) -> str:
        if self.tag_new:
            return self.tag_new
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
            source = StorageWeakRef(args[0].untyped_storage()).cdata
            if source in self.weight_keys:
                return "weights"  # autocast's low-precision copy of a weight
        if (
            self.vocab_size
            and t.dim() >= 2
            and t.shape[-1] == self.vocab_size
            and t.shape[0] != self.vocab_size
        ):
            return "logits_and_loss"
        return "activations"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        swept = False
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            entry = self.live.get(StorageWeakRef(storage).cdata)
            if entry is not None and not entry.ref.expired():
                continue  # a view, or an in-place result
            if not swept:
                self._sweep()  # frees happen between ops: settle them before counting the new block
                swept = True
            nbytes = block_size(storage.nbytes())
            alloc = Allocation(
                nbytes, str(func.overloadpacket.__name__), tuple(t.shape), str(t.dtype).replace("torch.", "")
            )
            if self.budget is not None and self.failing is None and self.current + nbytes > self.budget:
                self.failing = alloc
                self.allocated_at_failure = self.current
            self._add(t, self._tag(func, t, args))
            if self.largest is None or nbytes > self.largest.nbytes:
                self.largest = alloc
            if self.current > self.peak:
                self._record_peak()
        return out

    def _record_peak(self) -> None:
        self.peak = self.current
        self.peak_live = [(k, e.nbytes, e.tag) for k, e in self.live.items()]
        self.peak_grad_keys = {
            StorageWeakRef(p.grad.untyped_storage()).cdata for p in self.grads_of if p.grad is not None
        }

    def breakdown(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for key, nbytes, tag in self.peak_live:
            out["gradients" if key in self.peak_grad_keys else tag] += nbytes
        return out


# --------------------------------------------------------------------------------------------
# models: oomguide's GPT, or a user's nanoGPT model.py
# --------------------------------------------------------------------------------------------
@dataclass
class ModelSource:
    """Where the GPT class comes from: oomguide.model, or the model.py of a nanoGPT checkout."""

    gpt_class: type = GPT
    config_class: type = GPTConfig
    path: str | None = None

    def build(self, gpt_config: GPTConfig) -> torch.nn.Module:
        accepted = {f for f in inspect.signature(self.config_class).parameters}
        args = {k: v for k, v in asdict(gpt_config).items() if k in accepted}
        if gpt_config.grad_checkpoint and "grad_checkpoint" not in accepted:
            raise MemoryError_(f"{self.path}: its GPTConfig has no grad_checkpoint field")
        try:
            with warnings.catch_warnings(), _quiet():
                warnings.simplefilter("ignore")
                return self.gpt_class(self.config_class(**args))
        except Exception as exc:  # a user's model may fail in any way: report it in one line
            where = self.path or "oomguide.model"
            raise MemoryError_(f"{where}: building GPT failed: {exc.__class__.__name__}: {exc}") from None


class _quiet:
    """nanoGPT's GPT prints its parameter count; keep stdout clean for --json."""

    def __enter__(self):
        self._stdout = sys.stdout
        sys.stdout = open(__import__("os").devnull, "w")  # noqa: SIM115

    def __exit__(self, *exc):
        sys.stdout.close()
        sys.stdout = self._stdout


def load_model_source(path: str | Path) -> ModelSource:
    """Import a nanoGPT-style model.py (GPT and GPTConfig classes, ``forward(idx, targets)``)."""
    path = Path(path)
    if not path.is_file():
        raise MemoryError_(f"model file not found: {path}")
    name = f"_oomguide_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        with _quiet():
            spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise MemoryError_(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except Exception as exc:
        raise MemoryError_(f"{path}: import failed: {exc.__class__.__name__}: {exc}") from None
    gpt, cfg = getattr(module, "GPT", None), getattr(module, "GPTConfig", None)
    if not isinstance(gpt, type) or not issubclass(gpt, torch.nn.Module):
        raise MemoryError_(f"{path}: no GPT class (an nn.Module named GPT) in this file")
    if not isinstance(cfg, type):
        raise MemoryError_(f"{path}: no GPTConfig class in this file")
    params = list(inspect.signature(gpt.forward).parameters)
    if params[:3] != ["self", "idx", "targets"]:
        raise MemoryError_(
            f"{path}: GPT.forward must take (idx, targets), like nanoGPT's; it takes {params[1:]}"
        )
    return ModelSource(gpt, cfg, str(path))


# --------------------------------------------------------------------------------------------
# prediction
# --------------------------------------------------------------------------------------------
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
    breakdown: dict = field(default_factory=dict)
    reserved_bytes: int | None = None  # measured runs only

    def to_json(self) -> dict:
        return asdict(self)


def usable_bytes(gpu_memory: int, context_bytes: int = CONTEXT_BYTES) -> int:
    """What the caching allocator can get on a card of `gpu_memory` bytes (the CUDA context set aside)."""
    return gpu_memory - context_bytes


def _fake_batch(batch: int, block: int, vocab: int):
    return torch.randint(0, vocab, (batch, block)), torch.randint(0, vocab, (batch, block))


def _run_phase(
    model,
    config: TrainConfig,
    phase: str,
    tracker: AllocationTracker,
    state: str,
    ctx,
    batch_size: int,
    eval_iters: int = 1,
    stale_logits: bool = True,
):
    """Set up nanoGPT's state before `phase` (registering it with the tracker), then run the phase tracked."""
    cfg_block = model.config.block_size if hasattr(model, "config") else config.block_size
    vocab = tracker.vocab_size
    params = list(model.parameters())
    tracker.grads_of = params
    tracker.register(params, "weights")
    tracker.register(model.buffers(), "weights")
    optimizer = loop.make_optimizer(model, config, "cuda")
    stale_dtype = loop.PTDTYPE[config.dtype]
    block = min(config.block_size, cfg_block)
    if state == "training":
        # AdamW's state exists after the first step; make it without tracking the step itself
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tracker.register([t for s in optimizer.state.values() for t in s.values()], "optimizer_state")
    train_state = loop.TrainState(model, optimizer, loop.make_scaler(config.dtype, "cpu"), ctx)
    if state == "training" and stale_logits:
        # FACTS 11: the last micro-step's logits are still referenced
        train_state.logits = torch.empty(config.batch_size, block, vocab, dtype=stale_dtype)
        tracker.register([train_state.logits], "logits_and_loss")

    if phase == "train_step":

        def get_batch(split):
            return _fake_batch(batch_size, block, vocab)

        train_state.X, train_state.Y = get_batch("train")
        tracker.register([train_state.X, train_state.Y], "activations")
        with tracker:
            _train_step_tracked(
                train_state, get_batch, min(config.gradient_accumulation_steps, 2), config.grad_clip, tracker
            )
    elif phase == "estimate_loss":
        eval_block = min(config.eval_block, block)

        def get_batch(split):
            return _fake_batch(batch_size, eval_block, vocab)

        with tracker:
            if config.eval_batch_size and config.eval_batch_size < batch_size:
                loop.estimate_loss_batched(model, get_batch, eval_iters, ctx, config.eval_batch_size)
            else:
                loop.estimate_loss(model, get_batch, eval_iters, ctx)
    else:
        raise ValueError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")


def _train_step_tracked(train_state, get_batch, gas, grad_clip, tracker):
    """loop.train_step, with the optimizer's new tensors tagged as optimizer state."""
    opt = train_state.optimizer
    original = opt.step

    def step(*a, **k):
        tracker.tag_new = "optimizer_state"
        try:
            return original(*a, **k)
        finally:
            tracker.tag_new = None

    opt.step = step
    try:
        loop.train_step(train_state, get_batch, gas, grad_clip)
    finally:
        opt.step = original


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
    micro-step (FACTS 11), as after train.py drops them, or with a model that returns no such logits.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
    if state not in ("training", "first"):
        raise ValueError(f"unknown state {state!r}")
    if state == "first" and phase != "estimate_loss":
        raise ValueError("state='first' is the first estimate_loss at iteration 0")
    source = source or ModelSource()
    batch = batch_size or config.batch_size
    budget = None if gpu_memory is None else usable_bytes(gpu_memory, context_bytes)
    gpt_config = config.gpt_config()
    tracker = AllocationTracker(vocab_size=gpt_config.vocab_size, budget=budget)
    ctx = cuda_autocast_context(config.dtype)
    torch.manual_seed(seed)
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode(allow_non_fake_inputs=False)
    else:
        mode = nullcontext()
    with mode, warnings.catch_warnings():
        # GradScaler('cuda') on a CPU-only build warns that it disables itself
        warnings.simplefilter("ignore")
        model = source.build(gpt_config)
        model.train()
        run_config = config if batch_size is None else config.replace(batch_size=batch)
        with _recompute_under(ctx):
            _run_phase(model, run_config, phase, tracker, state, ctx, batch, eval_iters, stale_logits)
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
    if budget is not None:
        result.fits = tracker.failing is None
        if tracker.failing is not None:
            result.failing_allocation_bytes = segment_size(tracker.failing.nbytes)
            result.failing_allocation = tracker.failing.describe()
            result.allocated_at_failure_bytes = tracker.allocated_at_failure
    return result


def max_batch_size(
    config: TrainConfig,
    phase: str,
    gpu_memory: int,
    *,
    source: ModelSource | None = None,
    limit: int = 4096,
    progress=None,
    known: dict[int, PhaseResult] | None = None,
    context_bytes: int = CONTEXT_BYTES,
) -> int:
    """The largest batch_size whose predicted `phase` fits `gpu_memory` (0 if not even 1 fits).

    The peak is close to linear in the batch size, so two predictions give a first guess, and a
    few more settle it exactly. `known` caches predictions by batch size (shared with the caller).
    `progress(done, total_guess)` is called after each prediction.
    """
    known = {} if known is None else known
    calls = [0]

    def fits(b: int) -> bool:
        if b not in known:
            known[b] = predict(
                config, phase, gpu_memory, batch_size=b, source=source, context_bytes=context_bytes
            )
            calls[0] += 1
            if progress:
                progress(calls[0])
        return bool(known[b].fits)

    if not fits(1):
        return 0
    # linear guess from two points
    b2 = max(2, min(limit, config.batch_size if config.batch_size > 1 else 8))
    fits(b2)
    p1, p2 = known[1].peak_bytes, known[b2].peak_bytes
    slope = max((p2 - p1) / (b2 - 1), 1)
    budget = usable_bytes(gpu_memory, context_bytes)
    guess = max(1, min(limit, int(1 + (budget - p1) / slope)))
    lo, hi = 1, limit + 1  # lo fits; hi does not (or is beyond the limit)
    for b in sorted(known):
        if known[b].fits:
            lo = max(lo, b)
        else:
            hi = min(hi, b)
    # probe around the guess, then bisect
    for b in (guess, guess + 1):
        if lo < b < hi:
            if fits(b):
                lo = b
            else:
                hi = b
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------------------------
# measurement on CUDA (the only CUDA code of oomguide)
# --------------------------------------------------------------------------------------------
def cuda_available() -> bool:
    return torch.cuda.is_available()


def cuda_total_bytes() -> int:
    return torch.cuda.get_device_properties(0).total_memory


def cuda_device_name() -> str:
    return torch.cuda.get_device_name(0)


def limit_cuda_memory(gpu_memory: int, context_bytes: int = CONTEXT_BYTES) -> float:
    """Cap this process's caching allocator to a smaller card's usable memory (FACTS 15). Returns the fraction."""
    fraction = min(1.0, usable_bytes(gpu_memory, context_bytes) / cuda_total_bytes())
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    return fraction


def measure(
    config: TrainConfig,
    phase: str,
    data_dir: str | Path,
    gpu_memory: int | None = None,
    *,
    source: ModelSource | None = None,
    state: str = "training",
    iters: int = 1,
    context_bytes: int = CONTEXT_BYTES,
    stale_logits: bool = True,
) -> PhaseResult:
    """Run `phase` for real on CUDA and report the allocator's peak. An OOM is a result (fits=False).

    `stale_logits=False`: drop the warm-up step's last logits before the phase (as predict's option).
    """
    if not cuda_available():
        raise RuntimeError("measure() needs a CUDA GPU; use predict() elsewhere")
    source = source or ModelSource()
    device = "cuda"
    budget = None
    if gpu_memory is not None:
        limit_cuda_memory(gpu_memory, context_bytes)
        budget = usable_bytes(gpu_memory, context_bytes)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    data = loop.BinData(Path(data_dir), config.batch_size, config.block_size, device)
    model = optimizer = train_state = None
    fits, failing = True, None
    try:
        model = source.build(config.gpt_config()).to(device)
        model.train()
        optimizer = loop.make_optimizer(model, config, device)
        ctx = loop.autocast_context(device, config.dtype)
        train_state = loop.TrainState(model, optimizer, loop.make_scaler(config.dtype, device), ctx)
        if state == "training":
            # one real step first: AdamW's state and the last logits exist, as during training
            loop.train_step(train_state, data.get_batch, 1, config.grad_clip)
            if not stale_logits:
                train_state.logits = None
        torch.cuda.reset_peak_memory_stats()
        if phase == "train_step":
            for _ in range(iters):
                loop.train_step(
                    train_state, data.get_batch, config.gradient_accumulation_steps, config.grad_clip
                )
        else:

            def get_batch(split):
                return data.get_batch(split, config.batch_size, config.eval_block)

            if config.eval_batch_size and config.eval_batch_size < config.batch_size:
                loop.estimate_loss_batched(model, get_batch, iters, ctx, config.eval_batch_size)
            else:
                loop.estimate_loss(model, get_batch, iters, ctx)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        fits, failing = False, str(exc).splitlines()[0][:300]
    peak = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.max_memory_reserved()
    del model, optimizer, train_state
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    return PhaseResult(
        phase=phase,
        mode="measured",
        batch_size=config.batch_size,
        peak_bytes=peak,
        largest_allocation_bytes=0,
        largest_allocation="(not measured)",
        budget_bytes=budget,
        fits=fits if budget is not None else None,
        failing_allocation=failing,
        reserved_bytes=reserved,
    )


def empty_cache_effect(live_bytes: int = 256 * MiB, freed_bytes: int = 512 * MiB) -> dict[str, int]:
    """What ``torch.cuda.empty_cache()`` gives back (FACTS 13), on the GPU: keep `live_bytes` in a tensor,
    free `freed_bytes`, and read allocated/reserved before and after ``empty_cache()``."""
    if not cuda_available():
        raise RuntimeError("empty_cache_effect() needs a CUDA GPU")
    torch.cuda.empty_cache()
    live = torch.empty(live_bytes, dtype=torch.uint8, device="cuda")
    freed = torch.empty(freed_bytes, dtype=torch.uint8, device="cuda")
    del freed
    before = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    torch.cuda.empty_cache()
    after = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    out = {f"{k}_before": v for k, v in before.items()} | {f"{k}_after": v for k, v in after.items()}
    out["live_bytes"] = live.numel()
    del live
    torch.cuda.empty_cache()
    return out


def expandable_segments_in_use() -> bool | None:
    """Whether the caching allocator made its segments expandable (CUDA only): allocate, then read the
    memory snapshot's ``is_expandable`` flags. None when this PyTorch's snapshot has no such flag."""
    if not cuda_available():
        raise RuntimeError("expandable_segments_in_use() needs a CUDA GPU")
    probe = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    segments = torch.cuda.memory_snapshot()
    del probe
    flags = [seg["is_expandable"] for seg in segments if "is_expandable" in seg]
    return any(flags) if flags else None


_UNITS = {"gib": GiB, "gb": 1000**3, "mib": MiB, "mb": 1000**2, "g": GiB, "m": MiB}


def parse_size(text: str) -> int:
    """'11.69GiB', '12GB', '3686MiB' -> bytes. GiB/MiB are powers of 1024, GB/MB of 1000."""
    import re

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]+)\s*", str(text))
    if not match:
        raise ValueError(
            f"cannot read size {text!r}: write a number and a unit, e.g. 11.69GiB, 12GB or 4096MiB"
        )
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit {match.group(2)!r} in {text!r} (use GiB, GB, MiB or MB)")
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"size must be above zero, got {text!r}")
    return size


def gib(nbytes: float) -> float:
    return nbytes / GiB


def fmt_bytes(nbytes: float) -> str:
    if nbytes >= GiB:
        return f"{nbytes / GiB:.2f} GiB"
    return f"{nbytes / MiB:.2f} MiB"
