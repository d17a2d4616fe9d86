"""The site's contract.

Every check is a function that takes the repository root (or the built site) and returns a
list of problems, each naming the file and the language; the tests assert that the list is
empty. The negative tests at the end run the same functions on small broken trees.
"""

from __future__ import annotations

import html
import json
import os
import posixpath
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from oomguide import figures

ROOT = Path(__file__).resolve().parents[1]
LANGS = ("en", "ja", "zh", "de", "fr")
DEFAULT = "en"
PAGE_SUFFIXES = (".md", ".ipynb")
LOCAL_HOSTS = ("127.0.0.1", "localhost")

# The nav titles every language must translate (mkdocs.yml lists the order).
NAV_TITLES = (
    "Home",
    "OOM at the first estimate_loss()",
    "Evaluation OOM on a 12 GB card",
    "Beyond the usual fixes",
    "Where the memory goes",
    "Verify on your hardware",
)

# A word of each CJK language that the pages use and the search must find.
JA_WORD, JA_PAGE = "検証", "ja/verify/"
ZH_WORD, ZH_PAGE = "显存", "zh/verify/"

OUTPUT_MARK = "<!-- output -->"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
INCLUDE = re.compile(r"""^[ \t]*--8<--[ \t]+(?P<q>["'])(?P<path>[^"']+)(?P=q)[ \t]*$""")
HEADING = re.compile(r"^[ \t]*(?P<level>#{1,6})[ \t]+(?P<title>.*?)[ \t]*$")
ANCHOR = re.compile(r"\{[ \t]*#(?P<id>[^\s}]+)[^}]*\}[ \t]*$")
ANCHOR_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
ADMONITION = re.compile(r"^[ \t]*(?:!!!|\?\?\?\+?)[ \t]*(?P<kind>[\w-]+)")
COMMENT = re.compile(r"<!--.*?-->", re.S)
MEMORY_LITERAL = re.compile(r"\d[\d.,\u202f\u00a0]*\s?(?:KiB|MiB|GiB|TiB|Kio|Mio|Gio|Tio)\b")


# --- reading the docs tree ---------------------------------------------------------------


def rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def lang_pages(root: Path) -> dict[str, dict[str, Path]]:
    """{lang: {page name relative to docs/<lang>/: path}}"""
    out: dict[str, dict[str, Path]] = {}
    for lang in LANGS:
        base = root / "docs" / lang
        out[lang] = (
            {
                p.relative_to(base).as_posix(): p
                for p in sorted(base.rglob("*"))
                if p.is_file() and p.suffix in PAGE_SUFFIXES and ".ipynb_checkpoints" not in p.parts
            }
            if base.is_dir()
            else {}
        )
    return out


@dataclass
class Fence:
    line: int
    body: list[str]
    output: bool

    @property
    def include_only(self) -> bool:
        lines = [b for b in self.body if b.strip()]
        return bool(lines) and all(INCLUDE.match(b) for b in lines)


@dataclass
class Parsed:
    headings: list[tuple[int, int, str, str | None]] = field(
        default_factory=list
    )  # line, level, title, anchor
    includes: list[tuple[int, str]] = field(default_factory=list)
    admonitions: list[tuple[int, str]] = field(default_factory=list)
    fences: list[Fence] = field(default_factory=list)
    prose: list[tuple[int, str]] = field(default_factory=list)  # lines outside fences


def parse_markdown(text: str) -> Parsed:
    out = Parsed()
    lines = text.splitlines()
    i, previous = 0, ""
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            char, count = m["fence"][0], len(m["fence"])
            close = re.compile(rf"^[ \t]*{re.escape(char)}{{{count},}}[ \t]*$")
            body, j = [], i + 1
            while j < len(lines) and not close.match(lines[j]):
                body.append(lines[j])
                j += 1
            fence = Fence(i + 1, body, previous.strip() == OUTPUT_MARK)
            out.fences.append(fence)
            for k, b in enumerate(body):
                inc = INCLUDE.match(b)
                if inc:
                    out.includes.append((i + 2 + k, inc["path"]))
            i, previous = j + 1, lines[j] if j < len(lines) else ""
            continue
        out.prose.append((i + 1, line))
        inc = INCLUDE.match(line)
        if inc:
            out.includes.append((i + 1, inc["path"]))
        h = HEADING.match(line)
        if h:
            title = h["title"]
            a = ANCHOR.search(title)
            out.headings.append((i + 1, len(h["level"]), title, a["id"] if a else None))
        ad = ADMONITION.match(line)
        if ad:
            out.admonitions.append((i + 1, ad["kind"]))
        if line.strip():
            previous = line
        i += 1
    return out


def snippet_path(include: str) -> str:
    """'snippets/a/b.py:section' -> 'snippets/a/b.py'"""
    return re.split(r":(?=[\w-]*$|\d)", include, maxsplit=1)[0]


# --- checks on the sources ---------------------------------------------------------------


def check_pages_exist(root: Path) -> list[str]:
    pages = lang_pages(root)
    every = sorted(set().union(*(set(p) for p in pages.values())))
    errors = []
    for name in every:
        have = [lang for lang in LANGS if name in pages[lang]]
        for lang in LANGS:
            if name not in pages[lang]:
                errors.append(f"docs/{lang}/{name} ({lang}): missing; the page exists in {', '.join(have)}")
    return errors


def notebook_markdown(path: Path) -> list[tuple[int, str]]:
    """(cell number, source) of each Markdown cell of a notebook."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    return [
        (n, "".join(c.get("source", "")) if isinstance(c.get("source"), list) else c.get("source", ""))
        for n, c in enumerate(cells, 1)
        if c.get("cell_type") == "markdown"
    ]


def parse_page(path: Path) -> tuple[Parsed, str]:
    """A page's structure; a notebook's comes from its Markdown cells ("cell N" for lines)."""
    if path.suffix != ".ipynb":
        text = path.read_text(encoding="utf-8")
        return parse_markdown(text), text
    out = Parsed()
    for n, source in notebook_markdown(path):
        p = parse_markdown(source)
        out.headings += [(f"cell {n}", level, title, anchor) for _, level, title, anchor in p.headings]
        out.includes += [(f"cell {n}", inc) for _, inc in p.includes]
        out.admonitions += [(f"cell {n}", kind) for _, kind in p.admonitions]
    return out, ""  # a notebook's placeholders are not rendered: it computes its own numbers


def check_structure(root: Path) -> list[str]:
    """Explicit English anchors on headings; same anchors, includes, admonitions, figures as English.

    Notebooks too: a heading in a Markdown cell takes the same { #anchor } as on a page."""
    pages = lang_pages(root)
    errors = []
    for name in pages[DEFAULT]:
        stem = Path(name).stem
        parsed = {}
        for lang in LANGS:
            path = pages[lang].get(name)
            if path is None:
                continue  # reported by check_pages_exist
            p, text = parse_page(path)
            parsed[lang] = (p, figures.placeholders(text, stem))
            where = f"docs/{lang}/{name}"
            for line, level, title, anchor in p.headings:
                if anchor is None and level >= 2:
                    errors.append(
                        f"{where}:{line} ({lang}): heading {title!r} has no explicit English anchor {{ #id }}"
                    )
                elif anchor is not None and not ANCHOR_ID.match(anchor):
                    errors.append(
                        f"{where}:{line} ({lang}): anchor #{anchor} is not a lowercase English id (a-z, 0-9, -)"
                    )
        if DEFAULT not in parsed:
            continue
        en, en_figs = parsed[DEFAULT]
        for lang, (p, figs) in parsed.items():
            if lang == DEFAULT:
                continue
            where = f"docs/{lang}/{name} ({lang})"
            for what, mine, theirs in (
                ("heading anchors", [h[3] for h in p.headings if h[3]], [h[3] for h in en.headings if h[3]]),
                ("--8<-- includes", [i[1] for i in p.includes], [i[1] for i in en.includes]),
                ("admonition kinds", [a[1] for a in p.admonitions], [a[1] for a in en.admonitions]),
            ):
                if mine != theirs:
                    missing = [x for x in theirs if x not in mine]
                    extra = [x for x in mine if x not in theirs]
                    detail = (
                        f"missing {missing}, extra {extra}"
                        if missing or extra
                        else "same items in a different order"
                    )
                    errors.append(
                        f"{where}: {what} differ from docs/{DEFAULT}/{name}: {detail}; expected {theirs}, found {mine}"
                    )
            if set(figs) != set(en_figs):
                missing = sorted({f"{a}.{b}" for a, b in set(en_figs) - set(figs)})
                extra = sorted({f"{a}.{b}" for a, b in set(figs) - set(en_figs)})
                errors.append(
                    f"{where}: figure placeholders differ from docs/{DEFAULT}/{name}: missing {missing}, extra {extra}"
                )
    return errors


def markdown_pages(root: Path):
    """(lang, page name, parsed markdown) for every .md page of every language."""
    for lang, pages in lang_pages(root).items():
        for name, path in pages.items():
            if name.endswith(".md"):
                yield lang, name, parse_markdown(path.read_text(encoding="utf-8"))


def check_code_blocks(root: Path) -> list[str]:
    """Every fenced block is a snippet include, or program output marked with <!-- output -->."""
    errors = []
    for lang, name, p in markdown_pages(root):
        for fence in p.fences:
            if not (fence.include_only or fence.output):
                errors.append(
                    f"docs/{lang}/{name}:{fence.line} ({lang}): inline code block; put the code in "
                    f"snippets/{Path(name).stem}/ and include it with --8<--, or mark program output "
                    f"with a '{OUTPUT_MARK}' line right above the fence"
                )
        for line, inc in p.includes:
            if not any(f.line < line <= f.line + len(f.body) for f in p.fences):
                errors.append(f"docs/{lang}/{name}:{line} ({lang}): --8<-- {inc!r} outside a code fence")
    return errors


def snippet_files(root: Path) -> list[str]:
    base = root / "snippets"
    return (
        sorted(
            rel(p, root)
            for p in base.rglob("*")
            if p.is_file()
            and "__pycache__" not in p.parts
            and p.suffix not in (".pyc",)
            and p.name not in (".gitkeep", "placement.toml")
        )
        if base.is_dir()
        else []
    )


def check_snippets(root: Path) -> list[str]:
    """Every snippet is included by a page in every language and named by a test under examples/."""
    included: dict[str, set[str]] = {lang: set() for lang in LANGS}
    errors = []
    for lang, name, p in markdown_pages(root):
        for line, inc in p.includes:
            target = snippet_path(inc)
            included[lang].add(target)
            if not (root / target).is_file():
                errors.append(f"docs/{lang}/{name}:{line} ({lang}): includes {target}, which does not exist")
    tests = (
        {
            p: p.read_text(encoding="utf-8")
            for p in sorted((root / "examples").rglob("*.py"))
            if "__pycache__" not in p.parts
        }
        if (root / "examples").is_dir()
        else {}
    )
    for snippet in snippet_files(root):
        for lang in LANGS:
            if snippet not in included[lang]:
                errors.append(f"{snippet} ({lang}): not included by any page under docs/{lang}/")
        page, name = Path(snippet).relative_to("snippets").parent.as_posix(), Path(snippet).name
        module = "test_" + page.replace("-", "_").replace("/", "_") + ".py"
        if not any(
            f"{page}/{name}" in text or (name in text and path.name == module) for path, text in tests.items()
        ):
            errors.append(
                f"{snippet} (all languages): no test under examples/ names it "
                f"(write '{page}/{name}' in a test, or '{name}' in examples/{module})"
            )
    return errors


def check_memory_literals(root: Path) -> list[str]:
    """Outside code and output blocks, no page prints a memory size: figures come from {{ placeholders }}."""
    errors = []
    for lang, name, p in markdown_pages(root):
        prose = "\n".join(line for _, line in p.prose)
        prose = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), prose)
        for (line, _), text in zip(p.prose, prose.splitlines(), strict=False):
            for m in MEMORY_LITERAL.finditer(text):
                errors.append(
                    f"docs/{lang}/{name}:{line} ({lang}): literal memory figure {m.group(0)!r}; "
                    "compute it in an example and write a {{ key }} placeholder"
                )
    return errors


def read_mkdocs_yml(root: Path) -> dict:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # !ENV, !!python/name: ...
    return yaml.load((root / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def nav_entries(nav) -> list[tuple[str, str]]:
    out = []
    for item in nav or []:
        if isinstance(item, dict):
            for title, target in item.items():
                if isinstance(target, list):
                    out.append((title, ""))
                    out.extend(nav_entries(target))
                else:
                    out.append((title, target))
    return out


def i18n_languages(config: dict) -> dict[str, dict]:
    for plugin in config.get("plugins", []):
        if isinstance(plugin, dict) and "i18n" in plugin:
            return {lang["locale"]: lang for lang in plugin["i18n"]["languages"]}
    return {}


def check_nav(root: Path) -> list[str]:
    """Every English page is in the nav; every nav title is translated in every language."""
    config = read_mkdocs_yml(root)
    entries = nav_entries(config.get("nav"))
    in_nav = {target for _, target in entries}
    errors = [
        f"mkdocs.yml (en): docs/en/{name} is not in nav"
        for name in lang_pages(root)[DEFAULT]
        if name not in in_nav
    ]
    languages = i18n_languages(config)
    for lang in LANGS:
        if lang not in languages:
            errors.append(f"mkdocs.yml ({lang}): language missing from plugins.i18n.languages")
            continue
        if lang == DEFAULT:
            continue
        translations = languages[lang].get("nav_translations") or {}
        for title in dict.fromkeys([*NAV_TITLES, *(t for t, _ in entries)]):
            if title not in translations:
                errors.append(f"mkdocs.yml ({lang}): no nav_translations entry for {title!r}")
    return errors


# --- checks on the built site ------------------------------------------------------------


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str]] = []  # (tag, attr, value)
        self.html_lang: str | None = None
        self.nav_titles: list[str] = []
        self._ellipsis = 0
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.html_lang = a.get("lang")
        for key in ("id",) + (("name",) if tag == "a" else ()):
            if a.get(key):
                self.ids.add(a[key])
        if tag in ("a", "link", "area") and a.get("href") is not None:
            self.refs.append((tag, "href", a["href"]))
        if a.get("src") is not None:
            self.refs.append((tag, "src", a["src"]))
        if tag == "span" and "md-ellipsis" in (a.get("class") or "").split():
            self._ellipsis += 1
            self._text = []
        elif self._ellipsis and tag == "span":
            self._ellipsis += 1

    def handle_endtag(self, tag):
        if self._ellipsis and tag == "span":
            self._ellipsis -= 1
            if self._ellipsis == 0:
                # ordinary white space collapsed; no-break spaces (12\u00a0Go) kept as the reader sees them
                self.nav_titles.append(re.sub(r"[ \t\r\n]+", " ", "".join(self._text)).strip())

    def handle_data(self, data):
        if self._ellipsis:
            self._text.append(data)


_parsed_cache: dict[Path, _Collect] = {}


def parse_html(path: Path) -> _Collect:
    if path not in _parsed_cache:
        c = _Collect()
        c.feed(path.read_text(encoding="utf-8", errors="replace"))
        _parsed_cache[path] = c
    return _parsed_cache[path]


def html_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "assets" not in p.relative_to(site).parts)


def lang_of(path: Path, site: Path) -> str:
    first = path.relative_to(site).parts[0]
    return first if first in LANGS else DEFAULT


def site_url_prefixes(root: Path, url: str | None = None) -> list[str]:
    """The site's own address (mkdocs.yml's site_url, or `url`) and, when it has one, its path
    (``https://x.github.io/oomguide/`` -> that and ``/oomguide``: MkDocs writes 404.html's links so)."""
    url = (read_mkdocs_yml(root).get("site_url") if url is None else url) or ""
    url = url.rstrip("/")
    path = urlsplit(url).path.rstrip("/")
    return [p for p in (url, path) if p]


def _within(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith((prefix + "/", prefix + "#", prefix + "?"))


def resolve(site: Path, page: Path, target: str, prefixes: list[str]) -> Path | None:
    """The file a link of `page` points to, or None when it leaves the site."""
    for prefix in prefixes:
        if _within(target, prefix):
            target = target[len(prefix) :] or "/"
            break
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None
    path = unquote(parts.path)
    if not path:
        return page
    base = "/" if path.startswith("/") else "/" + page.parent.relative_to(site).as_posix() + "/"
    joined = posixpath.normpath(posixpath.join(base, path))
    out = site / joined.lstrip("/")
    if path.endswith("/") or out.is_dir():
        out = out / "index.html"
    return out


def check_links(site: Path, root: Path = ROOT, prefixes: list[str] | None = None) -> list[str]:
    """Every internal href/src resolves to a file, and every #fragment to an id there."""
    prefixes = site_url_prefixes(root) if prefixes is None else prefixes
    errors = []
    for page in html_pages(site):
        where = f"{rel(page, site)} ({lang_of(page, site)})"
        for tag, attr, value in parse_html(page).refs:
            if not value or value.startswith(("data:", "mailto:", "javascript:", "tel:", "blob:")):
                continue
            target = resolve(site, page, value, prefixes)
            if target is None:
                continue
            if not target.exists():
                errors.append(
                    f"{where}: <{tag} {attr}={value!r}> points to {rel(target, site)}, which is not built"
                )
                continue
            fragment = unquote(urlsplit(value).fragment)
            if fragment and target.suffix == ".html" and fragment not in parse_html(target).ids:
                errors.append(f"{where}: <{tag} {attr}={value!r}>: no id {fragment!r} in {rel(target, site)}")
    return errors


def check_no_outside_requests(site: Path, own: str = "") -> list[str]:
    """No src= and no <link href> outside 127.0.0.1/localhost; <a href> is a link, not a request, and
    neither is a reference to the site's own published address `own` (Material's canonical link)."""
    errors = []
    own = own.rstrip("/")
    for page in html_pages(site):
        for tag, attr, value in parse_html(page).refs:
            if tag == "a" or (own and _within(value, own)):
                continue
            parts = urlsplit(value)
            outside = (
                parts.scheme in ("http", "https", "") and parts.netloc and parts.hostname not in LOCAL_HOSTS
            )
            if outside:
                errors.append(
                    f"{rel(page, site)} ({lang_of(page, site)}): <{tag} {attr}={value!r}> is an outside request"
                )
    return errors


def check_html_lang_and_nav(site: Path, root: Path = ROOT) -> list[str]:
    config = read_mkdocs_yml(root)
    languages = i18n_languages(config)
    entries = [title for title, _ in nav_entries(config.get("nav"))]
    errors = []
    for page in html_pages(site):
        lang = lang_of(page, site)
        got = parse_html(page).html_lang
        if page.name != "404.html" and got != lang:
            errors.append(f"{rel(page, site)} ({lang}): <html lang={got!r}>, expected {lang!r}")
    for lang in LANGS:
        home = site / ("index.html" if lang == DEFAULT else f"{lang}/index.html")
        if not home.exists():
            errors.append(f"{rel(home, site)} ({lang}): home page not built")
            continue
        translations = (languages.get(lang) or {}).get("nav_translations") or {}
        shown = set(parse_html(home).nav_titles)
        for title in entries:
            want = title if lang == DEFAULT else translations.get(title, title)
            if want not in shown:
                errors.append(
                    f"{rel(home, site)} ({lang}): navigation shows no {want!r} (for {title!r}); it shows {sorted(shown)}"
                )
    return errors


def search_tokens(site: Path) -> tuple[dict, dict[str, list[str]]]:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    sep = re.compile(index["config"]["separator"])
    tokens = {
        doc["location"]: [t for t in sep.split(html.unescape(doc["title"] + " " + doc["text"])) if t]
        for doc in index["docs"]
    }
    return index["config"], tokens


def segments(word: str, vocabulary: set[str]) -> bool:
    """Can `word` be cut into index terms? (what Material's query segmentation does for CJK)"""
    ok = [True] + [False] * len(word)
    for end in range(1, len(word) + 1):
        ok[end] = any(ok[start] and word[start:end] in vocabulary for start in range(end))
    return ok[-1]


# --- the tests ---------------------------------------------------------------------------


def test_build_strict(site_build):
    assert site_build.returncode == 0, f"mkdocs build --strict failed:\n{site_build.output[-4000:]}"


def test_every_page_in_every_language():
    assert check_pages_exist(ROOT) == []


def test_same_skeleton_in_every_language():
    assert check_structure(ROOT) == []


def test_code_blocks_are_snippets_or_output():
    assert check_code_blocks(ROOT) == []


def test_every_snippet_included_everywhere_and_tested():
    assert check_snippets(ROOT) == []


def test_no_literal_memory_figures():
    assert check_memory_literals(ROOT) == []


def test_nav_complete_and_translated():
    assert check_nav(ROOT) == []


def test_internal_links_and_anchors_resolve(site):
    assert check_links(site) == []


def test_html_lang_and_translated_navigation(site):
    assert check_html_lang_and_nav(site) == []


def test_no_outside_requests_in_html(site):
    assert check_no_outside_requests(site) == []


def test_every_page_built_in_every_language(site):
    missing = []
    for lang in LANGS:
        prefix = "" if lang == DEFAULT else f"{lang}/"
        for name in lang_pages(ROOT)[DEFAULT]:
            stem = Path(name).with_suffix("").as_posix()
            out = site / prefix / ("index.html" if stem == "index" else f"{stem}/index.html")
            if not out.is_file():
                missing.append(f"{rel(out, site)} ({lang}): {name} was not rendered as a page")
    assert missing == []


def test_notebooks_are_pages(site):
    """A notebook is a page with Material's layout in its language, not a download (static-i18n #198)."""
    problems = []
    for lang in LANGS:
        prefix = "" if lang == DEFAULT else f"{lang}/"
        for name in lang_pages(ROOT)[DEFAULT]:
            if not name.endswith(".ipynb"):
                continue
            stem = name[: -len(".ipynb")]
            page = site / prefix / stem / "index.html"
            text = page.read_text(encoding="utf-8") if page.is_file() else ""
            if 'class="md-header' not in text or "jupyter-wrapper" not in text:
                problems.append(f"{rel(page, site)} ({lang}): {name} is not a rendered notebook page")
            if (site / prefix / name).exists():
                problems.append(f"{prefix}{name} ({lang}): the notebook was copied as a download")
            alternates = {}
            for m in re.finditer(r'href="([^"]*)" hreflang="([a-z]+)"', text):
                alternates[m.group(2)] = m.group(1)
            for other in LANGS:
                link = alternates.get(other, "")
                if not link.rstrip("/").endswith(stem) and link != "./":
                    problems.append(
                        f"{rel(page, site)} ({lang}): language switcher to {other} goes to {link!r}"
                    )
    assert problems == []


NOTEBOOK_IMAGE = re.compile(r'<img[^>]*\ssrc="data:image/png')
NOTEBOOK_OUTPUT = re.compile(r'class="jp-RenderedText[^"]*"[^>]*>\s*<pre>(.*?)</pre>', re.S)


def test_notebook_computes_nanochat_beside_nanogpt(site):
    """The build executes the notebook's nanochat section: where OOMGUIDE_NANOCHAT names a checkout
    (CI names one), its printed breakdown and its chart are on every language's page; where none is
    named, the line that says how to name one, and no chart."""
    named = bool(os.environ.get("OOMGUIDE_NANOCHAT"))
    problems = []
    for lang in LANGS:
        prefix = "" if lang == DEFAULT else f"{lang}/"
        page = site / prefix / "where-the-memory-goes" / "index.html"
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        at = text.find('id="nanochat-beside-nanogpt"')
        if at < 0:
            problems.append(f"{rel(page, site)} ({lang}): no section #nanochat-beside-nanogpt")
            continue
        section = text[at:]
        printed = html.unescape("".join(NOTEBOOK_OUTPUT.findall(section)))
        charts = len(NOTEBOOK_IMAGE.findall(section))
        if named and (charts != 1 or "MuonAdamW" not in printed):
            problems.append(
                f"{rel(page, site)} ({lang}): OOMGUIDE_NANOCHAT is set but the nanochat section did not "
                f"compute ({charts} chart(s); printed: {printed[:200]!r})"
            )
        if not named and (charts != 0 or "OOMGUIDE_NANOCHAT=~/nanochat" not in printed):
            problems.append(
                f"{rel(page, site)} ({lang}): without OOMGUIDE_NANOCHAT the section should print how to "
                f"name a checkout and draw nothing ({charts} chart(s); printed: {printed[:200]!r})"
            )
    assert problems == []


def test_language_switcher_stays_on_page(site):
    problems = []
    for page in html_pages(site):
        if page.name == "404.html":
            continue
        lang = lang_of(page, site)
        text = page.read_text(encoding="utf-8")
        relpath = page.relative_to(site).as_posix()
        stem = relpath[len(lang) + 1 :] if lang != DEFAULT else relpath
        for m in re.finditer(r'href="([^"]*)" hreflang="([a-z]+)"', text):
            href, other = m.groups()
            target = resolve(site, page, href, site_url_prefixes(ROOT))
            want = site / ("" if other == DEFAULT else other) / stem
            if target is None or target.resolve() != want.resolve():
                problems.append(
                    f"{relpath} ({lang}): switcher link to {other} is {href!r}, expected {rel(want, site)}"
                )
    assert problems == []


def test_search_finds_japanese_and_chinese(site):
    config, tokens = search_tokens(site)
    assert "\\u200b" in config["separator"], "search.separator must split on U+200B (jieba's word boundaries)"
    assert {"ja", "zh"} <= set(config["lang"]), f"search languages {config['lang']}: ja loads TinySegmenter"
    zh = [loc for loc, toks in tokens.items() if loc.startswith("zh/") and ZH_WORD in toks]
    assert zh, f"zh: {ZH_WORD!r} is no search term of any zh page (jieba + separator)"
    assert any(loc.startswith(ZH_PAGE) for loc in zh), f"zh: {ZH_WORD!r} not found on {ZH_PAGE}"
    ja_vocab = {t for loc, toks in tokens.items() if loc.startswith(JA_PAGE) for t in toks}
    ja_text = "".join("".join(toks) for loc, toks in tokens.items() if loc.startswith(JA_PAGE))
    assert JA_WORD in ja_text, f"ja: {JA_WORD!r} is not in the index of {JA_PAGE}"
    assert segments(JA_WORD, ja_vocab), f"ja: {JA_WORD!r} cannot be cut into index terms of {JA_PAGE}"


def test_figures_rendered_per_language(site):
    """Figure placeholders never reach the built HTML."""
    left = [
        f"{rel(p, site)} ({lang_of(p, site)}): unrendered placeholder {m.group(0)!r}"
        for p in html_pages(site)
        for m in figures.PLACEHOLDER.finditer(p.read_text(encoding="utf-8"))
    ]
    assert left == []


# --- the checks fail helpfully ------------------------------------------------------------

GOOD_PAGE = """# Title {{ #title }}

Intro.

## Section {{ #section }}

```bash title="x"
--8<-- "snippets/page/run.sh"
```

!!! warning
    Careful.

<!-- output -->
```text
done in 1.00 GiB
```
"""


def make_tree(tmp_path: Path, langs=LANGS) -> Path:
    for lang in langs:
        (tmp_path / "docs" / lang).mkdir(parents=True)
        (tmp_path / "docs" / lang / "page.md").write_text(GOOD_PAGE.format(), encoding="utf-8")
    (tmp_path / "snippets" / "page").mkdir(parents=True)
    (tmp_path / "snippets" / "page" / "run.sh").write_text("echo hi\n", encoding="utf-8")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "test_page.py").write_text('SNIPPET = "page/run.sh"\n', encoding="utf-8")
    return tmp_path


def test_checks_pass_on_a_good_tree(tmp_path):
    root = make_tree(tmp_path)
    assert check_pages_exist(root) == []
    assert check_structure(root) == []
    assert check_code_blocks(root) == []
    assert check_snippets(root) == []
    assert check_memory_literals(root) == []


def test_missing_page_names_file_and_language(tmp_path):
    root = make_tree(tmp_path)
    (root / "docs" / "de" / "page.md").unlink()
    errors = check_pages_exist(root)
    assert len(errors) == 1 and "docs/de/page.md" in errors[0] and "(de)" in errors[0]


def test_differing_anchor_names_file_and_language(tmp_path):
    root = make_tree(tmp_path)
    page = root / "docs" / "ja" / "page.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace("{ #section }", "{ #sektion }"), encoding="utf-8"
    )
    errors = check_structure(root)
    assert len(errors) == 1, errors
    assert "docs/ja/page.md" in errors[0] and "(ja)" in errors[0] and "sektion" in errors[0]


def test_heading_without_anchor_is_reported(tmp_path):
    root = make_tree(tmp_path)
    page = root / "docs" / "fr" / "page.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace("## Section { #section }", "## Section"), encoding="utf-8"
    )
    errors = check_structure(root)
    assert any("docs/fr/page.md:5 (fr)" in e and "no explicit English anchor" in e for e in errors), errors


def test_missing_include_and_admonition_are_reported(tmp_path):
    root = make_tree(tmp_path)
    page = root / "docs" / "zh" / "page.md"
    text = (
        page.read_text(encoding="utf-8")
        .replace('--8<-- "snippets/page/run.sh"\n', "")
        .replace("!!! warning", "!!! note")
    )
    page.write_text(text, encoding="utf-8")
    errors = check_structure(root) + check_snippets(root)
    assert any("docs/zh/page.md (zh): --8<-- includes differ" in e for e in errors), errors
    assert any("docs/zh/page.md (zh): admonition kinds differ" in e for e in errors), errors
    assert any(e.startswith("snippets/page/run.sh (zh): not included") for e in errors), errors


def test_untested_snippet_and_missing_snippet_are_reported(tmp_path):
    root = make_tree(tmp_path)
    (root / "snippets" / "page" / "extra.py").write_text("batch_size = 4\n", encoding="utf-8")
    page = root / "docs" / "en" / "page.md"
    page.write_text(page.read_text(encoding="utf-8").replace("run.sh", "gone.sh"), encoding="utf-8")
    errors = check_snippets(root)
    assert any("snippets/page/extra.py (all languages): no test under examples/" in e for e in errors), errors
    assert any("docs/en/page.md:8 (en): includes snippets/page/gone.sh" in e for e in errors), errors


def test_inline_code_and_literal_figures_are_reported(tmp_path):
    root = make_tree(tmp_path)
    page = root / "docs" / "de" / "page.md"
    text = page.read_text(encoding="utf-8").replace("<!-- output -->\n", "") + "\nDas braucht 6,14 GiB.\n"
    page.write_text(text, encoding="utf-8")
    code = check_code_blocks(root)
    assert len(code) == 1 and "docs/de/page.md:14 (de): inline code block" in code[0], code
    literals = check_memory_literals(root)
    assert (
        len(literals) == 1
        and "docs/de/page.md" in literals[0]
        and "(de)" in literals[0]
        and "6,14 GiB" in literals[0]
    )


def test_broken_link_and_outside_request_are_reported(tmp_path):
    site = tmp_path / "site"
    (site / "ja" / "a").mkdir(parents=True)
    (site / "ja" / "b").mkdir(parents=True)
    (site / "ja" / "a" / "index.html").write_text(
        '<html lang="ja"><body><a href="../b/#nowhere">x</a><a href="../c/">y</a>'
        '<script src="https://cdn.example.com/x.js"></script><img src="http://127.0.0.1:8000/ok.png"></body></html>',
        encoding="utf-8",
    )
    (site / "ja" / "b" / "index.html").write_text(
        '<html lang="ja"><h2 id="here">b</h2></html>', encoding="utf-8"
    )
    links = check_links(site)
    assert any("ja/a/index.html (ja)" in e and "no id 'nowhere'" in e for e in links), links
    assert any("ja/a/index.html (ja)" in e and "ja/c/index.html, which is not built" in e for e in links), (
        links
    )
    outside = check_no_outside_requests(site)
    assert len(outside) == 1 and "cdn.example.com" in outside[0] and "(ja)" in outside[0]


@pytest.mark.parametrize("include", ["snippets/a/b.py", "snippets/a/b.py:section"])
def test_snippet_path_strips_sections(include):
    assert snippet_path(include) == "snippets/a/b.py"
