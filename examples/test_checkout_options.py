"""`pytest examples --nanogpt PATH` and `--nanochat PATH`: a path that is not such a checkout is a
usage error (exit 4) in one line that names the option and the problem, never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE_FIGURES = "verify"  # the tolerance the verify page states (docs/<lang>/verify.md#figures)

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


# --------------------------------------------------------------------------------------------
# an option and its variable are one setting; a test skipped for want of a checkout has not failed
# --------------------------------------------------------------------------------------------
NANOCHAT = ROOT.parent / "shared" / "nanochat"


def test_the_option_is_what_the_variable_says():
    """`--nanochat PATH` reaches what reads only OOMGUIDE_NANOCHAT: the accuracy page's nanochat cases
    (oomguide.nanochat.cases), run here in a child pytest started without the variable."""
    import os

    path = Path(os.environ.get("OOMGUIDE_NANOCHAT") or NANOCHAT)
    if not (path / "nanochat" / "gpt.py").is_file():
        pytest.skip("needs a nanochat checkout: pytest examples --nanochat PATH (or OOMGUIDE_NANOCHAT=PATH)")
    env = {k: v for k, v in os.environ.items() if k not in ("OOMGUIDE_NANOCHAT", "OOMGUIDE_NANOGPT")}
    env["OOMGUIDE_PROBE"] = "1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            f"{__file__}::test_probe_nanochat_cases",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        + ["--nanochat", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_probe_nanochat_cases(request):
    """Run by the test above only: the checkout of --nanochat is the one the nanochat cases use."""
    import os

    if os.environ.get("OOMGUIDE_PROBE") != "1":
        pytest.skip("run by test_the_option_is_what_the_variable_says")
    from oomguide.nanochat import cases

    assert cases.checkout() == request.config._oomguide_nanochat


def test_skip_reasons_for_a_missing_checkout_are_recognised():
    from conftest import NANOCHAT_MISSING, NANOGPT_MISSING, missing_checkout
    from oomguide.nanochat import cases

    assert missing_checkout(NANOGPT_MISSING) == "--nanogpt"
    assert missing_checkout(NANOCHAT_MISSING) == "--nanochat"
    assert missing_checkout(cases.MISSING) == "--nanochat"
    assert (
        missing_checkout("no nanoGPT checkout at /x: set OOMGUIDE_NANOGPT=PATH") == "--nanogpt"
    )  # test_multi_gpu
    assert missing_checkout("needs CUDA") is None
    assert missing_checkout("nanoGPT checkout found, but too old") is None


def test_figures_of_tests_skipped_for_a_checkout_are_not_missing():
    """Without --nanogpt, the figures that only its tests compute are not checked, said in the summary
    with the command that checks them; a figure that no example computes for another reason still is
    missing (and fails the run)."""
    from conftest import not_checked

    skipped = {"--nanogpt": ["examples/test_run_moments.py::test_resume", "examples/test_nanogpt.py::test_x"]}
    pages_of = {
        "examples/test_run_moments.py::test_resume": "run-moments",
        "examples/test_nanogpt.py::test_x": "nanogpt",
    }
    unchecked = ["run-moments.resume_peak", "eval-oom-12gb.train_peak"]
    lines, missing = not_checked(skipped, unchecked, pages_of)
    assert missing == ["eval-oom-12gb.train_peak"]
    assert lines == [
        "oomguide: not checked: 2 tests need a nanogpt checkout, and 1 figure of nanogpt, run-moments come "
        "from them. To check them: pytest examples --nanogpt PATH (or OOMGUIDE_NANOGPT=PATH)"
    ]
    assert not_checked({}, unchecked, pages_of) == ([], unchecked)


# --------------------------------------------------------------------------------------------
# the pages' figures: exact with CI's torch, within a stated tolerance with another, or on a GPU
# --------------------------------------------------------------------------------------------
def test_a_figure_one_percent_off_passes_on_another_torch_only(figure):
    from conftest import OTHER_TORCH_TOLERANCE, compare_figure, figures_exact

    figure("figure_tolerance", OTHER_TORCH_TOLERANCE, "percent")  # what the verify page states
    assert figures_exact("2.13.0+cpu", cuda=False)  # constraints/ci.txt
    assert not figures_exact("2.11.0+cu130", cuda=False) and not figures_exact("2.13.0+cu130", cuda=True)
    page = {"value": 10 * 2**30, "unit": "gib"}
    ok, line = compare_figure(
        "eval-oom-12gb.train_peak_compiled", int(1.01 * 10 * 2**30), page, "gib", exact=False
    )
    assert ok and line == (
        "figure eval-oom-12gb.train_peak_compiled: the page prints 10.00 GiB, yours is 10.10 GiB, 1.00% apart: "
        "within 2% (the pages' figures are computed with torch 2.13.0, on the CPU)"
    )
    ok, line = compare_figure(
        "eval-oom-12gb.train_peak_compiled", int(1.03 * 10 * 2**30), page, "gib", exact=False
    )
    assert not ok and "3.00% apart: beyond 2%" in line
    ok, line = compare_figure(
        "eval-oom-12gb.train_peak_compiled", int(1.01 * 10 * 2**30), page, "gib", exact=True
    )
    assert not ok and "run pytest examples --update-figures" in line  # CI's torch: to the byte
    assert compare_figure("x.y", page["value"], page, "gib", exact=True) == (True, None)


def test_the_whole_suite_without_a_checkout_exits_zero(monkeypatch):
    """pytest_sessionfinish on a whole run where run-moments' tests were skipped for want of --nanogpt:
    its figures are not checked, said in the summary, exit status 0; a figure of another page that no
    example computed still makes it 1."""
    from types import SimpleNamespace

    import conftest
    from oomguide import figures

    store = figures.load()
    checked = {page: set(keys) for page, keys in store.items() if page != "run-moments"}
    node = "examples/test_run_moments.py::test_first_step"
    item = SimpleNamespace(
        nodeid=node,
        fspath=ROOT / "examples" / "test_run_moments.py",
        module=SimpleNamespace(__name__="test_run_moments"),
    )

    def session_with(checked):
        monkeypatch.setattr(conftest, "_CHECKED", checked)
        monkeypatch.setattr(conftest, "_SKIPPED_FOR", {"--nanogpt": [node]})
        monkeypatch.setattr(conftest, "_NOT_CHECKED", [])
        options = {"--update-figures": False}
        config = SimpleNamespace(
            option=SimpleNamespace(keyword="", markexpr=""),
            args=[str(ROOT / "examples")],
            getoption=options.get,
        )
        session = SimpleNamespace(config=config, items=[item], exitstatus=0)
        conftest.pytest_sessionfinish(session, 0)
        return session

    session = session_with(checked)
    assert session.exitstatus == 0
    assert conftest._NOT_CHECKED == [
        f"oomguide: not checked: 1 test needs a nanogpt checkout, and {len(store['run-moments'])} figures of "
        "run-moments come from them. To check them: pytest examples --nanogpt PATH (or OOMGUIDE_NANOGPT=PATH)"
    ]
    one_missing = dict(checked, **{"eval-oom-12gb": checked["eval-oom-12gb"] - {"train_peak"}})
    assert session_with(one_missing).exitstatus == 1
