"""From a tracked phase to what the card decides: the allocator's reserved memory and the verdict.

``predict`` records each tracked run as an ``allocator.Trace``; this module puts the warm-up in
front of it (what ran before the phase in train.py: a training step before a later evaluation, the
previous step before a step), replays it through the caching-allocator model, and writes the
allocated and reserved peaks and the verdict into the ``PhaseResult``. A phase fits when no
allocation of it fails the way the real allocator fails: a new segment that the card cannot hold
after every cached segment it may give back was given back.

Warm-up traces are replayed without the budget (as ``measure()`` runs its warm-up step before
capping the allocator); the phase itself under it. Never imports torch.cuda.
"""

from __future__ import annotations

from collections import OrderedDict

from .allocator import AllocConf, Trace, alloc_conf_from_env, replay

_WARMUPS: OrderedDict = OrderedDict()  # train-step traces, by what they depend on


def remember_warmup(key, trace: Trace) -> None:
    _WARMUPS[key] = trace
    _WARMUPS.move_to_end(key)
    while len(_WARMUPS) > 8:
        _WARMUPS.popitem(last=False)


def cached_warmup(key) -> Trace | None:
    return _WARMUPS.get(key)


def limit_for(budget: int | None, gpu_memory: int | None, conf: AllocConf) -> tuple[int | None, bool]:
    """The bytes the allocator may reserve, and whether a memory fraction (rather than the card) sets it."""
    if conf.per_process_memory_fraction is not None and gpu_memory is not None:
        capped = int(conf.per_process_memory_fraction * gpu_memory)
        if budget is None or capped < budget:
            return capped, True
    return budget, False


def fits(traces: list[Trace], budget: int | None, gpu_memory: int | None, conf: AllocConf | None, peak=None):
    """Whether the phase (the last of `traces`, the others its warm-up) fits the card on reserved
    memory, the allocator replayed under it; None when there is no card to judge on. `peak`: the
    tracker's peak of a single trace, which alone decides when it is over the limit (the allocator
    holds at least what the tracker counts)."""
    conf = alloc_conf_from_env() if conf is None else conf
    limit, fraction = limit_for(budget, gpu_memory, conf)
    if limit is None:
        return None
    if len(traces) == 1 and peak is not None and peak > limit:
        return False
    return replay(traces, conf, limit, measure_from=len(traces) - 1, fraction=fraction).fits


def judge(
    result, traces: list[Trace], measure_from: int, gpu_memory: int | None, conf: AllocConf | None
) -> None:
    """Fill `result` (a PhaseResult) with the allocator's view: reserved peak (on a card with room),
    and, when it has a budget, whether the phase fits on reserved memory and where it fails."""
    conf = alloc_conf_from_env() if conf is None else conf
    result.alloc_conf = conf.describe()
    free_run = replay(traces, conf, None, measure_from=measure_from)
    result.reserved_bytes = free_run.reserved_peak
    result.allocated_fits = result.fits
    limit, fraction = limit_for(result.budget_bytes, gpu_memory, conf)
    if limit is None:
        return
    capped = replay(traces, conf, limit, measure_from=measure_from, fraction=fraction)
    result.fits = capped.fits
    if capped.fits:
        result.reserved_within_budget_bytes = capped.reserved_peak
        result.failing_allocation_bytes = result.failing_allocation = None
        result.allocated_at_failure_bytes = result.reserved_at_failure_bytes = None
        if hasattr(result, "failing_moment"):
            result.failing_moment = None
        return
    what = capped.failing_what
    result.failing_allocation_bytes = capped.failing_alloc_size
    result.failing_allocation = what.describe() if hasattr(what, "describe") else str(what or "a tensor")
    result.allocated_at_failure_bytes = capped.allocated_at_failure
    result.reserved_at_failure_bytes = capped.reserved_at_failure
    if hasattr(result, "failing_moment"):  # where in the phase's code: the allocation's moment
        result.failing_moment = getattr(what, "moment", None)
