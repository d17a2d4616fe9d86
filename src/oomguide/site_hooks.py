"""MkDocs hooks of the site (``hooks:`` in mkdocs.yml).

Jobs:

* **Where each snippet goes.** Before every fence that includes a snippet
  (``--8<-- "snippets/<page>/<file>"``), the hook puts the snippet's "where this goes" line,
  in the page's language, from ``snippets/placement.toml`` (see :mod:`oomguide.placement`),
  the same data the examples use to apply the snippet to nanoGPT.
* **Figures.** Every page's Markdown goes through :func:`oomguide.figures.render`, so a
  ``{{ key }}`` placeholder becomes the figure the examples computed, formatted for the
  page's language. A missing figure fails the build with the file and the key.
* **The paste box.** A page's ``<!-- oomguide:paste-box -->`` becomes the box in which
  ``oomguide explain`` runs in the browser; the build puts Pyodide and the torch-free package into
  the site (:mod:`oomguide.paste`).
* **Notebook headings.** A heading in a notebook's Markdown cell takes an explicit English
  anchor like a page's, ``## 内訳 { #the-breakdown }``; nbconvert would give a Japanese or
  Chinese heading an empty id and mkdocs-jupyter's table of contents ``#_1``, so the hook sets
  the ids and the table of contents from those anchors (see ``on_page_content``).
* **Notebooks as pages.** mkdocs-static-i18n rebuilds every File of the docs folder as a
  plain ``File`` (priority -100), which turns mkdocs-jupyter's notebook pages back into
  static downloads (mkdocs-static-i18n issue #198). After it (priority -150), the notebook
  files, and their alternates for the language switcher, become documentation pages again
  at ``/<lang>/<stem>/`` (``/<stem>/`` for English).
* **Notebooks executed in one kernel.** The languages' notebooks compute the same predictions;
  the hook runs every language's code in one kernel, started in the background as the build
  begins, each prediction computed once, and gives mkdocs-jupyter (``execute: false``) copies
  with the outputs filled in; ``mkdocs serve`` takes current outputs from a record instead
  (:mod:`oomguide.notebooks`: its own, or the repository's in ``examples/notebook-outputs/``).

The language and stem of a page come from its source path: with ``docs_structure:
folder`` every page's ``file.src_uri`` is ``<lang>/<stem>.md`` (``en/index.md``,
``ja/verify.md``); a page that falls back to English keeps ``en/...``, so its figures are
formatted the English way, like its text.
"""

from __future__ import annotations

import atexit
import fnmatch
import html as htmllib
import json
import os
import posixpath
import re
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import jinja2
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from oomguide import figures, notebooks, paste, placement

DEFAULT_LANG = "en"


def page_lang_and_stem(src_uri: str) -> tuple[str, str]:
    """(language, stem) of a page from its source path relative to docs/."""
    path = PurePosixPath(src_uri)
    lang = path.parts[0] if len(path.parts) > 1 and path.parts[0] in figures.LANGS else DEFAULT_LANG
    return lang, path.stem


def on_page_markdown(markdown: str, page, config, files) -> str:
    if isinstance(page.file, NotebookPage):
        return markdown  # a notebook computes its numbers itself, executed at every build
    lang, stem = page_lang_and_stem(page.file.src_uri)
    root = Path(config.config_file_path).parent
    markdown = paste.add_box(markdown, lang, page.url, paste.has_pyodide(root))
    try:
        markdown = add_placements(markdown, lang)
        return figures.render(markdown, stem, lang)
    except (figures.FigureError, placement.PlacementError) as err:
        raise PluginError(f"docs/{page.file.src_uri}: {err}") from err


_INCLUDE = re.compile(
    r"""^(?P<indent>[ \t]*)--8<--[ \t]+["']snippets/(?P<path>[^"':]+)(?::[^"']*)?["'][ \t]*$"""
)
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(```|~~~)")


def add_placements(markdown: str, lang: str) -> str:
    """Put each included snippet's "where this goes" line just above its fence."""
    lines = markdown.split("\n")
    if not any(_INCLUDE.match(line) for line in lines):
        return markdown
    places = placement.load()
    out: list[str] = []
    for line in lines:
        found = _INCLUDE.match(line)
        if found and out and _FENCE.match(out[-1]):
            rel = found["path"]
            if rel not in places:
                raise placement.PlacementError(f"snippets/{rel} has no placement in snippets/placement.toml")
            indent = _FENCE.match(out[-1])["indent"]
            text = placement.describe(places[rel], lang, places)
            out[-1:-1] = [f"{indent}{text}", f"{indent}{{: .oomguide-where }}", ""]
        out.append(line)
    return "\n".join(out)


# --- notebooks -------------------------------------------------------------------------


class NotebookPage(File):
    """A notebook under docs/<lang>/ that is rendered as a page, not copied as a file."""

    def is_documentation_page(self) -> bool:
        return True

    def is_static_page(self) -> bool:
        return False

    def is_media_file(self) -> bool:
        return False


def _notebook_patterns(config) -> list[str]:
    plugin = config.plugins.get("mkdocs-jupyter")
    return list(plugin.config["include"]) if plugin else []


def _is_notebook(file: File, patterns: list[str]) -> bool:
    if isinstance(file, NotebookPage):
        return True
    name = posixpath.basename(file.src_uri)
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns) and name.endswith(".ipynb")


def _page_dest(lang_dir: str, stem: str, use_directory_urls: bool) -> str:
    if use_directory_urls:
        return posixpath.join(lang_dir, stem, "index.html")
    return posixpath.join(lang_dir, stem + ".html")


def _as_page(file: File, config, dest: str) -> NotebookPage:
    """The same source file, rendered as a page at `dest`; keeps what i18n recorded on it."""
    page = NotebookPage(
        file.src_uri,
        file.src_dir,
        config.site_dir,
        config.use_directory_urls,
        dest_uri=dest,
        inclusion=file.inclusion,
    )
    for key, value in vars(file).items():  # locale, localization, norm_src_uri, ...
        if key not in ("dest_uri", "url", "abs_dest_path", "src_uri", "src_dir", "dest_dir", "name"):
            page.__dict__.setdefault(key, value)
    return page


_HEADING = re.compile(r"<h(?P<level>[1-6])(?P<attrs>[^>]*)>(?P<body>.*?)</h(?P=level)>", re.S)
_ANCHOR_LINK = re.compile(r'<a class="anchor-link"[^>]*>.*?</a>', re.S)
_EXPLICIT = re.compile(r"\s*\{\s*#(?P<id>[A-Za-z0-9_-]+)\s*\}\s*$")
_ID = re.compile(r'\sid="(?P<id>[^"]*)"')


def _flatten(toc) -> list:
    out = []
    for item in toc:
        out.append(item)
        out.extend(_flatten(item.children))
    return out


_HEADERLINK = re.compile(r'<a class="headerlink"[^>]*>.*?</a>', re.S)


def _text(fragment: str) -> str:
    """A heading's text: tags dropped, runs of ordinary white space made one space, no-break spaces
    (U+00A0, U+202F) kept where the page put them."""
    return re.sub(r"[ \t\r\n]+", " ", htmllib.unescape(re.sub(r"<[^>]+>", "", fragment))).strip()


def _toc_as_headings(html: str, page) -> None:
    """Title every entry of the page's table of contents with its heading's own text.

    Python-Markdown's toc joins a title's words with ordinary spaces (``str.split``), so French's
    no-break spaces ("Option 1 : …", "Que faire ?", "12 Go") became breakable ones in the sidebar
    and the table of contents while the heading kept them."""
    titles = {}
    for m in _HEADING.finditer(html):
        found = _ID.search(m["attrs"])
        if found:
            titles[found["id"]] = _text(_HEADERLINK.sub("", m["body"]))
    for item in _flatten(page.toc):
        if titles.get(item.id):
            item.title = titles[item.id]


def on_page_content(html: str, page, config, files) -> str:
    """The table of contents titled as the headings are (no-break spaces kept); notebook pages:
    heading ids from their { #anchor }, unique and non-empty, and a table of contents that points
    at them."""
    if not isinstance(page.file, NotebookPage):
        _toc_as_headings(html, page)
        return html
    seen: set[str] = set()
    headings: list[tuple[str, str]] = []  # (id, title) in document order

    def fix(match: re.Match) -> str:
        attrs, body = match["attrs"], match["body"]
        found = _ID.search(attrs)
        old = found["id"] if found else ""
        link = _ANCHOR_LINK.search(body)
        text_part = body[: link.start()] if link else body
        explicit = _EXPLICIT.search(text_part)
        if explicit:
            text_part = text_part[: explicit.start()]
            new = explicit["id"]
        else:
            new = old if old and old not in seen else f"section-{len(headings) + 1}"
        while new in seen:
            new += "-1"
        seen.add(new)
        headings.append((new, _text(text_part)))
        attrs = _ID.sub(f' id="{new}"', attrs) if found else f'{attrs} id="{new}"'
        anchor = f'<a class="anchor-link" href="#{new}">¶</a>' if link else ""
        return f"<h{match['level']}{attrs}>{text_part}{anchor}</h{match['level']}>"

    html = _HEADING.sub(fix, html)
    items = _flatten(page.toc)
    if len(items) == len(headings):
        pairs = zip(items, headings, strict=True)
    else:  # match by title when a heading is missing from the table of contents
        by_title = {title: (hid, title) for hid, title in headings}
        pairs = [
            (item, by_title[_text(_EXPLICIT.sub("", item.title))])
            for item in items
            if _text(_EXPLICIT.sub("", item.title)) in by_title
        ]
    for item, (hid, title) in pairs:
        item.id, item.title = hid, title
    if page.title:
        page.title = _EXPLICIT.sub("", str(page.title))
    return html


@event_priority(-150)  # after mkdocs-static-i18n (-100), which made the notebooks plain files
def on_files(files: Files, config) -> Files:
    patterns = _notebook_patterns(config)
    i18n = config.plugins.get("i18n")
    notebooks = [f for f in files if _is_notebook(f, patterns)] if patterns else []
    if not notebooks:
        return files
    current = getattr(i18n, "current_language", None) or DEFAULT_LANG
    default = getattr(i18n, "default_language", None) or DEFAULT_LANG
    languages = list(getattr(i18n, "build_languages", None) or [current])

    def lang_dir(lang: str) -> str:
        return "" if lang == default else lang

    for file in notebooks:
        norm = getattr(file, "norm_src_uri", file.src_uri)  # "where-the-memory-goes.ipynb"
        stem = posixpath.splitext(posixpath.basename(norm))[0]
        sub = posixpath.dirname(norm)
        page = _as_page(
            file, config, _page_dest(posixpath.join(lang_dir(current), sub), stem, config.use_directory_urls)
        )
        # the language switcher links to page.file.alternates[lang].url: one page per language,
        # the language's own notebook where it exists, else the default language's one
        alternates = {}
        for lang in languages:
            if lang == current:
                alternates[lang] = page
                continue
            src = posixpath.join(lang, norm)
            if not os.path.exists(os.path.join(config.docs_dir, src)):
                src = posixpath.join(default, norm)
            alt = File(src, config.docs_dir, config.site_dir, config.use_directory_urls)
            alternates[lang] = _as_page(
                alt, config, _page_dest(posixpath.join(lang_dir(lang), sub), stem, config.use_directory_urls)
            )
        page.alternates = alternates
        files.remove(file)
        files.append(page)

    # the sitemap's per-language list of pages was taken before the notebooks were pages
    if i18n is not None and hasattr(i18n, "i18n_files_per_language"):
        i18n.i18n_files_per_language[current] = files.documentation_pages()
    return files


# --- notebook cache -----------------------------------------------------------------------


@event_priority(100)  # before mkdocs-jupyter's own on_post_build
def on_post_build(config) -> None:
    """Keep mkdocs-jupyter's cache across languages.

    mkdocs-jupyter deletes the cache files that the build did not use. Under static-i18n each
    language is a build of its own, so each would delete the other languages' notebooks and
    `mkdocs serve` would execute all five on every change. With the cache off (the tests and
    .ci/run), there is nothing to keep.

    Also puts the paste box's Python and Pyodide into the site (:func:`oomguide.paste.write_assets`).
    """
    paste.write_assets(Path(config.config_file_path).parent, Path(config.site_dir))
    plugin = config.plugins.get("mkdocs-jupyter")
    if plugin is None or not plugin.config.get("cache"):
        return
    used = getattr(plugin, "_used_cache_paths", None)
    cache_dir = Path(plugin.config["cache_dir"])
    if used is not None and cache_dir.is_dir():
        used.update(cache_dir.glob("*.json"))


# --- notebooks executed once per build -------------------------------------------------------
# mkdocs-jupyter would start a kernel per language (execute: true), and each would compute the same
# full-scale predictions. Instead, mkdocs.yml says `execute: false`, and as the build begins this
# hook starts ONE kernel in the background (oomguide.notebooks.execute) that runs every language's
# code cells in turn, English first, as the build goes. A notebook page then gets a copy of its own
# notebook with its own outputs filled in, and mkdocs-jupyter renders that. With mkdocs-jupyter's
# cache on (`mkdocs serve`), outputs come from a record when one is current: the one `mkdocs serve`
# made before (.cache/oomguide-notebooks/), else the repository's (examples/notebook-outputs/), so
# that the first serve of a fresh clone executes nothing; a record is current while the code, the
# library versions and every module of oomguide it used are unchanged, and, where it computed with nanochat,
# while OOMGUIDE_NANOCHAT names a checkout with the same code (oomguide.notebooks.load).
# With the cache off (the tests and .ci/run) every build executes.

_EXECUTIONS: dict[str, Future] = {}  # key -> the outputs of each code cell of one notebook
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oomguide-notebooks")
_TEMP: list[str] = []


def _cache_on(config) -> bool:
    plugin = config.plugins.get("mkdocs-jupyter")
    return bool(plugin and plugin.config.get("cache"))


def _work_dir(config) -> Path:
    """Where the executed copies (and, with the cache on, the records) live; never under docs/."""
    if _cache_on(config):
        return Path(config.config_file_path).parent / ".cache" / "oomguide-notebooks"
    if not _TEMP:
        _TEMP.append(tempfile.mkdtemp(prefix="oomguide-notebooks-"))
        atexit.register(shutil.rmtree, _TEMP[0], True)
    return Path(_TEMP[0])


def _notebook_sources(config) -> list[Path]:
    """The notebooks under docs/, the default language's first, then in the order the build goes."""
    patterns = _notebook_patterns(config)
    docs = Path(config.docs_dir)
    i18n = config.plugins.get("i18n")
    order = [getattr(i18n, "default_language", None) or DEFAULT_LANG]
    order += [lang for lang in getattr(i18n, "build_languages", None) or [] if lang not in order]
    found = [
        p
        for p in sorted(docs.rglob("*.ipynb"))
        if ".ipynb_checkpoints" not in p.parts and any(fnmatch.fnmatch(p.name, pat) for pat in patterns)
    ]

    def rank(path: Path):
        lang = path.relative_to(docs).parts[0]
        return (order.index(lang) if lang in order else len(order), path.as_posix())

    return sorted(found, key=rank)


def _start(config, paths: list[Path]) -> None:
    """Start (once) the execution of the notebooks at `paths` whose outputs are not known yet."""
    groups: dict[str, list[dict]] = {}
    records = Path(config.config_file_path).parent / notebooks.RECORDS.relative_to(notebooks.ROOT)
    for path in paths:
        code, kernel = notebooks.code_and_kernel(json.loads(path.read_text(encoding="utf-8")))
        key = notebooks.key(code, kernel)
        if key in _EXECUTIONS:
            continue
        future: Future = Future()
        _EXECUTIONS[key] = future
        store = _work_dir(config) / "outputs" / f"{key}.json" if _cache_on(config) else None
        if store is not None:
            known = notebooks.load(store)
            if known is None:
                known = notebooks.load(records / f"{key}.json")
            if known is not None:
                future.set_result(known)
                continue
        job = {"code": code, "cwd": str(path.parent), "store": store, "future": future}
        groups.setdefault(kernel, []).append(job)
    for kernel, jobs in groups.items():
        _POOL.submit(notebooks.execute, jobs, kernel, 600)


@event_priority(100)
def on_pre_build(config) -> None:
    """Start executing the notebooks' code while the rest of the site builds."""
    plugin = config.plugins.get("mkdocs-jupyter")
    if plugin is not None and plugin.config.get("execute"):
        raise PluginError("mkdocs.yml: mkdocs-jupyter's execute must be false (site_hooks.py executes)")
    _start(config, _notebook_sources(config))


@event_priority(50)  # before mkdocs-jupyter (0) renders the page from page.file.abs_src_path
def on_pre_page(page, config, files):
    """Point a notebook page at a copy of its notebook with the outputs of its code filled in."""
    if not isinstance(page.file, NotebookPage):
        return page
    source = getattr(page.file, "notebook_source", None) or page.file.abs_src_path
    page.file.notebook_source = source
    notebook = json.loads(Path(source).read_text(encoding="utf-8"))
    code, kernel = notebooks.code_and_kernel(notebook)
    key = notebooks.key(code, kernel)
    if key not in _EXECUTIONS:  # a notebook outside docs/, or changed since the build began
        _start(config, [Path(source)])
    try:
        outputs = _EXECUTIONS[key].result()
    except Exception as exc:  # a cell failed: the build fails, naming the notebook
        raise PluginError(f"{source}: executing the notebook failed:\n{exc}") from exc
    count = 0
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = outputs[count]
            count += 1
            cell["execution_count"] = count
    lang, stem = page_lang_and_stem(page.file.src_uri)
    executed = _work_dir(config) / "pages" / lang / f"{stem}.ipynb"
    executed.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(notebook, ensure_ascii=False, indent=1)
    if not executed.exists() or executed.read_text(encoding="utf-8") != text:
        executed.write_text(text, encoding="utf-8")
    page.file.abs_src_path = str(executed)
    return page


# --- the theme's templates, compiled once for all languages ------------------------------------
class _TemplateCache(jinja2.BytecodeCache):
    """In memory: each language's build makes a new Jinja environment, which would compile every
    template of the theme again; the bucket's checksum still catches a changed template."""

    def __init__(self):
        self.store: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.store:
            bucket.bytecode_from_string(self.store[bucket.key])

    def dump_bytecode(self, bucket):
        self.store[bucket.key] = bucket.bytecode_to_string()


_TEMPLATES = _TemplateCache()


def on_env(env, config, files):
    env.bytecode_cache = _TEMPLATES
    return env
