"""The shell snippets of the home page and of "Verify on your hardware" are real commands.

- snippets/index/explain.sh, snippets/index/check.sh: every line runs, as written, in a
  nanoGPT checkout (a copy of ``--nanogpt PATH`` when given, else its config/train_gpt2.py alone)
  with an OOM message like nanoGPT issue #88's.
- snippets/verify/run-examples.sh, snippets/verify/run-examples-budget.sh,
  snippets/verify/add-report.sh: they parse, the extra they install exists, and every pytest option
  they pass is one that `pytest examples` knows (running them here would run this suite inside
  itself); the report they copy is the one a GPU run writes (test_verify_shows_the_gpu_lines).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent)

SHELL_SNIPPETS = [
    "index/explain.sh",
    "index/check.sh",
    "verify/run-examples.sh",
    "verify/run-examples-budget.sh",
    "verify/add-report.sh",
]

# The documented command lines (README, index page); a snippet may use no other flag.
DOCUMENTED = {
    "check": {"--set", "--model", "--gpu-memory", "--json"},
    "explain": {"--config", "--set", "--lang", "--json"},
}

# Without --nanogpt: a stand-in for the reader's config/train_gpt2.py, written here with the values
# that decide its memory (GPT-2 124M at batch 12, block 1024; 40 accumulation steps for 8 GPUs).
# With --nanogpt (as in CI), the reader's own file is used instead.
TRAIN_GPT2 = """\
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 40
"""

# Shaped like https://github.com/karpathy/nanoGPT/issues/88, --batch_size=32 on a 16 GB card:
# 6.14 GiB is a float32
# (B*T, V) buffer, 32*1024*50304*4 bytes; the other sizes are made up but consistent.
OOM_MESSAGE = """\
Traceback (most recent call last):
  File "/home/user/nanoGPT/train.py", line 264, in <module>
    losses = estimate_loss()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.14 GiB. GPU 0 has a total capacity of 15.77 GiB of which 2.31 GiB is free. Including non-PyTorch memory, this process has 13.45 GiB memory in use. Of the allocated memory 12.96 GiB is allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.
"""


def commands(path: Path) -> list[list[list[str]]]:
    """The command lines of a shell snippet: each line, split into its pipeline's commands."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            out.append([shlex.split(part) for part in line.split("|")])
    return out


def flags(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("--")}


def oomguide_help(sub: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "oomguide", sub, "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"oomguide {sub} --help failed:\n{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("relative", SHELL_SNIPPETS)
def test_shell_snippet_parses(snippet, relative):
    proc = subprocess.run(["bash", "-n", str(snippet.path(relative))], capture_output=True, text=True)
    assert proc.returncode == 0, f"snippets/{relative}: bash -n: {proc.stderr}"


@pytest.mark.parametrize("relative", ["index/explain.sh", "index/check.sh"])
def test_oomguide_flags_exist(snippet, relative):
    used = [cmd for line in commands(snippet.path(relative)) for cmd in line if cmd[:1] == ["oomguide"]]
    assert used, f"snippets/{relative} runs no oomguide command"
    for cmd in used:
        sub = cmd[1]
        assert sub in DOCUMENTED, f"snippets/{relative}: unknown subcommand {sub!r}"
        assert flags(cmd) <= DOCUMENTED[sub], (
            f"snippets/{relative}: undocumented flags {flags(cmd) - DOCUMENTED[sub]}"
        )
        text = oomguide_help(sub)
        for flag in flags(cmd):
            assert flag in text, f"snippets/{relative}: `oomguide {sub} --help` has no {flag}"
        for flag in DOCUMENTED[sub]:
            assert flag in text, f"`oomguide {sub}` lacks the documented flag {flag}"


@pytest.fixture
def nanogpt_checkout(tmp_path, request) -> Path:
    """The reader's checkout (a copy of --nanogpt PATH) when given, else its config/train_gpt2.py alone."""
    real = getattr(request.config, "_oomguide_nanogpt", None)
    if real is not None:
        shutil.copytree(real, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "data"))
    else:
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "train_gpt2.py").write_text(TRAIN_GPT2, encoding="utf-8")
    (tmp_path / "oom.txt").write_text(OOM_MESSAGE, encoding="utf-8")
    (tmp_path / "train.log").write_text("iter 0: loss 10.9876\n" + OOM_MESSAGE, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("relative", ["index/explain.sh", "index/check.sh"])
def test_oomguide_lines_run(snippet, relative, nanogpt_checkout):
    """Each line of the snippet runs in a nanoGPT checkout and gives an answer (0: fits, 1: does not)."""
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    for line in snippet.path(relative).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=nanogpt_checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode in (0, 1) and proc.stdout.strip(), (
            f"snippets/{relative}: `{line}` exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )


def test_run_examples_installs_a_real_extra(snippet):
    extras = metadata("oomguide").get_all("Provides-Extra") or []
    pip = [
        cmd
        for line in commands(snippet.path("verify/run-examples.sh"))
        for cmd in line
        if cmd[:2] == ["pip", "install"]
    ]
    assert pip, "snippets/verify/run-examples.sh installs nothing"
    for cmd in pip:
        target = cmd[-1]
        assert target.startswith(".["), (
            f"snippets/verify/run-examples.sh: installs {target!r}, not this project"
        )
        extra = target[2:-1]
        assert extra in extras, f"snippets/verify/run-examples.sh: oomguide has no extra {extra!r} ({extras})"


@pytest.mark.parametrize(
    "relative", ["verify/run-examples.sh", "verify/run-examples-budget.sh", "verify/add-report.sh"]
)
def test_pytest_options_exist(snippet, relative):
    runs = [cmd for line in commands(snippet.path(relative)) for cmd in line if cmd[:1] == ["pytest"]]
    assert runs, f"snippets/{relative} runs no pytest"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "examples", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for cmd in runs:
        assert cmd[1:2] == ["examples"], f"snippets/{relative}: `{' '.join(cmd)}` does not run examples/"
        for flag in flags(cmd):
            assert flag in proc.stdout, f"snippets/{relative}: `pytest examples --help` has no {flag}"


def test_verify_shows_the_headers_the_examples_print():
    """docs/<lang>/verify.md shows the first line of `pytest examples` on each path: the CPU one as this
    very run prints it (default --gpu-memory), the CUDA one as the same code writes it for an H100."""
    from conftest import report_header

    cpu = report_header("11.69GiB")
    cuda = report_header(
        "11.69GiB",
        {
            "device": "NVIDIA H100 80GB HBM3",
            "capability": (9, 0),
            "non_pytorch": 512 * 1024**2,
            "expandable": False,
        },
    )
    for lang in ("en", "ja", "zh", "de", "fr"):
        text = (ROOT / "docs" / lang / "verify.md").read_text(encoding="utf-8")
        shown = [line.strip() for line in text.splitlines() if line.strip().startswith("oomguide examples:")]
        assert shown == [cuda, cpu], f"docs/{lang}/verify.md shows {shown}, the examples print {[cuda, cpu]}"


EXPLAIN_INCLUDE = '--8<-- "snippets/index/explain.sh"'


def installed_as_shown(line: str) -> str:
    """A "Read next" location as the page shows it: the installed copy of a page (``…/oomguide/guide/``),
    wherever this machine has it (a checkout's docs/, or site-packages after pip install)."""
    return re.sub(r"\S*/(?:docs|oomguide/guide)/(en|ja|zh|de|fr)/", r"…/oomguide/guide/\1/", line)


def shown_explain(text: str) -> tuple[str, list[str]]:
    """The paragraph after the home page's explain snippet and the output block that follows it."""
    lines = text.splitlines()
    start = lines.index(EXPLAIN_INCLUDE)
    mark = lines.index("<!-- output -->", start)
    intro = " ".join(line for line in lines[start + 2 : mark] if line.strip())
    end = lines.index("```", mark + 2)
    return intro, lines[mark + 2 : end]


@pytest.mark.parametrize("lang", ["en", "ja", "zh", "de", "fr"])
def test_home_page_shows_explain_in_its_own_language(lang, tmp_path):
    """docs/<lang>/index.md shows `oomguide explain oom.txt --lang <lang>` on an OOM message shaped
    like nanoGPT issue #88's, and the output it shows is what the command prints in that language."""
    (tmp_path / "oom.txt").write_text(OOM_MESSAGE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "OOMGUIDE_SITE_URL"}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(
        ["oomguide", "explain", "oom.txt", "--lang", lang],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    intro, shown = shown_explain((ROOT / "docs" / lang / "index.md").read_text(encoding="utf-8"))
    assert f"`--lang {lang}`" in intro, (
        f"docs/{lang}/index.md: the explain example does not say --lang {lang}"
    )
    printed = [installed_as_shown(line.rstrip()) for line in proc.stdout.rstrip("\n").splitlines()]
    assert [line.rstrip() for line in shown] == printed, (
        f"docs/{lang}/index.md shows another answer than `oomguide explain oom.txt --lang {lang}` prints:\n"
        + proc.stdout
    )


def test_verify_shows_the_gpu_lines():
    """docs/<lang>/verify.md shows what a GPU run prints, as the code writes it: a page run's summary
    line (page A's situation on an H100 capped to a 12 GB card: measured 6.80 GiB when it ran out of
    memory in the first evaluation, check's prediction for it), and the report's line; the report's
    name is what snippets/verify/add-report.sh copies; the page names the torch of the figures."""
    import gpu_run
    from conftest import CI_TORCH, finish_report
    from oomguide import memory

    card = memory.parse_size("11.69GiB")
    plan = gpu_run.Plan(
        label="estimate-loss-oom/situation.py",
        snippets=["estimate-loss-oom/situation.py"],
        configs=["snippets/estimate-loss-oom/situation.py"],
        overrides=["eval_iters=2"],
        harness=[],
        gpu_memory=card,
        cap_bytes=memory.usable_bytes(card),
        alloc_conf="",
        compiled=True,
        predicted={
            "estimate_loss_first": {
                "allocated": 13_863_374_336,
                "reserved": 15_355_346_944,
                "verdict": "does_not_fit",
            }
        },
    )
    message = "CUDA out of memory. Tried to allocate 6.14 GiB."
    record = {
        "phases": [{"name": "estimate_loss_first", "allocated": 7_301_444_403, "reserved": 7_709_466_296}],
        "oom": {"phase": "estimate_loss_first", "message": message},
        "error": f"OutOfMemoryError: {message}",
    }
    result = gpu_run.judge(plan, record)
    device = gpu_run.Device("NVIDIA H100 80GB HBM3", 85_017_493_504, (9, 0), "2.11.0+cu130")
    import tempfile

    import conftest

    with tempfile.TemporaryDirectory() as tmp:
        path = finish_report(device, [result], Path(tmp))
        report_line = conftest._REPORT.pop().replace(str(path), path.name)
    assert path.name.startswith("nvidia-") and path.name.endswith(".json")  # add-report.sh: nvidia-*.json
    for lang in ("en", "ja", "zh", "de", "fr"):
        text = (ROOT / "docs" / lang / "verify.md").read_text(encoding="utf-8")
        shown = [line.strip() for line in text.splitlines()]
        assert result.line() in shown, f"docs/{lang}/verify.md does not show {result.line()!r}"
        dated = [s for s in shown if s.startswith("oomguide: report written to ")]
        assert [s.split(": ", 2)[2] for s in dated] == [report_line.split(": ", 2)[2]], lang
        assert f"PyTorch {CI_TORCH}" in text, f"docs/{lang}/verify.md does not name the figures' torch"
