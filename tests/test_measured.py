"""The engine held to real GPUs: every run of ``examples/measurements/`` re-predicted with today's code.

A run is nanoGPT's own train.py (or nanochat's own base_train) measured on CUDA, phase by phase
(``oomguide.measured``). The rules:

- each allocated peak the run measured (the phases it finished) is within 3% of the prediction, or
  0.1 GiB for a small model;
- no run that ran out of memory is predicted to fit: the phase it failed in is not "fits";
- no run that fitted is refused: none of its phases is "does not fit", and with expandable
  segments (where the allocator leaves no doubt) every phase is "fits";
- the verdict's margins (``memory.reserved``: ALLOCATED_UNCERTAINTY, RESERVED_UNCERTAINTY, the floor)
  cover every measured error: the margin is what was measured, not a hope.

Needs the nanoGPT checkout the runs used (``OOMGUIDE_NANOGPT``; .ci/run sets it) and, for the
nanochat runs, ``OOMGUIDE_NANOCHAT``. Predictions are cached on disk by the engine's source.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oomguide import measured
from oomguide.memory import reserved

GiB = 2**30
RUNS = measured.load_all()
NANOGPT = os.environ.get("OOMGUIDE_NANOGPT")
NANOCHAT = os.environ.get("OOMGUIDE_NANOCHAT")
NANOGPT_RUNS = [r for r in RUNS if r.program == "nanoGPT"]
NANOCHAT_RUNS = [r for r in RUNS if r.program == "nanochat"]

needs_nanogpt = pytest.mark.skipif(
    not (NANOGPT and (Path(NANOGPT) / "train.py").is_file()),
    reason="set OOMGUIDE_NANOGPT to the nanoGPT checkout (pytest examples --nanogpt PATH)",
)


@pytest.fixture(scope="module")
def predictions() -> dict:
    return {run.name: measured.predict(run, nanogpt=NANOGPT) for run in NANOGPT_RUNS}


def finished(run: measured.Run):
    """The phases the run measured to their end: not the one it ran out of memory in."""
    return {c: p for c, p in run.phases.items() if c != run.outcome.get("oom_phase")}


def test_the_measurements_cover_what_the_issue_names():
    names = {r.name for r in RUNS}
    assert {"124m-compiled-b12", "124m-compiled-fp16-b12", "124m-compiled-b32", "seedb-situation-compiled"} <= names
    assert {"char-compiled", "exp-124m-compiled-12g-b14", "124m-eager-12g-b8", "124m-eager-12g-b9"} <= names
    assert len(NANOCHAT_RUNS) == 3
    assert sum(not r.outcome["fits"] for r in RUNS) >= 8, "runs that ran out of memory are kept too"


def test_a_file_that_breaks_the_format_is_named_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "oomguide-measurements/1", "machine": {}, "runs": []}')
    with pytest.raises(measured.MeasurementError, match=r"^bad.json: machine: 'device' is missing"):
        measured.load(bad)
    bad.write_text("{not json")
    with pytest.raises(measured.MeasurementError, match="cannot be read as JSON"):
        measured.load(bad)


@needs_nanogpt
@pytest.mark.parametrize("run", NANOGPT_RUNS, ids=lambda r: r.name)
def test_allocated_peaks_are_within_three_percent(run, predictions):
    predicted = predictions[run.name]
    for check, peaks in finished(run).items():
        want, got = peaks["allocated"], predicted[check]["allocated"]
        assert measured.within_tolerance(got, want), (
            f"{run.name} {check}: predicted {got / GiB:.2f} GiB, measured {want / GiB:.2f} GiB ({run.describe()})"
        )


@needs_nanogpt
@pytest.mark.parametrize("run", [r for r in NANOGPT_RUNS if not r.outcome["fits"]], ids=lambda r: r.name)
def test_no_run_that_ran_out_of_memory_is_predicted_to_fit(run, predictions):
    failed = run.outcome["oom_phase"]
    verdict = predictions[run.name][failed]["verdict"]
    assert verdict != "fits", f"{run.name}: ran out of memory in {failed}, predicted to fit ({run.describe()})"


@needs_nanogpt
@pytest.mark.parametrize("run", [r for r in NANOGPT_RUNS if r.outcome["fits"]], ids=lambda r: r.name)
def test_no_run_that_fitted_is_refused(run, predictions):
    for check, p in predictions[run.name].items():
        assert p["verdict"] != "does_not_fit", f"{run.name}: ran, but {check} predicted not to fit"
        if run.alloc_conf and "expandable_segments:True" in run.alloc_conf:
            assert p["verdict"] == "fits", f"{run.name}: ran with expandable segments, {check} said {p['verdict']}"


@needs_nanogpt
def test_the_verdicts_margins_cover_every_measured_error(predictions):
    """The margins of ``reserved.decide`` are the measured errors: a new measurement outside them fails."""
    for run in NANOGPT_RUNS:
        predicted = predictions[run.name]
        for check, peaks in finished(run).items():
            got = predicted[check]["allocated"]
            assert peaks["allocated"] <= reserved.within(got, reserved.ALLOCATED_UNCERTAINTY), (run.name, check)
        if run.cap_bytes and run.card is None and not run.alloc_conf:
            # a run with room (its cap far above its need), the default allocator: the replay's reserved
            # peak. Not the later estimate_loss: the process keeps the training step's segments, the
            # prediction replays the evaluation after an emptied cache
            for check in ("estimate_loss_first", "first_step", "train_step"):
                got = predicted[check]["reserved"]
                assert run.phases[check]["reserved"] <= reserved.within(got, reserved.RESERVED_UNCERTAINTY), (
                    run.name,
                    check,
                )


@needs_nanogpt
def test_the_compiled_step_of_nanogpts_default_is_within_three_percent(predictions):
    """The issue's own line: ``check config/train_gpt2.py --set gradient_accumulation_steps=2 --gpu "H100 80GB"``
    (compiled, nanoGPT's default) against the measured 9.54 GiB."""
    from oomguide import verdict

    out = verdict.verdict(
        verdict.Request(
            configs=[str(Path(NANOGPT) / "config" / "train_gpt2.py")],
            overrides=["gradient_accumulation_steps=2"],
            gpu="H100 80GB",
            nanogpt=NANOGPT,
            search=False,
        )
    )
    assert out["compiled"]
    measured_run = next(r for r in RUNS if r.name == "124m-compiled-b12")
    want = measured_run.phases["train_step"]["allocated"]
    assert out["phases"]["train_step"]["peak_bytes"] == pytest.approx(want, rel=0.03)


needs_nanochat = pytest.mark.skipif(
    not (NANOCHAT and (Path(NANOCHAT) / "nanochat" / "gpt.py").is_file()),
    reason="set OOMGUIDE_NANOCHAT to the nanochat checkout (pytest examples --nanochat PATH)",
)


@needs_nanochat
@pytest.mark.parametrize("run", NANOCHAT_RUNS, ids=lambda r: r.name)
def test_nanochats_compiled_training_step_is_within_five_percent(run):
    """nanochat's own base_train, compiled as it compiles itself: its whole run's allocated peak (its
    training step's) against ``check --nanochat`` for the same line and card. Eager autograd's saved
    tensors in place of the compiled partition's were 24-35% over; within 5% is the issue's bar, and
    the verdict's allocated margin covers the error."""
    predicted = measured.predict(run, nanochat=NANOCHAT)
    for check, peaks in finished(run).items():
        want, got = peaks["allocated"], predicted[check]["allocated"]
        assert got == pytest.approx(want, rel=0.05), (
            f"{run.name} {check}: predicted {got / GiB:.2f} GiB, measured {want / GiB:.2f} GiB ({run.describe()})"
        )
        assert want <= reserved.within(got, reserved.ALLOCATED_UNCERTAINTY), (run.name, check)
        assert predicted[check]["verdict"] == "fits", (run.name, check)
