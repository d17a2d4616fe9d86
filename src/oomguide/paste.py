"""The site's paste box: ``oomguide explain`` in the reader's browser, offline (issue 24).

What it does, for the site's hooks (``site_hooks.py``):

* **The box.** A page holds the line ``<!-- oomguide:paste-box -->``; :func:`box_html` replaces it
  with a text area, a button, a status line and the answer's place, worded in the page's language
  (the ``site`` catalogs), and the way from the page to the site's root (``data-base``), which the
  answer's links start with. ``docs/assets/paste.js`` does the rest in the browser; on a page opened
  as a file (``file://``), where the browser will not fetch Pyodide's WebAssembly, it only shows why
  the box cannot run and how to serve the site (``WORDS["file"]``).
* **What the browser runs.** :func:`bundle` packs the torch-free part of this package that
  ``oomguide explain`` uses for a message without a config (``BUNDLE``) into one zip, with the
  ``explain`` catalogs compiled to ``.mo`` from the same ``.po`` files the CLI reads
  (``i18n.compile_catalog``): Pyodide's Python has the standard library's ``gettext`` but no Babel.
  Numbers are formatted from CLDR by Babel (``figures.py``), so the zip also carries Babel's Python
  modules and the CLDR data of the five languages (``BABEL_MODULES``, ``BABEL_DATA``).
  The browser calls :func:`oomguide.explain.browser.answer`, the CLI's own ``explain`` and ``render``.
* **Pyodide.** From the npm registry's ``pyodide`` package (``package.json``, ``package-lock.json``;
  ``npm ci`` puts it in ``node_modules/pyodide``, which git ignores): :func:`write_assets` copies the
  files Pyodide needs to start its interpreter and standard library (``PYODIDE_FILES``) into
  ``site/assets/pyodide/``. Without them the build still passes and the box says how to get them.

Nothing is fetched until the reader presses the button; nothing is fetched from outside the site.
It must never explain anything itself (that is ``oomguide.explain``).
"""

from __future__ import annotations

import html
import io
import json
import re
import shutil
import zipfile
from pathlib import Path

from . import i18n
from .i18n import N_, gettext_for

PACKAGE = Path(__file__).resolve().parent
MARKER = "<!-- oomguide:paste-box -->"
PYODIDE_FILES = ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
PYODIDE_DIR = "assets/pyodide"  # under the built site
BUNDLE_PATH = "assets/oomguide/explain.zip"
# the modules `oomguide explain` imports for a message without a config (tests/test_explain.py checks
# that they import neither torch nor numpy; tests/test_browser.py runs them in chromium)
BUNDLE = (
    "__init__.py",
    "units.py",
    "figures.py",
    "i18n.py",
    "messages.py",  # the CLI's error line in the reader's language (check_render.error_line)
    "check_render.py",
    "explain/*.py",
)
DOMAINS = ("explain", "check")  # the catalogs those modules read
# Babel, which figures.py formats numbers with (CLDR): Pyodide's Python has none, so the bundle
# carries its pure-Python modules (unpickling its locale data needs babel.dates and babel.localtime
# too) and the CLDR data of the site's five languages, from the Babel installed here.
BABEL_MODULES = ("*.py", "localtime/*.py")
BABEL_DATA = ("global.dat", "locale-data/root.dat", *(f"locale-data/{lang}.dat" for lang in i18n.LANGS))

PLACEHOLDER = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate …"  # PyTorch's words
WORDS = {
    "label": N_("Your CUDA out-of-memory message, or the whole traceback"),
    "button": N_("Explain"),
    "loading": N_("Loading Python into this page (Pyodide, once per visit) …"),
    "reading": N_("Reading the message …"),
    "missing": N_(
        "This build of the site has no Pyodide, so the box cannot answer: run `npm ci` in the "
        "repository, then build or serve the site again. `oomguide explain` gives the same answer."
    ),
    "failed": N_("Pyodide could not start in this browser: {error}"),
    "wasm_type": N_(
        "The server sends Pyodide's WebAssembly (assets/pyodide/pyodide.asm.wasm) as {type}, and "
        "browsers run WebAssembly only when it comes as application/wasm: have the server send .wasm "
        "files with that type (`python -m http.server`, `mkdocs serve` and GitHub Pages do)."
    ),
    "file": N_(
        "Opened as a file (file://), this page cannot run the box: the browser refuses to load the "
        "WebAssembly that Python runs on from files. Serve the site instead: run "
        "`python -m http.server` in the folder that holds it (site/), then open "
        "http://localhost:8000/ (or run `mkdocs serve` in the repository)."
    ),
}


def pyodide_source(root: Path) -> Path:
    """Where ``npm ci`` (package.json) puts Pyodide in a checkout."""
    return root / "node_modules" / "pyodide"


def has_pyodide(root: Path) -> bool:
    source = pyodide_source(root)
    return all((source / name).is_file() for name in PYODIDE_FILES)


def base_of(page_url: str) -> str:
    """The way from a page (its URL, ``ja/paste/``) to the site's root: ``../..``; ``.`` at the root."""
    depth = len([part for part in page_url.split("/") if part])
    return "/".join([".."] * depth) or "."


def box_html(lang: str, page_url: str, pyodide: bool) -> str:
    """The box, in `lang`, for the page at `page_url`."""
    t = gettext_for(lang, "site")

    def attr(key: str) -> str:
        return html.escape(t(WORDS[key]), quote=True)

    base = base_of(page_url)
    status = "" if pyodide else re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(t(WORDS["missing"])))
    disabled = "" if pyodide else " disabled"
    return (
        f'<div class="oomguide-paste" data-lang="{lang}" data-base="{base}" '
        f'data-pyodide="{"yes" if pyodide else "missing"}" data-loading="{attr("loading")}" '
        f'data-reading="{attr("reading")}" data-failed="{attr("failed")}" data-file="{attr("file")}" '
        f'data-wasm-type="{attr("wasm_type")}">\n'
        f'<label class="oomguide-paste__label">{html.escape(t(WORDS["label"]))}\n'
        f'<textarea class="oomguide-paste__input" rows="8" spellcheck="false" '
        f'placeholder="{html.escape(PLACEHOLDER, quote=True)}"></textarea></label>\n'
        f'<button type="button" class="md-button md-button--primary oomguide-paste__button"{disabled}>'
        f"{html.escape(t(WORDS['button']))}</button>\n"
        f'<p class="oomguide-paste__status" role="status">{status}</p>\n'
        f'<pre class="oomguide-paste__answer" hidden><code></code></pre>\n'
        f"</div>\n"
        f'<script src="{base}/assets/paste.js" defer></script>'
    )


def add_box(markdown: str, lang: str, page_url: str, pyodide: bool) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, box_html(lang, page_url, pyodide))


def bundle() -> bytes:
    """The zip the browser unpacks: ``oomguide/...`` (the modules of ``BUNDLE``) and the compiled catalogs."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for pattern in BUNDLE:
            for path in sorted(PACKAGE.glob(pattern)):
                _add(z, f"oomguide/{path.relative_to(PACKAGE).as_posix()}", path.read_bytes())
        for name, data in guide_headings():
            _add(z, f"oomguide/{name}", data)
        for lang in i18n.LANGS:
            if lang == i18n.SOURCE_LANG:
                continue
            for domain in DOMAINS:
                po = i18n.po_path(lang, domain)
                mo = po.with_suffix(".mo").relative_to(PACKAGE).as_posix()
                _add(z, f"oomguide/{mo}", i18n.compile_catalog(po, lang, domain))
        import babel

        source = Path(babel.__file__).resolve().parent
        for name in sorted({p for pattern in BABEL_MODULES for p in source.glob(pattern)}) + [
            source / data for data in BABEL_DATA
        ]:
            _add(z, f"babel/{name.relative_to(source).as_posix()}", name.read_bytes())
    return buffer.getvalue()


def guide_headings() -> list[tuple[str, bytes]]:
    """The pages explain names, as the bundle carries them: their headings only (the titles "Read next"
    prints, ``explain.links.section_title``), each on its own line, every other line left empty."""
    from .explain import links

    out = []
    for lang in i18n.LANGS:
        for page in links.GUIDE_SECTIONS:
            path = links.page_file(page, lang)
            name = f"guide/{lang}/{path.name}"
            if path.suffix == ".ipynb":
                cells = [
                    {"cell_type": "markdown", "source": [line]}
                    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
                    if cell.get("cell_type") == "markdown"
                    for line in "".join(cell["source"]).splitlines()
                    if line.startswith("#")
                ]
                out.append((name, json.dumps({"cells": cells}, ensure_ascii=False).encode("utf-8")))
            else:
                lines = path.read_text(encoding="utf-8").splitlines()
                kept = "\n".join(line if line.startswith("#") else "" for line in lines) + "\n"
                out.append((name, kept.encode("utf-8")))
    return out


def _add(z: zipfile.ZipFile, name: str, data: bytes) -> None:
    """One file, with a fixed date: the same sources give the same zip."""
    z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)


def _copy(source: Path, target: Path) -> None:
    """Copy unless the same file is there already (each language's build calls the hook)."""
    if target.exists():
        a, b = source.stat(), target.stat()
        if a.st_size == b.st_size and int(a.st_mtime) == int(b.st_mtime):
            return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def write_assets(root: Path, site_dir: Path) -> None:
    """Pyodide (if ``npm ci`` installed it) and the bundle, into the built site."""
    if has_pyodide(root):
        for name in PYODIDE_FILES:
            _copy(pyodide_source(root) / name, site_dir / PYODIDE_DIR / name)
    target = site_dir / BUNDLE_PATH
    data = bundle()
    if not (target.exists() and target.read_bytes() == data):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
