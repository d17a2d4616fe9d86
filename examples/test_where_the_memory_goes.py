"""Notebook where-the-memory-goes: its code runs and draws its charts; the five languages share the code.

The site executes the notebooks during the build (mkdocs-jupyter); this test runs the English one's code
cells in order, as a kernel would, and checks what they compute against oomguide's predictor. Its last
section predicts a nanochat train step with the checkout that ``OOMGUIDE_NANOCHAT`` names (``pytest
examples --nanochat PATH`` sets it here): with one, the section must compute and agree with ``oomguide
check --nanochat`` on the nanochat page's line; without one, it prints how to name one and draws nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tokenize
import warnings
from pathlib import Path

import matplotlib
import pytest
import yaml

from oomguide import figures, memory, notebooks
from oomguide.config import load_config
from oomguide.nanochat import check

ROOT = Path(__file__).resolve().parents[1]
NANOCHAT_LINE = "nanochat/check-237.sh"  # the nanochat page's line that the notebook's last section predicts
LANGS = ("en", "ja", "zh", "de", "fr")
TITLES = {
    "en": "# Where the memory goes { #where-the-memory-goes }",
    "ja": "# メモリの内訳 { #where-the-memory-goes }",
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


@pytest.fixture(autouse=True)
def nanochat_checkout(request, monkeypatch) -> Path | None:
    """The nanochat checkout the notebook computes with: ``--nanochat PATH`` (by default
    ``OOMGUIDE_NANOCHAT``), given to the notebook as ``OOMGUIDE_NANOCHAT``; None without one."""
    path = getattr(request.config, "_oomguide_nanochat", None)
    if path is None:
        monkeypatch.delenv(notebooks.NANOCHAT, raising=False)
    else:
        monkeypatch.setenv(notebooks.NANOCHAT, str(path))
    return path


def _shared(function):
    """`function` with its results shared between the languages' runs (the code is the same)."""

    def shared(*args, **kwargs):
        key = (function.__qualname__, repr(args), repr(sorted(kwargs.items())))
        if key not in _PREDICTED:
            _PREDICTED[key] = function(*args, **kwargs)
        return _PREDICTED[key]

    return shared


def run_notebook(lang: str, monkeypatch, by_cell: list | None = None) -> tuple[dict, list, str]:
    """A language's notebook namespace after running its code cells, its figures (Agg backend) and
    what it printed (`by_cell`: filled with what each code cell printed). The predictions, nanoGPT's
    and nanochat's, are shared between the languages (the code is the same)."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    plt.rcdefaults()
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.gcf()))
    monkeypatch.setattr(memory, "predict", _shared(memory.predict))
    monkeypatch.setattr(check, "verdict", _shared(check.verdict))
    namespace: dict = {}
    printed = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a notebook that warns (a glyph missing from the font) shows it
        for cell in cells(lang):
            if cell["cell_type"] == "code":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(source(cell), f"docs/{lang}/where-the-memory-goes.ipynb", "exec"), namespace)
                    for fig in shown:
                        fig.canvas.draw()  # lays out the text: a missing glyph warns here
                printed.append(out.getvalue())
    if by_cell is not None:
        by_cell[:] = printed
    return namespace, shown, "".join(printed)


def charts_expected() -> int:
    """The breakdown and the batch curve, and nanochat's step beside nanoGPT's where a checkout is named."""
    return 3 if os.environ.get(notebooks.NANOCHAT) else 2


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
        assert len(shown) == len(en_shown) == charts_expected()
        phases, categories = namespace["PHASE_LABELS"], namespace["CATEGORY_LABELS"]
        breakdown, curve = (fig.axes[0] for fig in shown[:2])
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
        if namespace["nanochat"] is not None:  # nanochat's step beside nanoGPT's: its own words
            step = namespace["nanochat"]["phases"]["train_step"]
            assert figures.format_figure(step["peak_bytes"], "gib", lang) in printed
            for label in namespace["STEP_LABELS"]["nanochat"].values():
                assert label in printed, (lang, label)
            beside = shown[2].axes[0]
            assert [t.get_text() for t in beside.get_legend().get_texts()] == list(
                namespace["legend"].values()
            )[::-1]
            assert namespace["legend"].keys() == namespace["CATEGORY_LABELS"].keys()
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
    assert len(shown) == charts_expected(), "the breakdown, the peak against batch_size (and nanochat's step)"
    breakdown, curve = (fig.axes[0] for fig in shown[:2])

    # 1. stacked bars: one bar per phase, one stack per category, summing to the predicted peak
    config = load_config()
    peaks = {phase: memory.predict(config, phase) for phase in memory.PHASES}
    # one stack per category of the breakdown: the five, and cuBLAS's workspaces (memory/kernels.py)
    assert len(breakdown.containers) == len(memory.CATEGORIES) + 1
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


def nanochat_line(checkout: Path) -> tuple[list[str], str, list[str]]:
    """The nanochat page's oomguide line (``snippets/nanochat/check-237.sh``), with the reader's
    checkout for ~/nanochat: oomguide's arguments, among them its ``--gpu``, and the nanochat command."""
    words = shlex.split((ROOT / "snippets" / NANOCHAT_LINE).read_text(encoding="utf-8"))
    words = [str(checkout) if w == "~/nanochat" else w for w in words]
    at = words.index("--")
    assert words[:3] == ["oomguide", "check", "--nanochat"] and words[4] == "--gpu" and at == 6, words
    return words[1:at], words[5], words[at + 1 :]


def test_nanochat_beside_nanogpt(nanochat_checkout, monkeypatch, report):
    """With a nanochat checkout, the last section computes: its chart stacks nanoGPT's train step
    (``memory.predict``) beside nanochat's, and nanochat's figures are those that ``oomguide check
    --nanochat`` gives for the nanochat page's line, run as the reader runs it."""
    if nanochat_checkout is None:
        pytest.skip("needs a nanochat checkout: pytest examples --nanochat PATH (or OOMGUIDE_NANOCHAT=PATH)")
    printed_by_cell: list = []
    namespace, shown, printed = run_notebook("en", monkeypatch, printed_by_cell)
    assert namespace["nanochat"] is not None and len(shown) == 3, "the nanochat section did not compute"

    # the notebook predicts the page's line
    arguments, gpu, command = nanochat_line(nanochat_checkout)
    assert (namespace["NANOCHAT_GPU"], namespace["NANOCHAT_COMMAND"]) == (gpu, command)

    # ... and gives what `oomguide check --nanochat` gives for it (the command itself, in a process of its own)
    cli = subprocess.run(
        [sys.executable, "-m", "oomguide", *arguments, "--json", "--no-search", "--", *command],
        capture_output=True,
        text=True,
        env=dict(os.environ, LANG="C.UTF-8"),
        timeout=600,
    )
    assert cli.returncode in (0, 1), cli.stderr
    expected = json.loads(cli.stdout)["phases"]["train_step"]
    step = namespace["nanochat"]["phases"]["train_step"]
    assert (step["peak_bytes"], step["breakdown"]) == (expected["peak_bytes"], expected["breakdown"])
    # nanoGPT's five categories; cuBLAS's workspaces, nanoGPT's sixth, are not modelled for nanochat
    assert list(expected["breakdown"]) == list(memory.CATEGORIES)

    # the chart: one bar per project, stacked by category, summing to each train step's peak
    nanogpt = memory.predict(load_config(), "train_step")
    beside = shown[2].axes[0]
    # the stacks: the five categories and cuBLAS's workspaces (nanoGPT's prediction has them, nanochat's not)
    labels = namespace["CATEGORY_LABELS"]
    assert list(labels) == [*memory.CATEGORIES, "workspaces"]
    assert len(beside.containers) == len(labels)
    for container, category in zip(beside.containers, labels):
        heights = [bar.get_height() for bar in container.patches]
        wanted = [memory.gib(nanogpt.breakdown[category]), memory.gib(expected["breakdown"].get(category, 0))]
        assert heights == pytest.approx(wanted, rel=1e-12), category
    tops = [bar.get_y() + bar.get_height() for bar in beside.containers[-1].patches]
    assert tops == pytest.approx(
        [memory.gib(nanogpt.peak_bytes), memory.gib(expected["peak_bytes"])], rel=1e-9
    )

    # the printed figures are those
    said = printed_by_cell[-2]  # the section's first code cell
    assert f"peak {figures.format_figure(expected['peak_bytes'], 'gib', 'en')}" in said
    assert f"peak {figures.format_figure(nanogpt.peak_bytes, 'gib', 'en')}" in said
    for category in memory.CATEGORIES:
        assert figures.format_figure(expected["breakdown"][category], "gib", "en") in said, category
    state = expected["breakdown"]["optimizer_state"] / expected["breakdown"]["gradients"]
    assert f"{figures.format_figure(state, 'ratio', 'en')} in nanochat" in said
    report(
        "where-the-memory-goes, nanochat beside nanoGPT: "
        f"{' '.join(command)} on {gpu}: train step {memory.fmt_bytes(expected['peak_bytes'])}, "
        f"nanoGPT {memory.fmt_bytes(nanogpt.peak_bytes)}; agrees with oomguide check --nanochat"
    )


@pytest.mark.parametrize("lang", LANGS)
def test_without_a_nanochat_checkout_the_section_says_how_to_name_one(lang, monkeypatch):
    """No ``OOMGUIDE_NANOCHAT``: the section's cell prints one line, in the page's language, that
    names the variable, and its chart cell draws nothing; the rest of the notebook is unchanged."""
    import matplotlib.pyplot as plt

    monkeypatch.delenv(notebooks.NANOCHAT, raising=False)
    try:
        en_cells: list = []
        run_notebook("en", monkeypatch, en_cells)
        by_cell: list = []
        namespace, shown, _ = run_notebook(lang, monkeypatch, by_cell)
        assert namespace["nanochat"] is None and len(shown) == 2
        line, chart = by_cell[-2:]
        assert line.count("\n") == 1 and not chart, (lang, by_cell[-2:])
        assert "OOMGUIDE_NANOCHAT=~/nanochat" in line, lang
        assert lang == "en" or line != en_cells[-2], f"{lang}: the line is not translated"
    finally:
        plt.close("all")
        plt.rcdefaults()


def test_recorded_outputs_are_current(request, report):
    """The repository's records of the notebooks' outputs (examples/notebook-outputs/) are those of
    today's code: the first `mkdocs serve` of a fresh clone shows them without executing anything.
    `pytest examples --update-figures` (or `python -m oomguide.notebooks`) records them again."""
    if request.config.getoption("--update-figures"):
        if notebooks.nanochat_code() is None:  # CI names one: records made without would be stale there
            pytest.skip(
                "not re-recorded: the notebooks' records are made with a nanochat checkout, pytest examples "
                "--update-figures --nanochat PATH (or OOMGUIDE_NANOCHAT=PATH python -m oomguide.notebooks)"
            )
        notebooks.record()
    unnamed = [  # made with a nanochat checkout, checked with none named
        p.name
        for p in notebooks.RECORDS.glob("*.json")
        if json.loads(p.read_text(encoding="utf-8")).get("nanochat") and notebooks.nanochat_code() is None
    ]
    if unnamed:
        pytest.skip(
            "the records were made with a nanochat checkout: check them with one, pytest examples "
            "--nanochat PATH (or OOMGUIDE_NANOCHAT=PATH)"
        )
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
            problems.append(f"{lang}: record made with other code: {', '.join(notebooks.stale(record))}")
        else:
            outputs = notebooks.load(record)
            assert len(outputs) == len(code), f"{lang}: {len(outputs)} recorded outputs for {len(code)} cells"
            images = sum("image/png" in o.get("data", {}) for cell in outputs for o in cell)
            assert images == charts_expected(), (
                f"{lang}: the record holds {images} chart(s), the notebook draws {charts_expected()}"
            )
            report(f"{lang}: recorded outputs current ({record.name}, {images} charts)")
    extra = sorted(p.name for p in notebooks.RECORDS.glob("*.json") if p not in wanted)
    if extra:
        problems.append(f"records no notebook has: {', '.join(extra)}")
    assert not problems, (
        "examples/notebook-outputs/ is stale; run `python -m oomguide.notebooks` (or pytest examples "
        "--update-figures) and commit it:\n  " + "\n  ".join(problems)
    )
