"""From a tracked phase to what the card decides: the allocator's reserved memory and the verdict.

``predict`` records each tracked run as an ``allocator.Trace``; this module puts the warm-up in
front of it (what ran before the phase in train.py: a training step before a later evaluation, the
previous step before a step), replays it through the caching-allocator model, and writes the
allocated and reserved peaks and the verdict into the ``PhaseResult``.

The verdict has three values (``decide``), because a replay is not the real run: on a real GPU
(docs/en/accuracy.md#measured-on-a-gpu) the same run ran out of memory at batch 8 and fitted at
batch 9 on the same capped card, through fragmentation a replay from the phase alone does not
reproduce. So:

- **does not fit**: the phase's allocated peak alone is over the usable memory;
- **fits**: the replay under the card's budget fits, and the peaks leave the margin of the
  predictions' measured uncertainty (``within``): the allocated peak's ``ALLOCATED_UNCERTAINTY``
  and, with PyTorch's default allocator, the reserved peak's of the replay on a card with room,
  ``RESERVED_UNCERTAINTY`` (it then needs no cached segment given back), each at least
  ``UNCERTAINTY_FLOOR``;
- **borderline**: in between. The outcome depends on the allocator's history; the answer gives the
  verdict with ``expandable_segments:True`` (``PYTORCH_CUDA_ALLOC_CONF``), under which the
  measured runs came out as predicted.

The two uncertainties are the largest errors measured (``examples/measurements/``), rounded up;
``tests/test_measured.py`` fails when a measured run is outside them.

Warm-up traces are replayed without the budget (as ``measure()`` runs its warm-up step before
capping the allocator); the phase itself under it. Never imports torch.cuda.
"""

from __future__ import annotations

from collections import OrderedDict

from .allocator import AllocConf, Trace, alloc_conf_from_env, replay, with_expandable_segments

# How far a prediction may be from the real run, as measured (the module docstring): every allocated
# peak measured was within 2.0% of the prediction, and the reserved peaks of runs without a cap, with
# the default allocator, within 7.4% of the replay's; below a few hundred MiB (a small model's first
# estimate_loss) the errors are the allocator's granularity instead: 9 MiB allocated, 46 MiB
# reserved beyond the relative margin's 25 MiB, hence the floor.
ALLOCATED_UNCERTAINTY = 0.025
RESERVED_UNCERTAINTY = 0.08
UNCERTAINTY_FLOOR = 64 * 2**20  # bytes: the least margin, whatever the size of the peak
FITS, BORDERLINE, DOES_NOT_FIT = "fits", "borderline", "does_not_fit"

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


def within(nbytes: int, uncertainty: float) -> int:
    """The most a predicted `nbytes` may be on the GPU: its relative uncertainty, at least the floor."""
    return nbytes + max(int(nbytes * uncertainty), UNCERTAINTY_FLOOR)


def decide(peak: int, limit: int, capped_fits: bool, free_reserved: int | None, conf: AllocConf) -> str:
    """The verdict (the module docstring): `peak` the allocated peak, `limit` what the allocator may
    hold, `capped_fits` the replay's under it, `free_reserved` the replay's reserved peak with room."""
    if peak > limit:
        return DOES_NOT_FIT
    margin = within(peak, ALLOCATED_UNCERTAINTY) <= limit
    if not conf.expandable_segments:
        margin = margin and within(free_reserved or peak, RESERVED_UNCERTAINTY) <= limit
    return FITS if capped_fits and margin else BORDERLINE


def verdict_of(traces: list[Trace], budget, gpu_memory, conf: AllocConf | None, peak: int, measure_from=None):
    """(verdict, the capped replay, the replay with room) of a phase: the last of `traces`, the others
    its warm-up; None for the verdict when there is no card to judge on."""
    conf = alloc_conf_from_env() if conf is None else conf
    measure_from = len(traces) - 1 if measure_from is None else measure_from
    free_run = replay(traces, conf, None, measure_from=measure_from)
    limit, fraction = limit_for(budget, gpu_memory, conf)
    if limit is None:
        return None, None, free_run
    capped = replay(traces, conf, limit, measure_from=measure_from, fraction=fraction)
    return decide(peak, limit, capped.fits, free_run.reserved_peak, conf), capped, free_run


def fits(traces: list[Trace], budget: int | None, gpu_memory: int | None, conf: AllocConf | None, peak=None):
    """Whether the phase (the last of `traces`, the others its warm-up) fits the card for certain
    (``decide``: not when borderline); None when there is no card to judge on. `peak`: the tracker's
    peak of the phase (the allocator holds at least what the tracker counts)."""
    conf = alloc_conf_from_env() if conf is None else conf
    limit, _ = limit_for(budget, gpu_memory, conf)
    if limit is None:
        return None
    if peak is not None and peak > limit:
        return False
    if peak is None:
        peak = replay(traces, conf, None, measure_from=len(traces) - 1).allocated_peak
    return verdict_of(traces, budget, gpu_memory, conf, peak)[0] == FITS


def with_expandable(traces: list[Trace], budget, gpu_memory, conf: AllocConf | None, peak: int) -> str | None:
    """The verdict of the same phase with ``expandable_segments:True`` (a borderline phase's remedy)."""
    conf = alloc_conf_from_env() if conf is None else conf
    return verdict_of(traces, budget, gpu_memory, with_expandable_segments(conf), peak)[0]


def judge(
    result, traces: list[Trace], measure_from: int, gpu_memory: int | None, conf: AllocConf | None
) -> None:
    """Fill `result` (a PhaseResult) with the allocator's view: reserved peak (on a card with room),
    and, when it has a budget, whether the phase fits on reserved memory and where it fails."""
    conf = alloc_conf_from_env() if conf is None else conf
    result.alloc_conf = conf.describe()
    decided, capped, free_run = verdict_of(
        traces, result.budget_bytes, gpu_memory, conf, result.peak_bytes, measure_from
    )
    result.reserved_bytes = free_run.reserved_peak
    result.allocated_fits = result.fits
    if decided is None:
        return
    result.verdict = decided
    result.fits = decided == FITS
    if decided == BORDERLINE:
        result.verdict_with_expandable_segments = (
            decided
            if conf.expandable_segments
            else with_expandable(traces, result.budget_bytes, gpu_memory, conf, result.peak_bytes)
        )
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
