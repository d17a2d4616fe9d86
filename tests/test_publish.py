"""Publishing the site (issue 24): what the README's "Publish the site" says, kept true.

* A site built for a published address (``site_url`` set as the README says) keeps the site's
  contract: every link resolves, nothing is requested from outside, and every section
  ``oomguide explain`` links to, in every language, is a page of that site with that anchor.
* The README's examples of explain's links are what the code prints, its server requirements are what
  the box checks, and the size of Pyodide it states is the size of the files the build copies.
"""

from __future__ import annotations

import http.server
import mimetypes
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from oomguide import paste
from oomguide.explain import links
from test_site import check_links, check_no_outside_requests, parse_html, resolve, site_url_prefixes

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PUBLISHED = "https://guide.example/oomguide/"
LANGS = ("en", "ja", "zh", "de", "fr")


def readme_section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert m, f"the README has no section {title!r}"
    return m.group(1)


@pytest.fixture(scope="module")
def published_site(tmp_path_factory) -> Path:
    """`mkdocs build --strict` with mkdocs.yml's site_url set to PUBLISHED (a copy of mkdocs.yml beside
    it, since the hooks and paths are the repository's)."""
    site = tmp_path_factory.mktemp("published-site")
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    text, n = re.subn(r"^site_url:.*$", f"site_url: {PUBLISHED}", text, count=1, flags=re.M)
    assert n == 1
    with tempfile.NamedTemporaryFile(
        "w", dir=ROOT, prefix=".mkdocs-published-", suffix=".yml", encoding="utf-8", delete=False
    ) as config:
        config.write(text)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config.name, "--site-dir", str(site)],
            cwd=ROOT,
            env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        os.unlink(config.name)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return site


def test_a_site_built_for_its_published_address_keeps_the_contract(published_site):
    prefixes = site_url_prefixes(ROOT, PUBLISHED)
    assert check_links(published_site, prefixes=prefixes) == []
    assert check_no_outside_requests(published_site, own=PUBLISHED) == []
    page = (published_site / "ja" / "paste" / "index.html").read_text(encoding="utf-8")
    assert f'<link rel="canonical" href="{PUBLISHED}ja/paste/">' in page
    # the paste box's links stay relative: the site works under any address
    assert 'data-base="../.."' in page


def test_explains_links_are_the_published_sites_sections(published_site, monkeypatch):
    """Every section explain can name, in every language, with mkdocs.yml set for publishing: the link
    is an address of the published site, and it lands on a built page with that anchor."""
    monkeypatch.delenv(links.SITE_URL_ENV, raising=False)
    monkeypatch.setattr(links, "configured_site_url", lambda: PUBLISHED)
    prefixes = site_url_prefixes(ROOT, PUBLISHED)
    home = published_site / "index.html"
    checked = 0
    for lang in LANGS:
        for page, anchors in links.GUIDE_SECTIONS.items():
            for anchor in anchors or (None,):
                link = links.section_link(page, anchor, lang)
                assert link.startswith(PUBLISHED + ("" if lang == "en" else f"{lang}/") + page + "/"), link
                target = resolve(published_site, home, link, prefixes)
                assert target is not None and target.is_file(), f"{link}: no such page"
                if anchor:
                    assert anchor in parse_html(target).ids, f"{link}: no id {anchor!r} on the page"
                checked += 1
    assert checked > 5 * 30


def test_readme_shows_the_links_explain_prints(monkeypatch):
    """The README's two examples: the page's file while site_url is local, the address once published."""
    text = readme_section("Publish the site")
    monkeypatch.delenv(links.SITE_URL_ENV, raising=False)
    assert links.published_url() is None, "mkdocs.yml is set for publishing: the README says it ships local"
    local = links.section_link("eval-oom-12gb", "eval-batch-size", "ja")  # the installed page, its line
    assert local == links.file_link("eval-oom-12gb", "eval-batch-size", "ja") and Path(local.rpartition(":")[0]).is_file()
    assert f"/oomguide/guide/ja/{Path(local).name}`" in text, f"the README's example is not {Path(local).name}"
    assert f"`{links.section_title('eval-oom-12gb', 'eval-batch-size', 'ja')}`" in text
    shipped = re.search(r"^site_url:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)[1]
    assert f"The repository ships `{shipped}`" in text
    example = re.search(r"`site_url: (https://\S+)`", text)[1]
    monkeypatch.setattr(links, "configured_site_url", lambda: example)
    assert f"`{links.section_link('eval-oom-12gb', 'eval-batch-size', 'ja')}`" in text
    assert (ROOT / "src/oomguide/explain/site.yml").resolve() == (ROOT / "mkdocs.yml").resolve()
    assert f"`{links.SITE_URL_ENV}=" in text


def test_readme_says_what_the_box_needs_from_the_server():
    text = readme_section("Publish the site")
    # the way out the box names on a page opened as a file is the README's
    assert "`python -m http.server`" in paste.WORDS["file"] and "`python -m http.server` in `site/`" in text
    assert "http://localhost:8000/" in paste.WORDS["file"] and "<http://localhost:8000/>" in text
    # the type the box checks for is the README's, and the servers it names send it
    assert "application/wasm" in paste.WORDS["wasm_type"] and "`application/wasm`" in text
    assert 'type !== "application/wasm"' in (ROOT / "docs/assets/paste.js").read_text(encoding="utf-8")
    handler = http.server.SimpleHTTPRequestHandler
    assert handler.guess_type(handler.__new__(handler), "x/pyodide.asm.wasm") == "application/wasm"
    assert mimetypes.guess_type("pyodide.asm.wasm")[0] == "application/wasm"  # what `mkdocs serve` sends
    assert "`mkdocs gh-deploy --force`" in text and "mkdocs gh-deploy --force\n" in text


def test_readme_states_the_size_of_pyodide_the_build_copies():
    if not paste.has_pyodide(ROOT):
        pytest.skip("no Pyodide in node_modules (run `npm ci`)")
    size = sum((paste.pyodide_source(ROOT) / name).stat().st_size for name in paste.PYODIDE_FILES)
    stated = re.search(
        r"Pyodide \((\d+\.\d) MB under `assets/pyodide/`\)", readme_section("Publish the site")
    )
    assert stated, "the README no longer states Pyodide's size"
    assert stated[1] == f"{size / 1e6:.1f}", f"Pyodide's files are {size / 1e6:.1f} MB now"
