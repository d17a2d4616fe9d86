"""The reader's nanoGPT checkout: which of the guide's code changes its train.py and model.py have.

A verdict is for the run the reader has. Several settings the guide teaches (``eval_batch_size``,
``eval_block_size``, ``grad_checkpoint``) are read by code that the guide adds to nanoGPT, not by
nanoGPT itself: in an unchanged checkout, nanoGPT's configurator executes a config file that sets
them and nothing reads them (train.py's ``config_keys``), and refuses them on the command line
(configurator.py: ``ValueError: Unknown config key``). So a prediction honours such a key only
where the reader's code reads it. This module reads the checkout's code (parsed, never executed)
and says what it does:

- ``train.py``: does ``estimate_loss`` evaluate in chunks of ``eval_batch_size`` (the guide's
  eval-oom-12gb.md#eval-batch-size)? Does it ask ``get_batch`` for ``eval_block_size`` tokens
  (#eval-block-size)? Are the last micro-step's logits dropped before ``losses = estimate_loss()``
  (beyond.md#drop-stale-logits)? Which names may be set with ``--key=value`` (the globals defined
  before train.py executes configurator.py)?
- ``model.py``: the code that runs. :func:`model_kind` tells nanoGPT's own model.py (unchanged, or
  with the guide's checkpointed ``GPT.forward``), which oomguide's GPT reproduces allocation for
  allocation (tests/test_checkout.py compares them), from any other, which is run as it is.

A page's figures are ``oomguide check`` run in a copy of the checkout with the page's snippets
applied (examples/test_nanogpt.py), so they are this module's reading of that code too.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

# The settings only the guide's code changes read: key -> (what reads it, the guide's section).
GUIDE_KEYS = {
    "eval_batch_size": ("train.py's estimate_loss()", "eval-oom-12gb", "eval-batch-size"),
    "eval_block_size": ("train.py's estimate_loss() and get_batch()", "eval-oom-12gb", "eval-block-size"),
    "grad_checkpoint": ("model.py's GPT.forward", "eval-oom-12gb", "gradient-checkpointing"),
}

# Fingerprints of nanoGPT's model.py (see model_fingerprint): the file as released, and with the
# guide's eval-oom-12gb/checkpointed_forward.py in place of GPT.forward. Recorded from nanoGPT at
# commit 3adf61e154c3fe3fca428ad6bc3818b27a3b8291 (github.com/karpathy/nanoGPT, model.py) with
# `python -m oomguide.checkout PATH`; tests/test_checkout.py recomputes them from the checkout CI uses.
# Any other model.py (another version, the reader's own change) is run as it is: slower, never wrong.
KNOWN_MODELS = {
    "958974b54a794e7f": "nanogpt",
    "307a024668a231a6": "nanogpt+checkpointed_forward",
}


@dataclass(frozen=True)
class Code:
    """What the reader's train.py and model.py do, as far as memory goes."""

    where: str  # said in the output: the checkout, or the assumption made without one
    path: Path | None = None
    eval_batch_size: bool = False  # estimate_loss() forwards eval_batch_size sequences at a time
    eval_block_size: bool = False  # estimate_loss() asks get_batch for eval_block_size tokens
    drops_stale_logits: bool = False  # `logits = None` (or del) before `losses = estimate_loss()`
    model: str = "nanogpt"  # "nanogpt", "nanogpt+checkpointed_forward", or "own" (model_path runs)
    model_path: Path | None = None
    command_line_keys: frozenset | None = None  # what train.py accepts as --key=value (None: unknown)
    notes: tuple = field(default=())
    # torch.load(ckpt_path, map_location='cpu') (run-moments.md#resume, #sample): the checkpoint is not
    # put on the card; nanoGPT's map_location=device puts it there
    resume_to_cpu: bool = False  # train.py's init_from='resume'
    sample_to_cpu: bool = False  # sample.py's init_from='resume'

    @property
    def grad_checkpoint(self) -> bool:
        return self.model == "nanogpt+checkpointed_forward"

    def reads(self, key: str) -> bool:
        """Whether this code reads the guide's setting `key`."""
        if key == "grad_checkpoint":
            return self.grad_checkpoint or self.model == "own"
        return bool(getattr(self, key))


UNCHANGED = Code(where="nanoGPT as released (no checkout found: train.py and model.py assumed unchanged)")


class CheckoutError(ValueError):
    """A checkout that cannot be read; the message names the file."""


def _parse(path: Path) -> ast.Module:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckoutError(f"cannot read {path}: {exc.__class__.__name__}") from None
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise CheckoutError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None


def _function(tree: ast.AST, name: str):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _loads(node, name: str) -> bool:
    return node is not None and any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node)
    )


def _calls(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == name)
        or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
    )


def _drops_logits(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Delete):
        return any(isinstance(t, ast.Name) and t.id == "logits" for t in stmt.targets)
    return (
        isinstance(stmt, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "logits" for t in stmt.targets)
        and isinstance(stmt.value, ast.Constant)
        and stmt.value.value is None
    )


def drops_stale_logits(tree: ast.Module) -> bool:
    """A statement list in which `logits` is dropped before `losses = estimate_loss()` (in the loop)."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if not isinstance(stmts, list):
                continue
            dropped = False
            for stmt in stmts:
                if not isinstance(stmt, ast.stmt):
                    break
                dropped |= _drops_logits(stmt)
                if isinstance(stmt, ast.Assign) and _calls(stmt.value, "estimate_loss") and dropped:
                    return True
    return False


def command_line_keys(tree: ast.Module) -> frozenset | None:
    """The globals train.py defines before it executes configurator.py: what --key=value may set."""
    keys = set()
    for stmt in tree.body:
        if "configurator" in ast.unparse(stmt):
            return frozenset(keys)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        keys.update(t.id for t in targets if isinstance(t, ast.Name))
    return None  # no configurator: unknown


def loads_to_cpu(tree: ast.Module) -> bool:
    """Whether the file's ``torch.load`` of the checkpoint maps it to the CPU (``map_location='cpu'``,
    or ``torch.device('cpu')``) rather than to the training device (nanoGPT's ``map_location=device``)."""
    for node in ast.walk(tree):
        if not (_calls(node, "load") and isinstance(node.func, ast.Attribute)):
            continue
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        for kw in node.keywords:
            if kw.arg != "map_location":
                continue
            value = kw.value
            if isinstance(value, ast.Call) and _calls(value, "device") and value.args:
                value = value.args[0]
            return isinstance(value, ast.Constant) and value.value == "cpu"
    return False


def model_fingerprint(tree: ast.Module) -> str:
    """A short digest of model.py's code (its syntax tree: comments, docstrings and layout left out)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def model_kind(path: Path) -> str:
    return KNOWN_MODELS.get(model_fingerprint(_parse(path)), "own")


def read(path: str | Path) -> Code:
    """The Code of the nanoGPT checkout at `path` (a folder with train.py)."""
    folder = Path(path)
    train = folder / "train.py"
    if not train.is_file():
        raise CheckoutError(f"{folder} is not a nanoGPT checkout: it has no train.py")
    tree = _parse(train)
    estimate = _function(tree, "estimate_loss")
    model_file = folder / "model.py"
    kind = model_kind(model_file) if model_file.is_file() else "nanogpt"
    notes = []
    sample = folder / "sample.py"
    if not model_file.is_file():
        notes.append(f"{folder} has no model.py: predicted with nanoGPT's GPT")
    return Code(
        where=f"the nanoGPT checkout {folder}",
        path=folder,
        eval_batch_size=_loads(estimate, "eval_batch_size"),
        eval_block_size=_loads(estimate, "eval_block_size"),
        drops_stale_logits=drops_stale_logits(tree),
        model=kind,
        model_path=model_file if kind == "own" else None,
        command_line_keys=command_line_keys(tree),
        notes=tuple(notes),
        resume_to_cpu=loads_to_cpu(tree),
        sample_to_cpu=sample.is_file() and loads_to_cpu(_parse(sample)),
    )


def find(configs=(), cwd: str | Path | None = None, explicit: str | Path | None = None) -> Code:
    """The checkout a run belongs to: `explicit` (--nanogpt), else the first of the working directory
    and each config's checkout (``config/x.py``'s parent, else its folder) that has a train.py, as
    train.py's data and checkpoint are looked for; UNCHANGED when there is none."""
    from .config import checkout_places

    if explicit is not None:
        return read(Path(explicit).resolve())
    for place in checkout_places(configs, Path.cwd() if cwd is None else Path(cwd)):
        if (place / "train.py").is_file():
            return read(place.resolve())
    return UNCHANGED


if __name__ == "__main__":  # print a checkout's model fingerprint (to record KNOWN_MODELS)
    import sys

    for arg in sys.argv[1:]:
        print(model_fingerprint(_parse(Path(arg) / "model.py")), arg)
