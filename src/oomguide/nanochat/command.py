"""A nanochat command line as the reader types it, read as nanochat's own script reads it.

What it does: ``parse_line`` takes a line of nanochat's ``runs/speedrun.sh`` or ``runs/runcpu.sh``
unchanged (``torchrun --standalone --nproc_per_node=8 -m scripts.base_train -- --depth=24 ...``,
``python -m scripts.base_train --depth=4 ...``, ``python scripts/base_eval.py ...``, with
``VAR=value`` assignments in front and backslash-newlines) and says which script runs, in how many
processes (torchrun's ``--nproc_per_node``), with which arguments. ``script_arguments`` reads that
script's ``argparse`` options from the reader's checkout WITHOUT executing it: the script's syntax
tree is searched for ``parser.add_argument(...)`` calls whose arguments are literals (or arithmetic
on literals, as ``80*524288``), an ``argparse.ArgumentParser`` is built from them, and the
arguments are parsed by it, defaults included, as the script's ``parser.parse_args()`` would.
A shell variable (``$WANDB_RUN``) is taken literally: it names a wandb run, never a size.
It also reads the environment a script sets for itself (``os.environ["PYTORCH_ALLOC_CONF"] = ...``).

It must never import or run the reader's scripts; errors are ``BadCommand`` (one line).
"""

from __future__ import annotations

import argparse
import ast
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# the scripts the prediction knows (their phases: ``plan``); others are refused with this list
SCRIPTS = ("base_train", "base_eval", "chat_sft", "chat_rl", "chat_eval", "chat_cli", "chat_web")
# programs of runs/speedrun.sh and runs/runcpu.sh that put nothing on the GPU: the line said for each
# (the sentences are msgids of oomguide.messages)
NOT_ON_THE_GPU = {
    "nanochat.dataset": "{word}: not a memory-relevant script: it downloads data shards and puts nothing on the GPU",
    "tok_train": "{word}: not a memory-relevant script: it trains the tokenizer on the CPU and puts nothing on the GPU",
    "tok_eval": "{word}: not a memory-relevant script: it evaluates the tokenizer on the CPU and puts nothing on the GPU",
}


class BadCommand(ValueError):
    """A command line that names no nanochat run oomguide can predict; one line for the reader."""


@dataclass
class Command:
    """A parsed command line: the script, the processes, the script's own arguments."""

    script: str  # "base_train", ...
    world_size: int  # torchrun's --nproc_per_node (1 for python)
    argv: list  # the script's arguments, as its argparse receives them
    env: dict = field(default_factory=dict)  # VAR=value assignments before the program
    launcher: str = "python"  # "python" or "torchrun"


def parse_line(line, accept=SCRIPTS) -> Command:
    """Read a command line (a string, or its words) as the shell and torchrun/python would; `accept`:
    the scripts it may run (``tok_train`` for ``--tokenizer``)."""
    words = list(line) if not isinstance(line, str) else _split(line)
    words = [w for w in words if w not in ("\\", "")]
    if len(words) == 1 and " " in words[0]:
        words = _split(words[0])  # the whole line given as one quoted word
    if words[-1:] == ["&"]:
        words = words[:-1]  # run in the background (speedrun.sh's second download)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-") and words[0].split("=")[0].isidentifier():
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words:
        raise BadCommand("no command after --: give a nanochat command line, e.g. python -m scripts.base_train --depth=4")
    program = os.path.basename(words[0])
    rest = words[1:]
    if program == "torchrun" or (program.startswith("python") and rest[:2] == ["-m", "torch.distributed.run"]):
        if program != "torchrun":
            rest = rest[2:]
        return _torchrun(rest, env, accept)
    if program.startswith("python"):
        return _python(rest, env, accept)
    raise BadCommand(
        f"{words[0]}: not a command oomguide can read; give the line that runs a nanochat script "
        "(python -m scripts.X ... or torchrun ... -m scripts.X -- ...)"
    )


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line.replace("\\\n", " "), posix=True)
    except ValueError as exc:
        raise BadCommand(f"cannot read the command line: {exc}") from None


def _script_of(word: str, accept=SCRIPTS) -> str:
    name = word.removesuffix(".py").replace("/", ".").removeprefix("scripts.")
    if name in accept:
        return name
    if name in NOT_ON_THE_GPU:
        raise BadCommand(NOT_ON_THE_GPU[name].format(word=word))
    raise BadCommand(f"{word}: not a nanochat script oomguide predicts (known: {', '.join(accept)})")


def _python(rest: list[str], env: dict, accept=SCRIPTS) -> Command:
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:]  # interpreter flags (-u, -O)
    if rest[:1] == ["-m"] and len(rest) >= 2:
        return Command(_script_of(rest[1], accept), 1, _after_dashes(rest[2:]), env)
    if rest:
        return Command(_script_of(rest[0], accept), 1, _after_dashes(rest[1:]), env)
    raise BadCommand("python without a script: give python -m scripts.X ...")


def _torchrun(rest: list[str], env: dict, accept=SCRIPTS) -> Command:
    """torchrun's own options come before the script (torch/distributed/run.py's parser)."""
    nproc, i = 1, 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] not in ("-m", "--module"):
        option, has_value, value = rest[i].partition("=")
        takes = option not in ("--standalone", "--no-python", "--no_python", "--run-path", "--run_path")
        if takes and not has_value:
            value = rest[i + 1] if i + 1 < len(rest) else ""
            i += 1
        if option in ("--nproc_per_node", "--nproc-per-node"):
            if not value.isdigit() or int(value) < 1:
                raise BadCommand(f"torchrun {option}={value}: give a number of processes (GPUs), e.g. 8")
            nproc = int(value)
        i += 1
    rest = rest[i:]
    if rest[:1] in (["-m"], ["--module"]) and len(rest) >= 2:
        return Command(_script_of(rest[1], accept), nproc, _after_dashes(rest[2:]), env, "torchrun")
    if rest:
        return Command(_script_of(rest[0], accept), nproc, _after_dashes(rest[1:]), env, "torchrun")
    raise BadCommand("torchrun without a script: give torchrun ... -m scripts.X -- ...")


def _after_dashes(argv: list[str]) -> list[str]:
    """torchrun passes a leading ``--`` on to the script, whose argparse drops it."""
    return argv[1:] if argv[:1] == ["--"] else argv


# --- the script's argparse, read from its syntax tree -------------------------------------------

_TYPES = {"int": int, "float": float, "str": str}


def _literal(node):
    """A literal, or arithmetic on literals (``80*524288``, ``2**19``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.Pow, ast.FloorDiv)):
        a, b = _literal(node.left), _literal(node.right)
        ops = {ast.Mult: lambda: a * b, ast.Add: lambda: a + b, ast.Sub: lambda: a - b}
        ops.update({ast.Pow: lambda: a**b, ast.FloorDiv: lambda: a // b})
        return ops[type(node.op)]()
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand)
    return ast.literal_eval(node)


def script_path(checkout: Path, script: str) -> Path:
    return Path(checkout) / "scripts" / f"{script}.py"


def _tree(checkout: Path, script: str) -> ast.Module:
    path = script_path(checkout, script)
    if not path.is_file():
        raise BadCommand(f"{path}: no such script in the nanochat checkout")
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise BadCommand(f"{path}: cannot be read as Python: {exc}") from None


def script_parser(checkout: Path, script: str) -> argparse.ArgumentParser:
    """The script's argparse parser, rebuilt from its ``add_argument`` calls (never executed)."""
    parser = _OneLineParser(prog=f"scripts.{script}", add_help=False)
    found = 0
    for node in ast.walk(_tree(checkout, script)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        try:
            names = [_literal(a) for a in node.args]
            kwargs = {}
            for kw in node.keywords:
                if kw.arg == "type":
                    if not (isinstance(kw.value, ast.Name) and kw.value.id in _TYPES):
                        raise ValueError(kw.value)
                    kwargs["type"] = _TYPES[kw.value.id]
                elif kw.arg is not None:
                    kwargs[kw.arg] = _literal(kw.value)
        except (ValueError, TypeError, SyntaxError, KeyError):
            raise BadCommand(
                f"{script_path(checkout, script)}: an add_argument call oomguide cannot read without "
                f"running the script (line {node.lineno})"
            ) from None
        parser.add_argument(*names, **kwargs)
        found += 1
    if not found:
        raise BadCommand(f"{script_path(checkout, script)}: no argparse options found")
    return parser


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        raise BadCommand(f"{self.prog} would refuse the command line: {message}")


def script_arguments(checkout: Path, command: Command) -> argparse.Namespace:
    """The script's ``args``, as its own ``parser.parse_args()`` gives them for the command line."""
    return script_parser(checkout, command.script).parse_args(command.argv)


def script_environ(checkout: Path, script: str, environ: dict) -> dict:
    """`environ` with the assignments the script makes to ``os.environ["NAME"]`` at its top level
    (base_train.py sets ``PYTORCH_ALLOC_CONF`` before importing torch)."""
    out = dict(environ)
    for node in _tree(checkout, script).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Subscript)
            and ast.unparse(node.targets[0].value) == "os.environ"
        ):
            try:
                out[_literal(node.targets[0].slice)] = _literal(node.value)
            except (ValueError, TypeError, SyntaxError):
                continue
    return out
