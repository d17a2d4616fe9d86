"""Figures that pages print and examples compute: one store, one formatter.

A page writes ``{{ key }}`` (a figure of its own page) or ``{{ page-stem.key }}``;
the site hook replaces it with the value from ``examples/figures.json``, formatted for
the page's language. The examples compute every value and fail when the store differs
(see ``examples/conftest.py``, fixture ``figure``), so a page cannot print a number that
the code does not produce.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

STORE = Path(__file__).resolve().parents[2] / "examples" / "figures.json"
LANGS = ("en", "ja", "zh", "de", "fr")

# {{ key }} or {{ page.key }}; keys are [a-z0-9_], pages are file stems.
PLACEHOLDER = re.compile(r"\{\{\s*(?:(?P<page>[a-z0-9][a-z0-9-]*)\.)?(?P<key>[a-z0-9_]+)\s*\}\}")

UNITS = ("gib", "mib", "int", "code", "millions", "ratio", "percent", "seconds", "float", "mark")

_BYTE_UNITS = {
    # unit -> (divisor, symbol per language)
    "gib": (1024**3, {"fr": "Gio"}, "GiB"),
    "mib": (1024**2, {"fr": "Mio"}, "MiB"),
}


class FigureError(ValueError):
    """A figure that is missing, malformed or of an unknown unit."""


def load(path: Path = STORE) -> dict[str, dict[str, dict]]:
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def save(store: dict, path: Path = STORE) -> None:
    ordered = {page: dict(sorted(figs.items())) for page, figs in sorted(store.items())}
    path.write_text(json.dumps(ordered, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


# Typography per language (see also tests/test_language.py, which checks the built pages):
# - the thousands separator, and from how many digits on a number is grouped: English, Japanese
#   and Chinese group from four digits with a comma (65,536); German groups from five digits with a
#   period (65.536, but 1024), French from five digits with a narrow no-break space (65 536, 1024);
# - the decimal sign: a comma in German and French;
# - the space between a number and its unit: a no-break space in German and French (6,14 GiB,
#   6,14 Gio), so that a line never breaks between them; an ordinary space elsewhere;
# - ratios as each language says them in running text: "4.22×" in English, "4,22-mal" in German,
#   "4,22 fois" in French, "4.22 倍" in Japanese and Chinese.
NBSP, NNBSP = "\u00a0", "\u202f"
THOUSANDS = {"en": ",", "ja": ",", "zh": ",", "de": ".", "fr": NNBSP}
GROUP_FROM = {"en": 4, "ja": 4, "zh": 4, "de": 5, "fr": 5}
DECIMAL = {"en": ".", "ja": ".", "zh": ".", "de": ",", "fr": ","}
UNIT_SPACE = {"en": " ", "ja": " ", "zh": " ", "de": NBSP, "fr": NBSP}
RATIO = {"en": "×", "ja": NBSP + "倍", "zh": NBSP + "倍", "de": "-mal", "fr": NBSP + "fois"}


def _group(int_text: str, sep: str, group_from: int = 4) -> str:
    if len(int_text) < group_from:
        return int_text
    head, rest = int_text[: len(int_text) % 3 or 3], int_text[len(int_text) % 3 or 3 :]
    return sep.join([head] + [rest[i : i + 3] for i in range(0, len(rest), 3)])


def group_int(value: int, lang: str) -> str:
    """An integer as `lang` writes it in running text: 50,304 / 50.304 / 50 304; 1024 in de and fr."""
    return _number(value, 0, lang)


def _number(value: float, decimals: int, lang: str) -> str:
    text = f"{abs(value):.{decimals}f}"
    whole, _, frac = text.partition(".")
    out = _group(whole, THOUSANDS[lang], GROUP_FROM[lang]) + (DECIMAL[lang] + frac if frac else "")
    return ("-" if value < 0 else "") + out


def format_figure(value: float, unit: str, lang: str = "en", decimals: int | None = None) -> str:
    """Format a figure the way a native technical writer of `lang` prints it."""
    if lang not in LANGS:
        raise FigureError(f"unknown language {lang!r}")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise FigureError(f"figure value must be a finite number, got {value!r}")
    if unit in _BYTE_UNITS:
        divisor, symbols, default = _BYTE_UNITS[unit]
        number = _number(value / divisor, 2 if decimals is None else decimals, lang)
        return f"{number}{UNIT_SPACE[lang]}{symbols.get(lang, default)}"
    if unit == "int":
        return _number(round(value), 0, lang)
    if unit == "code":  # a value inside code (`block_size = 1024`): Python's spelling in every language
        return str(round(value))
    if unit == "millions":
        number = _number(value / 1e6, 2 if decimals is None else decimals, lang)
        return number + {"de": NBSP + "Mio.", "fr": NBSP + "millions"}.get(lang, "M")
    if unit == "ratio":
        number = _number(value, 2 if decimals is None else decimals, lang)
        return number + RATIO[lang]
    if unit == "percent":
        text = _number(value * 100, 0 if decimals is None else decimals, lang)
        return text + (NNBSP + "%" if lang in ("de", "fr") else "%")
    if unit == "seconds":
        return _number(value, 2 if decimals is None else decimals, lang) + UNIT_SPACE[lang] + "s"
    if unit == "float":
        return _number(value, 2 if decimals is None else decimals, lang)
    if unit == "mark":  # a yes/no a table shows: 1 -> ✓, 0 -> ✗, the same in every language
        if value not in (0, 1):
            raise FigureError(f"a mark is 0 or 1, got {value!r}")
        return "\u2713" if value else "\u2717"
    raise FigureError(f"unknown figure unit {unit!r} (known: {', '.join(UNITS)})")


# Code in a page: fenced blocks and `code spans`. A figure inside code is written as the program
# writes it, whatever the page's language: PyTorch prints "Tried to allocate 6.14 GiB" in Paris too.
_CODE = re.compile(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2[ \t]*$|(`+)(?:(?!\3).)+?\3", re.S | re.M)


def render(text: str, page: str, lang: str, store: dict | None = None) -> str:
    """Replace every placeholder of `text` (a page `page` in `lang`) with its formatted figure.

    Inside code (fences, code spans) a figure takes the English form without grouping, as a program
    prints it; elsewhere the page's language's."""
    store = load() if store is None else store
    code = [m.span() for m in _CODE.finditer(text)]

    def sub(match: re.Match) -> str:
        owner = match.group("page") or page
        key = match.group("key")
        entry = store.get(owner, {}).get(key)
        if entry is None:
            raise FigureError(
                f"{lang}/{page}: figure {owner}.{key} is not in {STORE.name}; run `pytest examples --update-figures`"
            )
        unit = entry["unit"]
        if any(start <= match.start() < end for start, end in code):
            return format_figure(
                entry["value"], "code" if unit == "int" else unit, "en", entry.get("decimals")
            )
        return format_figure(entry["value"], unit, lang, entry.get("decimals"))

    return PLACEHOLDER.sub(sub, text)


def placeholders(text: str, page: str) -> list[tuple[str, str]]:
    """The (page, key) of every figure a page's text uses, in order."""
    return [(m.group("page") or page, m.group("key")) for m in PLACEHOLDER.finditer(text)]


# --- charts -------------------------------------------------------------------------------------

# A chart in Japanese or Chinese needs a font with that script; Noto Sans CJK (Debian's
# fonts-noto-cjk) has both, with each language's glyph forms. Latin scripts keep matplotlib's default.
CHART_FONTS = {"ja": "Noto Sans CJK JP", "zh": "Noto Sans CJK SC"}


def chart_style(lang: str) -> dict:
    """matplotlib settings (``plt.rcParams.update(...)``) for a chart whose text is in `lang`."""
    if lang not in LANGS:
        raise FigureError(f"unknown language {lang!r}")
    fonts = [CHART_FONTS[lang], "DejaVu Sans"] if lang in CHART_FONTS else ["DejaVu Sans"]
    return {"font.family": "sans-serif", "font.sans-serif": fonts}


def tick_format(lang: str):
    """A matplotlib tick formatter that writes numbers as `lang` does (2,5 in German and French)."""
    from matplotlib.ticker import FuncFormatter

    if lang not in LANGS:
        raise FigureError(f"unknown language {lang!r}")

    def fmt(value: float, _position=None) -> str:
        text = f"{value:.10g}"
        whole, _, frac = text.lstrip("-").partition(".")
        if not whole.isdigit():  # 1e+20 and the like: leave as matplotlib would print it
            return text
        number = _number(float(text), len(frac), lang)
        return number

    return FuncFormatter(fmt)
