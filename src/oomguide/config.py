"""nanoGPT config files and ``--key=value`` overrides, read without executing them.

nanoGPT's ``configurator.py`` executes a config file and then applies ``--key=value``
arguments on top of train.py's globals. Here the file is parsed instead (FACTS 8):
literal assignments and simple arithmetic (``5 * 8``, ``6e-4 / 10``, ``'a' + 'b'``,
names assigned earlier) are read; anything else (an ``import``, a call) is skipped with a
warning naming the line, unless it assigns a key that matters for memory: that is an error.
"""

from __future__ import annotations

import ast
import operator
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .model import PRETRAINED_SHAPES, GPTConfig, pretrained_config

# Every global of nanoGPT's train.py, with its default (FACTS 7). dtype's default depends on
# the GPU in train.py ('bfloat16' if supported else 'float16'); oomguide assumes a card that
# supports bfloat16 (RTX 30xx and newer), which is what the guide's readers have.
NANOGPT_DEFAULTS: dict[str, object] = {
    "out_dir": "out",
    "eval_interval": 2000,
    "log_interval": 1,
    "eval_iters": 200,
    "eval_only": False,
    "always_save_checkpoint": True,
    "init_from": "scratch",
    "wandb_log": False,
    "wandb_project": "owt",
    "wandb_run_name": "gpt2",
    "dataset": "openwebtext",
    "gradient_accumulation_steps": 5 * 8,
    "batch_size": 12,
    "block_size": 1024,
    "n_layer": 12,
    "n_head": 12,
    "n_embd": 768,
    "dropout": 0.0,
    "bias": False,
    "learning_rate": 6e-4,
    "max_iters": 600000,
    "weight_decay": 1e-1,
    "beta1": 0.9,
    "beta2": 0.95,
    "grad_clip": 1.0,
    "decay_lr": True,
    "warmup_iters": 2000,
    "lr_decay_iters": 600000,
    "min_lr": 6e-5,
    "backend": "nccl",
    "device": "cuda",
    "dtype": "bfloat16",
    "compile": True,
}

# Keys the guide's code changes add to nanoGPT (not in nanoGPT itself; see FACTS 2, 4).
# vocab_size stands for what train.py reads from the dataset's meta.pkl (default 50304).
EXTENSION_DEFAULTS: dict[str, object] = {
    "eval_batch_size": None,  # None: estimate_loss uses batch_size, as nanoGPT does
    "eval_block_size": None,  # None: evaluation uses block_size
    "grad_checkpoint": False,
    "vocab_size": 50304,
}

DEFAULTS = {**NANOGPT_DEFAULTS, **EXTENSION_DEFAULTS}

MEMORY_KEYS = frozenset(
    {
        "batch_size",
        "block_size",
        "n_layer",
        "n_head",
        "n_embd",
        "dropout",
        "bias",
        "dtype",
        "init_from",
        "eval_batch_size",
        "eval_block_size",
        "grad_checkpoint",
        "vocab_size",
        "device",
    }
)

DTYPES = ("float32", "bfloat16", "float16")


class ConfigError(ValueError):
    """A config that cannot be read or makes no sense; the message names the problem."""


@dataclass
class TrainConfig:
    """nanoGPT's train.py globals after the config files and overrides, plus oomguide's extensions."""

    values: dict = field(default_factory=lambda: dict(DEFAULTS))
    sources: list[str] = field(default_factory=list)

    def __getattr__(self, name):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def replace(self, **changes) -> TrainConfig:
        values = dict(self.values)
        for key, value in changes.items():
            _set(values, key, value, f"replace({key}=...)")
        out = TrainConfig(values, list(self.sources))
        out.validate()
        return out

    @property
    def eval_batch(self) -> int:
        return self.values["eval_batch_size"] or self.values["batch_size"]

    @property
    def eval_block(self) -> int:
        return self.values["eval_block_size"] or self.values["block_size"]

    @property
    def tokens_per_iter(self) -> int:
        """Tokens per optimizer step, as train.py prints it (single process)."""
        v = self.values
        return v["gradient_accumulation_steps"] * v["batch_size"] * v["block_size"]

    def gpt_config(self) -> GPTConfig:
        """The model train.py builds: from scratch with these shapes, or a GPT-2 shape for init_from='gpt2*'."""
        v = self.values
        if v["init_from"] in PRETRAINED_SHAPES:
            # like train.py: from_pretrained, then crop the block size if asked for a smaller one
            return pretrained_config(
                v["init_from"],
                dropout=v["dropout"],
                grad_checkpoint=v["grad_checkpoint"],
                block_size=min(v["block_size"], 1024),
            )
        return GPTConfig(
            block_size=v["block_size"],
            vocab_size=v["vocab_size"],
            n_layer=v["n_layer"],
            n_head=v["n_head"],
            n_embd=v["n_embd"],
            dropout=v["dropout"],
            bias=v["bias"],
            grad_checkpoint=v["grad_checkpoint"],
        )

    def validate(self) -> None:
        v = self.values
        for key in (
            "batch_size",
            "block_size",
            "n_layer",
            "n_head",
            "n_embd",
            "gradient_accumulation_steps",
            "eval_iters",
            "vocab_size",
        ):
            if not isinstance(v[key], int) or isinstance(v[key], bool) or v[key] <= 0:
                raise ConfigError(f"{key} must be a positive integer, got {v[key]!r}")
        for key in ("eval_batch_size", "eval_block_size"):
            if v[key] is not None and (
                not isinstance(v[key], int) or isinstance(v[key], bool) or v[key] <= 0
            ):
                raise ConfigError(f"{key} must be a positive integer, got {v[key]!r}")
        if v["dtype"] not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {v['dtype']!r}")
        if v["init_from"] not in ("scratch", "resume", *PRETRAINED_SHAPES):
            raise ConfigError(
                f"init_from must be 'scratch', 'resume' or one of {', '.join(PRETRAINED_SHAPES)}, "
                f"got {v['init_from']!r}"
            )
        if v["init_from"] in PRETRAINED_SHAPES and v["block_size"] > 1024:
            raise ConfigError(
                f"block_size {v['block_size']} is above the model's 1024 (init_from={v['init_from']!r})"
            )
        if v["eval_block_size"] is not None and v["eval_block_size"] > v["block_size"]:
            raise ConfigError(
                f"eval_block_size {v['eval_block_size']} is above the model's block_size {v['block_size']}"
            )
        if v["init_from"] not in PRETRAINED_SHAPES and v["n_embd"] % v["n_head"] != 0:
            raise ConfigError(f"n_embd ({v['n_embd']}) must be divisible by n_head ({v['n_head']})")
        if not isinstance(v["dropout"], (int, float)) or not 0.0 <= v["dropout"] < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {v['dropout']!r}")


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


def _evaluate(node: ast.AST, known: dict):
    """Value of a literal / simple arithmetic expression; raises ValueError for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _evaluate(node.left, known), _evaluate(node.right, known)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, known))
    if isinstance(node, ast.Name) and node.id in known:
        return known[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_evaluate(e, known) for e in node.elts]
    raise ValueError(ast.unparse(node))


def _set(values: dict, key: str, value, where: str) -> None:
    """Assign with nanoGPT configurator's type check: the value keeps the default's type."""
    if key not in DEFAULTS:
        warnings.warn(
            f"{where}: {key!r} is not a nanoGPT train.py setting; oomguide ignores it", stacklevel=3
        )
        values[key] = value
        return
    default = DEFAULTS[key]
    if (
        default is not None
        and not isinstance(default, bool)
        and isinstance(default, float)
        and isinstance(value, int)
        and not isinstance(value, bool)
    ):
        value = float(value)  # configurator accepts 1 for a float setting
    if default is None:
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
    elif isinstance(default, bool):
        ok = isinstance(value, bool)
    else:
        ok = type(value) is type(default)
    if not ok:
        want = "an integer or None" if default is None else type(default).__name__
        raise ConfigError(f"{where}: {key} must be {want}, got {value!r}")
    values[key] = value


def read_config_file(path: str | Path, values: dict) -> None:
    """Apply the assignments of one nanoGPT config file to `values` (in place)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config path is a directory, not a file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.__class__.__name__}: {exc}") from None
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    for stmt in tree.body:
        where = f"{path}:{stmt.lineno}"
        targets = []
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            targets, expr = [t.id for t in stmt.targets], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            targets, expr = [stmt.target.id], stmt.value
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        else:
            first = ast.get_source_segment(text, stmt) or type(stmt).__name__
            warnings.warn(
                f"{where}: skipped (not a plain assignment): {first.splitlines()[0][:80]}", stacklevel=2
            )
            continue
        try:
            value = _evaluate(expr, values)
        except (ValueError, TypeError, ZeroDivisionError, OverflowError):
            names = ", ".join(targets)
            if MEMORY_KEYS.intersection(targets):
                raise ConfigError(
                    f"{where}: cannot read {names} = {ast.unparse(expr)[:80]} without running it; "
                    "write a literal value (it matters for memory)"
                ) from None
            warnings.warn(
                f"{where}: skipped {names} = {ast.unparse(expr)[:80]} (not a literal)", stacklevel=2
            )
            continue
        for key in targets:
            _set(values, key, value, where)


def parse_override(text: str) -> tuple[str, object]:
    """``key=value`` or ``--key=value`` -> (key, value), with nanoGPT configurator's literal_eval rule."""
    arg = text[2:] if text.startswith("--") else text
    key, sep, raw = arg.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise ConfigError(f"override {text!r} is not key=value")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # configurator keeps it as a string
    return key, value


def load_config(paths=(), overrides=(), **changes) -> TrainConfig:
    """train.py's settings after the config files `paths` and the `overrides` (``key=value``)."""
    values = dict(DEFAULTS)
    sources = []
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        read_config_file(path, values)
        sources.append(str(path))
    for item in overrides:
        key, value = parse_override(item)
        _set(values, key, value, f"--{key}")
    for key, value in changes.items():
        _set(values, key, value, f"{key}=")
    config = TrainConfig(values, sources)
    config.validate()
    return config
