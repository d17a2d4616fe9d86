"""Where the GPT comes from: oomguide's own model, or the model.py of a reader's nanoGPT checkout.

Imports and builds the model; a model that cannot be imported or built is a ``PredictionError`` with
one line naming the problem. Never runs a phase and never imports torch.cuda.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from ..model import GPT, GPTConfig


class PredictionError(RuntimeError):
    """A model or config that cannot be run for a prediction (the message names the problem)."""


@dataclass
class ModelSource:
    """Where the GPT class comes from: oomguide.model, or the model.py of a nanoGPT checkout."""

    gpt_class: type = GPT
    config_class: type = GPTConfig
    path: str | None = None

    def build(self, gpt_config: GPTConfig, compiled: bool = False) -> torch.nn.Module:
        """The GPT of `gpt_config`; `compiled`: as Inductor runs it: its outputs are a compiled graph's
        (``compiled.graph_outputs``), and oomguide's GPT frees each intermediate after its last use
        (``GPT.graph_lifetimes``); a reader's model is otherwise run as it is."""
        model = self._build(gpt_config)
        if compiled:
            from .compiled import graph_outputs

            graph_outputs(model)
            if hasattr(model, "graph_lifetimes"):
                model.graph_lifetimes = True
        return model

    def _build(self, gpt_config: GPTConfig) -> torch.nn.Module:
        accepted = {f for f in inspect.signature(self.config_class).parameters}
        args = {k: v for k, v in asdict(gpt_config).items() if k in accepted}
        if gpt_config.grad_checkpoint and "grad_checkpoint" not in accepted:
            raise PredictionError(f"{self.path}: its GPTConfig has no grad_checkpoint field")
        try:
            with warnings.catch_warnings(), _quiet():
                warnings.simplefilter("ignore")
                return self.gpt_class(self.config_class(**args))
        except Exception as exc:  # a user's model may fail in any way: report it in one line
            where = self.path or "oomguide.model"
            raise PredictionError(f"{where}: building GPT failed: {exc.__class__.__name__}: {exc}") from None


class no_init(TorchFunctionMode):
    """Skip the in-place initialisers while a model is built on fake or meta tensors: they have no
    values to fill, allocate nothing, and PyTorch runs them through slow reference implementations
    (seconds for GPT-2's embeddings on the meta device). ``torch.nn.init``'s functions and the
    tensor methods they and the modules call."""

    SKIP = {"normal_", "uniform_", "zero_", "fill_", "trunc_normal_", "ones_", "zeros_"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")
        name = getattr(func, "__name__", "")
        initialiser = name in self.SKIP or (
            getattr(func, "__module__", "") == "torch.nn.init" and name.endswith("_")
        )
        if initialiser and isinstance(target, torch.Tensor) and _valueless(target):
            return target
        return func(*args, **kwargs)


def _valueless(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return t.is_meta or isinstance(t, FakeTensor)


class _quiet:
    """nanoGPT's GPT prints its parameter count; keep stdout clean for --json."""

    def __enter__(self):
        self._stdout = sys.stdout
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115

    def __exit__(self, *exc):
        sys.stdout.close()
        sys.stdout = self._stdout


def load_model_source(path: str | Path) -> ModelSource:
    """Import a nanoGPT-style model.py (GPT and GPTConfig classes, ``forward(idx, targets)``)."""
    path = Path(path)
    if not path.is_file():
        raise PredictionError(f"model file not found: {path}")
    name = f"_oomguide_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        with _quiet():
            spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise PredictionError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except Exception as exc:
        raise PredictionError(f"{path}: import failed: {exc.__class__.__name__}: {exc}") from None
    gpt, cfg = getattr(module, "GPT", None), getattr(module, "GPTConfig", None)
    if not isinstance(gpt, type) or not issubclass(gpt, torch.nn.Module):
        raise PredictionError(f"{path}: no GPT class (an nn.Module named GPT) in this file")
    if not isinstance(cfg, type):
        raise PredictionError(f"{path}: no GPTConfig class in this file")
    params = list(inspect.signature(gpt.forward).parameters)
    if params[:3] != ["self", "idx", "targets"]:
        raise PredictionError(
            f"{path}: GPT.forward must take (idx, targets), like nanoGPT's; it takes {params[1:]}"
        )
    return ModelSource(gpt, cfg, str(path))
