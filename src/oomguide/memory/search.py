"""The batch-size search: the largest batch_size whose predicted phase fits a card.

``max_batch_size`` probes batch sizes with ``predict`` (or another predictor, such as
``distributed.predict``); its probes ask for a peak and a verdict only (``predict``'s ``search``),
which ``predict`` derives from two real runs (``batches``). ``second_runs`` names the second of
those runs, for ``prefetch`` to make them ahead of the search. Never imports torch.cuda.
"""

from __future__ import annotations

import functools
import inspect

from ..config import TrainConfig
from .models import ModelSource
from .predict import PhaseResult, batch_size_of, predict, second_batch
from .units import CONTEXT_BYTES, usable_bytes


def second_runs(predictor, config: TrainConfig, checks, *, source=None, **options) -> list:
    """The runs that the searches of `checks` ((phase, options) in order) will derive their probes
    from besides the config's own (``batches``): calls of `predictor` at the second batch size, with
    no card (``prefetch`` makes them ahead). None for a phase whose runs form no family: a reader's
    model, estimate_loss in chunks of eval_batch_size (``predict``, ``distributed.predict``)."""
    if source is not None and source.path is not None:
        return []
    calls = []
    for phase, phase_options in checks:
        if phase == "estimate_loss" and config.eval_batch_size:
            continue
        second = second_batch(max(1, batch_size_of(config, phase)))
        kwargs = dict(options, **phase_options, batch_size=second, source=source)
        calls.append(functools.partial(predictor, config, phase, None, **kwargs))
    return calls


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
    state: str = "training",
    compiled: bool = False,
    predictor=None,
    **options,
) -> int:
    """The largest batch_size whose predicted `phase` fits `gpu_memory` (0 if not even 1 fits).

    The peak is affine in the batch size (every activation, logits buffer and loss buffer grows
    with it; weights, gradients and optimizer state do not), up to the allocator's rounding and
    a change of the moment of the peak. So: the prediction at the config's batch size, split into
    its fixed part (weights, gradients, optimizer state at the peak) and the rest, gives a first
    guess; a prediction there gives a second point and the line through both a second guess;
    then the answer is verified: `b` fits and `b + 1` does not, each by a prediction (bisection
    takes over if the line misleads). Usually three or four predictions in all.

    `known` caches predictions by batch size (shared with the caller). `progress(done)` is called
    after each prediction. `predictor`: a function like ``predict`` (default: ``predict`` with
    `state`, `compiled` and ``peak_only=True``), e.g. ``distributed.predict`` with ``parallel`` bound.
    `options` go to the predictor (``alloc_conf``, ``capability``).
    """
    # the allocator's verdict depends on the whole step, not only its peak: the boundary found with
    # one micro-step is settled with full predictions (issue 15)
    full = None if predictor else functools.partial(predict, state=state, compiled=compiled, search=True)
    predictor = predictor or functools.partial(predict, state=state, compiled=compiled, peak_only=True)
    # the probes want a peak and a verdict only: a predictor that can derive them is told so
    probe = functools.partial(predictor, search=True) if _takes(predictor, "search") else predictor
    known = {} if known is None else known
    settled: dict[int, bool] = {}

    def full_fits(b: int) -> bool:
        if b not in settled:
            settled[b] = bool(
                full(
                    config,
                    phase,
                    gpu_memory,
                    batch_size=b,
                    source=source,
                    context_bytes=context_bytes,
                    **options,
                ).fits
            )
            calls[0] += 1
            if progress:
                progress(calls[0])
        return settled[b]

    def settle(b: int) -> int:
        if full is None:
            return b
        while b > 0 and not full_fits(b):
            b -= 1
        while b < limit and full_fits(b + 1):
            b += 1
        return b

    budget = usable_bytes(gpu_memory, context_bytes)
    calls = [0]

    def fits(b: int) -> bool:
        if b not in known:
            known[b] = (probe if b != b0 else predictor)(  # b0's breakdown is read below
                config, phase, gpu_memory, batch_size=b, source=source, context_bytes=context_bytes, **options
            )
            calls[0] += 1
            if progress:
                progress(calls[0])
        return bool(known[b].fits)

    def bracket() -> tuple[int, int]:
        lo, hi = 0, limit + 1  # lo fits (0: trivially); hi does not, or is beyond the limit
        for b, r in known.items():
            if r.fits and b > lo:
                lo = b
            elif not r.fits and b < hi:
                hi = b
        return lo, hi

    def line_guess() -> int | None:
        """Where the line through the two known points nearest the boundary meets the budget."""
        lo, hi = bracket()
        near = sorted(known, key=lambda b: (min(abs(b - lo), abs(b - hi)), b))[:2]
        if len(near) < 2:
            return None
        (b1, r1), (b2, r2) = ((b, known[b]) for b in sorted(near))
        slope = (r2.peak_bytes - r1.peak_bytes) / (b2 - b1)
        if slope <= 0:
            return None
        return int(b1 + (budget - r1.peak_bytes) // slope)

    b0 = max(1, min(limit, batch_size_of(config, phase)))
    fits(b0)
    first = known[b0]
    fixed = sum(first.breakdown.get(k, 0) for k in ("weights", "gradients", "optimizer_state"))
    per_sample = (first.peak_bytes - fixed) / b0
    guess = int((budget - fixed) // per_sample) if per_sample > 0 else limit
    while True:
        lo, hi = bracket()
        if hi - lo <= 1:
            return settle(lo)
        if guess is None or calls[0] >= 6:
            guess = (lo + hi) // 2  # the line misleads: bisect
        guess = min(max(guess, lo + 1), hi - 1)  # next to the boundary: the verification
        fits(guess)
        guess = line_guess()


def _takes(func, name: str) -> bool:
    """Whether `func` accepts the keyword `name` (a function with ``**kwargs`` is taken to pass it on)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
