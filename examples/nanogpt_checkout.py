"""A reader's nanoGPT checkout, copied to a temporary folder, with snippets applied as placed.

Used by the ``nanogpt`` fixture (``pytest examples --nanogpt PATH``, or ``OOMGUIDE_NANOGPT``):

- :meth:`NanoGPT.run` copies the checkout, applies each snippet where ``snippets/placement.toml``
  says (config lines into the config file, code into ``train.py``/``model.py`` at the named
  function, method or line, shell snippets run in a shell), writes ``data/<dataset>/train.bin`` and
  ``val.bin`` (np.uint16 tokens, and ``meta.pkl`` where needed), and runs nanoGPT's own ``train.py``
  through ``nanogpt_run.py``, which records what happened (see there).
- Scale: on the CPU, ``tiny`` — 2 layers, ``n_embd``, ``block_size`` and ``eval_block_size`` / 8,
  ``gradient_accumulation_steps`` / 16, ``eval_iters`` / 50, a 256-token vocabulary through
  ``meta.pkl`` (train.py reads ``vocab_size`` from it), two iterations with an evaluation before
  each: the first ``estimate_loss()`` and a later one. Settings that do not cost memory or time
  keep their values; tiny runs are eager (``compile=False``). On CUDA, ``full``: the config as
  written, compiled where it compiles, two iterations, ``eval_iters=2`` (the peak does not depend
  on it). A page's run (its snippets as placed, nothing added) is planned before it starts
  (``examples/gpu_run.py``: the card, the cap, what ``oomguide check`` says of each phase) and runs
  with the allocator capped to the ``--gpu-memory`` card; the runs it is compared with (stock
  nanoGPT, settings added on the command line, a wrong placement) run uncapped.
- Only the settings passed on the command line are scaled: the config files hold the snippets
  exactly as the reader pastes them.
- A run whose config resumes (``init_from = 'resume'``) first gets its checkpoint the way a reader
  does: the same config, from scratch (``--init_from=scratch``), writes ``out/ckpt.pt`` in the same
  copy; the resumed run then goes on from that checkpoint's step for two more iterations.
- :meth:`NanoGPT.sample` runs nanoGPT's own ``sample.py`` on a checkpoint that a tiny run of its
  train.py wrote (always tiny, on the CPU): the sample.py snippets' ``python sample.py ...`` lines
  as the reader types them, or a plain ``python sample.py``, with ``--device=cpu`` and a short
  ``num_samples``/``max_new_tokens`` (``SAMPLE_SCALE``) put before the reader's own settings.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oomguide import placement
from oomguide.config import load_config

HERE = Path(__file__).resolve().parent
SNIPPETS = HERE.parent / "snippets"
RUNNER = HERE / "nanogpt_run.py"
TINY_VOCAB = 256
CHAR_DATASETS = {"shakespeare_char": 65}  # datasets whose prepare.py writes a meta.pkl


TRAIN_LINE = re.compile(r"^\s*python3?\s+train\.py\b.*$", re.M)
SAMPLE_LINE = re.compile(r"^\s*python3?\s+sample\.py\b.*$", re.M)
# a tiny sampling run: a few samples, long enough to run past the tiny block_size (crop included)
SAMPLE_SCALE = ("--device=cpu", "--num_samples=3", "--max_new_tokens=160")


def _text(rel: str) -> str:
    return (SNIPPETS / rel).read_text(encoding="utf-8")


def starts_training(rel: str) -> bool:
    """A shell snippet that runs `python train.py ...` itself."""
    return bool(TRAIN_LINE.search(_text(rel)))


def starts_sampling(rel: str) -> bool:
    """A shell snippet that runs `python sample.py ...`."""
    return bool(SAMPLE_LINE.search(_text(rel)))


class CheckoutError(ValueError):
    """A --nanogpt path that is not a nanoGPT checkout."""


def check_checkout(path: str) -> Path:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise CheckoutError(f"--nanogpt {path}: no such folder")
    missing = [name for name in ("train.py", "model.py", "configurator.py") if not (root / name).is_file()]
    if missing:
        raise CheckoutError(f"--nanogpt {path}: not a nanoGPT checkout (no {', '.join(missing)})")
    return root.resolve()


DROP_STALE = "beyond/drop-stale-logits.py"  # train.py drops the last training logits before evaluating


@dataclass
class Run:
    """What one run of train.py did."""

    folder: Path
    rc: int
    record: dict
    output: str
    snippets: list[str]  # every snippet applied, needs included
    scale: str
    expected: dict  # the settings train.py should end up with (config files, then the scaling)
    configs: list[str]
    requested: tuple[str, ...] = ()  # the snippets asked for (without what they need)
    plan: object = None  # a page's full-scale run on the GPU: gpu_run.Plan (its cap, what check says)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.record.get("error")

    def explain(self) -> str:
        return f"train.py in {self.folder} with {self.snippets} exited {self.rc}:\n{self.output[-3000:]}"

    @property
    def settings(self) -> dict:
        """train.py's globals at the end of the run (its settings after config files and overrides)."""
        return self.record.get("globals", {})

    def forwards(self, training: bool) -> list[dict]:
        return [f for f in self.record["forwards"] if f["training"] is training]

    @property
    def evaluations(self) -> list[list[dict]]:
        """The eval forwards, grouped by estimate_loss() call."""
        out: list[list[dict]] = []
        for f in self.record["forwards"]:
            if f["training"]:
                continue
            if f.get("eval_start") or not out:
                out.append([])
            out[-1].append(f)
        return out

    @property
    def train_losses(self) -> list[float]:
        """Each training micro-step's loss, as the forward returned it (before the division)."""
        return [f["loss"] for f in self.forwards(True)]

    @property
    def estimates(self) -> list[tuple[int, float, float]]:
        """(step, train loss, val loss) as train.py prints them after each estimate_loss()."""
        out = []
        for line in self.output.splitlines():
            if line.startswith("step ") and "train loss" in line:
                step, rest = line[5:].split(":", 1)
                parts = dict(p.strip().rsplit(" ", 1) for p in rest.split(","))
                out.append((int(step), float(parts["train loss"]), float(parts["val loss"])))
        return out

    @property
    def recompute_factor(self) -> float:
        """Block calls per Block per training forward: 1 plain, 2 when recomputed in backward."""
        n = len(self.forwards(True)) * self.record["n_layer"]
        return self.record["block_calls"]["training"] / n


@dataclass
class NanoGPT:
    """The reader's checkout (never modified) and the runs made on copies of it."""

    source: Path
    tmp: Path
    device: object = None  # gpu_run.Device: the GPU (or a stand-in for it); None: the CPU path
    gpu_memory: int | None = None  # on the GPU, a page's full-scale runs are capped to this card
    workers: int = 2
    results: list = field(default_factory=list)  # gpu_run.Result of each judged run, for the report
    runs: dict = field(default_factory=dict)
    _idle: list = field(default_factory=list)
    _pool: ThreadPoolExecutor | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0

    @property
    def cuda(self) -> bool:
        return self.device is not None

    # --- the copy ---------------------------------------------------------------------------
    def copy(self, name: str) -> Path:
        with self._lock:
            self._count += 1
            dest = self.tmp / f"{self._count:03d}-{name}"
        shutil.copytree(
            self.source,
            dest,
            ignore=shutil.ignore_patterns(".git", "__pycache__", "data", "out*", "*.bin", "*.pt", "*.ipynb"),
        )
        return dest

    def apply(
        self, folder: Path, snippets, placements=None, code: bool = True
    ) -> tuple[list[str], list[str], list[str]]:
        """Apply the snippets (and what they need) to the copy.

        Returns (config files, shell/env snippets, every snippet applied). ``code=False``: the config
        lines only, on nanoGPT's own train.py and model.py (stock nanoGPT, to compare with).
        """
        return placement.apply_to(folder, snippets, placements, code)

    # --- data -------------------------------------------------------------------------------
    def write_data(self, folder: Path, dataset: str, vocab: int | None, block: int) -> None:
        """Tokens as nanoGPT's prepare.py writes them: np.uint16, train.bin and val.bin."""
        data = folder / "data" / dataset
        data.mkdir(parents=True, exist_ok=True)
        high = vocab or 50257
        rng = np.random.default_rng(0)
        n = max(50_000, 40 * block)
        rng.integers(0, high, n, dtype=np.uint16).tofile(data / "train.bin")
        rng.integers(0, high, n // 2, dtype=np.uint16).tofile(data / "val.bin")
        if vocab:  # as shakespeare_char's prepare.py writes it: sample.py encodes and decodes with it
            chars = [chr(i) for i in range(vocab)]
            meta = {
                "vocab_size": vocab,
                "itos": dict(enumerate(chars)),
                "stoi": {c: i for i, c in enumerate(chars)},
            }
            with open(data / "meta.pkl", "wb") as f:
                pickle.dump(meta, f)

    # --- scale ------------------------------------------------------------------------------
    def scale_args(
        self, folder: Path, configs: list[str], scale: str, out_dir: Path, overrides=()
    ) -> tuple[list[str], dict, str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = load_config([folder / c for c in configs], list(overrides))
        v = config.values
        args = {
            "max_iters": 1,
            "eval_interval": 1,
            "log_interval": 1,
            "always_save_checkpoint": False,
            "wandb_log": False,
            "out_dir": str(out_dir),
        }
        if str(v["device"]).startswith("cpu"):
            scale = "tiny"  # a config that asks for the CPU (cpu-fallback.py) runs small anywhere
        if scale == "tiny":
            args.update(
                device="cpu",
                compile=False,
                n_layer=min(v["n_layer"], 2),
                n_embd=v["n_embd"] // 8,
                block_size=max(8, v["block_size"] // 8),
                gradient_accumulation_steps=max(1, v["gradient_accumulation_steps"] // 16),
                eval_iters=max(1, v["eval_iters"] // 50),
            )
            if v.get("eval_block_size"):
                args["eval_block_size"] = v["eval_block_size"] // 8
        else:
            args["eval_iters"] = 2
        if v["init_from"] == "resume":  # the checkpoint is written at step 1: two more iterations
            args["max_iters"] = 2
        argv = [f"--{k}={val}" for k, val in args.items()]
        return argv, dict(v, **args), scale

    # --- running ----------------------------------------------------------------------------
    def _take_server(self) -> subprocess.Popen:
        """A runner process (torch imported once; a forked child per job), one per worker."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return subprocess.Popen(
            [sys.executable, str(RUNNER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def plan_for(self, folder: Path, configs: list[str], tail: list[str], applied, label: str, typed=()):
        """A page's full-scale run on the GPU, planned before it starts (gpu_run.plan): capped to the
        --gpu-memory card and compared with what `oomguide check` says for its settings, code and card."""
        from gpu_run import plan

        return plan(folder, configs, tail, applied, self.device, self.gpu_memory, label, typed)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for server in self._idle:
            if server.poll() is None:
                server.stdin.close()
                server.wait(timeout=60)
        self._idle.clear()

    def prefetch(self, jobs) -> None:
        """Start runs in the background, `workers` at a time: [(snippets, kwargs), ...]."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers)
        for snippets, kwargs in jobs:
            self._future(tuple(snippets), **kwargs)

    def _future(
        self,
        snippets: tuple[str, ...],
        scale: str | None = None,
        extra: tuple[str, ...] = (),
        code: bool = True,
        placements: dict | None = None,
        background: bool = True,
        sample: bool = False,
    ) -> Future:
        scale = "tiny" if sample else scale or ("full" if self.cuda else "tiny")
        key = (snippets, scale, tuple(extra), code, id(placements) if placements else None, sample)
        with self._lock:
            future = self.runs.get(key)
        if future is not None:
            return future
        # Everything that parses Python (placing the snippets with `ast`, reading the config) happens
        # here, in the calling thread; the pool's threads only wait for train.py. CPython 3.11's
        # `ast` module keeps its recursion counter per interpreter, not per thread, so two threads in
        # ast.parse at once can fail with "SystemError: AST constructor recursion depth mismatch"
        # (https://github.com/python/cpython/issues/106905).
        job = self._prepare(snippets, scale, extra, code, placements, sample)
        future = start_job(self._pool if background else None, self._launch, job)
        with self._lock:
            self.runs[key] = future
        return future

    def run(
        self,
        *snippets: str,
        scale: str | None = None,
        extra: tuple[str, ...] = (),
        code: bool = True,
        placements: dict | None = None,
    ) -> Run:
        """Apply `snippets` to a fresh copy and run train.py with the config file they fill.

        `extra`: more --key=value arguments after the scaling ones. A shell snippet that starts
        train.py itself runs in bash, with `python` meaning the instrumented runner. `code=False`:
        stock nanoGPT with the same config lines. `placements`: other placements than the table's
        (to show that a wrong one fails). Runs are cached by their arguments (and may have been
        started in the background by :meth:`prefetch`).
        """
        return self._future(tuple(snippets), scale, extra, code, placements, background=False).result()

    def sample(self, *snippets: str, extra: tuple[str, ...] = (), code: bool = True) -> Run:
        """Apply `snippets` to a fresh copy, let a tiny run of its train.py write ``out/ckpt.pt``, and
        run sample.py on it: the snippets' ``python sample.py ...`` lines, else ``python sample.py``,
        with ``SAMPLE_SCALE`` before the reader's settings and `extra` after them. On the CPU, always."""
        return self._future(tuple(snippets), None, extra, code, None, background=False, sample=True).result()

    def _prepare(self, snippets, scale, extra, code, placements, sample=False) -> dict:
        """The copy with its snippets applied, its data and its command line (in the calling thread)."""
        label = (Path(snippets[-1]).stem if snippets else "nanogpt") + ("" if code else "-stock")
        folder = self.copy(label)
        configs, shell, applied = self.apply(folder, snippets, placements, code)
        # --key=value on a shell snippet's own `python train.py` line: part of what the reader runs
        typed = [
            arg[2:]
            for rel in shell
            for line in TRAIN_LINE.findall(_text(rel))
            for arg in shlex.split(line)
            if arg.startswith("--")
        ]
        argv_scale, values, scale = self.scale_args(folder, configs, scale, folder / "out", typed)
        for arg in extra:
            k, _, v = arg[2:].partition("=")
            try:
                values[k] = ast.literal_eval(v)
            except (ValueError, SyntaxError):
                values[k] = v
        vocab = TINY_VOCAB if scale == "tiny" else CHAR_DATASETS.get(values["dataset"])
        self.write_data(folder, values["dataset"], vocab, values["block_size"])
        tail = [*argv_scale, *extra]
        planned = scale == "full" and self.cuda and code and not extra and placements is None and not sample
        run_plan = (
            self.plan_for(folder, configs, tail, applied, " + ".join(snippets), typed) if planned else None
        )
        return {
            "plan": run_plan,
            "folder": folder,
            "configs": configs,
            "shell": shell,
            "applied": applied,
            "values": values,
            "scale": scale,
            "tail": tail,
            "env": run_plan.env if run_plan else {},
            "snippets": snippets,
            "sample": sample,
            "extra": list(extra),
            # train.py writes the checkpoint first: for sample.py, and for a run that resumes
            "checkpoint_first": sample or values["init_from"] == "resume",
        }

    def _launch(self, job: dict) -> Run:
        """Run train.py on a prepared copy and read what it recorded (no Python parsing here)."""
        folder, configs, tail, env = job["folder"], job["configs"], job["tail"], job["env"]
        record, output = folder / "oomguide-record.json", folder / "oomguide-output.txt"
        rc = 0

        def made(rc: int, data: dict, text: str) -> Run:
            fields = ("applied", "scale", "values")
            return Run(folder, rc, data, text, *(job[f] for f in fields), configs, job["snippets"], job["plan"])

        if job["plan"] is not None and job["plan"].skip:  # nothing to run: the test skips with the reason
            return made(0, {}, "")
        if job["checkpoint_first"]:  # the same config from scratch, one iteration: out/ckpt.pt
            record, output = (
                folder / "oomguide-checkpoint-record.json",
                folder / "oomguide-checkpoint-output.txt",
            )
            kept = [a for a in tail if not a.startswith(("--max_iters=", "--always_save_checkpoint="))]
            scratch = [*kept, "--max_iters=1", "--always_save_checkpoint=True"]  # ckpt.pt at step 1
            rc = self._serve(
                folder, ["train.py", *configs, *scratch, "--init_from=scratch"], record, output, env
            )
            if rc == 0 and not (folder / "out" / "ckpt.pt").is_file():
                rc = 5
            if rc == 0:
                record, output = folder / "oomguide-record.json", folder / "oomguide-output.txt"
        if rc == 0 and job["sample"]:
            sampling = [rel for rel in job["shell"] if starts_sampling(rel)]
            if sampling:
                rc = self._run_shell(folder, sampling, [], job["extra"], record, output, env, sample=True)
            else:
                rc = self._serve(folder, ["sample.py", *SAMPLE_SCALE, *job["extra"]], record, output, env)
        elif rc == 0 and job["shell"]:
            rc = self._run_shell(folder, job["shell"], configs, tail, record, output, env)
        elif rc == 0:
            rc = self._serve(folder, ["train.py", *configs, *tail], record, output, env)
        data = json.loads(record.read_text()) if record.exists() else {"error": "no record", "forwards": []}
        return made(rc, data, output.read_text(errors="replace"))

    def _serve(self, folder: Path, argv: list[str], record: Path, output: Path, env: dict) -> int:
        """Run one script of the copy (train.py, sample.py) in a runner process; its exit code."""
        request = {"cwd": str(folder), "argv": argv, "record": str(record), "output": str(output), "env": env}
        server = self._take_server()
        try:
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            return json.loads(server.stdout.readline())["rc"]
        finally:
            with self._lock:
                self._idle.append(server)

    def _run_shell(self, folder, shell, configs, tail, record, output, env, sample=False) -> int:
        """Shell snippets, sourced in bash as the reader types them; `python` runs the instrumented runner
        (for `python sample.py ...`: SAMPLE_SCALE goes before the reader's settings, `tail` after them)."""
        bindir = folder / ".oomguide-bin"
        bindir.mkdir(exist_ok=True)
        shim = bindir / "python"
        runner = f"{shlex.quote(sys.executable)} {shlex.quote(str(RUNNER))} {shlex.quote(str(record))}"
        quoted = " ".join(shlex.quote(a) for a in tail)
        shim.write_text(
            "#!/bin/sh\n"
            + (
                f'shift; exec {runner} sample.py {" ".join(SAMPLE_SCALE)} "$@" {quoted}\n'
                if sample
                else f'exec {runner} "$@" {quoted}\n'
            )
        )
        shim.chmod(0o755)
        script = [f'export PATH={shlex.quote(str(bindir))}:"$PATH"']
        runs_train = False
        for rel in shell:
            script.append(f". {shlex.quote(str(SNIPPETS / rel))}")
            runs_train |= starts_training(rel)
        if not runs_train and not sample:
            script.append("python train.py " + " ".join(shlex.quote(c) for c in configs))
        with open(output, "w") as out:
            proc = subprocess.run(
                ["bash", "-e", "-c", "\n".join(script)],
                cwd=folder,
                env=dict(os.environ, **env),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=600,
            )
        return proc.returncode


def start_job(pool, launch, job) -> Future:
    """``launch(job)`` in `pool`'s thread, or here and now without a pool: a Future either way (the
    nanoGPT and nanochat checkouts share this; the job was prepared in the caller's thread, where
    the syntax trees were parsed)."""
    if pool is not None:
        return pool.submit(launch, job)
    future = Future()
    future.set_running_or_notify_cancel()
    try:
        future.set_result(launch(job))
    except BaseException as exc:
        future.set_exception(exc)
    return future
