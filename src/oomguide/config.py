"""nanoGPT config files and ``--key=value`` overrides, read without executing them.

nanoGPT's ``configurator.py`` executes a config file and then applies ``--key=value``
arguments on top of train.py's globals (``exec(open(config_file).read())``). Here it is parsed instead:
literal assignments and simple arithmetic (``5 * 8``, ``6e-4 / 10``, ``'a' + 'b'``,
names assigned earlier) are read; anything else (an ``import``, a call) is skipped with a
warning naming the line, unless it assigns a key that matters for memory: that is an error.
"""

from __future__ import annotations

import ast
import operator
import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .model import PRETRAINED_SHAPES, GPTConfig, pretrained_config

# Every global of nanoGPT's train.py, with its default (assigned at its top). dtype's default depends on
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

# Keys the guide's code changes add to nanoGPT (not in nanoGPT; docs/en/eval-oom-12gb.md#quick-fixes).
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
    # where vocab_size (and, for init_from='resume', the shape) came from, as train.py finds it
    vocab_from: str = "train.py's default 50304 (GPT-2's 50257 padded)"
    notes: list[str] = field(default_factory=list)  # what the reader should know about those sources
    explicit: frozenset = frozenset()  # the keys the config files and overrides set
    overridden: frozenset = frozenset()  # the keys set on the command line (--key=value)

    def __getattr__(self, name):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def replace(self, **changes) -> TrainConfig:
        values = dict(self.values)
        for key, value in changes.items():
            _set(values, key, value, f"replace({key}=...)")
        out = TrainConfig(
            values, list(self.sources), self.vocab_from, list(self.notes), self.explicit, self.overridden
        )
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


# what a setting's value must be, by the type of train.py's default (messages.WANTS translates them)
WANTS = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}

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


def _set(values: dict, key: str, value, where: str, defaults: dict | None = None) -> None:
    """Assign with nanoGPT configurator's type check: the value keeps the default's type
    (`defaults`: the script's globals, train.py's by default)."""
    defaults = DEFAULTS if defaults is None else defaults
    if key not in defaults:
        warnings.warn(
            f"{where}: {key} is not a nanoGPT train.py setting; oomguide ignores it", stacklevel=3
        )
        values[key] = value
        return
    default = defaults[key]
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
        want = "an integer or None" if default is None else WANTS.get(type(default), type(default).__name__)
        raise ConfigError(f"{where}: {key} must be {want}, got {value!r}")
    values[key] = value


def read_config_file(path: str | Path, values: dict, defaults: dict | None = None) -> list[str]:
    """Apply the assignments of one nanoGPT config file to `values` (in place); returns the keys set.
    `defaults`: the globals of the script that executes it (train.py's by default; sample.py's)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config path is a directory, not a file: {path}") from None
    except UnicodeDecodeError as exc:  # a checkpoint, meta.pkl, a binary given by mistake
        raise ConfigError(
            f"{path} is not a text config file (byte 0x{exc.object[exc.start]:02x} at offset {exc.start} "
            "is not UTF-8): give a nanoGPT config, a .py file of assignments like config/train_gpt2.py"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    if "\x00" in text:  # valid UTF-8 but binary: Python source cannot hold a NUL byte
        raise ConfigError(
            f"{path} is not a text config file (it holds NUL bytes): give a nanoGPT config, "
            "a .py file of assignments like config/train_gpt2.py"
        )
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    assigned = []
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
            _set(values, key, value, where, defaults)
            assigned.append(key)
    return assigned


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


class _PlainData(pickle.Unpickler):
    """An unpickler for plain data only: dicts, lists, tuples, sets, strings, bytes, numbers, None.

    Anything else in a pickle names a class or a function to call (pickle's GLOBAL/STACK_GLOBAL, and
    REDUCE/BUILD/NEWOBJ need one); ``find_class`` refuses every name, so no code from the file runs.
    """

    def find_class(self, module, name):
        raise ConfigError(f"refuses to load {module}.{name}")

    def persistent_load(self, pid):
        raise ConfigError("refuses a persistent id")


def read_meta_vocab(path: str | Path) -> int:
    """``vocab_size`` of a nanoGPT dataset's meta.pkl, read as plain data without running any code."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            meta = _PlainData(f).load()
    except ConfigError as exc:
        raise ConfigError(f"{path}: not plain data, oomguide will not unpickle it ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.__class__.__name__}: {exc}") from None
    except Exception as exc:  # a truncated or corrupt pickle fails in many ways
        raise ConfigError(f"{path}: not a readable pickle ({exc.__class__.__name__}: {exc})") from None
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 0:
        raise ConfigError(f"{path}: has no positive integer vocab_size (train.py reads meta['vocab_size'])")
    return vocab


def checkout_places(paths, cwd: Path) -> list[Path]:
    """Where train.py would look: the working directory, then the checkout each config file lives in
    (its directory's parent for nanoGPT's ``config/train_x.py``, else its own directory)."""
    out = [cwd]
    for path in paths:
        folder = Path(path).resolve().parent
        for candidate in (folder.parent,) if folder.name == "config" else (folder,):
            if candidate not in out:
                out.append(candidate)
    return out


def _read_checkpoint_args(path: Path) -> dict:
    import torch  # only for init_from='resume'

    try:
        # weights_only: torch's own restricted unpickler; mmap: the tensors are not read
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        args = checkpoint["model_args"]
    except Exception as exc:
        raise ConfigError(
            f"{path}: cannot read model_args from this checkpoint ({exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0][:120] if str(exc) else ''})"
        ) from None
    if not isinstance(args, dict):
        raise ConfigError(f"{path}: model_args is not a dict")
    return args


def resolve_model_args(config: TrainConfig, paths=(), explicit=(), cwd: str | Path | None = None) -> None:
    """Find the vocab (and for ``resume`` the shape) the way train.py does, in place (its
    ``meta_vocab_size`` and ``init_from`` branches).

    ``gpt2*``: GPT-2's vocab 50257. ``resume``: ``out_dir/ckpt.pt``'s ``model_args`` (n_layer, n_head,
    n_embd, block_size, bias, vocab_size), when the checkpoint is found. ``scratch``: ``vocab_size``
    from ``data/<dataset>/meta.pkl``, looked for in the working directory and then in the checkout the
    config lives in; 50304 when there is none. A ``vocab_size`` set explicitly (oomguide's extension
    key) wins over meta.pkl.
    """
    v = config.values
    cwd = Path.cwd() if cwd is None else Path(cwd)
    places = checkout_places(paths, cwd)
    if v["init_from"] in PRETRAINED_SHAPES:
        config.vocab_from = f"GPT-2's 50257 (init_from={v['init_from']!r})"
        return
    if v["init_from"] == "resume":
        out_dir = Path(v["out_dir"])
        found = [p / out_dir / "ckpt.pt" for p in places if (p / out_dir / "ckpt.pt").is_file()]
        if found:
            args = _read_checkpoint_args(found[0])
            for key in ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"):
                if key in args:
                    _set(v, key, args[key], f"{found[0]} model_args")
            config.vocab_from = f"the checkpoint {found[0]} (model_args)"
        else:
            config.notes.append(
                f"init_from='resume' but no {out_dir / 'ckpt.pt'} found in {', '.join(map(str, places))}: "
                "the model's shape is taken from the config, as if the checkpoint had it"
            )
            config.vocab_from = "the config (no checkpoint found)"
        return
    if "vocab_size" in explicit:
        config.vocab_from = "set explicitly (vocab_size)"
        return
    relative = Path("data") / str(v["dataset"]) / "meta.pkl"
    for place in places:
        meta = place / relative
        if meta.is_file():
            v["vocab_size"] = read_meta_vocab(meta)
            config.vocab_from = f"{meta}"
            return
    config.vocab_from = f"train.py's default 50304: no {relative} in {', '.join(map(str, places))}"
    if "dataset" in explicit:
        config.notes.append(
            f"dataset={v['dataset']!r} is set but no {relative} was found (looked in "
            f"{', '.join(map(str, places))}); predicting with GPT-2's vocab 50304, as train.py would. "
            "Run the dataset's prepare.py first, or run oomguide from your nanoGPT checkout"
        )


def load_config(paths=(), overrides=(), *, find_files: bool = False, cwd=None, **changes) -> TrainConfig:
    """train.py's settings after the config files `paths` and the `overrides` (``key=value``).

    `find_files=True` (the CLI): look for ``data/<dataset>/meta.pkl`` and, for ``init_from='resume'``,
    ``out_dir/ckpt.pt`` as train.py would (``resolve_model_args``), in `cwd` (default: the working
    directory) and in the config's checkout.
    """
    values = dict(DEFAULTS)
    sources = []
    explicit = set()
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    for path in paths:
        explicit.update(read_config_file(path, values))
        sources.append(str(path))
    overridden = set()
    for item in overrides:
        key, value = parse_override(item)
        _set(values, key, value, f"--{key}")
        explicit.add(key)
        overridden.add(key)
    for key, value in changes.items():
        _set(values, key, value, f"{key}=")
        explicit.add(key)
    config = TrainConfig(values, sources, explicit=frozenset(explicit), overridden=frozenset(overridden))
    config.validate()
    if find_files:
        resolve_model_args(config, paths, explicit, cwd)
        config.validate()
    elif values["init_from"] in PRETRAINED_SHAPES:
        config.vocab_from = f"GPT-2's 50257 (init_from={values['init_from']!r})"
    elif "vocab_size" in explicit:
        config.vocab_from = "set explicitly (vocab_size)"
    return config
