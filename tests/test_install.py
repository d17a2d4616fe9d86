"""Installing oomguide (issue 14): the torch it declares, and a non-editable install that works.

* ``oomguide check`` names the PyTorch whose code its prediction ran, and whether oomguide was
  verified on it (the range pyproject.toml declares).
* ``pip install .``: the wheel, built here and installed into a fresh virtual environment without
  the network (torch and numpy from this machine's local wheels), runs ``oomguide explain`` and
  ``oomguide check`` from outside the repository, with everything it reads at run time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy
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
    assert f"predicted with: PyTorch {torch.__version__} (oomguide is verified on 2.5\u20132.15)" in text


def test_check_says_when_torch_is_outside_the_range():
    assert "OUTSIDE the range oomguide is verified on (2.5\u20132.15)" in versions.line("2.4.1+cu121")
    assert versions.describe("2.16.0")["torch_verified"] is False


# --- pip install . (not editable) ------------------------------------------------------------
OOM_MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.14 GiB. GPU 0 has a total capacity of "
    "15.77 GiB of which 4.35 GiB is free. Including non-PyTorch memory, this process has 11.42 GiB memory in "
    "use. Of the allocated memory 10.94 GiB is allocated by PyTorch, and 98.25 MiB is reserved by PyTorch "
    "but unallocated.\n"
)


def _pip_config() -> dict[str, list[str]]:
    """The running interpreter's pip configuration (files and PIP_* variables): key -> values."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120
    )
    out: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        out.setdefault(key.rsplit(".", 1)[-1], []).extend(value.strip().strip("'\"").split())
    return out


def _local(source: str) -> str | None:
    """A wheel source on this machine (a folder, or a file:// URL of one), else None."""
    path = source.removeprefix("file://") if source.startswith("file://") else source
    return source if "://" not in path and Path(path).exists() else None


def local_wheel_sources() -> list[str]:
    """pip options that name only this machine's own wheel sources (PIP_FIND_LINKS, file:// indexes):
    an install with them cannot download anything."""
    config = _pip_config()
    links = [s for s in config.get("find-links", []) if _local(s)]
    indexes = [s for s in config.get("index-url", []) + config.get("extra-index-url", []) if _local(s)]
    options = [arg for link in dict.fromkeys(links) for arg in ("--find-links", link)]
    if not indexes:
        return options + ["--no-index"]
    options += ["--index-url", indexes[0]]
    return options + [arg for index in indexes[1:] for arg in ("--extra-index-url", index)]


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)


PUBLISHED = "https://guide.example/oomguide/"  # a site_url set for publishing (README: "Publish the site")


def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    """Build the wheel from a copy of the sources, with mkdocs.yml's site_url set for publishing, install
    it into a new venv from local wheels only (torch and numpy at the versions running here), and run
    explain and check from outside the tree: explain links to the published site's sections."""
    start = time.perf_counter()
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    mkdocs, n = re.subn(r"^site_url:.*$", f"site_url: {PUBLISHED}", mkdocs, count=1, flags=re.M)
    assert n == 1, "mkdocs.yml has no site_url line"
    (tree / "mkdocs.yml").write_text(mkdocs, encoding="utf-8")
    shutil.copytree(
        ROOT / "src",
        tree / "src",
        symlinks=True,  # explain/site.yml and guide stay the repository's links to mkdocs.yml and docs/
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    shutil.copytree(ROOT / "docs", tree / "docs")
    assert (tree / "src/oomguide/explain/site.yml").resolve() == (tree / "mkdocs.yml").resolve()
    assert (tree / "src/oomguide/guide").resolve() == (tree / "docs").resolve()
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check"]
    built = _run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(tree)])
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("oomguide-*.whl")

    # everything under src/oomguide is in the wheel: modules, catalogs, data files
    package = ROOT / "src" / "oomguide"
    wanted = {
        f"oomguide/{p.relative_to(package).as_posix()}"
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }
    # and the guide's pages, which explain's "Read next" opens while the site is not published
    wanted |= {
        f"oomguide/guide/{p.relative_to(ROOT / 'docs').as_posix()}"
        for p in (ROOT / "docs").glob("*/*")
        if p.suffix in (".md", ".ipynb")
    }
    with zipfile.ZipFile(wheel) as zf:
        missing = sorted(wanted - set(zf.namelist()))
        recorded = zf.read("oomguide/explain/site.yml").decode("utf-8")
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data]): {missing}"
    # the wheel carries mkdocs.yml's site_url as it was when the wheel was built
    assert re.search(r"^site_url:\s*(\S+)", recorded, re.M)[1] == PUBLISHED

    # a fresh venv; torch and numpy exactly as here, from this machine's wheels, nothing downloaded
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    pins = [f"torch=={torch.__version__}", f"numpy=={numpy.__version__}"]
    installed = _run(
        pip
        + ["--python", str(python), "install", "--no-compile", "--quiet"]
        + local_wheel_sources()
        + pins
        + [str(wheel)]
    )
    assert installed.returncode == 0, (
        f"installing {wheel.name} with {pins} from local wheels only failed; this test needs torch and "
        f"numpy's wheels on the machine (PIP_FIND_LINKS):\n{installed.stdout}{installed.stderr}"
    )
    install_seconds = time.perf_counter() - start

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    work = tmp_path / "elsewhere"  # not the repository: nothing can come from src/ or docs/
    work.mkdir()
    where = _run([str(python), "-c", "import oomguide; print(oomguide.__file__)"], cwd=work, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr

    (work / "oom.txt").write_text(OOM_MESSAGE, encoding="utf-8")
    oomguide = str(venv / "bin" / "oomguide")
    explained = _run([oomguide, "explain", "oom.txt", "--lang", "ja"], cwd=work, env=env)
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert f"\n    {PUBLISHED}ja/estimate-loss-oom/#reduce-batch-size\n" in explained.stdout
    assert "docs/" not in explained.stdout and "127.0.0.1" not in explained.stdout
    assert "6.14 GiB" in explained.stdout and "診断" in explained.stdout  # the Japanese words are there
    assert "\n  - 最初の estimate_loss() で CUDA メモリ不足になる › 1. バッチサイズを減らす\n" in explained.stdout

    # the site not published (site_url on this machine, as the repository ships it): each section is the
    # page's own copy in the installed package, at its heading's line; open each and find the section
    site_yml = Path(where.stdout.strip()).parent / "explain" / "site.yml"
    site_yml.write_text("site_url: http://127.0.0.1:8000/\n", encoding="utf-8")
    for lang in ("en", "de"):
        local = _run([oomguide, "explain", "oom.txt", "--lang", lang], cwd=work, env=env)
        assert local.returncode == 0, local.stdout + local.stderr
        opened = open_read_next(local.stdout, lang)
        assert opened and all(Path(path).is_relative_to(venv) for path, _, _ in opened), opened

    check = [oomguide, "check", "--no-search", "--json"] + [f"--set={s}" for s in TINY]
    checked = _run(check, cwd=work, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = json.loads(checked.stdout)
    assert out["torch_version"] == torch.__version__
    assert "train_step" in out["phases"] and all(p["fits"] for p in out["phases"].values())
    print(
        f"pip install . into a fresh venv: build + install {install_seconds:.0f} s, "
        f"total with explain and check {time.perf_counter() - start:.0f} s"
    )


def open_read_next(output: str, lang: str) -> list[tuple[str, int, str]]:
    """Open every location explain's "Read next" prints (``path:line`` of a page file): the file exists
    and its line is the heading of the section whose title is printed above it. (path, line, title)."""
    from oomguide.explain import TEXT
    from oomguide.i18n import gettext_for

    lines = output.splitlines()
    rest = lines[lines.index(gettext_for(lang)(TEXT["h_links"])) + 1 :]
    opened = []
    for title_line, where in zip(rest[::2], rest[1::2]):
        assert title_line.startswith("  - ") and where.startswith("    "), (title_line, where)
        path, _, line = where.strip().rpartition(":")
        assert Path(path).is_absolute() and Path(path).is_file(), f"{where.strip()} does not open"
        heading = Path(path).read_text(encoding="utf-8").splitlines()[int(line) - 1]
        section = title_line[4:].rpartition(" › ")[2]
        assert heading.startswith("#") and "{ #" in heading, f"{where.strip()}: not a heading: {heading}"
        assert section.replace(" ", "") in heading.replace("`", "").replace(" ", ""), (section, heading)
        assert f"/{lang}/" in path
        opened.append((path, int(line), section))
    return opened


def test_checkpoint_hook_is_the_one_this_torch_calls(monkeypatch):
    """versions.checkpoint_recompute_hook() names what checkpoint() goes through on the running torch
    (renamed in 2.14): the prediction's CUDA autocast reaches checkpointed recomputation only there."""
    import torch.utils.checkpoint as ckpt

    name = versions.checkpoint_recompute_hook()
    original = getattr(ckpt, name)
    calls = []

    def spy(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(ckpt, name, spy)
    x = torch.ones(3, requires_grad=True)
    ckpt.checkpoint(lambda t: (t * 2).sin(), x, use_reentrant=False).sum().backward()
    assert calls == [name] and x.grad is not None
