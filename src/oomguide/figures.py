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
from decimal import Decimal
from pathlib import Path

from .i18n import N_, NC_, gettext_for, pgettext_for

STORE = Path(__file__).resolve().parents[2] / "examples" / "figures.json"
LANGS = ("en", "ja", "zh", "de", "fr")

# {{ key }} or {{ page.key }}; keys are [a-z0-9_], pages are file stems.
PLACEHOLDER = re.compile(r"\{\{\s*(?:(?P<page>[a-z0-9][a-z0-9-]*)\.)?(?P<key>[a-z0-9_]+)\s*\}\}")

UNITS = ("gib", "mib", "kib", "gb", "bytes", "int", "code", "millions", "ratio", "percent", "seconds", "float", "mark", "verdict")
# oomguide's verdict in a table, the same in every language (the page's legend says which is which):
# 2 fits, 1 borderline, 0 does not fit
VERDICT_SIGNS = ("\u2717", "\u2248", "\u2713")

_BYTE_UNITS = {
    # unit -> (divisor, symbol per language)
    "gib": (1024**3, {"fr": "Gio"}, "GiB"),
    "mib": (1024**2, {"fr": "Mio"}, "MiB"),
    "kib": (1024, {"fr": "Kio"}, "KiB"),
    "gb": (1000**3, {"fr": "Go"}, "GB"),
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


# Typography per language (tests/test_language.py checks the built pages). Numbers come from
# CLDR through Babel (``babel.numbers``, ``babel.units``): each language's digits, decimal sign,
# grouping separator (65,536 / 65.536 / 65 536 with U+202F in French), percent sign and its space,
# compact large numbers (124.37M, 124,37 Mio., 124,37 millions) and the unit "second"
# (0.12 sec, 0.12 秒, 0,12 s). Decided here, on top of CLDR:
# - German and French leave a four-digit number ungrouped (1024, as DIN 5008 and the Imprimerie
#   nationale's rules have it; CLDR would write 1.024 / 1 024): ``GROUP_FROM``;
# - German groups with a narrow no-break space (50 304, which DIN 5008 allows beside CLDR's 50.304),
#   as French does: next to sizes quoted PyTorch's way ("6.14 GiB"), a period would mean two things,
#   and the pages and the tool's output write every count the same way: ``GROUP_SEPARATOR``;
# - the space between a number and its unit is a no-break space in German and French (6,14 GiB,
#   6,14 Gio), so that a line never breaks between them; an ordinary space elsewhere;
# - German seconds are the SI symbol (0,12 s, as German technical writing has them; CLDR's short form
#   is "Sek."), as French's are;
# - Chinese seconds take that space too (0.12 秒, where CLDR writes 0.12秒), as the Chinese pages
#   write a number before a Chinese unit (30 秒, 4 倍, 8 个) and as Japanese CLDR does;
# - Japanese and Chinese counts are written in 億/亿 and 万 (1 億 2,437 万, 1 亿 2437 万, to the
#   precision of the English 124.37M; CLDR's compact 1.24億 keeps less), with that space, as both
#   languages' pages write a number before 万 (約 7,700 万, 约 7700 万): ``_man_oku``;
# - a count of millions is written out in French (124,37 millions: "de paramètres" follows in the
#   page), compact elsewhere;
# - the ratio's words (4.22×, 4,22-mal, 4,22 fois, 4.22 倍) are the ``site`` catalogs' (CLDR has none).
# Rounding is Python's (``f"{x:.2f}"``) before Babel sees the number, so that a size prints as PyTorch
# rounds it ("6.14 GiB" in the message, 6,14 Gio on the page).
NBSP, NNBSP = "\u00a0", "\u202f"
GROUP_FROM = {"en": 4, "ja": 4, "zh": 4, "de": 5, "fr": 5}
UNIT_SPACE = {"en": " ", "ja": " ", "zh": " ", "de": NBSP, "fr": NBSP}
GROUP_SEPARATOR = {"de": NNBSP}  # CLDR's elsewhere
COMPACT = {"fr": "long"}  # format_compact_decimal's format_type; "short" elsewhere
# TRANSLATORS: a ratio in running text ("the logits take 4.22× the memory"); {number} is formatted
# already. Keep the no-break space between number and word where the language puts a space.
RATIO = N_("{number}×")
# TRANSLATORS: the same ratio in a table cell ("1.96×" under a column "Factor"), where a table is
# terser than a sentence (German 1,96× in a table, 1,96-mal in a sentence). {number} is formatted.
RATIO_CELL = NC_("table cell", "{number}×")


def _rounded(value: float, decimals: int) -> Decimal:
    """`value` rounded as Python prints it with `decimals` digits, as an exact Decimal."""
    return Decimal(f"{value:.{decimals}f}")


def _number(value: float, decimals: int, lang: str, trim: bool = False) -> str:
    """`value` with `decimals` fraction digits (at most, if `trim`), as CLDR writes numbers in `lang`."""
    from babel.numbers import format_decimal

    number = _rounded(value, decimals)
    number = abs(number) if number == 0 else number  # -0.001 is "0.00", not "-0.00"
    pattern = "#,##0" + ("." + ("#" if trim else "0") * decimals if decimals else "")
    grouped = abs(number) >= 10 ** (GROUP_FROM[lang] - 1)
    text = format_decimal(number, pattern, locale=lang, group_separator=grouped)
    if grouped and lang in GROUP_SEPARATOR:
        from babel.numbers import get_group_symbol

        text = text.replace(get_group_symbol(lang), GROUP_SEPARATOR[lang])
    return text


def format_count(value: int, lang: str) -> str:
    """A count the tools compute, as `lang` writes it in running text: 50,304 / 50 304 (de and fr,
    U+202F); 1024 in de and fr."""
    return _number(value, 0, lang)


def _unit_spaced(text: str) -> str:
    """CLDR's ja/zh forms put the unit right after the figure (1.24億, 0.12秒, 512字节): a space
    between them, as the pages write a figure and its unit."""
    return re.sub(r"^([\d.,]+)(?=[^\d.,\s])", r"\1 ", text)


def _percent(value: float, decimals: int, lang: str) -> str:
    from babel import Locale
    from babel.numbers import format_percent

    pattern = Locale.parse(lang).percent_formats[None].pattern  # "#,##0 %" in German and French
    if decimals:
        pattern = pattern.replace("#,##0", "#,##0." + "0" * decimals, 1)
    number = _rounded(value * 100, decimals)
    number = abs(number) if number == 0 else number  # -0.04 % is "0.0 %", not "-0.0 %"
    return format_percent(number / 100, pattern, locale=lang)


def _millions(value: float, decimals: int, lang: str) -> str:
    from babel.numbers import format_compact_decimal

    if lang in ("ja", "zh"):
        return _man_oku(value, decimals, lang)
    number = _rounded(value / 1e6, decimals) * 1000000  # a count of millions, as these languages say it
    text = format_compact_decimal(
        number, format_type=COMPACT.get(lang, "short"), locale=lang, fraction_digits=decimals
    )
    return text.replace(" ", UNIT_SPACE[lang])


MAN_OKU = {"ja": ("万", "億"), "zh": ("万", "亿")}


def _man_oku(value: float, decimals: int, lang: str) -> str:
    """A count as Japanese and Chinese write it, in 万 (10⁴) and 億/亿 (10⁸), to the precision the English
    form keeps: 124.37M is 1 億 2,437 万 (1 亿 2437 万), 10.65M is 1,065 万, 1.56B is 15.6 億. The
    English form rounds to `decimals` digits of millions, or of billions from 1B up."""
    man, oku = MAN_OKU[lang]
    step = 10 ** ((9 if round(value / 1e6, decimals) >= 1000 else 6) - decimals)  # what the English keeps
    count = round(Decimal(value) / step) * Decimal(step)
    space = UNIT_SPACE[lang]

    def figure(number: Decimal, unit: float) -> str:  # `number` in units of `unit`, to `step`'s precision
        digits = max(0, len(str(int(unit))) - len(str(step)))
        text = _number(number / Decimal(unit), digits, lang, trim=True)
        if lang == "zh" and number < Decimal(unit) * 10000:  # zh writes 7700 万, ja 7,700 万
            text = text.replace(",", "")
        return text

    if count < 10**8 or step > 10**4:  # 1,065 万; 15.6 億 where the English keeps less than a 万
        unit, name = (10**8, oku) if count >= 10**8 else (10**4, man)
        return f"{figure(count, unit)}{space}{name}" if count else "0"
    whole, rest = divmod(count, 10**8)
    text = f"{figure(whole * 10**8, 10**8)}{space}{oku}"
    return f"{text}{space}{figure(rest, 10**4)}{space}{man}" if rest else text


def _seconds(value: float, decimals: int, lang: str) -> str:
    from babel.units import format_unit

    pattern = "#,##0" + ("." + "0" * decimals if decimals else "")
    text = format_unit(
        _rounded(value, decimals), "duration-second", length="short", locale=lang, format=pattern
    )
    if lang in GROUP_SEPARATOR:  # 12.345 Sek.: the group symbol only, not the unit's period
        text = re.sub(r"(?<=\d)\.(?=\d{3})", GROUP_SEPARATOR[lang], text)
    if lang == "de":
        text = text.replace("Sek.", "s")
    if lang == "zh":  # CLDR: 0.12秒
        text = _unit_spaced(text)
    return text.replace(" ", UNIT_SPACE[lang])


def _bytes(value: int, lang: str) -> str:
    from babel.units import format_unit

    text = format_unit(value, "digital-byte", length="long", locale=lang, format="#,##0")
    if lang == "zh":  # CLDR: 512字节
        text = _unit_spaced(text)
    return text.replace(" ", UNIT_SPACE[lang]).replace("\xa0", UNIT_SPACE[lang])


def _ratio(value: float, decimals: int, lang: str, cell: bool = False) -> str:
    number = _number(value, decimals, lang, trim=True)
    if cell:
        return pgettext_for(lang, "site")("table cell", RATIO_CELL).format(number=number)
    return gettext_for(lang, "site")(RATIO).format(number=number)


def format_figure(
    value: float, unit: str, lang: str = "en", decimals: int | None = None, cell: bool = False
) -> str:
    """Format a figure the way a native technical writer of `lang` prints it; `cell`: in a table's
    cell, where some languages write it more tersely (a ratio)."""
    if lang not in LANGS:
        raise FigureError(f"unknown language {lang!r}")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise FigureError(f"figure value must be a finite number, got {value!r}")
    if unit in _BYTE_UNITS:
        divisor, symbols, default = _BYTE_UNITS[unit]
        number = _number(value / divisor, 2 if decimals is None else decimals, lang)
        return f"{number}{UNIT_SPACE[lang]}{symbols.get(lang, default)}"
    if unit == "bytes":  # a size under 1 KiB, in CLDR's long unit word (512 bytes, 512 バイト, 512 octets)
        return _bytes(round(value), lang)
    if unit == "int":
        return format_count(round(value), lang)
    if unit == "code":  # a value inside code (`block_size = 1024`): Python's spelling in every language
        return str(round(value))
    if unit == "millions":
        return _millions(value, 2 if decimals is None else decimals, lang)
    if unit == "ratio":  # 2 倍, not 2.00 倍: trailing zeros dropped
        return _ratio(value, 2 if decimals is None else decimals, lang, cell)
    if unit == "percent":
        return _percent(value, 0 if decimals is None else decimals, lang)
    if unit == "seconds":
        return _seconds(value, 2 if decimals is None else decimals, lang)
    if unit == "float":
        return _number(value, 2 if decimals is None else decimals, lang)
    if unit == "mark":  # a yes/no a table shows: 1 -> ✓, 0 -> ✗, the same in every language
        if value not in (0, 1):
            raise FigureError(f"a mark is 0 or 1, got {value!r}")
        return "\u2713" if value else "\u2717"
    if unit == "verdict":
        if value not in (0, 1, 2):
            raise FigureError(f"a verdict is 0 (does not fit), 1 (borderline) or 2 (fits), got {value!r}")
        return VERDICT_SIGNS[int(value)]
    raise FigureError(f"unknown figure unit {unit!r} (known: {', '.join(UNITS)})")


def format_bytes(nbytes: float, lang: str = "en") -> str:
    """A size the tool computed (a prediction, a sum), as `lang` writes it and the pages print it (6.14 GiB,
    6,14 GiB, 6,14 Gio): GiB from 1 GiB up, MiB below (``units.fmt_bytes``'s choice). A size quoted
    from the reader's OOM message is never passed here: it stays as PyTorch printed it, to be found in the log."""
    return format_figure(nbytes, "gib" if nbytes >= 1024**3 else "mib", lang)


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
        line_start = text.rfind("\n", 0, match.start()) + 1
        cell = text[line_start : match.start()].lstrip().startswith("|")
        return format_figure(entry["value"], unit, lang, entry.get("decimals"), cell)

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
    """A matplotlib tick formatter that writes numbers as `lang` does, from CLDR (2,5 in German and French)."""
    from matplotlib.ticker import FuncFormatter

    if lang not in LANGS:
        raise FigureError(f"unknown language {lang!r}")

    def fmt(value: float, _position=None) -> str:
        text = f"{value:.10g}"
        whole, _, frac = text.lstrip("-").partition(".")
        if not whole.isdigit():  # 1e+20 and the like: leave as matplotlib would print it
            return text
        return _number(float(text), len(frac), lang)

    return FuncFormatter(fmt)
