"""A phase's allocations as functions of the batch size: the batch-size search without a run per probe.

The batch-size search (``max_batch_size``) asks, for many batch sizes, two things of a prediction:
its peak and whether it fits. Both follow from the tracked run's traces (``allocator.Trace``: the
tensors alive before, then the allocations and frees in order), and a run of oomguide's GPT at
batch size ``b`` makes the same allocations and frees in the same order at every ``b``: only their
sizes change, each either not at all (weights, gradients, optimizer state) or in proportion to
``b`` (activations, logits, the batch itself). So two real runs at two batch sizes give every other
batch size's traces exactly, and each probe of the search costs one replay of the allocator.

``Family`` holds the real runs of one prediction that differ only in the batch size (``remember``
files them, ``family`` finds them). It is fitted on two runs and checked on every further one: two
runs whose traces differ in anything but sizes, a size neither constant nor proportional to the
batch size, or a fitted trace whose tracker peak is not the run's, and the family is not used.
Batch size 1 is never derived (a dimension of size 1 can change which copies PyTorch makes).
Only for oomguide's GPT on fake tensors, and not for ``estimate_loss`` with ``eval_batch_size``
(the number of chunks follows the batch size): ``predict`` decides, and ``distributed.predict``
for DDP and FSDP2, whose verdict is the rank's trace replayed through the allocator (checked against
the run's at every run; FSDP2's in the order ``tracker.as_judged`` gives). Arithmetic on traces;
never imports torch.cuda.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from .allocator import ALLOC, Trace
from .cuda_model import block_size

_FAMILIES: OrderedDict = OrderedDict()  # key -> Family, the most recent last
filed: list | None = None  # where ``prefetch``'s child has it: (key, batch size) of each run filed


@dataclass
class Run:
    """One real prediction: its batch size, its traces (warm-up first) and its tracker's peak."""

    batch: int
    traces: list
    peak: int


@dataclass
class Family:
    """Real runs of one prediction at several batch sizes, and their traces fitted on the batch size."""

    runs: dict = field(default_factory=dict)  # batch size -> Run
    fitted: list | None = None  # per trace: (pre, events, checks, sweeps) with (slope, constant) sizes
    broken: bool = False  # the runs disagree with the model: every probe is a real run

    def add(self, run: Run) -> None:
        self.runs[run.batch] = run
        if self.broken:
            return
        if self.fitted is None:
            if len(self.runs) >= 2:
                a, b = list(self.runs.values())[:2]
                self.fitted = _fit(a, b)
                if self.fitted is None:
                    self.broken = True
                    return
                for r in (a, b):
                    self._check(r)
        else:
            self._check(run)

    def _check(self, run: Run) -> None:
        traces = self.traces(run.batch)
        if traces is None or len(traces) != len(run.traces):
            self.broken = True
            return
        for made, real in zip(traces, run.traces):
            if (
                made.pre != _sizes_only(real.pre)
                or made.events != _sizes_only(real.events, True)
                or made.checks != real.checks
                or made.sweeps != real.sweeps
            ):
                self.broken = True
                return
        if trace_peak(traces[-1]) != run.peak:
            self.broken = True

    def ready(self, batch: int) -> bool:
        """Whether `batch` can be had without a run (fitted, and not batch size 1 unless it ran)."""
        return batch in self.runs or (self.fitted is not None and not self.broken and batch >= 2)

    def traces(self, batch: int) -> list[Trace] | None:
        if batch in self.runs and (self.fitted is None or self.broken):
            return self.runs[batch].traces
        if self.fitted is None:
            return None
        made = []
        for pre, events, checks, sweeps in self.fitted:
            made.append(
                Trace(
                    pre=[(uid, k * batch + c, what) for uid, k, c, what in pre],
                    events=[(kind, uid, k * batch + c, what) for kind, uid, k, c, what in events],
                    checks=list(checks),
                    sweeps=list(sweeps),
                )
            )
        return made

    def peak(self, batch: int) -> int:
        if batch in self.runs:
            return self.runs[batch].peak
        return trace_peak(self.traces(batch)[-1])


def family(key) -> Family:
    """The family of runs filed under `key` (a new, empty one if none)."""
    if key not in _FAMILIES:
        _FAMILIES[key] = Family()
        while len(_FAMILIES) > 16:
            _FAMILIES.popitem(last=False)
    _FAMILIES.move_to_end(key)
    return _FAMILIES[key]


def remember(key, batch: int, traces: list[Trace], peak: int) -> None:
    """File a real prediction's traces under `key`."""
    family(key).add(Run(batch, traces, peak))
    if filed is not None:
        filed.append((key, batch))


def trace_peak(trace: Trace, rounding=block_size) -> int:
    """The tracker's peak from its trace: the bytes alive, as it books them, after each allocation
    (and at each storage of 0 bytes, ``Trace.checks``), the tensors alive before counted from the start."""
    booked = {}
    current = 0
    for uid, nbytes, _what in trace.pre:
        booked[uid] = rounding(nbytes)
        current += booked[uid]
    peak = 0
    checks = iter(trace.checks)
    next_check = next(checks, None)
    for i, (kind, uid, nbytes, _what) in enumerate(trace.events):
        while next_check == i:
            peak = max(peak, current)
            next_check = next(checks, None)
        if kind == ALLOC:
            booked[uid] = rounding(nbytes)
            current += booked[uid]
            peak = max(peak, current)
        else:
            current -= booked.pop(uid, 0)
    while next_check is not None:
        peak = max(peak, current)
        next_check = next(checks, None)
    return peak


def trace_fits(trace: Trace, budget: int, rounding=block_size) -> bool:
    """Whether the tracker saw no allocation over `budget` (its ``failing``: a verdict on allocated
    memory, as ``distributed.predict`` gives it): a tensor alive before, counted as registered, or a
    new storage (one of 0 bytes books a block in that check) beyond what is alive when it comes."""
    booked = {}
    current = 0
    for uid, nbytes, _what in trace.pre:
        booked[uid] = rounding(nbytes)
        current += booked[uid]
        if current > budget:
            return False
    checks = iter(trace.checks)
    next_check = next(checks, None)
    for i, (kind, uid, nbytes, _what) in enumerate(trace.events):
        while next_check == i:
            if current + rounding(0) > budget:
                return False
            next_check = next(checks, None)
        if kind == ALLOC:
            booked[uid] = rounding(nbytes)
            if current + booked[uid] > budget:
                return False
            current += booked[uid]
        else:
            current -= booked.pop(uid, 0)
    return next_check is None or current + rounding(0) <= budget


def _sizes_only(items, events=False):
    """A real trace's pre or events without the descriptions of ops (what a fitted trace holds)."""
    if events:
        return [(kind, uid, nbytes, _plain(what)) for kind, uid, nbytes, what in items]
    return list(items)


def _plain(what):
    """What a fitted trace keeps of an event's description: a word ("resize_", ``tracker.as_judged``)."""
    return what if isinstance(what, str) else None


def _size(na: int, a: int, nb: int, b: int) -> tuple[int, int] | None:
    """(slope, constant) of a size that is na at batch size a and nb at b: constant or proportional."""
    if na == nb:
        return 0, na
    if na % a == 0 and na // a * b == nb:
        return na // a, 0
    return None


def _describe(what) -> object:
    """What must be equal between two runs for an allocation to be the same one: op, dtype, rank."""
    if hasattr(what, "op"):
        return (what.op, what.dtype, len(what.shape))
    return what


def _fit(a: Run, b: Run) -> list | None:
    if len(a.traces) != len(b.traces):
        return None
    fitted = []
    for ta, tb in zip(a.traces, b.traces):
        if (
            len(ta.pre) != len(tb.pre)
            or len(ta.events) != len(tb.events)
            or ta.checks != tb.checks
            or ta.sweeps != tb.sweeps
        ):
            return None
        pre = []
        for (ua, na, wa), (ub, nb, wb) in zip(ta.pre, tb.pre):
            size = _size(na, a.batch, nb, b.batch)
            if ua != ub or wa != wb or size is None:
                return None
            pre.append((ua, *size, wa))
        events = []
        for (ka, ua, na, wa), (kb, ub, nb, wb) in zip(ta.events, tb.events):
            if ka != kb or ua != ub or _describe(wa) != _describe(wb):
                return None
            size = _size(na, a.batch, nb, b.batch)
            if size is None:
                return None
            events.append((ka, ua, *size, _plain(wa)))
        fitted.append((pre, events, list(ta.checks), list(ta.sweeps)))
    return fitted
