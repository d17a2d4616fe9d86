"""Page "How accurate is oomguide?": every public report under tests/reports/ re-predicted.

Each case (``oomguide.reports``) is re-predicted phase by phase in train.py's order with
``oomguide.memory``, its message read with explain, and compared with what the report says happened.
The page's table (a predicted peak, the card's usable memory and ✓/✗ per case) and its agreement
counts are figures computed here; its list of disagreements must name exactly the cases that
disagree, in every language. A better engine changes the verdicts: ``pytest examples/test_accuracy.py
--update-figures`` rewrites the figures, and this test then names the disagreements the page must add
or drop.

Runtime: a case shares predictions with the cases of the same config and card; predictions are
cached on disk under .cache/ keyed by the engine's source, so only a changed engine re-predicts.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from oomguide import config as config_module
from oomguide import figures as figs
from oomguide import memory, reports

ROOT = Path(__file__).resolve().parents[1]
LANGS = figs.LANGS


@pytest.fixture(scope="module")
def cases():
    return reports.load_cases()


@pytest.fixture(scope="module")
def verdicts(cases):
    from oomguide.nanochat import cases as nanochat_cases

    if any(c.nanochat for c in cases) and nanochat_cases.checkout() is None:
        pytest.skip(nanochat_cases.MISSING)
    predictor = reports.Predictor()
    features = reports.engine_features()
    start = time.perf_counter()
    out = [reports.replay(case, predictor, features) for case in cases]
    out_time = time.perf_counter() - start
    print(f"\n{len(out)} cases re-predicted in {out_time:.1f} s ({predictor.computed} predictions computed)")
    return out


def test_cases_are_public_reports_with_their_inferences_marked(cases):
    assert len(cases) >= 15, "the page promises at least 15 public reports"
    projects = {c.project for c in cases}
    assert {"karpathy/nanoGPT", "karpathy/nanochat", "karpathy/build-nanogpt"} <= projects
    for case in cases:
        where = f"tests/reports/{case.id}"
        assert case.source.startswith("https://github.com/"), where
        marked = set()
        for path in case.configs:
            for line in path.read_text(encoding="utf-8").splitlines():
                m = re.match(r"\s*([a-z_]+)\s*=.*#\s*inferred\b", line)
                if m:
                    marked.add(m.group(1))
        # a value marked as inferred in a config file says why in case.toml, and the reverse
        assert marked <= set(case.inferred), (
            f"{where}: {marked - set(case.inferred)} marked but not explained"
        )
        for key in case.inferred:
            if key in config_module.DEFAULTS:
                assert key in marked or any(o.startswith(f"{key}=") for o in case.overrides), (
                    f"{where}: case.toml explains inferred {key!r}, but no config line marks it"
                )
        if case.nanochat is not None:
            # the reporter's command line, run by oomguide.nanochat: what the report does not state about
            # it (or the code it ran) is said in [inferred]
            assert set(case.inferred) <= {*case.nanochat, "code"}, (
                f"{where}: inferred keys name no [nanochat] entry"
            )
            assert "code" in case.inferred, (
                f"{where}: say which nanochat code the prediction runs, and the reporter's"
            )
            assert not case.configs, f"{where}: a nanochat case is its command line, not a nanoGPT config"
        if case.message is not None:
            assert "out of memory" in case.message.lower(), f"{where}/message.txt is not an OOM message"
        # every config the case names is readable as train.py would read it
        reports.case_config(case)


def test_every_case_repredicted(verdicts, figure, report, request):
    for v in verdicts:
        report(
            f"{v.case.id}: reported {v.case.reported}"
            + (f" ({v.case.phase})" if v.case.phase else "")
            + f", predicted {v.predicted}"
            + (f" ({v.predicted_phase})" if v.predicted_phase else "")
            + f", peak {memory.fmt_bytes(v.deciding.peak_bytes)} of {memory.fmt_bytes(v.usable_bytes)}"
            + (" -> agrees" if v.agrees else f" -> DISAGREES (not modelled: {v.missing_features or 'none'})")
        )
    computed = reports.summarize(verdicts)
    for key, (value, unit) in computed.items():
        figure(key, value, unit)
    if request.config.getoption("--update-figures"):
        # a better engine can make a figure unnecessary (a disagreement that is gone): drop it
        store = figs.load()
        # (the section "Measured on a GPU" has figures of its own: test_measured_on_a_gpu's, kept)
        kept = {k: v for k, v in store.get("accuracy", {}).items() if k in computed or k.startswith("gpu_")}
        store["accuracy"] = kept
        figs.save(store)


def test_every_message_read_by_explain_or_the_reason_known(verdicts):
    """A message explain cannot read is one whose format the case says decides it."""
    for v in verdicts:
        if v.explain is None or v.explain["read"]:
            continue
        formats = {"short_message", "no_request_message"}
        assert (not v.case.message_complete) or formats & set(v.case.decided_by), (
            f"{v.case.id}: explain cannot read its message ({v.explain['error']}) and the case does not "
            "say which message format decides it"
        )


def _page(lang: str) -> str:
    return (ROOT / "docs" / lang / "accuracy.md").read_text(encoding="utf-8")


def _section(text: str, anchor: str) -> str:
    m = re.search(r"^## .*\{ #" + anchor + r" \}$", text, re.M)
    assert m, f"no section {{ #{anchor} }}"
    rest = text[m.end() :]
    end = re.search(r"^## ", rest, re.M)
    return rest[: end.start()] if end else rest


@pytest.mark.parametrize("lang", LANGS)
def test_page_shows_every_case_and_lists_exactly_the_disagreements(verdicts, lang):
    text = _page(lang)
    table = _section(text, "cases")
    for v in verdicts:
        row = [line for line in table.splitlines() if f"{{{{ {v.case.key}_agree }}}}" in line]
        assert len(row) == 1, f"docs/{lang}/accuracy.md ({lang}): the table needs one row for {v.case.id}"
        assert v.case.source in row[0], (
            f"docs/{lang}/accuracy.md ({lang}): {v.case.id}'s row must link its report"
        )
    listed = set()
    for m in re.finditer(r"^- \*\*`([a-z0-9-]+)`\*\*", _section(text, "disagreements"), re.M):
        listed.add(m.group(1))
    expected = {v.case.id for v in reports.disagreements(verdicts)}
    assert listed == expected, (
        f"docs/{lang}/accuracy.md ({lang}): the disagreements listed are {sorted(listed)}, the engine "
        f"disagrees on {sorted(expected)}: add {sorted(expected - listed)}, drop {sorted(listed - expected)}"
    )


# ------------------------------------------------------------------------------------------------
# Measured on a GPU: nanoGPT's own train.py (and nanochat's base_train) on CUDA, beside today's
# prediction for the same settings and card (oomguide.measured; tests/test_measured.py holds the rules)
# ------------------------------------------------------------------------------------------------
GPU_SECTION = "measured-on-a-gpu"
VERDICT_VALUE = {"does_not_fit": 0, "borderline": 1, "fits": 2}
# the phase column of the section's table, as each language's pages name the phases
PHASE_WORDS = {
    "en": {
        "estimate_loss_first": "first `estimate_loss()`",
        "first_step": "first optimizer step",
        "train_step": "training step",
    },
    "ja": {
        "estimate_loss_first": "最初の `estimate_loss()`",
        "first_step": "最初のオプティマイザのステップ",
        "train_step": "学習ステップ",
    },
    "zh": {
        "estimate_loss_first": "首次 `estimate_loss()`",
        "first_step": "第一个优化器步",
        "train_step": "训练步",
    },
    "de": {
        "estimate_loss_first": "erstes `estimate_loss()`",
        "first_step": "erster Optimiererschritt",
        "train_step": "Trainingsschritt",
    },
    "fr": {
        "estimate_loss_first": "premier `estimate_loss()`",
        "first_step": "premier pas d’optimiseur",
        "train_step": "pas d’entraînement",
    },
}


def gpu_key(run) -> str:
    return "gpu_" + re.sub(r"\W", "_", run.name)


def deciding_phase(run) -> str:
    """The phase a row shows: where the run ran out of memory, else its training step."""
    return run.outcome.get("oom_phase") or "train_step"


@pytest.fixture(scope="module")
def gpu_runs(request):
    from oomguide import measured

    nanogpt = getattr(request.config, "_oomguide_nanogpt", None)
    if nanogpt is None:
        pytest.skip(
            "the section 'Measured on a GPU' re-predicts nanoGPT's own runs: pytest examples --nanogpt PATH"
        )
    nanochat = getattr(request.config, "_oomguide_nanochat", None)
    out = []
    for run in measured.load_all():
        if run.program == "nanochat" and nanochat is None:
            continue
        compiled = True if run.program == "nanochat" else bool(measured.settings(run, nanogpt).compile)
        out.append((run, measured.predict(run, nanogpt=nanogpt, nanochat=nanochat), compiled))
    return out


def test_measured_on_a_gpu(gpu_runs, figure, report):
    from oomguide import measured, verdict
    from oomguide.memory import reserved

    counts = dict.fromkeys(
        (
            "runs",
            "phases",
            "within",
            "oom_runs",
            "false_fits",
            "oom_does_not_fit",
            "oom_borderline",
            "ran_runs",
            "refused",
            "ran_fits",
            "ran_borderline",
            "expandable_runs",
            "expandable_right",
        ),
        0,
    )
    worst = {"eager": 0.0, "compiled": 0.0}
    nanogpt = [(r, p, c) for r, p, c in gpu_runs if r.program == "nanoGPT"]
    for run, predicted, compiled in nanogpt:
        key, phase = gpu_key(run), deciding_phase(run)
        said = verdict.worst(p["verdict"] for p in predicted.values())
        ran = run.outcome["fits"]
        counts["runs"] += 1
        figure(f"{key}_usable", run.gpu_memory - memory.CONTEXT_BYTES, "gib")
        figure(f"{key}_predicted", predicted[phase]["allocated"], "gib")
        figure(f"{key}_ran", int(ran), "mark")
        figure(f"{key}_verdict", VERDICT_VALUE[said], "verdict")
        if ran:
            figure(f"{key}_measured", run.phases[phase]["allocated"], "gib")
            figure(
                f"{key}_error",
                predicted[phase]["allocated"] / run.phases[phase]["allocated"] - 1,
                "percent",
                decimals=1,
            )
        kind = "compiled" if compiled else "eager"
        for check, peaks in run.phases.items():
            if check == run.outcome.get("oom_phase"):
                continue
            error = predicted[check]["allocated"] / peaks["allocated"] - 1
            counts["phases"] += 1
            counts["within"] += measured.within_tolerance(predicted[check]["allocated"], peaks["allocated"])
            if peaks["allocated"] >= 2**30:  # the page's "largest error": peaks of a gigabyte or more
                worst[kind] = max(worst[kind], abs(error))
        if ran:
            counts["ran_runs"] += 1
            counts["refused"] += said == "does_not_fit"
            counts["ran_fits"] += said == "fits"
            counts["ran_borderline"] += said == "borderline"
        else:
            counts["oom_runs"] += 1
            counts["false_fits"] += said == "fits"
            counts["oom_does_not_fit"] += said == "does_not_fit"
            counts["oom_borderline"] += said == "borderline"
        if "expandable_segments:True" in run.alloc_conf:
            counts["expandable_runs"] += 1
            counts["expandable_right"] += said == ("fits" if ran else "does_not_fit") or (
                not ran and said == "borderline"
            )
        report(
            f"GPU {run.name}: {phase} measured {run.phases[phase]['allocated'] / 2**30:.2f} GiB, predicted "
            f"{predicted[phase]['allocated'] / 2**30:.2f} GiB; {'ran' if ran else 'OOM'}, oomguide: {said}"
        )
    for name, value in counts.items():
        figure(f"gpu_{name}", value, "int")
    figure("gpu_worst_eager", worst["eager"], "percent", decimals=1)
    figure("gpu_worst_compiled", worst["compiled"], "percent", decimals=1)
    figure("gpu_tolerance", measured.TOLERANCE, "percent")
    figure("gpu_tolerance_floor", measured.TOLERANCE_FLOOR, "gib", decimals=1)
    figure("gpu_allocated_uncertainty", reserved.ALLOCATED_UNCERTAINTY, "percent", decimals=1)
    figure("gpu_reserved_uncertainty", reserved.RESERVED_UNCERTAINTY, "percent")
    figure("gpu_uncertainty_floor", reserved.UNCERTAINTY_FLOOR, "mib", decimals=0)
    assert counts["false_fits"] == 0 and counts["refused"] == 0, counts
    for run, predicted, _ in gpu_runs:
        if run.program != "nanochat":
            continue
        key = gpu_key(run)
        figure(f"{key}_measured", run.phases["train_step"]["allocated"], "gib")
        figure(f"{key}_predicted", predicted["train_step"]["allocated"], "gib")
        figure(
            f"{key}_error",
            predicted["train_step"]["allocated"] / run.phases["train_step"]["allocated"] - 1,
            "percent",
        )
        report(
            f"GPU {run.name}: measured {run.phases['train_step']['allocated'] / 2**30:.2f} GiB, predicted "
            f"{predicted['train_step']['allocated'] / 2**30:.2f} GiB"
        )


@pytest.mark.parametrize("lang", LANGS)
def test_gpu_section_has_a_row_per_measured_run(gpu_runs, lang):
    section = _section(_page(lang), GPU_SECTION)
    for run, _, _ in gpu_runs:
        key = gpu_key(run)
        rows = [
            line
            for line in section.splitlines()
            if line.startswith("|") and f"{{{{ {key}_predicted }}}}" in line
        ]
        assert len(rows) == 1, f"docs/{lang}/accuracy.md ({lang}): one row for the measured run {run.name}"
        assert f"`{run.name}`" in rows[0], f"docs/{lang}/accuracy.md ({lang}): the row of {run.name} names it"
        if run.program == "nanoGPT":
            word = PHASE_WORDS[lang][deciding_phase(run)]
            assert word in rows[0], (
                f"docs/{lang}/accuracy.md ({lang}): {run.name}'s row shows the phase {word}"
            )
