"""The house rules of src/oomguide/, as checks (issue 13; CONTRIBUTING.md, "Where things live").

- Every module stays readable: at most MAX_LINES lines, and it opens with a docstring that says
  what it does.
- Only ``memory/measure.py`` touches the GPU: no other module imports ``torch.cuda`` or calls
  anything under it, so every other path runs, and is tested, on a CPU-only machine.
- CONTRIBUTING.md's map ("Where things live", "explain: where things go") names every module, so
  that a newcomer finds each one from the job it does (issue 23; ``test_the_map_names_every_module``).
- Beyond src/, every tracked text file cites only what the repository's reader can follow: no fact
  numbers of a notes file kept outside it, no paths into the shared folder beside the checkout
  (issue 23; ``test_nothing_cites_outside_the_repository``).
"""

from __future__ import annotations

import ast
import re
import subprocess
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


def test_the_map_names_every_module():
    """Each module of src/oomguide/ (but package __init__ and __main__) is named in CONTRIBUTING.md by its
    path under src/oomguide/, in backquotes (nanoGPT's and nanochat's files share some of those names,
    so a name is not checked the other way round)."""
    text = (SRC.parents[1] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z0-9_/]+\.py)\b", text))
    modules = {_name(p) for p in MODULES if p.name not in ("__init__.py", "__main__.py")}
    missing = sorted(modules - named)
    assert not missing, f"CONTRIBUTING.md's map does not name: {', '.join(missing)} (add a row for its job)"


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


# --- citations that lead outside the repository (issue 23) ------------------------------------------
ROOT = SRC.parents[1]
NOTES = "FACT" + "S"  # the notes file's name, spelled in pieces so that this file passes its own check
CITATION = re.compile(rf"\b{NOTES}(?:\.md)?\b")
SHARED_PATH = re.compile(r"(?:\.\.|/work)/shared(?:/[\w.\-]*\w)*")  # no trailing full stop
SHARED_NANOGPT = "/".join(("..", "shared", "nanoGPT"))  # the checkout CI runs examples/ against
SHARED_NANOGPT_USES = {  # the files that implement or document that default, and only they
    ".ci/run",
    "CONTRIBUTING.md",
    "examples/conftest.py",
    "examples/test_multi_gpu.py",
    "examples/test_nanogpt.py",
}
SHARED_NANOCHAT = "/".join(("..", "shared", "nanochat"))  # the nanochat checkout CI runs examples/ against
SHARED_NANOCHAT_USES = {".ci/run", "CONTRIBUTING.md", "examples/conftest.py", "examples/test_nanochat.py"}
SHARED_CHECKOUTS = {SHARED_NANOGPT: SHARED_NANOGPT_USES, SHARED_NANOCHAT: SHARED_NANOCHAT_USES}


def outside_references(name: str, text: str) -> list[str]:
    """Where `text` (the tracked file `name`) cites the notes file or points into the shared folder."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        found += [f"{name}:{lineno}: {m.group(0)!r} (fact numbers)" for m in CITATION.finditer(line)]
        for m in SHARED_PATH.finditer(line):
            if name not in SHARED_CHECKOUTS.get(m.group(0), ()):
                found.append(f"{name}:{lineno}: {m.group(0)!r} (a path outside the repository)")
    return found


def tracked_text_files() -> dict[str, str]:
    """Every file ``git ls-files`` lists that reads as UTF-8 text, by its path in the repository."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"not a git checkout, nothing tracked to check ({err})")
    texts = {}
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the working tree, not yet in the index
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary (a pickled meta.pkl)
    return texts


def test_the_citation_finder_finds_what_leads_outside():
    """The check can fail: fact numbers and shared paths are found; other words and the one use are not."""
    notes_md = NOTES + ".md"
    assert outside_references("src/x.py", f"# the peak ({NOTES} 17)")
    assert outside_references("tests/t.py", f'"""See {notes_md} 3-5."""')
    assert outside_references("README.md", "/".join(("", "work", "shared", notes_md)))
    assert outside_references("examples/conftest.py", SHARED_NANOGPT + "/train.py")  # a file in it
    assert not outside_references("CONTRIBUTING.md", f"`.ci/run` uses {SHARED_NANOGPT}.")
    assert outside_references("src/oomguide/cli.py", f"default {SHARED_NANOGPT}")  # not a listed use
    assert not outside_references("tests/test_browser.py", f"ARTI{NOTES} = ROOT / 'test-artifacts'")
    assert not outside_references(".ci/run", f"if [ -d {SHARED_NANOGPT} ]; then")
    assert not outside_references("examples/test_nanochat.py", f"CI: {SHARED_NANOCHAT}")
    assert outside_references("examples/test_nanogpt.py", f"CI: {SHARED_NANOCHAT}")  # not a listed use
    assert outside_references("examples/conftest.py", SHARED_NANOCHAT + "/nanochat/gpt.py")
    assert not outside_references("docs/en/index.md", "nanoGPT's facts, shared by the languages")


def test_nothing_cites_outside_the_repository():
    """No tracked text file cites the notes file or points into the shared folder (issue 23).

    The project once cited a notes file kept beside the checkout by its fact numbers (its name in
    capitals, ``NOTES``, then "17" or ".md 3-5"), and files in the shared folder next to the
    repository. Whoever carries the project on has neither. Cite what the fact stands for instead:
    the upstream source (PyTorch's file and function, nanoGPT's file and function, an issue's
    address) or the guide's page and section (docs/en/<page>.md#anchor).

    Checked in every file ``git ls-files`` lists that reads as UTF-8 text, this one included (it
    spells its patterns in pieces): ``CITATION``, the notes file's name as a word, with or without
    ``.md`` (``ARTIFACTS`` is another word); ``SHARED_PATH``, a path into the shared folder, relative
    (``..``) or under /work.

    One use is allowed, narrowly: ``SHARED_NANOGPT``, the nanoGPT checkout that CI runs the examples
    against (and ``SHARED_NANOCHAT``, nanochat's, in ``SHARED_NANOCHAT_USES``, the same way). It is a directory the tests run, not a citation, so it passes as that exact path (a
    file inside it does not) and only in ``SHARED_NANOGPT_USES``: ``.ci/run`` sets OOMGUIDE_NANOGPT
    from it, examples/conftest.py, test_nanogpt.py and test_multi_gpu.py name it as the default or in
    their skip message, and CONTRIBUTING.md documents it.
    """
    texts = tracked_text_files()
    assert len(texts) > 100 and "tests/test_house.py" in texts, "git ls-files listed too little"
    found = [hit for name, text in sorted(texts.items()) for hit in outside_references(name, text)]
    assert not found, (
        "cited from outside the repository; cite the upstream source (file and function, an issue's "
        "address) or the guide's page (docs/en/<page>.md#anchor) instead:\n" + "\n".join(found)
    )


def test_every_allowed_use_of_the_shared_checkout_is_still_there():
    """The allowance stays narrow: a file in SHARED_NANOGPT_USES that no longer names the checkout
    leaves the list."""
    texts = tracked_text_files()
    for checkout, uses in SHARED_CHECKOUTS.items():
        unused = sorted(name for name in uses if checkout not in texts.get(name, ""))
        assert not unused, f"{', '.join(unused)} no longer name(s) {checkout}: remove it from its uses"
