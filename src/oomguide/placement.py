"""Where each snippet goes in nanoGPT: one data file, read by the site and by the tests.

``snippets/placement.toml`` has one table per snippet (its path under ``snippets/``). The site
hook turns it into the "where this goes" line next to the snippet, in the page's language
(:func:`describe`); the examples apply the snippet to a copy of nanoGPT exactly there
(:func:`apply`). So the page and the test cannot disagree. The line's words are English in
``WORDS`` (message ids); the other languages' are in ``locale/<lang>/LC_MESSAGES/site.po``
(:mod:`oomguide.i18n`).

Kinds of placement (one per table):

* ``config = "config/train_mine.py"``: lines of a nanoGPT config file.
* ``shell = "nanogpt"``, ``"nanochat"`` or ``"oomguide"``: commands typed in a shell, in a checkout of
  one of them (a nanochat line such as ``torchrun … -m scripts.base_train -- --depth=24 …``).
* ``env = true``: an environment setting, in the shell that starts ``python train.py``, before it.
* ``file = "train.py"``, ``"model.py"`` or ``"sample.py"`` (nanoGPT), or a file of nanochat
  (``"nanochat/gpt.py"``, ``"scripts/base_train.py"`` …), with one of
  - ``replace = "estimate_loss"`` (a function) or ``"GPT.forward"`` (a method): the snippet's
    ``def`` of that name replaces it; the snippet's other lines (imports, helpers, constants) go
    just before the top-level statement that holds the target (the function itself, or ``class GPT``);
  - ``replace_line``, ``before`` or ``after = "<a line of code>"``, optionally ``within = "<function>"``:
    the snippet replaces that line, or goes just before or after it, at its indentation.

``needs = ["page/other.py", ...]``: snippets that must be in place first (the tests apply them too;
the page names those that are code changes).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

from .i18n import N_, gettext_for

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "snippets"
DATA = SNIPPETS / "placement.toml"

LINE_KINDS = ("replace_line", "before", "after")
SHELLS = ("nanogpt", "nanochat", "oomguide")
NANOCHAT_FOLDERS = ("nanochat/", "scripts/", "tasks/", "runs/")  # a file there is nanochat's
NANOGPT_FILES = ("train.py", "model.py", "sample.py")  # the nanoGPT files a code snippet goes into


class PlacementError(ValueError):
    """A placement that cannot be read, or a target that is not where the placement says."""


@dataclass(frozen=True)
class Placement:
    snippet: str  # path under snippets/
    kind: str  # config, shell, env, replace, replace_line, before, after
    file: str = ""  # config: the config file; code: train.py / model.py; shell: nanogpt / oomguide
    target: str = ""  # the function, method or line
    within: str = ""  # the function that holds the target line
    needs: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_code(self) -> bool:
        return self.kind in ("replace", *LINE_KINDS)

    @property
    def program(self) -> str:
        """The checkout it goes into: "nanochat" (its shell, or a file under nanochat's folders),
        "oomguide" (a shell in oomguide), else "nanogpt"."""
        if self.kind == "shell":
            return self.file
        if self.is_code and self.file.startswith(NANOCHAT_FOLDERS):
            return "nanochat"
        return "nanogpt"


def load(path: Path = DATA) -> dict[str, Placement]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PlacementError(f"{path}: {exc}") from None
    out = {}
    for snippet, entry in data.items():
        out[snippet] = _entry(snippet, dict(entry))
    for snippet, place in out.items():
        for need in place.needs:
            if need not in out:
                raise PlacementError(f"{path.name}: {snippet} needs {need}, which has no placement")
    return out


def _entry(snippet: str, entry: dict) -> Placement:
    needs = tuple(entry.pop("needs", ()))
    within = entry.pop("within", "")
    if "config" in entry:
        place = Placement(snippet, "config", entry.pop("config"), needs=needs)
    elif "shell" in entry:
        place = Placement(snippet, "shell", entry.pop("shell"), needs=needs)
        if place.file not in SHELLS:
            choices = ", ".join(repr(name) for name in SHELLS)
            raise PlacementError(f"{snippet}: shell must be one of {choices}, not {place.file!r}")
    elif entry.pop("env", False):
        place = Placement(snippet, "env", needs=needs)
    elif "file" in entry:
        kinds = [k for k in ("replace", *LINE_KINDS) if k in entry]
        if len(kinds) != 1:
            raise PlacementError(f"{snippet}: give exactly one of replace, replace_line, before, after")
        place = Placement(snippet, kinds[0], entry.pop("file"), entry.pop(kinds[0]), within, needs)
        if place.file not in NANOGPT_FILES and not place.file.startswith(NANOCHAT_FOLDERS):
            raise PlacementError(
                f"{snippet}: file must be one of {', '.join(NANOGPT_FILES)} (nanoGPT) or a file under "
                f"{', '.join(NANOCHAT_FOLDERS)} (nanochat), not {place.file!r}"
            )
    else:
        raise PlacementError(f"{snippet}: no placement (config, shell, env or file)")
    if entry:
        raise PlacementError(f"{snippet}: unknown keys {sorted(entry)}")
    if within and place.kind not in LINE_KINDS:
        raise PlacementError(f"{snippet}: 'within' goes with replace_line, before or after only")
    return place


def expand(snippets, placements: dict[str, Placement]) -> list[str]:
    """The snippets with everything they need, each once, needs first, in order."""
    out: list[str] = []

    def add(name: str, chain: tuple[str, ...] = ()):
        if name in chain:
            raise PlacementError(f"needs form a cycle: {' -> '.join((*chain, name))}")
        if name not in placements:
            raise PlacementError(f"{name} has no placement in {DATA.name}")
        for need in placements[name].needs:
            add(need, (*chain, name))
        if name not in out:
            out.append(name)

    for name in snippets:
        add(name)
    return out


# --- applying a code snippet -------------------------------------------------------------


def _strip(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _indent(text: str, prefix: str) -> list[str]:
    return [(prefix + line if line.strip() else "") for line in text.rstrip("\n").split("\n")]


def _start(node: ast.AST) -> int:
    """First line (1-based) of a def or class, decorators included."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _function(tree: ast.Module, name: str, where: str):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    raise PlacementError(f"{where} has no function {name}()")


def _parse(text: str, where: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise PlacementError(f"{where}:{exc.lineno}: not valid Python: {exc.msg}") from None


def apply(place: Placement, snippet_text: str, target_text: str) -> str:
    """`target_text` (the file `place.file`) with the snippet put where `place` says."""
    if not place.is_code:
        raise PlacementError(f"{place.snippet}: a {place.kind} snippet is not pasted into a file")
    lines = target_text.split("\n")
    tree = _parse(target_text, place.file)
    if place.kind == "replace":
        out = _replace_def(place, snippet_text, lines, tree)
    else:
        out = _at_line(place, snippet_text, lines, tree)
    result = "\n".join(out)
    _parse(result, f"{place.file} with {place.snippet}")
    return result


def _replace_def(place: Placement, snippet_text: str, lines: list[str], tree: ast.Module) -> list[str]:
    snippet_tree = _parse(snippet_text, place.snippet)
    snippet_lines = snippet_text.rstrip("\n").split("\n")
    owner_name, _, name = place.target.rpartition(".")
    defs = [n for n in snippet_tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        raise PlacementError(f"{place.snippet} defines no {name}() to replace {place.target}")
    new_def = defs[-1]
    lo, hi = _start(new_def), new_def.end_lineno
    # the lines just above the def that are comments about it stay with the rest
    definition = "\n".join(snippet_lines[lo - 1 : hi])
    rest = "\n".join(snippet_lines[: lo - 1] + snippet_lines[hi:]).strip("\n")
    if owner_name:
        owner = next(
            (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner_name),
            None,
        )
        if owner is None:
            raise PlacementError(f"{place.file} has no class {owner_name}")
        old = next((n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if old is None:
            raise PlacementError(f"{place.file}: class {owner_name} has no method {name}()")
        prefix = lines[old.lineno - 1][: old.col_offset]
        holder = owner
    else:
        old = _function(tree, name, place.file)
        prefix = ""
        holder = old
    out = lines[: _start(old) - 1] + _indent(definition, prefix) + lines[old.end_lineno :]
    if rest.strip():
        at = _start(holder) - 1
        out = out[:at] + rest.split("\n") + ["", ""] + out[at:]
    return out


def _at_line(place: Placement, snippet_text: str, lines: list[str], tree: ast.Module) -> list[str]:
    lo, hi = 1, len(lines)
    if place.within:
        func = _function(tree, place.within, place.file)
        lo, hi = func.lineno, func.end_lineno
    target = _strip(place.target)
    found = [i for i in range(lo - 1, hi) if _strip(lines[i]) == target]
    where = f"{place.file}" + (f", in {place.within}()" if place.within else "")
    if not found:
        raise PlacementError(f"{where} has no line `{place.target}`")
    if len(found) > 1:
        raise PlacementError(f"{where} has the line `{place.target}` {len(found)} times")
    i = found[0]
    prefix = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    new = _indent(snippet_text, prefix)
    if place.kind == "replace_line":
        return lines[:i] + new + lines[i + 1 :]
    if place.kind == "before":
        return lines[:i] + new + lines[i:]
    return lines[: i + 1] + new + lines[i + 1 :]


def rest_of(place: Placement, snippet_text: str) -> bool:
    """Whether a method replacement carries other lines (imports, helpers) that go above the class."""
    if place.kind != "replace" or "." not in place.target:
        return False
    tree = _parse(snippet_text, place.snippet)
    name = place.target.rpartition(".")[2]
    return any(
        not (isinstance(n, ast.FunctionDef) and n.name == name)
        for n in tree.body
        if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    )


def apply_to(
    folder: Path, snippets, placements: dict[str, Placement] | None = None, code: bool = True
) -> tuple[list[str], list[str], list[str]]:
    """Put the snippets (and what they need) into the checkout at `folder` (nanoGPT's or nanochat's),
    where this table says: config lines appended to their config file, code into its file (:func:`apply`).

    Returns (config files, relative to `folder`; shell/env snippets, which run rather than go into a
    file; every snippet applied). ``code=False``: the config lines only (nanoGPT's own code kept).
    """
    placements = placements or load()
    configs: list[str] = []
    shell: list[str] = []
    applied: list[str] = []
    for rel in expand(snippets, placements):
        place = placements[rel]
        if not code and place.kind != "config":
            continue
        applied.append(rel)
        text = (SNIPPETS / rel).read_text(encoding="utf-8")
        if place.kind == "config":
            path = folder / place.file
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(text if text.endswith("\n") else text + "\n")
            if place.file not in configs:
                configs.append(place.file)
        elif place.is_code:
            target = folder / place.file
            target.write_text(apply(place, text, target.read_text(encoding="utf-8")), "utf-8")
        else:
            shell.append(rel)
    return configs, shell, applied


# --- the page's "where this goes" line ---------------------------------------------------

# the English words of the "where this goes" line: msgids of locale/<lang>/LC_MESSAGES/site.po
WORDS = {
    "label": N_("Where this goes"),
    "config": N_("the config file `{file}`"),
    "shell:nanogpt": N_("a shell, in your nanoGPT checkout"),
    "shell:nanochat": N_("a shell, in your nanochat checkout"),
    "shell:oomguide": N_("a shell, in a checkout of oomguide"),
    "env": N_("the shell that starts `python train.py`, before that command"),
    "replace:function": N_("in `{file}`, this code replaces the function `{target}()`"),
    "replace:method": N_("in `{file}`, this `{name}` replaces the method `{target}`"),
    "rest": N_("; the lines before `def {name}` in the snippet go just before `class {owner}`"),
    "replace_line": N_("in `{file}`, this replaces the line `{target}`{within}"),
    "before": N_("in `{file}`, just before the line `{target}`{within}, at its indentation"),
    "after": N_("in `{file}`, just after the line `{target}`{within}"),
    "within": N_(" in `{within}()`"),
    "needs": N_("Needs {needs}."),
    "and": N_(" and "),
}


def describe(place: Placement, lang: str, placements: dict[str, Placement] | None = None) -> str:
    """The "where this goes" line of a snippet, in Markdown, in `lang`."""
    t = gettext_for(lang, "site")
    words = {key: t(text) for key, text in WORDS.items()}
    owner, _, name = place.target.rpartition(".")
    fields = dict(file=place.file, target=place.target, name=name, owner=owner)
    fields["within"] = words["within"].format(within=place.within) if place.within else ""
    if place.kind == "shell":
        text = words[f"shell:{place.file}"]
    elif place.kind == "replace":
        text = words["replace:method" if owner else "replace:function"].format(**fields)
        if owner and rest_of(place, (SNIPPETS / place.snippet).read_text(encoding="utf-8")):
            text += words["rest"].format(**fields)
    else:
        text = words[place.kind].format(**fields)
    colon = "：" if lang in ("ja", "zh") else ("\u00a0: " if lang == "fr" else ": ")
    cjk = lang in ("ja", "zh")
    line = f"**{words['label']}**{colon}{text}" + ("。" if cjk else ".")
    code_needs = [n for n in place.needs if placements is None or placements[n].is_code]
    if code_needs:
        names = words["and"].join(f"`{Path(n).name}`" for n in code_needs)
        line += ("" if cjk else " ") + words["needs"].format(needs=names)
    return line
