"""nanochat's own model, optimizer and KV cache, imported from the reader's checkout: the one place
where ``sys.path`` is touched.

What it does: ``load(path, compute_dtype)`` imports ``nanochat.gpt`` (GPT, GPTConfig),
``nanochat.optim`` (MuonAdamW), ``nanochat.flash_attention``, ``nanochat.engine`` (KVCache) and
``nanochat.fp8`` (Float8Linear, for base_train's ``--fp8``)
from the checkout at `path`, with nanochat's ``NANOCHAT_DTYPE`` set to the compute dtype the card
gives (nanochat/common.py's ``_detect_compute_dtype``: bfloat16 from compute capability 8.0, float32
before, unless the reader's environment sets ``NANOCHAT_DTYPE``). nanochat reads that dtype once,
at import, into module globals, so each (checkout, dtype) gets modules of its own: the import runs
with the checkout first on ``sys.path`` and ``nanochat.*`` out of ``sys.modules``, and both are put
back as they were afterwards, so the reader's modules never leak into oomguide's process.

Packages nanochat imports but the prediction never uses (``rustbpe``, ``tiktoken`` for the
tokenizer, ``pyarrow`` for the data loader, ``wandb``) stand as empty modules during the import when
they are not installed; ``Code.stood_in`` names them and the output says so. No nanochat code is
copied here; nothing but these modules' definitions runs at import.

Never imports torch.cuda (nanochat's flash_attention asks ``torch.cuda.is_available()``, which is
False on a CPU build and makes it fall back to SDPA, as it does on any machine without FA3).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_OPTIONAL = ("rustbpe", "tiktoken", "pyarrow", "pyarrow.parquet", "wandb", "filelock")
_CACHE: dict = {}


class NotNanochat(ValueError):
    """A path that is no nanochat checkout (one line for the reader)."""


@dataclass
class Code:
    """nanochat's modules from one checkout, imported for one compute dtype."""

    path: Path
    compute_dtype: torch.dtype
    gpt: types.ModuleType
    optim: types.ModuleType
    flash_attention: types.ModuleType
    engine: types.ModuleType | None
    common: types.ModuleType
    stood_in: list = field(default_factory=list)
    fp8: types.ModuleType | None = None  # nanochat/fp8.py (Float8Linear), where the checkout has it


def check_checkout(path) -> Path:
    """`path` as a nanochat checkout (nanochat/gpt.py and scripts/ in it), else NotNanochat."""
    root = Path(os.path.expanduser(str(path))).resolve()
    if not root.is_dir():
        raise NotNanochat(f"--nanochat {path}: no such directory")
    for need in ("nanochat/gpt.py", "nanochat/optim.py", "nanochat/engine.py", "scripts"):
        if not (root / need).exists():
            raise NotNanochat(f"--nanochat {path}: not a nanochat checkout ({need} is missing)")
    return root


def compute_dtype_for(capability: tuple[int, int], environ=None) -> tuple[str, str]:
    """The dtype nanochat computes in on a card (nanochat/common.py, _detect_compute_dtype), and why."""
    environ = os.environ if environ is None else environ
    value = environ.get("NANOCHAT_DTYPE")
    if value is not None:
        if value not in _DTYPES:
            raise ValueError(f"NANOCHAT_DTYPE={value}: nanochat knows bfloat16, float16, float32")
        return value, f"NANOCHAT_DTYPE={value} in the environment"
    if tuple(capability) >= (8, 0):
        return "bfloat16", "the card's compute capability is 8.0 or newer (nanochat/common.py)"
    return "float32", "the card's compute capability is below 8.0 (nanochat/common.py)"


def load(path, compute_dtype: str) -> Code:
    """nanochat's modules from the checkout at `path`, computing in `compute_dtype`."""
    root = check_checkout(path)
    key = (str(root), compute_dtype)
    if key in _CACHE:
        return _CACHE[key]
    saved_path = list(sys.path)
    saved_modules = {n: m for n, m in sys.modules.items() if n == "nanochat" or n.startswith("nanochat.")}
    saved_env = os.environ.get("NANOCHAT_DTYPE")
    stood_in = []
    for name in saved_modules:
        del sys.modules[name]
    for name in _OPTIONAL:
        top = name.split(".")[0]
        if name not in sys.modules and (top in stood_in or importlib.util.find_spec(top) is None):
            sys.modules[name] = types.ModuleType(name)
            stood_in.append(name)
    os.environ["NANOCHAT_DTYPE"] = compute_dtype
    sys.path.insert(0, str(root))
    try:
        modules = {n: importlib.import_module(f"nanochat.{n}") for n in ("common", "gpt", "optim", "flash_attention")}
        try:
            modules["engine"] = importlib.import_module("nanochat.engine")
        except ImportError:
            modules["engine"] = None
        try:
            modules["fp8"] = importlib.import_module("nanochat.fp8")
        except ImportError:
            modules["fp8"] = None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise NotNanochat(
            f"--nanochat {path}: nanochat's code cannot be imported: {exc.__class__.__name__}: {first}"
        ) from None
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("NANOCHAT_DTYPE", None)
        else:
            os.environ["NANOCHAT_DTYPE"] = saved_env
        for name in [n for n in sys.modules if n == "nanochat" or n.startswith("nanochat.")]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        for name in stood_in:
            sys.modules.pop(name, None)
    for missing in ("GPT", "GPTConfig"):
        if not hasattr(modules["gpt"], missing):
            raise NotNanochat(f"--nanochat {path}: nanochat/gpt.py defines no {missing}")
    code = Code(
        root,
        _DTYPES[compute_dtype],
        modules["gpt"],
        modules["optim"],
        modules["flash_attention"],
        modules["engine"],
        modules["common"],
        [n for n in stood_in if "." not in n],
        modules["fp8"],
    )
    _CACHE[key] = code
    return code
