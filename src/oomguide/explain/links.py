"""Where explain sends the reader: the guide's sections, as addresses and as page paths.

What it does: knows every section explain links to (``GUIDE_SECTIONS``; tests/test_explain.py checks
each anchor in every language), builds a section's address from the site's address and its path in
the repository (``docs/ja/eval-oom-12gb.md#eval-batch-size``), so that a reader without a running
server can still open the right file.

The site's address has one setting: ``site_url`` in mkdocs.yml, read at run time (``site.yml``
beside this module is a link to it, so the installed package carries it too), overridden by the
environment variable ``OOMGUIDE_SITE_URL``.

It must never choose sections (that is ``diagnosis``) nor hold an address of its own.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

SITE_URL_ENV = "OOMGUIDE_SITE_URL"
MKDOCS_YML = Path(__file__).with_name("site.yml")  # a link to the repository's mkdocs.yml

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
    """``site_url`` of mkdocs.yml (the file has MkDocs' own YAML tags, so it is read line by line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuntimeError(f"cannot read the site's address from {path}: {exc}") from None
    m = re.search(r"^site_url:\s*['\"]?([^'\"\s#]+)", text, re.M)
    if not m:
        raise RuntimeError(f"{path} has no site_url")
    return m.group(1)


def site_url() -> str:
    return (os.environ.get(SITE_URL_ENV) or configured_site_url()).rstrip("/")


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
