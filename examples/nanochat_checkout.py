"""A reader's nanochat checkout, copied to a temporary folder, with snippets applied as placed, and
nanochat's own scripts run there on the CPU at a tiny scale.

Used by the ``nanochat`` fixture (``pytest examples --nanochat PATH``, or ``OOMGUIDE_NANOCHAT``):

- Once per session, :meth:`NanoChat.prepare` writes what nanochat would download into a base
  directory (``NANOCHAT_BASE_DIR``; examples/nanochat_data.py: pretraining shards, stand-in CORE
  files, the SFT mixture's task files) and trains a tokenizer on the shards with nanochat's own
  ``python -m scripts.tok_train`` (rustbpe), a vocabulary of :data:`TINY_VOCAB`. Nothing downloads.
- :meth:`NanoChat.run` copies the checkout, applies snippets where ``snippets/placement.toml`` says
  (code into ``nanochat/gpt.py`` …; a shell snippet is the command line that is run), gives the run
  its own base directory (the shared data linked in; a later script of a chain sees the checkpoints
  of the run it follows, as ``runs/speedrun.sh``'s scripts see each other's), and runs the script
  as ``python -m scripts.<name>`` through examples/nanochat_run.py, which records the forwards.
- ``torchrun --standalone --nproc_per_node=N -m scripts.x -- ARGS`` runs as one process,
  ``python -m scripts.x ARGS``: nanochat starts a process group only on CUDA
  (``nanochat/common.py``, ``compute_init``), so N CPU processes would train N unrelated models.
  ``$WANDB_RUN`` is ``dummy``, as ``runs/speedrun.sh`` sets it when it is unset.
- Scale (:func:`tiny_args`): only what costs memory or time is changed, by flags appended after the
  typed ones (argparse keeps the last): ``--depth`` / 4 (at least 2), the width (``--aspect-ratio``
  and ``--head-dim`` / 16 and / 8, at least 32 wide), ``--max-seq-len`` / 32, ``--total-batch-size`` / 32 (so gradient
  accumulation is the full run's at one process; where the line leaves it to nanochat's scaling law,
  2**19 / 32, nanochat's reference batch at d12), one training step (``--num-iterations=1``), one
  batch per validation (``--eval-tokens``), ``--device-type=cpu``. The schedule flags keep their
  meaning: at the defaults base_train evaluates before and after the step and, after it (its last
  step), runs the CORE evaluation (on the stand-in tasks) and samples, as nanochat's last step does.
  base_eval: ``--split-tokens`` one batch per split, ``--max-per-task=4``. chat_sft: one step (its
  ``--num-iterations=2`` counts batches drawn), one batch per validation, ChatCORE off
  (``--chatcore-every=-1``: its ARC/HumanEval data is not written here). chat_cli: as typed, on CPU. ``--device-batch-size`` and
  ``--window-pattern`` keep their typed values.
- Runs are eager (``TORCHDYNAMO_DISABLE=1``, PyTorch's switch that turns ``torch.compile`` into a
  no-op), because the recording wraps methods from outside; ``compiled=True`` runs the script
  unrecorded as plain ``python -m`` with nanochat's ``torch.compile`` (test_nanochat.py does so once).

AST caveat as in examples/nanogpt_checkout.py: snippets are placed (``ast``) in the calling thread;
pool threads only wait for the script.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nanogpt_checkout import start_job
from oomguide import placement

HERE = Path(__file__).resolve().parent
SNIPPETS = HERE.parent / "snippets"
RUNNER = HERE / "nanochat_run.py"
TINY_VOCAB = 512
SEQ_SCALE = 32  # --max-seq-len and --total-batch-size are divided by this
DEPTH_SCALE = 4  # --depth is divided by this (at least 2 layers)
REFERENCE_BATCH = 2**19  # nanochat's B_REF (scripts/base_train.py): where a line leaves the total to nanochat
DEFAULTS = {  # the argparse defaults of scripts/base_train.py that the scaling reads
    "depth": 20,
    "aspect-ratio": 64,
    "head-dim": 128,
    "max-seq-len": 2048,
    "device-batch-size": 32,
}
COMMAND = re.compile(r"(?:^|\s)-m\s+(scripts\.\w+)")


class CheckoutError(ValueError):
    """A --nanochat path that is not a nanochat checkout."""


def check_checkout(path: str) -> Path:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise CheckoutError(f"--nanochat {path}: no such folder")
    needed = ("nanochat/gpt.py", "nanochat/common.py", "scripts/base_train.py", "scripts/tok_train.py")
    missing = [name for name in needed if not (root / name).is_file()]
    if missing:
        raise CheckoutError(f"--nanochat {path}: not a nanochat checkout (no {', '.join(missing)})")
    return root.resolve()


# --- command lines ----------------------------------------------------------------------------


def parse_command(text: str, env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """The script and its flags from a shell line (continuations joined), as bash splits it:
    ``torchrun … -m scripts.base_train -- --depth=24`` and ``python -m scripts.base_train --depth=24``
    both give ``("scripts.base_train", ["--depth=24"])``. ``$VAR`` is expanded from `env`."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [ln for ln in joined.splitlines() if COMMAND.search(ln) and not ln.lstrip().startswith("#")]
    if len(lines) != 1:
        raise ValueError(f"expected one `-m scripts.<name>` command line, found {len(lines)}")
    words = shlex.split(lines[0], comments=True)
    at = words.index("-m")
    module, args = words[at + 1], words[at + 2 :]
    if args[:1] == ["--"]:
        args = args[1:]
    env = env or {}
    args = [re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m[1], ""), a) for a in args]
    return module, args


def speedrun_line(folder: Path, module: str) -> str:
    """The line of the checkout's runs/speedrun.sh that runs `module` (the reader's own line)."""
    text = (folder / "runs" / "speedrun.sh").read_text(encoding="utf-8")
    found = [
        ln
        for ln in re.sub(r"\\\n", " ", text).splitlines()
        if re.search(rf"-m\s+{re.escape(module)}(\s|$)", ln) and not ln.lstrip().startswith("#")
    ]
    if len(found) != 1:
        raise ValueError(f"runs/speedrun.sh: {len(found)} lines run {module}, expected one")
    return found[0]


def flags(args: list[str]) -> dict[str, str | bool]:
    """--key=value / --key value / --flag, the last one of each winning, as argparse does."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            key, eq, value = arg[2:].partition("=")
            if eq:
                out[key] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                out[key] = args[i + 1]
                i += 1
            else:
                out[key] = True
        i += 1
    return out


def tiny_args(module: str, typed: list[str], extra: dict[str, object] | None = None) -> list[str]:
    """The flags appended to a typed line to run it tiny on the CPU (see the module docstring)."""
    given = flags(typed)

    def typed_int(key: str) -> int:
        return int(given.get(key, DEFAULTS[key]))

    out: dict[str, object] = {"device-type": "cpu"}
    if module == "scripts.base_train":
        seq = typed_int("max-seq-len") // SEQ_SCALE
        batch = typed_int("device-batch-size")
        total = int(given.get("total-batch-size", -1))
        layers = max(2, typed_int("depth") // DEPTH_SCALE)
        out.update(
            {
                "depth": layers,
                # at least 32 wide: nanochat's smear gate reads 24 channels (GPT.forward, smear_gate)
                "aspect-ratio": max(typed_int("aspect-ratio") // 16, -(-32 // layers)),
                "head-dim": max(8, typed_int("head-dim") // 8),
                "max-seq-len": seq,
                "total-batch-size": (total if total > 0 else REFERENCE_BATCH) // SEQ_SCALE,
                "num-iterations": 1,
                "eval-tokens": batch * seq,
            }
        )
    elif module == "scripts.base_eval":
        out.update({"max-per-task": 4, "split-tokens": 1})  # split-tokens: one batch, set in _prepare
    elif module == "scripts.chat_sft":
        # ChatCORE's tasks (ARC, HumanEval, ...) are not written here: off, which no typed line overrides
        out.update({"num-iterations": 2, "eval-tokens": 1, "chatcore-every": -1})
    out.update(extra or {})
    return [f"--{k}={v}" for k, v in out.items()]


# --- runs -------------------------------------------------------------------------------------


@dataclass
class Run:
    """What one run of a nanochat script did."""

    folder: Path  # the copy of the checkout
    base: Path  # its NANOCHAT_BASE_DIR
    module: str
    argv: list[str]  # typed, then the scale's
    rc: int
    output: str
    record: dict
    snippets: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.record.get("error")

    def explain(self) -> str:
        return (
            f"{self.module} {' '.join(self.argv)} in {self.folder} exited {self.rc}:\n{self.output[-4000:]}"
        )

    def line(self, pattern: str) -> re.Match:
        """The first printed line that matches `pattern` (a regex), as a match."""
        for text in self.output.splitlines():
            found = re.search(pattern, text)
            if found:
                return found
        raise AssertionError(f"{self.module} printed no line matching {pattern!r}:\n{self.output[-3000:]}")

    def lines(self, pattern: str) -> list[re.Match]:
        return [m for m in (re.search(pattern, t) for t in self.output.splitlines()) if m]

    @property
    def accumulation(self) -> tuple[int, int]:
        """(total batch size in tokens, gradient accumulation steps), as base_train/chat_sft print them."""
        found = self.line(r"Total batch size ([\d,]+) => gradient accumulation steps: (\d+)")
        return int(found[1].replace(",", "")), int(found[2])

    @property
    def micro_batch(self) -> tuple[int, int]:
        """(device batch size, sequence length) of each micro-step, as printed."""
        found = self.line(r"Tokens / micro-batch / rank: (\d+) x (\d+) = ")
        return int(found[1]), int(found[2])

    @property
    def model_config(self) -> dict:
        """The model config base_train prints (its JSON block)."""
        text = self.output.split("Model config:\n", 1)[1]
        return json.loads(text[: text.index("}") + 1])

    @property
    def parameters(self) -> dict[str, int]:
        block = self.output.split("Parameter counts:\n", 1)[1].splitlines()
        out = {}
        for ln in block:
            key, sep, value = ln.partition(":")
            if not sep or not value.strip().replace(",", "").isdigit():
                break
            out[key.strip()] = int(value.replace(",", ""))
        return out

    def forwards(self, **match) -> list[dict]:
        return [f for f in self.record["forwards"] if all(f[k] == v for k, v in match.items())]

    @property
    def losses(self) -> list[float]:
        return [float(m[1]) for m in self.lines(r"^step \d+/\d+ .*\| loss: ([\d.]+)")]


@dataclass
class NanoChat:
    """The reader's checkout (never modified), the shared tiny data, and the runs made on copies."""

    source: Path
    tmp: Path
    workers: int = 2
    runs: dict = field(default_factory=dict)
    timings: list = field(default_factory=list)  # (label, seconds) of every script run
    _pool: ThreadPoolExecutor | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _count: int = 0
    _shared: Path | None = None

    # --- the copy and the data --------------------------------------------------------------
    def copy(self, name: str) -> Path:
        with self._lock:
            self._count += 1
            dest = self.tmp / f"{self._count:03d}-{name}"
        shutil.copytree(
            self.source, dest, ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv", "dev", "*.ipynb")
        )
        return dest

    def env(self, base: Path, eager: bool = True) -> dict[str, str]:
        env = dict(
            os.environ,
            NANOCHAT_BASE_DIR=str(base),
            WANDB_RUN="dummy",
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        env.pop("NANOCHAT_DTYPE", None)
        if eager:
            env["TORCHDYNAMO_DISABLE"] = "1"
        else:
            env.pop("TORCHDYNAMO_DISABLE", None)
        return env

    def prepare(self) -> Path:
        """The shared base directory: data written, tokenizer trained by scripts.tok_train (once)."""
        with self._lock:
            if self._shared is not None:
                return self._shared
            from nanochat_data import write_all

            shared = self.tmp / "shared-base"
            write_all(shared)
            folder = self.copy("tok_train")
            start = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "scripts.tok_train",
                    "--max-chars=2000000",
                    f"--vocab-size={TINY_VOCAB}",
                ],
                cwd=folder,
                env=self.env(shared),
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.timings.append(("tok_train", time.perf_counter() - start))
            if proc.returncode:
                raise RuntimeError(f"scripts.tok_train failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
            self.tok_train_output = proc.stdout
            self._shared = shared
            return shared

    def base_for(self, name: str, after: Run | None) -> Path:
        shared = self.prepare()
        base = self.tmp / f"base-{name}"
        base.mkdir()
        for item in shared.iterdir():
            (base / item.name).symlink_to(item)
        if after is not None:  # the checkpoints of the run this one follows
            for item in after.base.iterdir():
                if item.name.endswith("_checkpoints"):
                    (base / item.name).symlink_to(item.resolve())
        return base

    # --- running ----------------------------------------------------------------------------
    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def prefetch(self, jobs) -> None:
        """Start runs in the background, `workers` at a time: [kwargs of run(), ...]."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers)
        for kwargs in jobs:
            self._future(background=True, **kwargs)

    def run(self, *snippets: str, **kwargs) -> Run:
        """Apply `snippets` to a fresh copy and run the script their command line names (or
        `command`, a line as in runs/speedrun.sh) at the tiny scale.

        `extra`: flags after the scale's ({"core-metric-every": 2}); `after`: the run whose
        checkpoints this script loads; `compiled`: nanochat's torch.compile on, unrecorded;
        `placements`: other placements than the table's. Cached by arguments.
        """
        return self._future(snippets=snippets, background=False, **kwargs).result()

    def _future(
        self,
        snippets=(),
        command: str = "",
        extra=None,
        after: Run | None = None,
        compiled: bool = False,
        placements=None,
        background: bool = False,
    ) -> Future:
        key = (
            tuple(snippets),
            command,
            json.dumps(extra, sort_keys=True),
            id(after),
            compiled,
            id(placements) if placements else None,
        )
        with self._lock:
            future = self.runs.get(key)
        if future is not None:
            return future
        job = self._prepare(tuple(snippets), command, extra or {}, after, compiled, placements)
        future = start_job(self._pool if background else None, self._launch, job)
        with self._lock:
            self.runs[key] = future
        return future

    def _prepare(self, snippets, command, extra, after, compiled, placements) -> dict:
        """The copy with its snippets applied and its command line (in the calling thread)."""
        found = COMMAND.search(command)
        label = Path(snippets[-1]).stem if snippets else (found[1].split(".")[-1] if found else "speedrun")
        folder = self.copy(label + ("-compiled" if compiled else ""))
        _, shell, applied = placement.apply_to(folder, snippets, placements)
        lines = [(SNIPPETS / rel).read_text(encoding="utf-8") for rel in shell]
        if command:
            lines.append(command)
        if not lines:  # a code change alone: the reader's own speedrun line runs it
            lines.append(speedrun_line(folder, "scripts.base_train"))
        if len(lines) != 1:
            raise ValueError(f"{snippets}: one command line to run, got {len(lines)}")
        module, typed = parse_command(lines[0], {"WANDB_RUN": "dummy"})
        scale = tiny_args(module, typed, extra)
        if module == "scripts.base_eval":  # one batch per split: --split-tokens is rounded to batches
            batch = int(flags(typed + scale).get("device-batch-size", 32))
            seq = json.loads(next((after.base / "base_checkpoints").glob("*/meta_*.json")).read_text())[
                "model_config"
            ]["sequence_len"]
            scale = [a for a in scale if not a.startswith("--split-tokens=")] + [
                f"--split-tokens={batch * seq}"
            ]
        if module == "scripts.chat_sft":  # one batch per validation, at the batch inherited or typed
            meta = json.loads(next((after.base / "base_checkpoints").glob("*/meta_*.json")).read_text())
            given = flags(typed)
            batch = int(given.get("device-batch-size", meta["device_batch_size"]))
            seq = int(given.get("max-seq-len", meta["max_seq_len"]))
            scale = [a for a in scale if not a.startswith("--eval-tokens=")] + [
                f"--eval-tokens={batch * seq}"
            ]
        return {
            "folder": folder,
            "base": self.base_for(folder.name, after),
            "module": module,
            "argv": [*typed, *scale],
            "compiled": compiled,
            "applied": applied,
        }

    def _launch(self, job: dict) -> Run:
        folder, base, module, argv = job["folder"], job["base"], job["module"], job["argv"]
        record = folder / "oomguide-record.json"
        if job["compiled"]:
            cmd = [sys.executable, "-m", module, *argv]
        else:
            cmd = [sys.executable, str(RUNNER), str(record), module, *argv]
        start = time.perf_counter()
        proc = subprocess.run(
            cmd,
            cwd=folder,
            env=self.env(base, eager=not job["compiled"]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - start
        with self._lock:
            self.timings.append((f"{module} ({folder.name})", seconds))
        data = json.loads(record.read_text()) if record.exists() else {"forwards": [], "error": None}
        return Run(folder, base, module, argv, proc.returncode, proc.stdout, data, job["applied"], seconds)
