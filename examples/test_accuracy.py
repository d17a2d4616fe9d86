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
        store["accuracy"] = {k: v for k, v in store.get("accuracy", {}).items() if k in computed}
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
