"""Every one-line error and note that ``oomguide check`` and ``oomguide explain`` print, and their
``--help``, speak the reader's language (issue 31): nothing comes out in English in ja, zh, de or fr.

Three layers, so that a new message cannot slip through:

* **In the code.** Every sentence the library raises (a ``ValueError`` the CLI prints as its error
  line), warns or appends to a run's notes is read from the source (its f-string, each value a
  stand-in) and must be an instance of a msgid of ``oomguide.messages``; only the internal errors of
  ``INTERNAL`` (a programming error, or refused earlier with its own message) are left out, each
  with the reason.
* **In the catalogs.** Every msgid of ``oomguide.messages`` has a translation in every language that
  is not the English sentence.
* **At run time.** The CLI runs each bad input, in each language: one line, exit 2, and the line is
  not the English one (a message the matcher misses, as ``'foo' is not a nanoGPT train.py setting``
  was, fails here). The notes of a run and the paste box's lines are checked the same way, and
  ``--help`` must hold none of its English sentences.
"""

from __future__ import annotations

import ast
import io
import json
import pickle
import re
import sys
from pathlib import Path

import pytest

from oomguide import i18n, messages, verdict
from oomguide.cli import main
from oomguide.explain import browser

PACKAGE = Path(i18n.__file__).resolve().parent
LANGS = [lang for lang in i18n.LANGS if lang != i18n.SOURCE_LANG]
# what the CLI prints as its error line (cli._main, explain/browser.py), and what becomes a note
ERROR_CLASSES = {
    "ValueError",
    "ConfigError",
    "BadRequest",
    "BadCommand",
    "CheckoutError",
    "ExplainError",
    "BadInput",
    "PredictionError",
    "ArgumentTypeError",
}
# (module, the sentence's start): raised only for a caller's programming error, or after the CLI has
# refused the same input with a message of its own; never the reader's line
INTERNAL = {
    ("config.py", "exponent too large"): "caught by the config reader: the line is skipped or refused",
    ("i18n.py", "unknown language"): "--lang is one of argparse's choices",
    ("memory/distributed.py", "unknown phase"): "phases come from memory.CHECKS",
    ("memory/distributed.py", "the number of processes"): "verdict.prepare refuses --nproc-per-node first",
    (
        "memory/distributed.py",
        "unknown strategy",
    ): "verdict.Parallel is built from --strategy's checked value",
    ("memory/distributed.py", "strategy "): "verdict.prepare refuses --strategy with one process first",
    ("memory/measure.py", "a "): "measured runs are the examples' (pytest), not the CLI's",
    ("memory/phases.py", "unknown phase"): "phases come from memory.CHECKS",
    ("memory/predict.py", "unknown phase"): "phases come from memory.CHECKS",
    ("memory/predict.py", "unknown state"): "states are the engine's own",
    ("memory/predict.py", "phase "): "states are the engine's own",
    ("model.py", "unknown model type"): "config.validate refuses init_from first",
    ("nanochat/phases.py", "unknown phase kind"): "phase kinds are nanochat/plan.py's own",
    ("versions.py", "cannot read a PyTorch version"): "torch.__version__ of an installed torch",
    ("reports.py", ""): "the accuracy page's cases (pytest), not the CLI",
}


# --- in the code ----------------------------------------------------------------------------


def _text(node: ast.AST, token: str) -> str | None:
    """The sentence a str or f-string builds, each value written `token` (repr'd ones quoted, as
    the library prints them); None for anything else (a message passed on, as ``str(exc)``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value)
            else:
                parts.append(f"'{token}'" if value.conversion == ord("r") else token)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, token), _text(node.right, token)
        return None if left is None or right is None else left + right
    return None


def written_messages() -> list[tuple[str, int, str, ast.AST]]:
    """(module, line, kind, sentence node) of every error, warning and note the library writes."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in ERROR_CLASSES:
                kind = "error"
            elif name == "warn" and getattr(func.value, "id", None) == "warnings":
                kind = "warning"
            elif name in ("append", "insert") and "notes" in ast.unparse(func.value):
                kind = "note"
            elif name in ("append", "insert") and "assumptions" in ast.unparse(func.value):
                kind = "assumption"  # check --nanochat's "assumed: …" lines
            else:
                continue
            out.append((module, node.lineno, kind, node.args[-1]))
    return out


def _internal(module: str, text: str) -> bool:
    return any(module == m and text.startswith(start) for m, start in INTERNAL)


def test_every_message_the_library_writes_has_a_msgid():
    found = written_messages()
    assert len(found) > 100, "the scan found too little: did the error classes change?"
    missing = []
    for module, line, kind, node in found:
        text = _text(node, "x")
        if text is None or _internal(module, text):
            continue
        if not any(messages.match(_text(node, token)) for token in ("x", "--x", "1")):
            missing.append(f"src/oomguide/{module}:{line} ({kind}): {text!r}")
    assert not missing, (
        "sentences no msgid of oomguide.messages matches (they print in English in every language): "
        "add the msgid, run `python -m oomguide.i18n` and translate:\n" + "\n".join(missing)
    )


def test_internal_errors_are_still_in_the_code():
    """An INTERNAL entry whose error is gone is left out of the list."""
    found = {(m, _text(n, "x") or "") for m, _, _, n in written_messages()}
    stale = [key for key in INTERNAL if not any(m == key[0] and t.startswith(key[1]) for m, t in found)]
    assert not stale, stale


# --- in the catalogs --------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_every_msgid_is_translated(lang):
    _ = i18n.gettext_for(lang, "check")
    same = [m for m in (*messages.MESSAGES, *messages.READERS) if _(m) == m]
    assert not same, f"{lang}: check.po leaves these in English (or lacks them): {same}"


# --- at run time: errors --------------------------------------------------------------------

OOM_CUT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of"
)
MPS = "RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB)"
NO_FIGURES = "RuntimeError: the job ran out of memory"


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A folder with a config, a model.py without a GPT, and a meta.pkl that would run code."""
    root = tmp_path_factory.mktemp("every-line")
    (root / "train_mine.py").write_text("batch_size = 4\nn_layer = 2\n", encoding="utf-8")
    (root / "model.py").write_text("x = 1\n", encoding="utf-8")
    (root / "data" / "evil").mkdir(parents=True)
    (root / "data" / "evil" / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65, "f": print}))
    (root / "data" / "zero").mkdir(parents=True)
    (root / "data" / "zero" / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 0}))
    (root / "empty.txt").write_text("", encoding="utf-8")
    return root


def error_cases(root: Path) -> dict[str, tuple[list[str], str | None]]:
    """name -> (argv, stdin): each ends in one error line, before any prediction runs."""
    config = str(root / "train_mine.py")
    return {
        "config missing": (["check", str(root / "missing.py")], None),
        "config is a folder": (["check", str(root)], None),
        "unknown key": (["check", config, "--set", "nonsense=3"], None),
        "not key=value": (["check", config, "--set", "batch_size"], None),
        "wrong type": (["check", config, "--set", "batch_size='abc'"], None),
        "dtype": (["check", config, "--set", "dtype='float8'"], None),
        "init_from": (["check", config, "--set", "init_from='gpt3'"], None),
        "dropout": (["check", config, "--set", "dropout=1.5"], None),
        "n_head": (["check", config, "--set", "n_head=5"], None),
        "block_size": (["check", config, "--set", "init_from='gpt2'", "--set", "block_size=2048"], None),
        "meta.pkl runs code": (["check", config, "--set", "dataset='evil'"], None),
        "meta.pkl vocab": (["check", config, "--set", "dataset='zero'"], None),
        "model missing": (["check", config, "--model", str(root / "no-model.py")], None),
        "model without GPT": (["check", config, "--model", str(root / "model.py")], None),
        "size": (["check", config, "--gpu-memory", "12"], None),
        "unknown GPU": (["check", config, "--gpu", "zzzzzzzz"], None),
        "processes": (["check", config, "--nproc-per-node", "0"], None),
        "argparse choice": (["check", config, "--phase", "nope"], None),
        "argparse command": (["nope"], None),
        "argparse no command": ([], None),  # "oomguide --lang de" alone: the command word is missing
        "argparse unknown option": (["check", config, "--bogus"], None),
        "argparse value missing": (["check", config, "--gpu"], None),
        "argparse int": (["check", config, "--nproc-per-node", "x"], None),
        "argparse flag with a value": (["check", config, "--json=1"], None),
        "explain file missing": (["explain", str(root / "missing.txt")], None),
        "explain folder": (["explain", str(root)], None),
        "explain empty file": (["explain", str(root / "empty.txt")], None),
        "explain stdin empty": (["explain", "-"], ""),
        "explain no message": (["explain", "-"], "step 0: train loss 10.9\n"),
        "explain no figures": (["explain", "-"], NO_FIGURES),
        "explain MPS": (["explain", "-"], MPS),
        "explain cut": (["explain", "-"], OOM_CUT),
        "explain argparse": (["explain", "-", "--gpu-memory", "abc"], None),
    }


def run_cli(argv, stdin, lang, monkeypatch, capsys, cwd) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin if stdin is not None else ""))
    try:
        rc = main([*argv, "--lang", lang])
    except SystemExit as exc:  # argparse's errors
        rc = exc.code
    return rc, capsys.readouterr().err


def _message(line: str) -> str:
    """The library's message in an error line ("oomguide check: error: MESSAGE")."""
    return re.split(r"[:：]\s*(?:error|エラー|错误|Fehler|erreur)\s*[:：]\s*", line.strip(), maxsplit=1)[-1]


@pytest.mark.parametrize("name", list(error_cases(Path("."))))
def test_every_error_line_in_every_language(name, place, monkeypatch, capsys):
    argv, stdin = error_cases(place)[name]
    rc, english = run_cli(argv, stdin, "en", monkeypatch, capsys, place)
    assert rc == 2 and english.count("\n") == 1, f"{name}: {rc} {english!r}"
    text = _message(english)
    assert messages.match(text), f"{name}: no msgid matches {text!r}"
    for lang in LANGS:
        rc, line = run_cli(argv, stdin, lang, monkeypatch, capsys, place)
        assert rc == 2 and line.count("\n") == 1, f"{name} ({lang}): {rc} {line!r}"
        assert text not in line, f"{name} ({lang}): in English: {line!r}"
        assert not re.search(r"\bcommand\b", line), f"{name} ({lang}): argparse's name in English: {line!r}"
        assert "stdin" not in line or lang == "de", f"{name} ({lang}): {line!r}"  # de says stdin


@pytest.mark.parametrize("text", ["", "  \n", "step 0: train loss 10.9", NO_FIGURES, MPS, OOM_CUT])
def test_the_paste_box_speaks_of_the_pasted_text(text):
    english = json.loads(browser.answer(text, "en", ".."))["error"]
    assert "stdin" not in english and ("pasted text" in english or "Tried to allocate" in english)
    for lang in LANGS:
        line = json.loads(browser.answer(text, lang, ".."))["error"]
        assert _message(english) not in line, f"{lang}: in English: {line!r}"
        assert "stdin" not in line and "標準入力" not in line and "标准输入" not in line, line


# --- at run time: notes ---------------------------------------------------------------------


def note_cases(root: Path) -> dict[str, tuple[str, dict]]:
    """name -> (config text, Request fields): each run's notes, read without a prediction."""
    return {
        "no meta.pkl": ("dataset = 'shakespeare_char'\n", {}),
        "no checkpoint": ("init_from = 'resume'\n", {}),
        "not a setting": ("foo = 1\n", {}),
        "not an assignment": ("import os\nbatch_size = 4\n", {}),
        "not a literal": ("learning_rate = max(1e-4, 1e-3)\n", {}),
        "guide key": ("eval_batch_size = 4\n", {}),
        "guide key on the command line": ("batch_size = 4\n", {"overrides": ["eval_block_size=8"]}),
        "eval_only": ("eval_only = True\n", {"phases": ["train_step"]}),
        "not run": ("batch_size = 4\n", {"phases": ["resume"]}),
    }


@pytest.mark.parametrize("name", list(note_cases(Path("."))))
def test_every_note_in_every_language(name, tmp_path):
    text, fields = note_cases(tmp_path)[name]
    (tmp_path / "train_mine.py").write_text(text, encoding="utf-8")
    run = verdict.prepare(verdict.Request(configs=[str(tmp_path / "train_mine.py")], cwd=tmp_path, **fields))
    notes = list(run.notes)
    assert notes, f"{name}: no note"
    for note in notes:
        found = messages.match(note)
        assert found, f"{name}: no msgid matches the note {note!r}"
        for lang in LANGS:
            translated = messages.translate(note, lang)
            assert translated != note, f"{name} ({lang}): in English: {note!r}"
            for key, value in found[1].items():  # the values, kept (those of other messages translated)
                if value and key not in (*messages.RECURSIVE, "reader"):
                    assert value in translated, f"{name} ({lang}): {value!r} lost in {translated!r}"


# --- at run time: what the recorded outputs print ---------------------------------------------

GOLDEN = Path(__file__).resolve().parent / "golden"
# English function words that no ja, zh, de or fr sentence of the tool has outside quotes and code
_ENGLISH = re.compile(r"\b(?:the|is|of|and|but|from|with|was|which|are|not|its)\b")
_QUOTED = re.compile(r"`[^`]*`|'[^']*'|\"[^\"]*\"|\([^()]*Tried to allocate[^()]*\)")


def english_lines(text: str) -> list[tuple[str, int, str]]:
    """(language, line number, line) of each line in a language other than English that reads as an
    English sentence: two English function words outside quotes. A recorded output holds one block per
    language, each after its ``$ oomguide … --lang xx`` line."""
    out, lang = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("$ oomguide"):
            found = re.search(r"--lang (\w+)", line)
            lang = found.group(1) if found else i18n.SOURCE_LANG
            continue
        if lang in (None, i18n.SOURCE_LANG):
            continue
        if len(_ENGLISH.findall(_QUOTED.sub("", line))) >= 2:
            out.append((lang, number, line.strip()))
    return out


def test_english_lines_are_found():
    text = "$ oomguide check x --lang de\nHinweis: init_from='resume' but no out/ckpt.pt found in the config\nOK: `the list of it`\n"
    assert [n for _, n, _ in english_lines(text)] == [2]


def test_no_english_sentence_in_any_recorded_output():
    """Every output the goldens record (check and explain, nanoGPT and nanochat, every language) is
    read line by line: a note explain left untranslated, or nanochat's assumptions, printed in English
    in every language, as they did before this test."""
    files = sorted(GOLDEN.rglob("*.txt"))
    assert len(files) > 20, "no recorded outputs found"
    found = [f"{f.relative_to(GOLDEN)}:{n} ({lang}): {line}" for f in files for lang, n, line in english_lines(f.read_text(encoding="utf-8"))]
    assert not found, "English in the reader's language:\n" + "\n".join(found)


# --- at run time: --help --------------------------------------------------------------------


def _helps(parser) -> list[str]:
    """Every sentence of a parser's --help, its subcommands' included."""
    import argparse

    out = [parser.description] if parser.description else []
    for action in parser._actions:
        if action.help and action.help != argparse.SUPPRESS:
            out.append(action.help)
        if isinstance(action, argparse._SubParsersAction):
            out += [a.help for a in action._choices_actions]
            for sub in action.choices.values():
                out += _helps(sub)
    return out


def _options(lang: str) -> str:
    from oomguide.cli import OPTIONS

    return i18n.gettext_for(lang, "check")(OPTIONS)


@pytest.mark.parametrize("command", ["check", "explain"])
def test_help_in_every_language(command, capsys):
    from oomguide.cli import _explain_parser, build_parser

    english = _helps(_explain_parser("en") if command == "explain" else build_parser("en"))
    flat = lambda s: re.sub(r"\s+", " ", s)  # noqa: E731 (argparse wraps lines)
    for lang in LANGS:
        with pytest.raises(SystemExit) as info:
            main([command, "--help", "--lang", lang])
        assert info.value.code == 0
        shown = flat(capsys.readouterr().out)
        left = [h for h in english if len(h) > 12 and flat(h) in shown]
        assert not left, f"{command} --help ({lang}) in English: {left}"
        for word in ("usage:", "options:", "positional arguments", "show this help"):  # fr: options
            assert word not in shown or word == "options:" == f"{_options(lang)}:", (
                f"{command} --help ({lang}): {word!r}"
            )


def test_lang_before_the_command_word_is_the_commands_lang(capsys):
    """"oomguide --lang de --help" (round-19 reviewers) was argparse's error, "de" read as the command
    word: --lang is taken before the command too, and the last one given decides, as argparse's own."""
    from oomguide.cli import _new_parser

    message = str(GOLDEN / "messages" / "article-estimate-loss.txt")
    for lang in LANGS:
        with pytest.raises(SystemExit) as info:
            main(["--lang", lang, "--help"])
        assert info.value.code == 0
        shown = capsys.readouterr().out
        assert _new_parser(lang)[0].description in shown and _new_parser("en")[0].description not in shown
        assert main(["explain", message, "--lang", lang]) == 0
        after = capsys.readouterr().out
        assert main(["--lang", lang, "explain", message]) == 0
        assert capsys.readouterr().out == after
        assert main(["--lang", "en", "explain", message, f"--lang={lang}"]) == 0
        assert capsys.readouterr().out == after


@pytest.mark.parametrize("lang", ["ja", "zh", "en", "fr"])
def test_help_wraps_wide_text_by_columns_and_never_inside_an_identifier(lang, capsys, monkeypatch):
    """argparse wraps at spaces: Japanese and Chinese help has none, and it broke inside identifiers
    ("init_fro m", "--vocab- size") with lines twice as wide as the terminal."""
    from oomguide.cli import _columns

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["check", "--help", "--lang", lang])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(_columns(line) <= 80 for line in lines if not line.lstrip().startswith(("[", "--phase", "用法", "使い方"))), out
    words = set(re.findall(r"[A-Za-z0-9_.\-]+", out))
    assert {"init_from", "--vocab-size", "--nproc_per_node", "--gpu-memory"} <= words, sorted(words)
    assert not any(line.lstrip().startswith(("，", "。", "：", "）")) for line in lines), out
    assert not any(line.rstrip().endswith(("（", "「")) for line in lines), out


def test_an_unknown_key_on_the_command_line_stops_as_train_py_does(tmp_path, capsys):
    """configurator.py raises ValueError("Unknown config key: ...") for a --key=value that is not a
    global of train.py; a key in a config file it only executes (no error), so that stays a note."""
    config = tmp_path / "train_mine.py"
    config.write_text("nonsense = 3\n", encoding="utf-8")
    assert main(["check", str(config), "--set", "nonsense=3", "--lang", "en"]) == 2
    assert capsys.readouterr().err == (
        "oomguide check: error: train.py would stop on --nonsense: 'Unknown config key' "
        "(not a global of its train.py)\n"
    )
    run = verdict.prepare(verdict.Request(configs=[str(config)], cwd=tmp_path))
    assert any("nonsense is not a nanoGPT train.py setting" in n for n in run.notes), run.notes


def test_two_closing_marks_in_a_row_never_start_a_line():
    """"状态）、" at a line's end: the closing mark that overflowed took back "）", itself a closing mark,
    which then began the next line; both go with the character before them."""
    from oomguide.cli import _Formatter

    text = "第一个训练步（创建 AdamW 的状态）、训练步"
    for width in range(8, 40):
        lines = _Formatter("x")._split_lines(text, width)
        assert "".join(lines).replace(" ", "") == text.replace(" ", ""), lines
        assert not any(line.startswith(("）", "、")) for line in lines), (width, lines)
