"""What a new user trips on (issue 32), on the command line: the card options of explain and check, the
spelling of a setting, and the words explain uses for the phases of a run.

The site's side of the issue (the language switcher, 404s, wide tables) is in tests/test_browser.py;
"Read next" in tests/test_explain.py and tests/test_install.py; the serve command's banner in
tests/test_publish.py.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from oomguide import cli
from oomguide.check_render import phase_title
from oomguide.cli import main
from oomguide.memory import CHECKS, gpus

ROOT = Path(__file__).resolve().parents[1]
MESSAGE = ROOT / "tests" / "golden" / "messages" / "article-estimate-loss.txt"
LANGS = ("en", "ja", "zh", "de", "fr")


def _exit(args) -> int:
    """The exit code of the command line, argparse's own refusals (SystemExit) included."""
    try:
        return main(args)
    except SystemExit as stop:
        return stop.code


TINY = ["n_layer=2", "n_head=2", "n_embd=32", "block_size=32", "vocab_size=128", "batch_size=4"]


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_parser_takes_a_prefix_of_an_option():
    """argparse's prefix matching is off everywhere: "--gpu" is never "--gpu-memory"."""
    for parser in (cli.build_parser(), cli._explain_parser()):
        found = list(_parsers(parser))
        assert len(found) >= 2 and all(p.allow_abbrev is False for p in found), [p.prog for p in found]


def test_explain_and_check_have_the_same_card_options():
    def card_options(parser):
        return {
            option: (action.metavar, action.help.split(";")[0] if option != "--gpu-memory" else None)
            for action in parser._actions
            for option in action.option_strings
            if option in ("--gpu", "--gpu-memory", "--capability")
        }

    check = cli.build_parser()._subparsers._group_actions[0].choices["check"]
    explain = cli._explain_parser()._subparsers._group_actions[0].choices["explain"]
    assert card_options(check) == card_options(explain) and len(card_options(check)) == 3


def test_explain_reads_a_card_by_name(capsys):
    v100 = gpus.find_gpu("V100 16GB")
    assert main(["explain", str(MESSAGE), "--gpu", "V100 16GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["card_bytes"] == v100.total_memory
    # a name sold with two sizes is refused with the choices, as check refuses it
    assert main(["explain", str(MESSAGE), "--gpu", "V100", "--lang", "de"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpu" in err[0] and "V100 32GB" in err[0] and "Fehler" in err[0], err
    # with a config, the prediction is for that card, as check's
    args = ["explain", str(MESSAGE), "--gpu", "T4", "--json"] + [f"--set={s}" for s in TINY]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prediction"]["gpu_memory_bytes"] == gpus.find_gpu("T4").total_memory


@pytest.mark.parametrize("command", ["explain", "check"])
def test_a_prefix_of_an_option_is_refused(capsys, command):
    args = [command, str(MESSAGE)] if command == "explain" else [command, "--no-search"]
    assert _exit(args + ["--gpu-mem", "12GiB"]) == 2
    assert "unrecognized arguments: --gpu-mem" in capsys.readouterr().err


@pytest.mark.parametrize("lang", LANGS)
def test_train_py_spelling_of_a_setting_names_set(capsys, lang):
    """`check config --batch_size=8` (train.py's spelling): one line, in the reader's language, that says
    to write --set batch_size=8; exit 2."""
    assert _exit(["check", "--no-search", "--batch_size=8", "--compile=False", "--lang", lang]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--set batch_size=8 --set compile=False" in err
    if lang != "en":
        assert "unrecognized" not in err and "setting" not in err, err
    assert _exit(["explain", str(MESSAGE), "--batch_size=8", "--lang", lang]) == 2
    assert "--set batch_size=8" in capsys.readouterr().err


INTERNAL = re.compile(r"\b(estimate_loss_first|first_step|train_step)\b")


@pytest.mark.parametrize("lang", LANGS)
def test_explain_names_the_phases_as_check_does(capsys, lang):
    args = ["explain", str(MESSAGE), "--lang", lang] + [f"--set={s}" for s in TINY]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert not INTERNAL.search(text), INTERNAL.search(text)
    for name in ("estimate_loss_first", "first_step", "train_step", "estimate_loss"):
        assert f"  {phase_title(name, lang)}" in text, (name, lang)
    assert set(CHECKS) >= {"estimate_loss_first", "first_step", "train_step"}


# --- the README's serve command starts without Material's end-of-life notice ----------------------
def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [line for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()]


def _material_notice(env: dict) -> str:
    """What Material prints when `mkdocs` loads the theme (material.templates, imported by the theme's
    entry point while MkDocs reads mkdocs.yml), under `env`."""
    import os
    import subprocess
    import sys

    code = "import sys; sys.argv[0] = 'mkdocs'; import material.templates"
    clean = {k: v for k, v in os.environ.items() if k != "NO_MKDOCS_2_WARNING"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_every_mkdocs_command_of_the_readme_silences_the_notice():
    commands = [c for c in _readme_commands() if re.search(r"\bmkdocs (serve|gh-deploy|build)\b", c)]
    assert any("mkdocs serve" in c for c in commands) and any("gh-deploy" in c for c in commands)
    for command in commands:
        for call in re.findall(r"(?:^|&& )((?:\w+=\S+ )*)mkdocs (?:serve|gh-deploy|build)", command):
            assert "NO_MKDOCS_2_WARNING=1" in call.split(), f"README: {command}"
    env = dict(
        pair.split("=", 1) for pair in re.findall(r"\b(NO_MKDOCS_2_WARNING=\S+) mkdocs serve", commands[0])
    )
    assert "end of life" in _material_notice({})  # the notice this guards against is still Material's
    assert "end of life" not in _material_notice(env)
    assert "2027-05-05" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("lang", ("en", "fr"))
def test_check_ends_with_the_sections_its_notes_name(tmp_path, monkeypatch, capsys, lang):
    """A note of check names the section that adds a setting (eval-oom-12gb.md#eval-batch-size); the
    answer ends with those sections as explain's "Read next" gives them, and each opens from a folder
    outside the repository."""
    from oomguide.explain import links
    from test_install import open_read_next

    monkeypatch.delenv(links.SITE_URL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    args = ["check", "--no-search", "--phase", "train_step", "--set", "eval_batch_size=2", "--lang", lang]
    assert main(args + [f"--set={s}" for s in TINY]) == 0
    opened = open_read_next(capsys.readouterr().out, lang)
    assert [Path(path).name for path, _, _ in opened] == ["eval-oom-12gb.md"], opened
