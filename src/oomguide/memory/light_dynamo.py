"""A prediction's process without TorchDynamo's 1.3 s import: ``torch._dynamo`` loaded on demand.

Fake tensors need two things of ``torch._dynamo``: its ``config`` module (read when a
``FakeTensorMode`` is made) and ``disable`` (the fake tensor's dispatch is wrapped in
``torch._disable_dynamo``, which imports ``torch._dynamo`` on the first call); the optimizer's step
calls ``graph_break``. Importing the package
imports the whole compiler (symbolic_convert, trace_rules, variables...): more than a second on a
laptop, as long as the rest of ``oomguide check`` on the default config.

``install()`` puts in ``sys.modules`` a ``torch._dynamo`` whose package ``__init__`` has not run yet:
its submodules (``torch._dynamo.config``) import as usual; ``disable`` wraps nothing and
``graph_break`` does nothing, which is what the real ones do when no frame is being compiled (nothing is compiled in a prediction: torch.compile
is modelled, ``compiled``); any other name runs the real ``__init__`` first, so code that needs
Dynamo gets all of it. Only the CLI installs it, before the first prediction; a process that already
imported Dynamo keeps it. Never imports torch.cuda.

Why this is kept (issue 23's rule: a speed-up stays only where a goal needs it): measured on this
2-core machine, it saves 0.37 s of CPU on `oomguide check config/train_gpt2.py` and 0.57 s on gpt2-xl.
Re-measured after a first phase began to make its later run too (``phases``), side by side with
`import torch` (1.23 s), best of 3 on a busy 2-core machine: 3.70 s of CPU with it, 4.07 s without.
The 124M goal (≤ 1.6x `import torch`) is not met yet; remove it once the engine meets that goal.
"""

from __future__ import annotations

import importlib.util
import sys


def _disable(fn=None, recursive=True, **_options):
    """torch._dynamo.disable outside compilation: the function itself (no frame is being compiled)."""
    if fn is None:
        return lambda f: f
    return fn


def _graph_break(msg: str = "") -> None:
    """torch._dynamo.graph_break outside compilation: nothing (the optimizer's step calls it)."""


def _importing_a_submodule() -> bool:
    """Whether a module of torch._dynamo is being imported right now (its code is running)."""
    return any(
        getattr(getattr(module, "__spec__", None), "_initializing", False)
        for name, module in list(sys.modules.items())
        if name.startswith("torch._dynamo.")
    )


def install() -> bool:
    """Make ``torch._dynamo`` load lazily in this process; False if it is loaded already (or cannot be)."""
    if "torch._dynamo" in sys.modules:
        return False
    import torch

    spec = importlib.util.find_spec("torch._dynamo")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return False
    module = importlib.util.module_from_spec(spec)

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if _importing_a_submodule() and importlib.util.find_spec(f"torch._dynamo.{name}") is not None:
            # a submodule asked for while another one is being imported (``from . import utils`` in
            # torch._dynamo.source, which fake tensors import to make a constant): imported as itself.
            # Running the package's __init__ from inside that import would import the half-initialised
            # module again (a circular ImportError); anywhere else the __init__ runs, as it would have.
            return importlib.import_module(f"torch._dynamo.{name}")
        # anything else beyond config and disable: the real package, loaded into this module
        del module.__dict__["__getattr__"]
        for own in ("disable", "graph_break"):
            module.__dict__.pop(own, None)
        spec.loader.exec_module(module)
        return getattr(module, name)

    module.disable = _disable
    module.graph_break = _graph_break
    module.__getattr__ = __getattr__
    sys.modules["torch._dynamo"] = module
    torch._dynamo = module
    return True
