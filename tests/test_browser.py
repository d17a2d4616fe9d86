"""The built site in a real browser: Debian's chromium driven by Playwright.

Never `playwright install`: the browser is the system's /usr/bin/chromium. Without it the
tests skip, unless OOMGUIDE_REQUIRE_BROWSER=1 (set by .ci/run), where they fail.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import re
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("OOMGUIDE_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "test-artifacts"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
LANGS = ("en", "ja", "zh", "de", "fr")
NOTEBOOK = "where-the-memory-goes"
# (language, word, page the results must include): words the pages use
SEARCHES = [("ja", "検証", "ja/verify/"), ("ja", "ハードウェア", "ja/verify/"), ("zh", "硬件", "zh/verify/"), ("zh", "验证", "zh/verify/")]


def _require_browser():
    if CHROMIUM.exists():
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError as err:  # pragma: no cover - playwright is a test dependency
            reason = f"the playwright package is missing ({err})"
        else:
            return
    else:
        reason = f"{CHROMIUM} is not installed (apt-get install -y chromium)"
    if os.environ.get("OOMGUIDE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser tests required (OOMGUIDE_REQUIRE_BROWSER=1) but {reason}")
    pytest.skip(reason)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


class _WrongWasmType(_Quiet):
    """A static server that sends .wasm files as application/octet-stream."""

    extensions_map = {**_Quiet.extensions_map, ".wasm": "application/octet-stream"}


@pytest.fixture(scope="module")
def wrong_wasm_type_server(site):
    handler = functools.partial(_WrongWasmType, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, server, request):
    """A fresh page that records every request it (and its workers) make."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    failed: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    context.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    pg = context.new_page()
    pg.requests = requests
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        name = re.sub(r"[^\w.-]+", "-", request.node.name.encode("ascii", "backslashreplace").decode())
        pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    except Exception:  # noqa: BLE001 - a screenshot is a courtesy, not a check
        pass
    outside = [
        u
        for u in requests
        if urlsplit(u).scheme in ("http", "https", "ws", "wss") and urlsplit(u).hostname != "127.0.0.1"
    ]
    context.close()
    assert outside == [], f"{request.node.name}: requests outside 127.0.0.1: {outside}"
    # every request the site makes answers: no 404 (Material's language selector once fetched
    # <page>/sitemap.xml beside each alternate link: docs/assets/language.js, issue 32)
    assert failed == [], f"{request.node.name}: requests that failed: {failed}"


def url_of(server: str, lang: str, path: str = "") -> str:
    return server + ("" if lang == "en" else f"{lang}/") + path


@pytest.mark.parametrize("lang", LANGS)
def test_home_page_loads(page, server, lang):
    response = page.goto(url_of(server, lang))
    assert response is not None and response.ok, f"{lang}: home page answered {response and response.status}"
    assert page.locator("html").get_attribute("lang") == lang
    assert page.locator("h1").first.is_visible(), f"{lang}: home page has no visible title"
    assert page.errors == [], f"{lang}: JavaScript errors on the home page: {page.errors}"


@pytest.mark.parametrize(
    ("start", "target"), [("en", "ja"), ("ja", "zh"), ("zh", "de"), ("de", "fr"), ("fr", "en")]
)
def test_language_switcher_stays_on_page(page, server, start, target):
    page.goto(url_of(server, start, "verify/"))
    link = page.locator(f'.md-select a[hreflang="{target}"]').first
    page.locator(".md-header__option .md-select").first.hover()
    link.click()
    page.wait_for_load_state("load")
    expected = url_of(server, target, "verify/")
    assert page.url == expected, f"{start} -> {target}: switcher landed on {page.url}, expected {expected}"
    assert page.locator("html").get_attribute("lang") == target


@pytest.mark.parametrize(
    ("start", "target"), [("ja", "de"), ("en", "zh"), ("de", "fr"), ("fr", "en"), ("zh", "ja")]
)
def test_language_switcher_keeps_the_section(page, server, start, target):
    """From a section (/ja/estimate-loss-oom/#recommended-fixes), the switcher lands on the same section
    in the other language: the anchors are the same in every language. Also after the reader moved to
    another section by a link on the page (the hash changed)."""
    page.goto(url_of(server, start, "estimate-loss-oom/#recommended-fixes"))
    page.locator(".md-header__option .md-select").first.hover()
    page.locator(f'.md-select a[hreflang="{target}"]').first.click()
    page.wait_for_load_state("load")
    expected = url_of(server, target, "estimate-loss-oom/#recommended-fixes")
    assert page.url == expected, f"{start} -> {target}: switcher landed on {page.url}, expected {expected}"
    assert page.locator("html").get_attribute("lang") == target
    # the section moved to on the page (the table of contents), then the switcher: back to `start`
    page.evaluate("() => { location.hash = '#expandable-segments'; }")  # as a heading's link does
    page.wait_for_function("() => location.hash === '#expandable-segments'")
    page.locator(".md-header__option .md-select").first.hover()
    page.locator(f'.md-select a[hreflang="{start}"]').first.click()
    page.wait_for_load_state("load")
    assert page.url == url_of(server, start, "estimate-loss-oom/#expandable-segments"), page.url
    assert page.evaluate("() => document.getElementById('expandable-segments') !== null")


def test_no_page_causes_a_404(page, server):
    """Every page in every language, each left until the network is idle (Material fetches sitemaps after
    the page has loaded): the page fixture fails on any answer of 400 or more, and none comes."""
    pages = sorted(p.stem for p in (ROOT / "docs" / "en").iterdir() if p.suffix in (".md", ".ipynb"))
    seen = 0
    for lang in LANGS:
        for name in pages:
            path = "" if name == "index" else f"{name}/"
            response = page.goto(url_of(server, lang, path))
            assert response is not None and response.ok, f"{lang}/{path}: {response and response.status}"
            page.wait_for_load_state("networkidle")
            seen += 1
    assert seen == 5 * len(pages) and len(pages) >= 10


# The pages with the widest tables and the longest command lines (issue 32)
WIDE_PAGES = ("accuracy", "nanochat")
WIDE_CONTENT = r"""() => {
  const column = document.querySelector('article.md-content__inner').getBoundingClientRect();
  const out = [];
  const visibleScroll = el => {
    const style = getComputedStyle(el);
    const color = style.scrollbarColor.split(' rgba(0, 0, 0, 0)')[0];
    return ['auto', 'scroll'].includes(style.overflowX) && style.scrollbarColor !== 'auto'
      && !/^(transparent|rgba\(0, 0, 0, 0\))/.test(color);
  };
  for (const wrap of document.querySelectorAll('article .md-typeset__scrollwrap')) {
    if (wrap.scrollWidth > wrap.clientWidth + 1)
      out.push('table wider than the column: ' + wrap.innerText.slice(0, 60));
  }
  for (const code of document.querySelectorAll('article pre > code')) {
    const block = code.closest('.highlight');
    const wraps = block && /language-(bash|text)/.test(block.className);
    const over = code.scrollWidth > code.clientWidth + 1;
    if (over && (wraps || !visibleScroll(code)))
      out.push((wraps ? 'command line or output not wrapped: ' : 'code hidden, no visible scrollbar: ')
        + code.innerText.slice(0, 60));
    if (code.getBoundingClientRect().right > column.right + 1) out.push('code past the column');
  }
  if (document.documentElement.scrollWidth > window.innerWidth) out.push('the page scrolls sideways');
  return out;
}"""


@pytest.mark.parametrize("lang", LANGS)
def test_wide_tables_and_command_lines_fit_a_1280_pixel_window(page, server, lang):
    """At 1280 pixels (the page fixture's window), the accuracy cases table, the nanochat depth table and
    the nanochat command lines stay in the column: tables wrap, command lines and output wrap, Python
    code longer than the column keeps a visible scrollbar. Screenshots in test-artifacts/."""
    assert page.viewport_size["width"] == 1280
    for name in WIDE_PAGES:
        page.goto(url_of(server, lang, f"{name}/"))
        page.wait_for_load_state("load")
        problems = page.evaluate(WIDE_CONTENT)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{name}-{lang}-1280.png"), full_page=True)
        assert problems == [], f"{lang}/{name}/ at 1280 px: {problems}"
        # the accuracy page's last column is on screen, whole: its header's right edge in the column
        if name == "accuracy":
            right = page.evaluate(
                "() => { const th = [...document.querySelectorAll('article table th')].at(-1);"
                " const wrap = th.closest('.md-typeset__scrollwrap').getBoundingClientRect();"
                " return [th.getBoundingClientRect().right, wrap.right]; }"
            )
            assert right[0] <= right[1] + 1, f"{lang}: the cases table's last column is cut off: {right}"


@pytest.mark.parametrize(("lang", "word", "expected"), SEARCHES)
def test_search_finds_cjk_words(page, server, lang, word, expected):
    page.goto(url_of(server, lang))
    meta = page.locator(".md-search-result__meta")
    initializing = meta.inner_text()  # "Initializing search", in the page's language
    box = page.locator("input.md-search__input")
    box.click()
    # typing before the worker has indexed would be lost: wait for "Type to start searching"
    page.wait_for_function(
        "text => document.querySelector('.md-search-result__meta').innerText !== text", arg=initializing
    )
    box.fill(word)
    box.press("End")  # Material searches on keyup
    results = page.locator(".md-search-result__item a")
    try:
        results.first.wait_for(timeout=20000)
    except Exception as err:
        meta = page.locator(".md-search-result__meta").inner_text()
        raise AssertionError(f"{lang}: searching {word!r} shows no result ({meta!r})") from err
    hrefs = [results.nth(i).get_attribute("href") for i in range(results.count())]
    assert any(expected in (h or "") for h in hrefs), (
        f"{lang}: searching {word!r} gave {hrefs}, none on {expected}"
    )


def test_code_copy_button(page, server):
    page.goto(url_of(server, "en", "verify/"))
    assert page.locator("pre code").count() > 0, "verify page has no code block"
    # Material >= 9.7 puts the copy button in a nav above each block (md-clipboard before)
    button = page.locator("pre .md-code__button[data-md-type='copy'], pre button.md-clipboard").first
    button.wait_for(state="attached", timeout=10000)
    assert button.count() == 1, "no copy button on a code block"


def test_notebook_is_a_page_with_charts(page, server):
    if not (ROOT / "docs" / "en" / f"{NOTEBOOK}.ipynb").exists():
        pytest.skip(
            f"docs/en/{NOTEBOOK}.ipynb is not written yet; this check becomes a hard failure once it exists"
        )
    for lang in LANGS:
        response = page.goto(url_of(server, lang, f"{NOTEBOOK}/"))
        assert response is not None and response.ok, (
            f"{lang}: /{NOTEBOOK}/ answered {response and response.status}"
        )
        assert "html" in (response.headers.get("content-type") or ""), (
            f"{lang}: the notebook is served as a download"
        )
        assert page.locator(".md-header").count() == 1, f"{lang}: the notebook page has no Material layout"
        assert page.locator("html").get_attribute("lang") == lang
        charts = page.locator(".jupyter-wrapper img")
        assert charts.count() > 0, f"{lang}: the notebook page shows no chart"
        assert charts.first.evaluate("img => img.complete && img.naturalWidth > 0"), (
            f"{lang}: the chart does not render"
        )
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"notebook-{lang}.png"), full_page=True)


# --- the paste box: `oomguide explain` in the browser (issue 24) -----------------------------------
MESSAGES = sorted((ROOT / "tests" / "golden" / "messages").glob("*.txt"))
UNREADABLE = "RuntimeError: something else went wrong\n"


def _require_pyodide(site: Path):
    if (site / "assets" / "pyodide" / "pyodide.asm.wasm").is_file():
        return
    reason = "the site was built without Pyodide (run `npm ci` first: package.json)"
    if os.environ.get("OOMGUIDE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"paste-box tests required (OOMGUIDE_REQUIRE_BROWSER=1) but {reason}")
    pytest.skip(reason)


def cli_answer(text: str, lang: str, base: str) -> str:
    """What `oomguide explain - --lang LANG` prints for `text` on stdin, with the site's links from `base`
    (OOMGUIDE_SITE_URL): its answer, or its one error line."""
    from oomguide import cli

    argv = ["explain", "-", "--lang", lang]
    stdin, before = sys.stdin, os.environ.get("OOMGUIDE_SITE_URL")
    sys.stdin, os.environ["OOMGUIDE_SITE_URL"] = io.StringIO(text), base
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()) as out,
            contextlib.redirect_stderr(io.StringIO()) as err,
        ):
            rc = cli._main(argv)
    finally:
        sys.stdin = stdin
        if before is None:
            del os.environ["OOMGUIDE_SITE_URL"]
        else:
            os.environ["OOMGUIDE_SITE_URL"] = before
    return out.getvalue().rstrip("\n") if rc == 0 else err.getvalue().strip()


def paste_and_explain(page, text: str, timeout: float = 120_000) -> tuple[str, int]:
    """Paste `text` into the page's box, press its button, and return (what the box shows, milliseconds)."""
    box = page.locator(".oomguide-paste")
    done = int(box.get_attribute("data-answers") or 0)
    box.locator("textarea").fill(text)
    box.locator(".oomguide-paste__button").click()
    page.wait_for_function(
        "n => Number(document.querySelector('.oomguide-paste').dataset.answers || 0) > n",
        arg=done,
        timeout=timeout,
    )
    answer = box.locator(".oomguide-paste__answer")
    shown = (
        answer.inner_text() if answer.is_visible() else box.locator(".oomguide-paste__status").inner_text()
    )
    return shown.rstrip("\n"), int(box.get_attribute("data-last-ms"))


def _record_timing(name: str, ms: int) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "paste-timings.json"
    timings = json.loads(path.read_text()) if path.exists() else {}
    timings[name] = ms
    path.write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("lang", LANGS)
def test_paste_page_explains_every_message_as_the_cli_does(page, server, site, lang):
    """Every golden message (every format PyTorch prints, tracebacks, input cut short) pasted into the
    paste page of each language: the box shows the CLI's text, its links relative, to this language's
    pages; input it cannot read gets the CLI's error line. Pyodide loads once, on the first press."""
    _require_pyodide(site)
    page.goto(url_of(server, lang, "paste/"))
    box = page.locator(".oomguide-paste")
    base = box.get_attribute("data-base")
    assert base == (".." if lang == "en" else "../.."), base
    assert not [u for u in page.requests if "/assets/pyodide/" in u or "explain.zip" in u], (
        f"{lang}: Pyodide was fetched before the button was pressed"
    )
    box.locator("textarea").fill(MESSAGES[0].read_text(encoding="utf-8"))
    box.locator(".oomguide-paste__button").click()
    progress = box.locator(".oomguide-paste__status").inner_text()
    assert progress == box.get_attribute("data-loading"), f"{lang}: no progress line while Pyodide loads"
    page.wait_for_function("() => document.querySelector('.oomguide-paste').dataset.answers", timeout=180_000)
    _record_timing(
        f"{lang} first answer (Pyodide loaded on the press, empty cache)",
        int(box.get_attribute("data-last-ms")),
    )
    for i, message in enumerate(MESSAGES):
        text = message.read_text(encoding="utf-8")
        shown, ms = paste_and_explain(page, text)
        if i == 0:
            _record_timing(f"{lang} next answer (same page)", ms)
        assert shown == cli_answer(text, lang, base), f"{lang}: {message.name}: the box and the CLI differ"
    links = box.locator(".oomguide-paste__answer a")
    assert links.count() > 0, f"{lang}: the last answer has no link"
    prefix = url_of(server, lang)
    for i in range(links.count()):
        href = links.nth(i).get_attribute("href")
        assert href.startswith(base + "/"), f"{lang}: {href} is not relative to the site's root"
        absolute = links.nth(i).evaluate("a => a.href")
        assert absolute.startswith(prefix) and "#" in absolute, f"{lang}: {absolute} leaves {prefix}"
    shown, _ = paste_and_explain(page, UNREADABLE)  # the CLI's line, naming the pasted text, not stdin
    from oomguide.explain import browser

    expected = json.loads(browser.answer(UNREADABLE, lang, base))["error"]
    assert shown == expected and "\n" not in shown and "stdin" not in shown, f"{lang}: {shown!r}"
    assert not box.locator(".oomguide-paste__answer").is_visible()
    assert page.errors == [], f"{lang}: JavaScript errors on the paste page: {page.errors}"


@pytest.mark.parametrize("lang", LANGS)
def test_home_page_box_explains(page, server, site, lang):
    """The home page's box in each language: the CLI's answer for the same message, in the page's
    language, with links to that language's sections that land on them."""
    from oomguide.explain import TEXT
    from oomguide.i18n import gettext_for

    _require_pyodide(site)
    page.goto(url_of(server, lang))
    base = page.locator(".oomguide-paste").get_attribute("data-base")
    assert base == ("." if lang == "en" else "..")
    text = next(m for m in MESSAGES if m.name == "fragmentation.txt").read_text(encoding="utf-8")
    shown, _ = paste_and_explain(page, text)
    assert shown == cli_answer(text, lang, base)
    for key in ("h_diagnosis", "h_links"):  # the answer's headings, in the page's language
        heading = gettext_for(lang)(TEXT[key])
        assert heading in shown.splitlines(), f"{lang}: no {heading!r} in the box's answer"
        assert lang == "en" or heading != TEXT[key], f"{lang}: {key} is not translated"
    assert "docs/" not in shown and "127.0.0.1" not in shown, f"{lang}: the links leave the site"
    href = page.locator(".oomguide-paste__answer a").first.evaluate("a => a.href")
    assert href.startswith(url_of(server, lang)), href
    response = page.goto(href)
    assert response is not None and response.ok
    anchor = href.split("#", 1)[1]
    assert page.locator(f"[id='{anchor}']").count() == 1, f"{lang}: {href} lands on no section"


@pytest.mark.parametrize("lang", LANGS)
def test_box_opened_as_a_file_says_why_it_cannot_run(page, site, lang):
    """Opened as a file (file://), chromium refuses to fetch Pyodide's WebAssembly: the box says so
    at once, in the page's language, with the way out (serve the site), and fetches nothing."""
    from oomguide import paste
    from oomguide.i18n import gettext_for

    _require_pyodide(site)
    home = site / ("" if lang == "en" else lang) / "index.html"
    page.goto(home.as_uri())
    status = page.locator(".oomguide-paste__status")
    words = gettext_for(lang, "site")(paste.WORDS["file"])
    assert lang == "en" or words != paste.WORDS["file"], f"{lang}: the file:// line is not translated"
    status.filter(has_text="file://").wait_for(timeout=10_000)
    assert status.inner_text() == words.replace("`", ""), f"{lang}: {status.inner_text()!r}"
    assert status.locator("code").all_inner_texts() == ["python -m http.server", "mkdocs serve"]
    assert page.locator(".oomguide-paste__button").is_disabled()
    assert not [u for u in page.requests if "/assets/pyodide/" in u or "explain.zip" in u]
    assert page.errors == [], f"{lang}: JavaScript errors on the file:// page: {page.errors}"


@pytest.mark.parametrize("lang", LANGS)
def test_box_on_a_server_with_the_wrong_wasm_type_says_what_to_change(
    page, wrong_wasm_type_server, site, lang
):
    """Served as application/octet-stream, the WebAssembly would never compile and Pyodide's start would
    never end: the box asks the server first and says, in the page's language, what it must send."""
    from oomguide import paste
    from oomguide.i18n import gettext_for

    _require_pyodide(site)
    page.goto(url_of(wrong_wasm_type_server, lang, "paste/"))
    shown, _ = paste_and_explain(page, MESSAGES[0].read_text(encoding="utf-8"), timeout=30_000)
    words = gettext_for(lang, "site")(paste.WORDS["wasm_type"]).format(type="application/octet-stream")
    assert shown == words.replace("`", ""), f"{lang}: {shown!r}"
    assert lang == "en" or words != paste.WORDS["wasm_type"].format(type="application/octet-stream")
    assert not page.locator(".oomguide-paste__answer").is_visible()
    assert not [u for u in page.requests if u.endswith("/pyodide.js")], "Pyodide was loaded all the same"
