"""Notebook where-the-memory-goes: its code runs and draws both charts; the five languages share the code.

The site executes the notebooks during the build (mkdocs-jupyter); this test runs the English one's code
cells in order, as a kernel would, and checks what they compute against oomguide's predictor.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib
import pytest

from oomguide import memory
from oomguide.config import load_config

ROOT = Path(__file__).resolve().parents[1]
LANGS = ("en", "ja", "zh", "de", "fr")
TITLES = {
    "en": "# Where the memory goes { #where-the-memory-goes }",
    "ja": "# メモリの行き先 { #where-the-memory-goes }",
    "zh": "# 显存都去哪儿了 { #where-the-memory-goes }",
    "de": "# Wohin der Speicher geht { #where-the-memory-goes }",
    "fr": "# Où passe la mémoire { #where-the-memory-goes }",
}


def cells(lang: str) -> list[dict]:
    path = ROOT / "docs" / lang / "where-the-memory-goes.ipynb"
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_languages_share_the_code():
    """Same code cells (and cell order) in every language; only the markdown is translated."""
    en = cells("en")
    for lang in LANGS:
        mine = cells(lang)
        assert [c["cell_type"] for c in mine] == [c["cell_type"] for c in en], lang
        code = [source(c) for c in mine if c["cell_type"] == "code"]
        assert code == [source(c) for c in en if c["cell_type"] == "code"], lang
        assert mine[0]["cell_type"] == "markdown" and source(mine[0]).splitlines()[0] == TITLES[lang]
        for c in mine:
            assert "--8<--" not in source(c), lang  # notebooks are not run through pymdownx.snippets
            assert c["cell_type"] != "code" or not c.get("outputs"), (
                "outputs come from the build, not the file"
            )
        if lang != "en":
            markdown = [source(c) for c in mine if c["cell_type"] == "markdown"]
            english = [source(c) for c in en if c["cell_type"] == "markdown"]
            assert all(a != b for a, b in zip(markdown, english)), f"{lang}: an untranslated markdown cell"


@pytest.fixture
def executed(monkeypatch):
    """The English notebook's namespace after running its code cells, with its figures (Agg backend)."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.gcf()))
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a notebook that warns shows the warning on the site
        for cell in cells("en"):
            if cell["cell_type"] == "code":
                exec(compile(source(cell), "where-the-memory-goes.ipynb", "exec"), namespace)
    yield namespace, shown
    plt.close("all")


def test_notebook_draws_the_breakdown_and_the_batch_curve(executed, report):
    namespace, shown = executed
    assert len(shown) == 2, "two charts: the breakdown and the peak against batch_size"
    breakdown, curve = (fig.axes[0] for fig in shown)

    # 1. stacked bars: one bar per phase, one stack per category, summing to the predicted peak
    config = load_config()
    peaks = {phase: memory.predict(config, phase) for phase in memory.PHASES}
    assert len(breakdown.containers) == len(memory.CATEGORIES)
    tops = [0.0, 0.0]
    for container in breakdown.containers:
        for i, bar in enumerate(container.patches):
            tops[i] = max(tops[i], bar.get_y() + bar.get_height())
    for top, phase in zip(tops, memory.PHASES):
        assert top == pytest.approx(memory.gib(peaks[phase].peak_bytes), rel=1e-9)
    assert [t.get_text() for t in breakdown.get_legend().get_texts()][-1] == "weights"

    # 2. peak against batch_size: a line per phase and the 12 GB card's usable memory
    batch_sizes = namespace["batch_sizes"]
    assert 5 <= len(batch_sizes) <= 8 and config.batch_size in batch_sizes
    lines = curve.get_lines()
    assert len(lines) == 3
    usable = memory.usable_bytes(memory.DEFAULT_GPU_MEMORY)
    assert lines[-1].get_ydata()[0] == pytest.approx(memory.gib(usable))
    for line, phase in zip(lines, memory.PHASES):
        assert list(line.get_xdata()) == batch_sizes
        at_default = line.get_ydata()[batch_sizes.index(config.batch_size)]
        assert at_default == pytest.approx(memory.gib(peaks[phase].peak_bytes))
        assert all(a < b for a, b in zip(line.get_ydata(), line.get_ydata()[1:]))  # grows with batch_size
    report(
        "where-the-memory-goes notebook: "
        + ", ".join(
            f"{p} {memory.fmt_bytes(r.peak_bytes)} at batch {config.batch_size}" for p, r in peaks.items()
        )
    )
