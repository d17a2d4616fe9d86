"""Installing oomguide (issue 14): the torch it declares, and a non-editable install that works.

* ``oomguide check`` names the PyTorch whose code its prediction ran, and whether oomguide was
  verified on it (the range pyproject.toml declares).
* ``pip install .``: the wheel, built here and installed into a fresh virtual environment without
  the network (torch and numpy from this machine's local wheels), runs ``oomguide explain`` and
  ``oomguide check`` from outside the repository, with everything it reads at run time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from oomguide import versions
from oomguide.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["n_layer=2", "n_head=2", "n_embd=32", "block_size=32", "vocab_size=128", "batch_size=4"]


# --- the torch oomguide declares, and the one it runs on ---------------------------------------
def test_release_reads_every_spelling_of_a_torch_version():
    assert versions.release("2.13.0+cpu") == (2, 13, 0)
    assert versions.release("2.5.1+cu124") == (2, 5, 1)
    assert versions.release("2.6.0a0+git1234abc") == (2, 6, 0)
    assert versions.release("2.15") == (2, 15, 0)
    with pytest.raises(ValueError, match="cannot read a PyTorch version"):
        versions.release("nightly")


def test_verified_range_is_the_declared_one():
    """pyproject's torch requirement and versions.VERIFIED_* say the same range."""
    (torch_req,) = re.findall(r'^\s*"(torch\b[^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    low = re.search(r">=\s*(\d+)\.(\d+)", torch_req)
    high = re.search(r"<\s*(\d+)\.(\d+)", torch_req)
    assert low and high, f"pyproject declares torch without a range: {torch_req!r}"
    assert (int(low[1]), int(low[2])) == versions.VERIFIED_MIN
    # "<2.16" admits every 2.15.x: the newest verified minor release is the one below the bound
    assert (int(high[1]), int(high[2]) - 1) == versions.VERIFIED_MAX
    assert versions.verified("2.5.0") and versions.verified("2.15.3+cu130")
    assert not versions.verified("2.4.1") and not versions.verified("2.16.0")


def test_constraints_pin_a_torch_inside_the_range():
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "constraints" / "ci.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert versions.verified(pins["torch"]), pins["torch"]
    assert versions.release(pins["torch"]) == versions.release(torch.__version__), (
        "the tests run on another torch than constraints/ci.txt pins"
    )


def test_check_names_the_torch_its_prediction_models(capsys):
    args = ["check", "--no-search", "--phase", "train_step"] + [f"--set={s}" for s in TINY]
    main(args + ["--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["torch_version"] == torch.__version__
    assert out["torch_verified"] is versions.verified()
    assert out["torch_verified_range"] == "2.5-2.15"
    main(args)
    text = capsys.readouterr().out
    assert f"predicted with: PyTorch {torch.__version__} (oomguide is verified on 2.5-2.15)" in text


def test_check_says_when_torch_is_outside_the_range():
    assert "OUTSIDE the range oomguide is verified on (2.5-2.15)" in versions.line("2.4.1+cu121")
    assert versions.describe("2.16.0")["torch_verified"] is False
