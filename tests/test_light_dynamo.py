"""``memory/light_dynamo.py``: TorchDynamo loaded only when something needs more than fake tensors do.

The CLI installs it before a prediction; a prediction must then give what it gives without it. Each
case runs in a fresh interpreter, since the point is what a process has imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_fake_tensors_run_without_the_compiler():
    out = _run(
        """
        import sys, torch
        from oomguide.memory import light_dynamo
        assert light_dynamo.install()
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            x = torch.empty(8, 8, requires_grad=True)
            (x @ x).sum().backward()
        print("symbolic_convert" if "torch._dynamo.symbolic_convert" in sys.modules else "light")
        """
    )
    assert out.strip() == "light"


def test_a_constant_tensor_under_fake_tensors():
    """A constant (``torch.tensor(2.0)`` beside fake tensors, as a reader's model.py or AdamW's step
    counter makes) makes fake tensors import ``torch._dynamo.source``, whose ``from . import utils``
    once ran the package's __init__ from inside that import: a circular ImportError, which
    ``oomguide check --model`` reported as a model that cannot run on fake tensors."""
    out = _run(
        """
        import torch
        from oomguide.memory import light_dynamo
        assert light_dynamo.install()
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            x = torch.empty(4, requires_grad=True)
            y = (x * torch.tensor(2.0)).sum()
            y.backward()
            opt = torch.optim.AdamW([x], foreach=False, fused=False)
            opt.step()
        import torch._dynamo
        assert callable(torch._dynamo.reset)  # a name only the real package has: its __init__ ran
        print(tuple(y.shape), tuple(opt.state[x]["exp_avg"].shape))
        """
    )
    assert out.strip() == "() (4,)"


def test_a_submodule_asked_for_outside_an_import_loads_the_package():
    """``torch.distributed.init_process_group`` (FSDP2's fake process group) reads
    ``torch._dynamo.trace_rules`` from the package: outside the import of another of its modules, that
    runs the package's __init__ first, as without light_dynamo; importing the submodule alone there
    ended in a circular ImportError inside TorchDynamo."""
    out = _run(
        """
        import torch
        from oomguide.memory import light_dynamo
        assert light_dynamo.install()
        rules = torch._dynamo.trace_rules
        assert callable(torch._dynamo.reset) and rules is __import__("sys").modules["torch._dynamo.trace_rules"]
        print("ok")
        """
    )
    assert out.strip() == "ok"
