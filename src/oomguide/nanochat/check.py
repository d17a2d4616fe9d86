"""The verdict on a nanochat run: each phase's peak, reserved memory, whether it fits, the largest
``--device-batch-size`` that does; one plain dict (``--json``), which ``render`` words.

What it does: reads the command line (``command``), imports nanochat's code for the card's compute
dtype (``code``), plans the script's phases (``plan``) and predicts each on fake tensors
(``phases``); the card (``--gpu``, ``--gpu-memory``) is resolved and judged by oomguide's own
machinery: ``memory.gpus`` for the card, ``memory.reserved.judge`` for the caching allocator's
reserved peak and the verdict on it, ``memory.search.max_batch_size`` for the search, whose probes
come from two real runs (``memory.batches``) as nanoGPT's do. A phase during training (a later
evaluation, sampling, the next step) is replayed after the training step, whose segments the
allocator has cached. ``verdicts`` judges one line on several cards (the nanochat page's table) with
its runs on fake tensors made once (``Runs``): a run does not depend on the card's memory, only its
replay does. Never imports torch.cuda.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

from .. import units, versions
from ..memory import batches, gpus, reserved
from ..memory.allocator import alloc_conf_from_env, parse_alloc_conf
from ..memory.predict import PhaseResult, second_batch
from ..memory.search import max_batch_size
from . import code as nanochat_code
from .command import parse_line, script_arguments, script_environ
from .phases import Setting, run
from .plan import make_plan


@dataclass
class Request:
    checkout: str
    command: list  # the words after --
    gpu: str | None = None
    gpu_memory: int = units.DEFAULT_GPU_MEMORY
    capability: tuple | None = None
    alloc_conf: str | None = None
    search: bool = True
    from_base: str | None = None
    tokenizer: str | None = None  # the tok_train line that trained the tokenizer


def fa3_for(capability: tuple, dtype: str) -> bool:
    """Whether nanochat runs FA3 on this card (nanochat/flash_attention.py: the ``kernels`` package,
    a dependency of nanochat, loads it on CUDA; FA3 takes bfloat16 only; compiled for sm80 to sm90)."""
    return dtype == "bfloat16" and (8, 0) <= tuple(capability) < (10, 0)


class Runs:
    """The runs on fake tensors that verdicts make, kept for every later verdict given the same
    ``Runs``: those of one command line on several cards (``verdicts``), or of several lines.

    A run is decided by nanochat's code (the compute dtype), the ``Setting`` (the shape, the ranks,
    the compute capability and with it the attention kernel) and the phase (``--fp8`` included) at
    its batch size; it is filed under exactly those, so a card of another capability or dtype never
    gets another card's run. What the tracker records (its trace, peak, breakdown, largest
    allocation) does not depend on the card: its budget only marks the first allocation over it
    (``AllocationTracker.failing``), which here gives the verdict on allocated bytes alone
    (``allocated_fits``; the failing allocation that is reported is the allocator replay's,
    ``reserved.judge``). That verdict is read for another budget from the ones a run was made with,
    where they settle it (`allocated_fits`), else the run is made again with the card's budget."""

    def __init__(self):
        self._runs: dict = {}

    def get(self, code, setting, spec, batch: int, budget: int, allocated: bool = False) -> _Run:
        """The run of `spec` at `batch`; `allocated`: with its tracker's verdict known at `budget`."""
        key = (id(code), setting, spec, batch)
        found = self._runs.get(key)
        if found is None or (allocated and found.allocated_fits(budget) is None):
            tracker, used = run(code, setting, spec, batch, budget)
            if found is None:
                found = self._runs[key] = _Run(code, tracker, used)
            found.budgets[budget] = tracker.failing is None
        return found


@dataclass
class _Run:
    code: object  # (kept alive: its id is part of the run's key)
    tracker: object
    used: list  # the attention kernels
    budgets: dict = field(default_factory=dict)  # budget -> whether the tracker saw no allocation over it

    def allocated_fits(self, budget: int) -> bool | None:
        """Whether the tracker would see no allocation over `budget` (None: not settled by the budgets
        it ran with). Its failing allocation is the first that takes what it holds over the budget,
        so a budget as large as one it fitted fits, one as small as one it failed fails, and so does
        any budget below its peak (what it held after an allocation)."""
        if any(fit and b <= budget for b, fit in self.budgets.items()):
            return True
        if self.tracker.peak > budget or any(not fit and b >= budget for b, fit in self.budgets.items()):
            return False
        return None


class _Judge:
    """Predicts a plan's phases on one card; files runs by batch size for the search."""

    def __init__(self, code, plan, setting, card, conf, runs: Runs | None = None):
        self.code, self.plan, self.setting, self.card, self.conf = code, plan, setting, card, conf
        self.budget = units.usable_bytes(card.total_memory)
        self.runs = Runs() if runs is None else runs

    def _real(self, spec, batch, allocated: bool = False) -> _Run:
        return self.runs.get(self.code, self.setting, _runs_as(spec), batch, self.budget, allocated)

    def warmup(self, spec, batch):
        """The training step before a phase during training (its segments cached), or None."""
        train = next((p for p in self.plan.phases if p.kind == "train"), None)
        if train is None:
            return None
        return self._real(train, batch if spec.searched and train.searched else train.batch).tracker.trace

    def predict(self, spec, batch, search: bool = False) -> PhaseResult:
        spec = _runs_as(spec)
        key = repr((self.setting, spec))
        family = batches.family(key)
        if search and len(family.runs) == 1 and batch not in family.runs:
            self._second_run(spec, key, next(iter(family.runs)))  # the probes' second point, when first wanted
        if search and family.ready(batch) and batch not in family.runs:
            traces = family.traces(batch)
            result = PhaseResult(spec.name, "predicted", batch, family.peak(batch), 0, "", budget_bytes=self.budget)
            result.fits = reserved.fits(traces, self.budget, self.card.total_memory, self.conf, peak=result.peak_bytes)
            if result.fits is not None:
                return result
        made = self._real(spec, batch, allocated=True)
        tracker = made.tracker
        warm = self.warmup(spec, batch)
        traces = [tracker.trace] if warm is None else [warm, tracker.trace]
        result = PhaseResult(
            phase=spec.name,
            mode="predicted",
            batch_size=batch,
            peak_bytes=tracker.peak,
            largest_allocation_bytes=tracker.largest.nbytes,
            largest_allocation=tracker.largest.describe(),
            breakdown=tracker.breakdown(),
            budget_bytes=self.budget,
        )
        result.fits = made.allocated_fits(self.budget)  # the verdict on allocated bytes (``allocated_fits``)
        result.attention = ", ".join(made.used) or None
        # on a card, the allocator replay decides and names the failing allocation (``reserved.judge``)
        reserved.judge(result, traces, len(traces) - 1, self.card.total_memory, self.conf)
        if spec.searched and (batch > 1 or not batches.family(key).runs):
            # batch size 1 is never derived (``memory.batches``): its run, which may make other copies
            # than a larger batch's, is no check of a family fitted on larger ones
            batches.remember(key, batch, traces, tracker.peak)
        return result

    def _second_run(self, spec, key, first: int) -> None:
        """The family's second real run (``memory.batches``: two runs give every other batch's traces),
        made only once a search asks for a batch no run has: a search that needs no probe (the
        command's own batch is the largest the script accepts, and it fits) costs no second run."""
        second = second_batch(first)
        tracker = self._real(spec, second).tracker
        warm = self.warmup(spec, second)
        batches.remember(key, second, [tracker.trace] if warm is None else [warm, tracker.trace], tracker.peak)

    def largest(self, spec, progress=None) -> tuple[int, int | None]:
        """The largest --device-batch-size that fits and that the script accepts (``plan.rule``), with
        the micro-steps the script derives there (None where it derives none)."""
        rule = self.plan.rule
        if rule is None:
            def predictor(config, phase, gpu_memory, *, batch_size, source=None, context_bytes=None, search=False):
                return self.predict(spec, batch_size, search=search)

            found = max_batch_size(
                SimpleNamespace(batch_size=spec.batch), spec.name, self.card.total_memory, predictor=predictor, progress=progress
            )
            return found, None
        calls = [0]

        def at(batch):  # the phase as the script runs it at `batch`: its own gradient accumulation
            return replace(spec, grad_accum=rule.accum(batch)) if spec.kind == "train" else spec

        def fits(batch) -> bool:
            calls[0] += 1
            if progress:
                progress(calls[0])
            return bool(self.predict(at(batch), batch, search=True).fits)

        accepted = rule.accepted(rule.most())
        *rest, top = accepted
        if self._may_fit(spec, rest, top) and fits(top):
            return top, rule.accum(top)
        lo, hi = -1, len(rest)  # rest[lo] fits (-1: none known), rest[hi] does not (len: none known)
        while hi - lo > 1:  # the peak grows with the batch at a fixed kind of step: bisection
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(rest[mid]) else (lo, mid)
        return (rest[lo], rule.accum(rest[lo])) if lo >= 0 else (0, None)

    def _may_fit(self, spec, rest, top) -> bool:
        """Whether the largest accepted batch can fit, without a run of its own where the answer is
        plain: there a training step has one micro-step (no gradients alive during its forward), so
        its peak is at least that of the step with several micro-steps at the same batch (derived
        from that step's runs) less the gradients; over the budget, it cannot fit."""
        if spec.kind != "train" or not rest or self.plan.rule.accum(top) != 1 or top == spec.batch:
            return True  # (at the command's own batch, its run is already there)
        several = replace(spec, grad_accum=2)
        derived = self.predict(several, top, search=True)
        grads = self.predict(several, spec.batch).breakdown.get("gradients", 0)
        return derived.peak_bytes - grads <= self.budget


def _runs_as(spec):
    """What a phase runs: a training step's second micro-step stands for every later one (``phases``),
    so two or more micro-steps run alike and share their runs."""
    return replace(spec, grad_accum=min(spec.grad_accum, 2)) if spec.kind == "train" else spec


def verdicts(requests: list[Request], progress=None, environ: dict | None = None) -> list[dict]:
    """Each request's verdict, exactly as ``verdict`` gives it alone, the runs on fake tensors that
    they have in common made once (``Runs``): one command line on several cards costs its runs once,
    and a replay of their traces through the allocator per card and probe of the search."""
    runs = Runs()
    return [verdict(request, progress, environ, runs=runs) for request in requests]


def verdict(request: Request, progress=None, environ: dict | None = None, runs: Runs | None = None) -> dict:
    """`request` predicted; `environ`: the environment the reader runs it in (default: this process's);
    `runs`: the runs of earlier verdicts to use where they are this one's (``Runs``)."""
    checkout = nanochat_code.check_checkout(request.checkout)
    command = parse_line(request.command)
    args = script_arguments(checkout, command)
    gpu = gpus.resolve_card(request.gpu, request.gpu_memory, request.capability)
    environ = dict(os.environ if environ is None else environ)
    environ.update(command.env)
    dtype, dtype_why = nanochat_code.compute_dtype_for(gpu.capability, environ)
    code = nanochat_code.load(checkout, dtype)
    plan = make_plan(code, checkout, command, args, request.from_base, environ, request.tokenizer)
    if request.alloc_conf is not None:
        conf = parse_alloc_conf(request.alloc_conf, "--alloc-conf")
    else:
        conf = alloc_conf_from_env(script_environ(checkout, command.script, environ))
    fp8_note = _fp8(plan, code, gpu.capability)
    fa3 = fa3_for(gpu.capability, dtype)
    setting = Setting(tuple(sorted(plan.config.items())), command.world_size, tuple(gpu.capability), fa3)
    card = SimpleNamespace(gpu=gpu, total_memory=gpu.total_memory)
    judge = _Judge(code, plan, setting, card, conf, runs)
    assumptions = list(plan.assumptions) + ([fp8_note] if fp8_note else [])
    assumptions.append(
        "attention: FA3 (nanochat loads it with the kernels package on sm80-sm90 in bfloat16), modelled as "
        "its output and log-sum-exp" if fa3 else "attention: nanochat's SDPA fallback (no FA3 on this card or dtype)"
    )
    if not fa3 and plan.config.get("window_pattern", "L").upper() != "L":
        assumptions.append("SDPA fallback with sliding windows: an explicit mask per short-window layer, as nanochat builds it")
    if plan.fp8:
        assumptions.append("torch.compile (training model): modelled as eager with Inductor's fused loss, the logits' cast and softcap fused into it")
    else:
        assumptions.append(
            "torch.compile (training model): the backward keeps what AOTAutograd's min-cut partitioner keeps, "
            "traced on fake tensors as Inductor partitions the model; the logits' cast, softcap and loss are one fused kernel"
        )
        assumptions.append(
            "the compiled backward frees what it keeps from the last made to the first, at the backward's pace: a rule, not traced"
        )
    assumptions.append("MuonAdamW's compiled steps run eagerly: their temporaries are an upper bound")
    if code.stood_in:
        assumptions.append(f"not installed, stood in for the import only (never used by the prediction): {', '.join(code.stood_in)}")
    rl = plan.rule if plan.rule is not None and plan.rule.script == "chat_rl" else None
    out = {
        "nanochat": str(checkout),
        "script": plan.script,
        "command": " ".join(request.command) if not isinstance(request.command, str) else request.command,
        "world_size": command.world_size,
        "arguments": {k: v for k, v in sorted(vars(args).items())},
        "shape": plan.config,
        "model_from": plan.model_from,
        "compute_dtype": dtype,
        "compute_dtype_from": dtype_why,
        "device_batch_size": plan.device_batch_size,
        "total_batch_size": plan.total_batch_size,
        "gradient_accumulation_steps": plan.grad_accum,
        "accepted_device_batch_sizes": plan.rule.accepted(plan.rule.most()) if plan.rule is not None else None,
        # chat_rl's micro-steps: each example's --num-samples rows in passes of the device batch, for
        # each of the rank's examples (no total batch of tokens)
        "samples_per_example": rl.total if rl is not None else None,
        "examples_per_rank": rl.repeat if rl is not None else None,
        "gpu": gpu.name,
        "gpu_memory_bytes": gpu.total_memory,
        "usable_bytes": units.usable_bytes(gpu.total_memory),
        "context_bytes": units.CONTEXT_BYTES,
        "compute_capability": ".".join(map(str, gpu.capability)),
        "compute_capability_assumed": gpu.capability_assumed,
        "alloc_conf": conf.describe(),
        "mode": "predicted",
        **versions.describe(),
        "assumptions": assumptions,
        "phases": {},
    }
    for spec in plan.phases:
        result = judge.predict(spec, spec.batch)
        entry = result.to_json()
        if request.search and spec.searched:
            report = progress(spec.name) if progress else None
            entry["max_batch_size"], accum = judge.largest(spec, report)
            entry["searched"] = "device_batch_size"
            if plan.rule is not None and spec.kind == "train":
                entry["gradient_accumulation_steps"] = accum  # what the script derives at that batch
        out["phases"][spec.name] = entry
    out["fits"] = all(p["fits"] for p in out["phases"].values())
    searched = [p["max_batch_size"] for p in out["phases"].values() if "max_batch_size" in p]
    if searched:  # the run's answer: every searched phase runs with the one --device-batch-size
        out["largest_device_batch_size"] = min(searched)
        out["largest_device_batch_size_gradient_accumulation_steps"] = (
            plan.rule.accum(min(searched)) if plan.rule is not None and min(searched) else None
        )
    return out


FP8_CAPABILITY = (8, 9)  # ATen's _scaled_mm_out_cuda: "only supported on CUDA devices with compute capability >= 9.0 or 8.9"


def _fp8(plan, code, capability) -> str | None:
    """base_train's --fp8: its training step with nanochat's Float8Linear (the plan's train phases
    marked), or why not; the line the output says either way."""
    if not plan.fp8:
        return None
    if tuple(capability) < FP8_CAPABILITY:
        return (
            f"--fp8 on compute capability {'.'.join(map(str, capability))}: base_train converts the Linear layers "
            "anyway, and torch._scaled_mm (8.9 or newer) would stop its first training step with a RuntimeError, "
            "not an out-of-memory error; predicted without fp8"
        )
    if code.fp8 is None:
        return "--fp8: this checkout has no nanochat/fp8.py; predicted without fp8"
    plan.phases = [replace(p, fp8=True) if p.kind == "train" else p for p in plan.phases]
    return (
        "--fp8: the training step with nanochat's Float8LinearConfig and convert_to_float8_training (base_train's "
        "filter: dimensions multiples of 16, at least 128), run on fake tensors; evaluation and sampling in the "
        "compute dtype (base_train's disable_fp8); each quantisation (nanochat/fp8.py's _to_fp8) as Inductor "
        "fuses it in the compiled model: the float8 tensor and its scale, no float32 copy"
    )


def checkout_path(path: str) -> Path:
    return nanochat_code.check_checkout(path)
