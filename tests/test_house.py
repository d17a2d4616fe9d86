"""The house rules of src/oomguide/, as checks (issue 13; CONTRIBUTING.md, "Where things live").

- Every module stays readable: at most MAX_LINES lines, and it opens with a docstring that says
  what it does.
- Only ``memory/measure.py`` touches the GPU: no other module imports ``torch.cuda`` or calls
  anything under it, so every other path runs, and is tested, on a CPU-only machine.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "oomguide"
MODULES = sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 600
GPU_MODULES = {"memory/measure.py"}  # the one place that may use torch.cuda


def _name(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def cuda_uses(source: str) -> list[str]:
    """Where `source` imports or uses torch.cuda (an attribute chain, an import, `from torch import cuda`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("torch.cuda")
            ]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("torch.cuda") or (
                module == "torch" and any(a.name == "cuda" for a in node.names)
            ):
                found.append(f"line {node.lineno}: from {module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr == "cuda":
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                found.append(f"line {node.lineno}: torch.cuda")
    return found


def test_the_finder_finds_every_form():
    """The check can fail: each way of reaching torch.cuda is found, and a string or a tensor's .cuda() is not."""
    assert cuda_uses("import torch.cuda") and cuda_uses("from torch.cuda import mem_get_info")
    assert cuda_uses("from torch import cuda") and cuda_uses("import torch\nx = torch.cuda.is_available()")
    assert not cuda_uses("doc = 'torch.cuda.mem_get_info()'\ny = x.cuda()\nimport torch.nn")


def test_modules_were_found():
    assert len(MODULES) >= 20 and (SRC / "memory" / "measure.py") in MODULES


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_is_short_and_says_what_it_does(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, (
        f"src/oomguide/{_name(path)} has {lines} lines (at most {MAX_LINES}): split it by job, "
        "as memory/ and explain/ are split (CONTRIBUTING.md, 'Where things live')"
    )
    if path.name == "__main__.py":
        return  # `python -m oomguide`: two lines that call cli.main
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc and len(doc) >= 40, f"src/oomguide/{_name(path)} opens with no docstring saying what it does"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_only_measure_touches_the_gpu(path):
    uses = cuda_uses(path.read_text(encoding="utf-8"))
    if _name(path) in GPU_MODULES:
        assert uses, (
            f"src/oomguide/{_name(path)} is the GPU module but uses no torch.cuda: update GPU_MODULES"
        )
    else:
        assert not uses, (
            f"src/oomguide/{_name(path)} uses torch.cuda ({'; '.join(uses)}): only memory/measure.py may; "
            "add what you need there and call it"
        )
