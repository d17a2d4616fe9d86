"""Notebook where-the-memory-goes: its code runs and draws both charts; the five languages share the code.

The site executes the notebooks during the build (mkdocs-jupyter); this test runs the English one's code
cells in order, as a kernel would, and checks what they compute against oomguide's predictor.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tokenize
import warnings
from pathlib import Path

import matplotlib
import pytest
import yaml

from oomguide import figures, memory, notebooks
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


def code_shape(code: str) -> list[str]:
    """A code cell's tokens with every string literal as "S" and comments left out: the code
    itself, whatever language its labels are written in."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        out.append("S" if tok.type == tokenize.STRING else tok.string)
    return out


def test_languages_share_the_code():
    """Same code cells (and cell order) in every language; only the markdown and the strings the
    reader sees (labels, printed lines, `LANG`) are translated."""
    en = cells("en")
    for lang in LANGS:
        mine = cells(lang)
        assert [c["cell_type"] for c in mine] == [c["cell_type"] for c in en], lang
        code = [code_shape(source(c)) for c in mine if c["cell_type"] == "code"]
        assert code == [code_shape(source(c)) for c in en if c["cell_type"] == "code"], lang
        assert f'LANG = "{lang}"' in source(next(c for c in mine if c["cell_type"] == "code")), lang
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


_PREDICTED: dict = {}


def run_notebook(lang: str, monkeypatch) -> tuple[dict, list, str]:
    """A language's notebook namespace after running its code cells, its figures (Agg backend) and
    what it printed. The predictions are shared between the languages (the code is the same)."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    real_predict = memory.predict

    def predict(*args, **kwargs):
        key = (repr(args), repr(sorted(kwargs.items())))
        if key not in _PREDICTED:
            _PREDICTED[key] = real_predict(*args, **kwargs)
        return _PREDICTED[key]

    plt.close("all")
    plt.rcdefaults()
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.gcf()))
    monkeypatch.setattr(memory, "predict", predict)
    namespace: dict = {}
    printed = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
        warnings.simplefilter("error")  # a notebook that warns (a glyph missing from the font) shows it
        for cell in cells(lang):
            if cell["cell_type"] == "code":
                exec(compile(source(cell), f"docs/{lang}/where-the-memory-goes.ipynb", "exec"), namespace)
                for fig in shown:
                    fig.canvas.draw()  # lays out the text: a missing glyph warns here
    return namespace, shown, printed.getvalue()


@pytest.fixture
def executed(monkeypatch):
    """The English notebook's namespace after running its code cells, with its figures."""
    namespace, shown, _ = run_notebook("en", monkeypatch)
    yield namespace, shown
    import matplotlib.pyplot as plt

    plt.close("all")
    plt.rcdefaults()


def chart_data(fig) -> list:
    ax = fig.axes[0]
    return [p.get_height() for p in ax.patches] + [list(line.get_ydata()) for line in ax.get_lines()]


@pytest.mark.parametrize("lang", LANGS)
def test_charts_and_printed_lines_in_the_readers_language(lang, monkeypatch):
    """Titles, axes, legends, ticks and printed lines in the page's language, with its glossary and
    its number format; the same bars and lines as in English."""
    import matplotlib.pyplot as plt

    try:
        _, en_shown, _ = run_notebook("en", monkeypatch)
        namespace, shown, printed = run_notebook(lang, monkeypatch)
        assert len(shown) == len(en_shown) == 2
        phases, categories = namespace["PHASE_LABELS"], namespace["CATEGORY_LABELS"]
        breakdown, curve = (fig.axes[0] for fig in shown)
        assert [t.get_text() for t in breakdown.get_legend().get_texts()] == list(categories.values())[::-1]
        assert [t.get_text() for t in breakdown.get_xticklabels()] == list(phases.values())
        legend = [t.get_text() for t in curve.get_legend().get_texts()]
        assert legend[:-1] == list(phases.values())
        for fig, en_fig in zip(shown, en_shown):
            assert chart_data(fig) == chart_data(en_fig)  # the same numbers, whatever the words
            ax, en_ax = fig.axes[0], en_fig.axes[0]
            if lang in ("ja", "zh", "de"):  # languages that share no chart word with English
                assert ax.get_ylabel() != en_ax.get_ylabel()
                assert not {t.get_text() for t in ax.get_legend().get_texts()} - {"estimate_loss()"} & {
                    t.get_text() for t in en_ax.get_legend().get_texts()
                }
            yticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
            comma = lang in ("de", "fr")  # the decimal sign: 2,5 in German and French, 2.5 elsewhere
            assert ax.yaxis.get_major_formatter()(2.5) == ("2,5" if comma else "2.5")
            assert not any(("." if comma else ",") in t for t in yticks)
        # the printed lines: the page's labels and the page's figures
        for label in phases.values():
            assert label in printed, (lang, label)
        assert figures.format_figure(namespace["peaks"]["train_step"].peak_bytes, "gib", lang) in printed
        # the glossary holds for what the charts and the printed lines say
        said = printed + " ".join(
            t.get_text()
            for fig in shown
            for t in [*fig.axes[0].get_legend().get_texts(), fig.axes[0].title, fig.axes[0].yaxis.label]
        )
        glossary = yaml.safe_load((ROOT / "glossary.yml").read_text(encoding="utf-8"))
        for concept, entry in glossary.items():
            for pattern in (entry.get("avoid") or {}).get(lang, []):
                found = re.search(pattern, said)
                assert not found, (
                    f"{lang}: {found.group(0)!r} for {concept!r} in the notebook's charts or output"
                )
    finally:
        plt.close("all")
        plt.rcdefaults()


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


def test_recorded_outputs_are_current(request, report):
    """The repository's records of the notebooks' outputs (examples/notebook-outputs/) are those of
    today's code: the first `mkdocs serve` of a fresh clone shows them without executing anything.
    `pytest examples --update-figures` (or `python -m oomguide.notebooks`) records them again."""
    if request.config.getoption("--update-figures"):
        notebooks.record()
    problems = []
    wanted = set()
    for path in notebooks.notebook_paths():
        code, kernel = notebooks.code_and_kernel(json.loads(path.read_text(encoding="utf-8")))
        record = notebooks.RECORDS / f"{notebooks.key(code, kernel)}.json"
        wanted.add(record)
        lang = path.parent.name
        if not record.is_file():
            problems.append(f"{lang}: no record for this notebook's code and library versions")
        elif notebooks.load(record) is None:
            problems.append(
                f"{lang}: record made with other code: {', '.join(notebooks.stale_modules(record))}"
            )
        else:
            outputs = notebooks.load(record)
            assert len(outputs) == len(code), f"{lang}: {len(outputs)} recorded outputs for {len(code)} cells"
            images = sum("image/png" in o.get("data", {}) for cell in outputs for o in cell)
            assert images >= 2, f"{lang}: the record holds {images} chart(s), the notebook draws two"
            report(f"{lang}: recorded outputs current ({record.name}, {images} charts)")
    extra = sorted(p.name for p in notebooks.RECORDS.glob("*.json") if p not in wanted)
    if extra:
        problems.append(f"records no notebook has: {', '.join(extra)}")
    assert not problems, (
        "examples/notebook-outputs/ is stale; run `python -m oomguide.notebooks` (or pytest examples "
        "--update-figures) and commit it:\n  " + "\n  ".join(problems)
    )
