"""Where explain sends the reader: the guide's sections, as addresses or as files that open here.

What it does: knows every section explain links to (``GUIDE_SECTIONS``; tests/test_explain.py checks
each anchor in every language), names each one as its page writes it (:func:`section_title`: the
heading in the reader's language), and gives each one location that opens where the reader is
(:func:`section_link`): the section's address on the published site (``https://…/ja/eval-oom-12gb/
#eval-batch-size``) when the site is published, otherwise the page's own file as installed with the
package and the line of its heading (``…/oomguide/guide/ja/eval-oom-12gb.md:31``), which opens in
any editor or pager, from any folder, with or without the repository.

The pages travel with the package: ``guide`` beside this package is a link to the repository's docs/
(as ``site.yml`` is to mkdocs.yml); the wheel carries a copy of the pages, and a checkout (or an
editable install) reads docs/ itself, so the location is docs/ there. tests/test_install.py runs
explain from a wheel, outside the repository, and opens what it prints.

The site's address has one setting: ``site_url`` in mkdocs.yml, read at run time (``site.yml``
beside this module is a link to it: the wheel carries a copy, made when it is built, and
tests/test_install.py checks that the installed CLI reads the same address). A ``site_url`` on this
machine (``http://127.0.0.1:8000/``, what ``mkdocs serve`` answers on; ``localhost``) means the site is
not published. The environment variable ``OOMGUIDE_SITE_URL`` overrides it and is always an address
(the paste box sets it to the way from its page to the site's root).

It must never choose sections (that is ``diagnosis``) nor hold an address of its own.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

SITE_URL_ENV = "OOMGUIDE_SITE_URL"
MKDOCS_YML = Path(__file__).with_name("site.yml")  # a link to the repository's mkdocs.yml
GUIDE = Path(__file__).parent.parent / "guide"  # a link to the repository's docs/: the pages, installed

# Every page of the guide that explain links to, with the anchors its headings have in all five
# languages (docs/<lang>/<page>.md, `## Heading { #anchor }`).
GUIDE_SECTIONS: dict[str, tuple[str, ...]] = {
    "estimate-loss-oom": (
        "problem-analysis",
        "root-causes",
        "memory-arithmetic",
        "recommended-fixes",
        "reduce-batch-size",
        "disable-compile",
        "shorter-block-size",
        "expandable-segments",
        "empty-cache",
        "eval-interval",
        "float16-gradscaler",
        "hardware-setup",
        "cpu-fallback",
        "expected-result",
    ),
    "eval-oom-12gb": (
        "root-cause",
        "what-really-happens",
        "quick-fixes",
        "eval-batch-size",
        "eval-block-size",
        "eval-iters",
        "smaller-n-embd",
        "gradient-checkpointing",
        "rtx-4070-combination",
        "allocator-setting",
    ),
    "beyond": ("chunked-loss", "drop-stale-logits", "four-gb-card", "time-cost"),
    "multi-gpu": ("launch", "ddp-cost", "bucket-view", "gpt2-xl", "fsdp2"),
    "run-moments": ("resume", "first-step", "sample"),
    "where-the-memory-goes": (),  # a notebook page: linked as a whole
}
NOTEBOOK_PAGES = ("where-the-memory-goes",)


@functools.cache
def configured_site_url(path: Path = MKDOCS_YML) -> str:
    """``site_url`` of mkdocs.yml, ``""`` without one (the file has MkDocs' own YAML tags, so it is read
    line by line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuntimeError(f"cannot read the site's address from {path}: {exc}") from None
    m = re.search(r"^site_url:\s*['\"]?([^'\"\s#]+)", text, re.M)
    return m.group(1) if m else ""


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")  # `mkdocs serve` here: not a published site


def site_url() -> str:
    return (os.environ.get(SITE_URL_ENV) or configured_site_url()).rstrip("/")


def is_local(url: str) -> bool:
    """Whether `url` answers only on the reader's own machine (or is no address at all)."""
    parts = urlsplit(url)
    return not parts.netloc or parts.hostname in LOCAL_HOSTS


def published_url() -> str | None:
    """The site's address where the links should go, or None when the site is not published:
    ``OOMGUIDE_SITE_URL`` if set, else mkdocs.yml's ``site_url`` unless it is on this machine."""
    chosen = os.environ.get(SITE_URL_ENV)
    if chosen:
        return chosen.rstrip("/")
    configured = configured_site_url()
    return None if is_local(configured) else configured.rstrip("/")


def _check(page: str, anchor: str | None) -> None:
    if page not in GUIDE_SECTIONS or (anchor is not None and anchor not in GUIDE_SECTIONS[page]):
        raise KeyError(f"{page}#{anchor} is not a section of the guide")


def guide_url(page: str, anchor: str | None, lang: str, base: str | None = None) -> str:
    """A section's URL: English at the site's root, other languages under /<lang>/ (mkdocs-static-i18n)."""
    _check(page, anchor)
    base = site_url() if base is None else base.rstrip("/")
    prefix = base if lang == "en" else f"{base}/{lang}"
    return f"{prefix}/{page}/" + (f"#{anchor}" if anchor else "")


def page_path(page: str, anchor: str | None, lang: str) -> str:
    """The section's source in the repository: ``docs/<lang>/<page>.md#<anchor>``."""
    _check(page, anchor)
    ext = ".ipynb" if page in NOTEBOOK_PAGES else ".md"
    return f"docs/{lang}/{page}{ext}" + (f"#{anchor}" if anchor else "")


def page_file(page: str, lang: str) -> Path:
    """The page's file as installed with the package (in a checkout: docs/<lang>/<page>.md itself)."""
    ext = ".ipynb" if page in NOTEBOOK_PAGES else ".md"
    return (GUIDE / lang / f"{page}{ext}").resolve()


_MARKUP = re.compile(r"`|\*\*")


@functools.cache
def _headings(page: str, lang: str) -> tuple[dict[str, tuple[str, int]], str]:
    """({anchor: (heading text, line)}, the page's title) of a page in `lang`, read from its file: a
    Markdown page's `## Title { #anchor }` lines, a notebook's Markdown cells (line 0: no lines there)."""
    path = page_file(page, lang)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        lines = [
            ("".join(c["source"]) if isinstance(c["source"], list) else c["source"]).splitlines()
            for c in cells
            if c.get("cell_type") == "markdown"
        ]
        numbered = [(line, 0) for cell in lines for line in cell]
    else:
        numbered = [(line, n) for n, line in enumerate(text.splitlines(), 1)]
    found, title = {}, ""
    for line, n in numbered:
        m = re.match(r"^(#{1,6})\s+(.*?)\s*\{\s*#([\w-]+)\s*\}\s*$", line)
        if m:
            words = _MARKUP.sub("", m.group(2)).strip()
            found[m.group(3)] = (words, n)
            if len(m.group(1)) == 1 and not title:
                title = words
    return found, title


def section_title(page: str, anchor: str | None, lang: str) -> str:
    """The section as its page in `lang` names it: ``page title › heading`` (the page title alone for a
    whole page)."""
    _check(page, anchor)
    headings, title = _headings(page, lang)
    return title if anchor is None else f"{title} › {headings[anchor][0]}"


def file_link(page: str, anchor: str | None, lang: str) -> str:
    """The page's installed file and the line of the section's heading: ``/…/ja/beyond.md:13``."""
    _check(page, anchor)
    path = page_file(page, lang)
    line = _headings(page, lang)[0][anchor][1] if anchor else 0
    return f"{path}:{line}" if line else str(path)


def section_link(page: str, anchor: str | None, lang: str) -> str:
    """The one location explain prints for a section: its address on the published site, else the page's
    installed file at the heading's line."""
    base = published_url()
    return file_link(page, anchor, lang) if base is None else guide_url(page, anchor, lang, base)


def read_next(sections, lang: str) -> list[str]:
    """The lines of "Read next" for `sections` ((page, anchor) pairs), in explain's and check's answers:
    each section's title in `lang`, and below it the one place that opens it."""
    lines = []
    for page, anchor in sections:
        lines += [f"  - {section_title(page, anchor, lang)}", f"    {section_link(page, anchor, lang)}"]
    return lines


def sections_named(texts) -> list[tuple[str, str]]:
    """The guide's sections that lines of text name as ``eval-oom-12gb.md#eval-batch-size`` (check's notes
    name the section that adds a setting), in order, once each; names of no section are left out."""
    found = []
    for text in texts:
        for page, anchor in re.findall(r"\b([a-z0-9-]+)\.md#([\w-]+)", text):
            if anchor in GUIDE_SECTIONS.get(page, ()) and (page, anchor) not in found:
                found.append((page, anchor))
    return found
