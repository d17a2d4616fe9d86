"""The catalogs (src/oomguide/locale/<lang>/LC_MESSAGES/<domain>.po) match the code, in every language.

A catalog fails here when it lacks a message the code uses, keeps one the code no longer uses,
leaves one untranslated or fuzzy, or changes a message's {placeholders}; the template (.pot) must be
what the code extracts, and every sentence explain defines must reach the extraction (a string the
extractor cannot see would never be translated). The fix is `python -m oomguide.i18n`, then translate.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from babel.messages.pofile import read_po

from oomguide import i18n
from oomguide.explain.tensors import TENSOR_NAMES
from oomguide.explain.words import TEXT

ROOT = Path(__file__).resolve().parents[1]
DOMAINS = [d for d in i18n.DOMAINS if len(i18n.extract(d))]
CASES = [(lang, d) for d in DOMAINS for lang in i18n.LANGS if lang != i18n.SOURCE_LANG]


def fields(text: str) -> set[str]:
    return set(re.findall(r"\{(\w*)\}", text))


def read(path: Path, lang: str | None, domain: str):
    with path.open("rb") as f:
        return read_po(f, locale=lang, domain=domain)


@pytest.mark.parametrize(("lang", "domain"), CASES, ids=[f"{lang}/{d}" for lang, d in CASES])
def test_catalog_matches_the_code(lang, domain):
    used = {(m.id, m.context) for m in i18n.extract(domain) if m.id}
    path = i18n.po_path(lang, domain)
    rel = path.relative_to(ROOT)
    assert path.is_file(), f"{rel} is missing: run `python -m oomguide.i18n`, then translate"
    catalog = read(path, lang, domain)
    have = {(m.id, m.context) for m in catalog if m.id}
    assert not used - have, f"{rel} lacks {sorted(used - have)}"
    assert not have - used, f"{rel} has messages the code no longer uses: {sorted(have - used)}"
    for m in catalog:
        if not m.id:
            continue
        assert m.string, f"{rel}: untranslated: {m.id!r}"
        assert not m.fuzzy, f"{rel}: fuzzy (changed in the code, not yet checked): {m.id!r}"
        assert fields(m.string) == fields(m.id), f"{rel}: placeholders differ in {m.id!r}"


@pytest.mark.parametrize("domain", DOMAINS)
def test_template_is_what_the_code_extracts(domain):
    path = i18n.LOCALE / f"{domain}.pot"
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing: run `python -m oomguide.i18n`"
    template = {(m.id, m.context) for m in read(path, None, domain) if m.id}
    extracted = {(m.id, m.context) for m in i18n.extract(domain) if m.id}
    assert template == extracted, "run `python -m oomguide.i18n`"


def test_every_sentence_of_explain_is_extracted():
    extracted = {m.id for m in i18n.extract("explain")}
    missing = [k for k, v in {**TEXT, **TENSOR_NAMES}.items() if v not in extracted]
    assert not missing, f'not seen by the extractor (write N_("..." "..."), no inner parentheses): {missing}'


def test_every_language_translates():
    """Each catalog really changes the words (a catalog that copied the English would pass the rest)."""
    for lang, domain in CASES:
        _ = i18n.gettext_for(lang, domain)
        english = [m.id for m in i18n.extract(domain) if m.id and re.search(r"[a-z]{4}", m.id)]
        same = [e for e in english if _(e) == e]
        assert len(same) < len(english) / 2, f"{lang}/{domain}: {len(same)} of {len(english)} left in English"


def test_catalogs_ship_as_package_data():
    """pyproject.toml's package-data takes every catalog and template, and the site address link."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = data["tool"]["setuptools"]["package-data"]["oomguide"]
    package = ROOT / "src" / "oomguide"
    files = [p.relative_to(package).as_posix() for p in (package / "locale").rglob("*") if p.is_file()]
    files.append("explain/site.yml")
    assert any(f.endswith(".po") for f in files)
    for f in files:
        assert any(fnmatch(f, g) for g in globs), f"src/oomguide/{f} is not in package-data {globs}"


def test_regenerating_an_unchanged_catalog_leaves_its_file_alone(tmp_path):
    """`python -m oomguide.i18n` rewrites a catalog only when a message changed, not for its date."""
    from datetime import datetime, timezone

    from babel.messages.catalog import Catalog

    def catalog(day: int, text: str) -> Catalog:
        made = Catalog(locale="de", domain="check", creation_date=datetime(2026, 11, day, tzinfo=timezone.utc))
        made.add("card", text)
        return made

    path = tmp_path / "check.po"
    i18n._write(path, catalog(1, "Karte"))
    written = path.read_bytes()
    assert b"2026-11-01" in written
    i18n._write(path, catalog(2, "Karte"))
    assert path.read_bytes() == written
    i18n._write(path, catalog(3, "Grafikkarte"))
    assert b"Grafikkarte" in path.read_bytes() and b"2026-11-03" in path.read_bytes()
