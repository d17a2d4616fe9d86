"""The words oomguide prints in five languages: gettext catalogs, read with Babel.

What it does: the code holds English sentences only, as gettext message ids (``_("Diagnosis")``
where they are printed, ``N_("...")`` where they are defined apart from their use). Each other
language has a catalog, ``locale/<lang>/LC_MESSAGES/<domain>.po`` in this package, that
translators' tools (Poedit, Weblate, Lokalize) open; ``locale/<domain>.pot`` is the template they
start a new language from. At run time a catalog is read straight from its ``.po`` file with Babel
and compiled in memory, so there is no build step; ``pyproject.toml`` ships the files as package
data. The site's paste box runs the same code in the browser without Babel: the site's build
compiles the same ``.po`` files to ``.mo`` (``compile_catalog``), which are read where no ``.po`` is. An untranslated or fuzzy entry falls back to English.

Domains: ``explain`` (everything ``oomguide explain`` prints: the ``explain`` package),
``check`` (everything ``oomguide check`` prints, and the one-line errors of both commands:
``check_render.py``, ``messages.py``, and ``cli.py``'s --help) and ``site`` (the words the site's hooks put on pages). ``DOMAINS`` says which source files feed which
domain; tests/test_catalogs.py fails when a catalog lacks a message the code uses, keeps one the
code no longer uses, or changes a message's ``{placeholders}``.

After changing a sentence in the code: ``python -m oomguide.i18n`` re-extracts the templates and
merges them into every catalog (new entries come out empty, changed ones fuzzy), then translate.

It must never hold a translation itself, and never be needed to run anything but the printing.
"""

from __future__ import annotations

import functools
import gettext
import io
import os
import re
from pathlib import Path

LANGS = ("en", "ja", "zh", "de", "fr")
SOURCE_LANG = "en"
PACKAGE = Path(__file__).resolve().parent
LOCALE = PACKAGE / "locale"
# domain -> source files (relative to the package) whose _() / N_() strings it holds
DOMAINS: dict[str, tuple[str, ...]] = {
    "explain": ("explain/*.py",),
    "check": ("check_render.py", "messages.py", "nanochat/render.py", "cli.py"),
    "site": ("site_hooks.py", "placement.py", "paste.py", "figures.py"),
}
KEYWORDS = {"_": None, "N_": None, "NC_": ((1, "c"), 2)}


def N_(message: str) -> str:
    """Marks `message` for the catalogs where it is defined; it is translated where it is printed."""
    return message


def NC_(context: str, message: str) -> str:
    """Marks `message` with a gettext context (msgctxt): the same English words where a language
    says them another way (a ratio in a table cell, not in a sentence). Printed with `pgettext_for`."""
    return message


def default_lang(environ=None) -> str:
    """The language a command-line tool speaks by default: the locale of the environment, read as
    gettext reads it for messages (POSIX: the first of LC_ALL, LC_MESSAGES, LANG that is set and not
    empty decides): ``ja_JP.UTF-8`` -> ja, ``de_DE`` -> de; English for C, POSIX and any language
    oomguide has no catalog for."""
    environ = os.environ if environ is None else environ
    value = next((environ[k] for k in ("LC_ALL", "LC_MESSAGES", "LANG") if environ.get(k)), "")
    lang = value.split(".")[0].split("@")[0].split("_")[0].split("-")[0].strip().lower()
    return lang if lang in LANGS else SOURCE_LANG


def po_path(lang: str, domain: str) -> Path:
    return LOCALE / lang / "LC_MESSAGES" / f"{domain}.po"


@functools.cache
def translations(lang: str, domain: str) -> gettext.NullTranslations:
    """The catalog of `lang` for `domain`, compiled in memory from its .po file."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r} (known: {', '.join(LANGS)})")
    if lang == SOURCE_LANG:
        return gettext.NullTranslations()
    po = po_path(lang, domain)
    if po.exists():
        data = compile_catalog(po, lang, domain)
    else:  # the site's paste box: the package without Babel, its .po compiled by the build (site_hooks)
        data = po.with_suffix(".mo").read_bytes()
    return gettext.GNUTranslations(io.BytesIO(data))


def compile_catalog(po: Path, lang: str, domain: str) -> bytes:
    """A .po file as .mo bytes, compiled with Babel; fuzzy entries are left out (they fall back to English)."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with po.open("rb") as f:
        catalog = read_po(f, locale=lang, domain=domain)
    buffer = io.BytesIO()
    write_mo(buffer, catalog)
    return buffer.getvalue()


def gettext_for(lang: str, domain: str = "explain"):
    """The ``_`` of `lang`: English message id in, translated sentence out."""
    return translations(lang, domain).gettext


def pgettext_for(lang: str, domain: str = "explain"):
    """The ``pgettext`` of `lang`: (context, English message id) in, translated words out."""
    return translations(lang, domain).pgettext


# --------------------------------------------------------------------------------------------
# keeping the catalogs in step with the code (translators' side; tests use extract())
# --------------------------------------------------------------------------------------------
def source_files(domain: str) -> list[Path]:
    return sorted({p for pattern in DOMAINS[domain] for p in PACKAGE.glob(pattern) if p.is_file()})


def extract(domain: str):
    """The messages the code of `domain` uses, as a Babel catalog (the template)."""
    from babel.messages.catalog import Catalog
    from babel.messages.extract import extract_from_file

    catalog = Catalog(project="oomguide", domain=domain, fuzzy=False)
    for path in source_files(domain):
        for lineno, message, comments, context in extract_from_file(
            "python", str(path), keywords=KEYWORDS, comment_tags=("TRANSLATORS:",)
        ):
            catalog.add(
                message,
                locations=[(path.relative_to(PACKAGE).as_posix(), lineno)],
                auto_comments=comments,
                context=context,
                flags=("python-brace-format",) if "{" in message else (),
            )
    return catalog


def _write(path: Path, catalog) -> None:
    """Write a template or catalog, unless only its POT-Creation-Date would change."""
    from babel.messages.pofile import write_po

    buffer = io.BytesIO()
    write_po(buffer, catalog, width=100, ignore_obsolete=True)
    new = buffer.getvalue()
    undated = re.compile(rb'^"POT-Creation-Date: [^"]*"$', re.MULTILINE)
    if path.exists() and undated.sub(b"", path.read_bytes()) == undated.sub(b"", new):
        return
    path.write_bytes(new)


def update() -> None:
    """Write each domain's template and merge it into every language's catalog."""
    from babel.messages.pofile import read_po

    for domain in DOMAINS:
        template = extract(domain)
        if not len(template):
            continue
        LOCALE.mkdir(exist_ok=True)
        _write(LOCALE / f"{domain}.pot", template)
        for lang in LANGS:
            if lang == SOURCE_LANG:
                continue
            path = po_path(lang, domain)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                with path.open("rb") as f:
                    catalog = read_po(f, locale=lang, domain=domain)
            else:
                from babel.messages.catalog import Catalog

                catalog = Catalog(locale=lang, domain=domain, project="oomguide")
            catalog.update(template, no_fuzzy_matching=False)
            _write(path, catalog)
            print(f"{path.relative_to(PACKAGE)}: {len(catalog)} messages")


if __name__ == "__main__":
    update()
