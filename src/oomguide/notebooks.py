"""The notebook pages' code, executed in one Jupyter kernel, and its outputs recorded by content.

The languages' notebooks (``docs/<lang>/where-the-memory-goes.ipynb``) share their code and
differ only in the words the reader sees, so one kernel runs them all in turn, each in a fresh
namespace, with ``memory.predict`` remembering its results: each prediction is computed once,
whatever the number of languages (``execute``).

Outputs are kept as a *record*: the outputs of each code cell, plus the modules of oomguide that
the kernel had imported when the notebook ended, with a hash of each file's content. A record is
found by a key of the notebook's code, its kernel and the versions of torch, numpy and matplotlib
(``key``), and is used only while every module it lists is unchanged (``load``): a figure is never
older than the code that computes it. A notebook that imported ``oomguide.nanochat`` computed with
the nanochat checkout that ``OOMGUIDE_NANOCHAT`` names, or printed how to name one: its record
also holds that checkout's code (``nanochat_code``, None for none). Where ``OOMGUIDE_NANOCHAT``
names a checkout, the record is used only while that checkout has the same code; where it names
none, the record is used as it is, as the nanochat page shows the figures the examples computed
with CI's checkout (``examples/figures.json``): a reader who serves the site has no nanochat to
compute with, and the page then shows what the recorded checkout gave.

Records live in two places. ``mkdocs serve`` keeps what it executed under
``.cache/oomguide-notebooks/`` (not in git). The repository carries one record per language in
``examples/notebook-outputs/`` (``python -m oomguide.notebooks`` or ``pytest
examples/test_where_the_memory_goes.py --update-figures`` writes them; a test fails while they are
stale), so that the first ``mkdocs serve`` of a fresh clone has nothing to execute. The tests and
CI build with the cache off and execute every notebook.

Never imports mkdocs (``site_hooks`` does the site's part) and never touches a GPU.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
from concurrent.futures import Future
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # src/oomguide
ROOT = PACKAGE.parents[1]
RECORDS = ROOT / "examples" / "notebook-outputs"
NOTEBOOKS = "where-the-memory-goes.ipynb"  # the notebook pages, in every language's folder
NANOCHAT = "OOMGUIDE_NANOCHAT"  # the nanochat checkout a notebook computes nanochat's figures with

# run once in the kernel, before the first notebook (never shown on a page)
SETUP = """\
def _remember(predict):
    import functools
    seen = {}

    @functools.wraps(predict)
    def remembered(*args, **kwargs):  # closures and local imports only: %reset clears the namespace
        import copy
        key = repr((args, sorted(kwargs.items())))
        if key not in seen:
            seen[key] = predict(*args, **kwargs)
        return copy.deepcopy(seen[key])

    return remembered


import matplotlib as _matplotlib, matplotlib.pyplot as _plt
from oomguide import memory as _memory
from oomguide.nanochat import check as _nanochat_check
_matplotlib._oomguide_rc = dict(_matplotlib.rcParams.copy())
_memory.predict = _remember(_memory.predict)
_nanochat_check.verdict = _remember(_nanochat_check.verdict)
"""
# run before each notebook: a fresh namespace, no figure left open, the kernel's own rcParams
RESET = """\
get_ipython().run_line_magic("reset", "-f")
import os as _os, matplotlib as _matplotlib, matplotlib.pyplot as _plt
_plt.close("all")
dict.update(_matplotlib.rcParams, _matplotlib._oomguide_rc)
_os.chdir({cwd!r})
"""
# run after each notebook: which of oomguide's modules its outputs depend on
MODULES = """\
import sys as _sys, json as _json
print(_json.dumps(sorted(m.__file__ for n, m in list(_sys.modules.items())
                         if (n == "oomguide" or n.startswith("oomguide.")) and getattr(m, "__file__", None))))
"""


def code_and_kernel(notebook: dict) -> tuple[list[str], str]:
    """The notebook's code cells and the name of its kernel."""
    code = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    kernel = notebook.get("metadata", {}).get("kernelspec", {}).get("name") or "python3"
    return code, kernel


def versions() -> dict[str, str | None]:
    out = {}
    for name in ("torch", "numpy", "matplotlib"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def key(code: list[str], kernel: str) -> str:
    """The key of a record: the code, the kernel and the library versions (the modules it used are
    checked by ``load``)."""
    text = json.dumps({"code": code, "kernel": kernel, "versions": versions()})
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_digests(files: list[str]) -> dict[str, str]:
    """{path relative to the package: content hash} of the module files a kernel imported."""
    out = {}
    for name in files:
        path = Path(name).resolve()
        try:
            relative = path.relative_to(PACKAGE).as_posix()
        except ValueError:  # another copy of oomguide than this one: the record cannot be checked
            relative = str(path)
        out[relative] = _digest(path)
    return out


def nanochat_code(environ=None) -> str | None:
    """The code of the nanochat checkout that ``OOMGUIDE_NANOCHAT`` names, as the accuracy page's
    cache keys it (``nanochat.cases.checkout_digest``: its nanochat/*.py and scripts/*.py, what a
    prediction runs), or None where it names none."""
    from .nanochat import cases

    value = (os.environ if environ is None else environ).get(NANOCHAT)
    return cases.checkout_digest(Path(os.path.expanduser(value))) if value else None


def _uses_nanochat(modules: dict[str, str]) -> bool:
    return any(name.startswith("nanochat/") for name in modules)


def _stale(record: dict) -> list[str]:
    """What a record's outputs depend on that reads differently now: the modules whose file is gone
    or changed, and the nanochat checkout where OOMGUIDE_NANOCHAT names other code than it did."""
    modules = record["modules"]
    out = [r for r, d in modules.items() if not (PACKAGE / r).is_file() or _digest(PACKAGE / r) != d]
    if _uses_nanochat(modules):
        now = nanochat_code()
        if "nanochat" not in record or (now is not None and record["nanochat"] != now):
            out.append(f"the nanochat checkout that {NANOCHAT} names")
    return out


def load(path: Path) -> list | None:
    """The outputs recorded at `path`, or None when there is no record or something it used has changed."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    modules = record.get("modules") if isinstance(record, dict) else None
    if not modules or "outputs" not in record or _stale(record):
        return None
    return record["outputs"]


def stale(path: Path) -> list[str]:
    """What a record used that has changed since (for the tests' message)."""
    return _stale(json.loads(Path(path).read_text(encoding="utf-8")))


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(
        json.dumps(record, ensure_ascii=False, indent=0, sort_keys=True) + "\n", encoding="utf-8"
    )
    os.replace(partial, path)


def execute(jobs: list[dict], kernel: str, timeout: int) -> None:
    """Run the jobs' notebooks one after another in one kernel.

    A job is ``{"code": [...], "cwd": str, "store": Path | None, "future": Future}``: its future gets
    the outputs of its code cells as soon as they are there, and its record is written to `store`.
    """
    import nbformat
    from nbclient import NotebookClient

    def cell(source):
        return nbformat.v4.new_code_cell(source)

    nb = nbformat.v4.new_notebook(cells=[cell(SETUP)])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, record_timing=False)
    try:
        with client.setup_kernel(cwd=jobs[0]["cwd"]):
            client.execute_cell(nb.cells[0], 0)
            for job in jobs:
                start = len(nb.cells)
                nb.cells += [cell(RESET.format(cwd=job["cwd"]))] + [cell(src) for src in job["code"]]
                nb.cells.append(cell(MODULES))
                for index in range(start, len(nb.cells)):
                    client.execute_cell(nb.cells[index], index)  # raises CellExecutionError on an error
                outputs = json.loads(json.dumps([c.outputs for c in nb.cells[start + 1 : -1]]))
                used = json.loads("".join(o.get("text", "") for o in nb.cells[-1].outputs))
                if job["store"] is not None:
                    record = {"modules": module_digests(used), "outputs": outputs}
                    if _uses_nanochat(record["modules"]):  # the kernel's environment is this process's
                        record["nanochat"] = nanochat_code()
                    _write(job["store"], record)
                job["future"].set_result(outputs)
    except BaseException as exc:
        for job in jobs:
            if not job["future"].done():
                job["future"].set_exception(exc)
        raise


def notebook_paths(docs: Path = ROOT / "docs") -> list[Path]:
    """Every language's notebook page, English first."""
    found = sorted(Path(docs).glob(f"*/{NOTEBOOKS}"))
    return sorted(found, key=lambda p: (p.parent.name != "en", p.parent.name))


def record(paths: list[Path] | None = None, out: Path = RECORDS, timeout: int = 600) -> list[Path]:
    """Execute the notebooks and write their records to `out`, one per notebook; remove records
    that no notebook has any more. Returns the records written."""
    paths = notebook_paths() if paths is None else paths
    jobs_by_kernel: dict[str, list[dict]] = {}
    written = []
    for path in paths:
        code, kernel = code_and_kernel(json.loads(Path(path).read_text(encoding="utf-8")))
        store = Path(out) / f"{key(code, kernel)}.json"
        written.append(store)
        job = {"code": code, "cwd": str(Path(path).parent), "store": store, "future": Future()}
        jobs_by_kernel.setdefault(kernel, []).append(job)
    for kernel, jobs in jobs_by_kernel.items():
        execute(jobs, kernel, timeout)
    for old in Path(out).glob("*.json"):
        if old not in written:
            old.unlink()
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m oomguide.notebooks``: execute every notebook page and record its outputs."""
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print("usage: python -m oomguide.notebooks   (records examples/notebook-outputs/)", file=sys.stderr)
        return 2
    if nanochat_code() is None:
        print(
            f"note: {NANOCHAT} names no nanochat checkout: the notebooks print how to name one, and their records "
            "hold that; CI names one, so record with it (OOMGUIDE_NANOCHAT=PATH python -m oomguide.notebooks)",
            file=sys.stderr,
        )
    for path in record():
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
