"""The paste box's Python (issue 24) without a browser: what the site's build packs for Pyodide runs on
the standard library alone and answers as the CLI does; the box as the pages get it.

tests/test_browser.py pastes the same messages into the box in chromium.
"""

from __future__ import annotations

import html
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from oomguide import messages, paste
from oomguide.explain import browser

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = sorted((ROOT / "tests" / "golden" / "messages").glob("*.txt"))
LANGS = ("en", "ja", "zh", "de", "fr")

# In a fresh interpreter that sees only the standard library and the bundle (no site-packages, torch
# and numpy blocked; Babel, which formats the numbers, only as the bundle carries it, as in Pyodide):
# the answer for each message and language, as JSON.
RUN_BUNDLE = """
import json, sys
sys.path.insert(0, sys.argv[1])
for blocked in ("torch", "numpy"):
    sys.modules[blocked] = None  # an import of it fails
from oomguide.explain.browser import answer
import babel
assert babel.__file__.startswith(sys.argv[1]), babel.__file__
out = {}
for path in sys.argv[2:]:
    text = open(path, encoding="utf-8").read()
    for lang in ("en", "ja", "zh", "de", "fr"):
        out[f"{path} {lang}"] = json.loads(answer(text, lang, "../.."))
print(json.dumps(out))
"""


def test_the_bundle_answers_like_the_cli_on_the_standard_library_alone(tmp_path):
    with zipfile.ZipFile(io.BytesIO(paste.bundle())) as z:
        names = z.namelist()
        z.extractall(tmp_path)
    assert "oomguide/explain/browser.py" in names
    assert not [n for n in names if n.endswith(".po")], "the browser reads compiled catalogs only"
    assert {f"oomguide/locale/{lang}/LC_MESSAGES/explain.mo" for lang in LANGS[1:]} <= set(names)
    assert {f"babel/locale-data/{lang}.dat" for lang in LANGS} <= set(names)
    files = [str(m) for m in MESSAGES]
    done = subprocess.run(
        [sys.executable, "-S", "-c", RUN_BUNDLE, str(tmp_path), *files],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    for path in files:
        text = Path(path).read_text(encoding="utf-8")
        for lang in LANGS:
            assert answers[f"{path} {lang}"] == json.loads(browser.answer(text, lang, "../..")), (path, lang)


def test_the_bundle_is_the_same_for_the_same_sources():
    assert paste.bundle() == paste.bundle()


@pytest.mark.parametrize(
    ("url", "base"), [("", "."), ("ja/", ".."), ("paste/", ".."), ("ja/paste/", "../..")]
)
def test_base_is_the_way_to_the_sites_root(url, base):
    assert paste.base_of(url) == base


def test_links_are_relative_and_in_the_readers_language():
    text = (ROOT / "tests" / "golden" / "messages" / "fragmentation.txt").read_text(encoding="utf-8")
    out = json.loads(browser.answer(text, "de", "../.."))
    assert out["links"] and all(link.startswith("../../de/") for link in out["links"])
    assert [line.strip() for line in out["text"].splitlines() if line.startswith("    ../")] == out["links"]
    # each under its section's title in the page's language (the bundle carries the pages' headings)
    titles = [line[4:] for line in out["text"].splitlines() if line.startswith("  - ") and " › " in line]
    assert len(titles) == len([link for link in out["links"] if "#" in link]), titles
    assert "127.0.0.1" not in out["text"] and "docs/" not in out["text"]  # the site's pages, not files


def test_unreadable_input_is_the_clis_error_line(monkeypatch, capsys):
    """The box's line for input it cannot read is the CLI's, in the page's language, naming the
    pasted text where the CLI names stdin (issue 31: a reader who pasted has no stdin)."""
    import io
    import sys

    from oomguide.cli import main

    for lang in ("en", "ja", "fr"):
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello"))
        assert main(["explain", "-", "--lang", lang]) == 2
        cli = capsys.readouterr().err.strip()
        box = json.loads(browser.answer("hello", lang, ".."))["error"]
        said = "no CUDA out-of-memory message ('Tried to allocate …') in "
        stdin, pasted = (messages.translate(said + where, lang) for where in ("stdin", "the pasted text"))
        assert cli.endswith(stdin) and box == cli[: -len(stdin)] + pasted, (cli, box)
        if lang == "ja":
            assert cli.startswith("oomguide explain：エラー："), cli  # not the English line


def test_without_pyodide_the_box_says_so_and_the_page_still_builds():
    html = paste.box_html("fr", "fr/paste/", pyodide=False)
    assert 'data-pyodide="missing"' in html and " disabled>" in html
    assert "npm ci" in html and "Pyodide" in html
    with_it = paste.box_html("fr", "fr/paste/", pyodide=True)
    assert 'data-pyodide="yes"' in with_it and "disabled" not in with_it
    assert 'src="../../assets/paste.js"' in with_it


def test_the_box_carries_the_file_url_line_in_its_language():
    """What paste.js shows on a page opened as a file: why the box cannot run and how to serve the site."""
    from oomguide.i18n import gettext_for

    for lang in LANGS:
        words = gettext_for(lang, "site")(paste.WORDS["file"])
        assert "file://" in words and "`python -m http.server`" in words and "http://localhost:8000/" in words
        assert lang == "en" or words != paste.WORDS["file"], lang
        assert f'data-file="{html.escape(words, quote=True)}"' in paste.box_html(lang, "paste/", pyodide=True)
