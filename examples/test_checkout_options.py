"""`pytest examples --nanogpt PATH` and `--nanochat PATH`: a path that is not such a checkout is a
usage error (exit 4) in one line that names the option and the problem, never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

OPTIONS = {
    "nanogpt": ("examples/test_nanogpt.py", "not a nanoGPT checkout (no train.py, model.py"),
    "nanochat": ("examples/test_nanochat.py", "not a nanochat checkout (no nanochat/gpt.py"),
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("bad", ["missing", "empty"])
def test_bad_checkout_path_is_a_usage_error(tmp_path, option, bad):
    module, not_a_checkout = OPTIONS[option]
    path = tmp_path / bad
    if bad == "empty":
        path.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", module, "--co", "-q", f"--{option}", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
    expected = "no such folder" if bad == "missing" else not_a_checkout
    assert f"--{option} {path}: {expected}" in errors[0]
