"""Runs measured on a real CUDA GPU, and what oomguide predicts for each: the ground truth the engine
is held to (docs/en/accuracy.md#measured-on-a-gpu).

A measurements file (``examples/measurements/*.json``) is one JSON document in the format
``oomguide-measurements/1``; ``pytest examples`` on a GPU writes its report in it, so that a reader's
report is added to the project by copying the file into that folder:

- ``format``: ``"oomguide-measurements/1"``; ``about``: how the runs were measured, in one paragraph;
- ``machine``: ``device`` (``torch.cuda.get_device_name``), ``total_bytes``
  (``get_device_properties().total_memory``), ``capability`` ([major, minor]), ``torch``,
  ``python``, ``driver`` (or null);
- ``runs``: each with ``name``, ``program`` (``nanoGPT`` or ``nanochat``), and
  - nanoGPT: ``configs`` (config files: ``snippets/...`` is this repository's, any other path the
    nanoGPT checkout's), ``overrides`` (train.py's ``--key=value`` as ``key=value``; ``harness``: the
    ones that only shorten the run), ``meta_vocab_size`` when the data had a meta.pkl;
  - nanochat: ``command`` (the line as typed, ``python -m scripts.base_train ...``);
  - ``cap_bytes``: the ``set_per_process_memory_fraction`` cap in bytes (null: none), ``card``
    (``{"memory_gib": 11.69}``: the card the cap emulates, or null), ``alloc_conf`` (the
    ``PYTORCH_CUDA_ALLOC_CONF`` it ran with, ``""`` for none);
  - ``phases``: check name (``estimate_loss_first``, ``first_step``, ``train_step``,
    ``estimate_loss``) -> ``{"allocated": peak bytes, "reserved": peak bytes}``, for each phase
    that ran (the phase that ran out of memory: its peak up to the failure);
  - ``outcome``: ``{"fits": bool, "oom_phase": check name or null, "message": the OOM message}``;
  - optionally ``predicted``: what oomguide said when the run was made (not used to judge).

``predict(run)`` re-predicts a run with the code of today, through the one verdict ``check`` uses
(``verdict.verdict``; nanochat: ``nanochat.check.verdict``), on the card the run had: the capped
memory (plus the CUDA context oomguide sets aside) or the whole card, its compute capability and
allocator setting. Never imports torch.cuda.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "oomguide-measurements/1"
ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "examples" / "measurements"
CACHE_DIR = ROOT / ".cache" / "oomguide-measured"  # keyed by the engine's source: never stale
CHECKS = ("estimate_loss_first", "first_step", "train_step", "estimate_loss")
# what the engine is held to (tests/test_measured.py, the accuracy page): each measured allocated
# peak within TOLERANCE of the prediction, or within TOLERANCE_FLOOR bytes for a small model
TOLERANCE = 0.03
TOLERANCE_FLOOR = 2**30 // 10


def within_tolerance(predicted: int, measured: int) -> bool:
    return abs(predicted - measured) <= max(TOLERANCE * measured, TOLERANCE_FLOOR)
PROGRAMS = ("nanoGPT", "nanochat")


class MeasurementError(ValueError):
    """A measurements file that does not follow the format (the message names the file and field)."""


@dataclass
class Run:
    name: str
    program: str
    machine: dict
    phases: dict  # check -> {"allocated": int, "reserved": int}
    outcome: dict
    cap_bytes: int | None = None
    card: dict | None = None
    alloc_conf: str = ""
    configs: list = field(default_factory=list)
    overrides: list = field(default_factory=list)
    meta_vocab_size: int | None = None
    command: list = field(default_factory=list)
    source: str = ""  # the file it came from

    @property
    def capability(self) -> tuple:
        return tuple(self.machine["capability"])

    @property
    def gpu_memory(self) -> int:
        """The card's memory as ``check --gpu-memory`` takes it: the cap is what PyTorch may use,
        so the card is the cap plus the CUDA context oomguide sets aside (or the whole card)."""
        from .units import CONTEXT_BYTES

        return self.cap_bytes + CONTEXT_BYTES if self.cap_bytes else self.machine["total_bytes"]

    def describe(self) -> str:
        if self.program == "nanochat":
            return " ".join(self.command)
        return " ".join([*self.configs, *(f"--{o}" for o in self.overrides)])


def _need(data: dict, key: str, kind, where: str):
    if key not in data or not isinstance(data[key], kind):
        raise MeasurementError(f"{where}: '{key}' is missing or not {getattr(kind, '__name__', kind)}")
    return data[key]


def parse(doc: dict, where: str) -> list[Run]:
    """The runs of one measurements document (checked field by field)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise MeasurementError(f"{where}: not an {FORMAT} document ('format' differs)")
    machine = _need(doc, "machine", dict, where)
    for key, kind in (("device", str), ("total_bytes", int), ("capability", list), ("torch", str)):
        _need(machine, key, kind, f"{where}: machine")
    runs = []
    for i, data in enumerate(_need(doc, "runs", list, where)):
        at = f"{where}: runs[{i}]"
        name = _need(data, "name", str, at)
        at = f"{where}: run {name}"
        program = _need(data, "program", str, at)
        if program not in PROGRAMS:
            raise MeasurementError(f"{at}: program must be one of {', '.join(PROGRAMS)}")
        phases = _need(data, "phases", dict, at)
        for check, peaks in phases.items():
            if check not in CHECKS:
                raise MeasurementError(f"{at}: unknown phase {check!r} (one of {', '.join(CHECKS)})")
            for key in ("allocated", "reserved"):
                _need(peaks, key, int, f"{at}: {check}")
        outcome = _need(data, "outcome", dict, at)
        _need(outcome, "fits", bool, f"{at}: outcome")
        if program == "nanoGPT":
            _need(data, "configs", list, at)
        else:
            _need(data, "command", list, at)
        runs.append(
            Run(
                name=name,
                program=program,
                machine=machine,
                phases=phases,
                outcome=outcome,
                cap_bytes=data.get("cap_bytes"),
                card=data.get("card"),
                alloc_conf=data.get("alloc_conf") or "",
                configs=list(data.get("configs", [])),
                overrides=list(data.get("overrides", [])),
                meta_vocab_size=data.get("meta_vocab_size"),
                command=list(data.get("command", [])),
                source=where,
            )
        )
    return runs


def load(path: str | Path) -> list[Run]:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MeasurementError(f"{path}: cannot be read as JSON: {exc}") from None
    return parse(doc, path.name)


def load_all(folder: str | Path = DIR) -> list[Run]:
    """Every run of every measurements file in `folder`, file by file in name order."""
    return [run for path in sorted(Path(folder).glob("*.json")) for run in load(path)]


def document(machine: dict, runs: list[dict], about: str) -> dict:
    """A measurements document (what ``pytest examples`` writes on a GPU); checked as ``load`` checks it."""
    doc = {"format": FORMAT, "about": about, "machine": machine, "runs": runs}
    parse(doc, "the report")
    return doc


# ------------------------------------------------------------------------------------------------
# a run re-predicted
# ------------------------------------------------------------------------------------------------
def settings(run: Run, nanogpt: str | Path):
    """A nanoGPT run's settings as train.py read them in the measured checkout (``nanogpt``)."""
    from .config import load_config

    paths = [ROOT / c if c.startswith("snippets/") else Path(nanogpt) / c for c in run.configs]
    overrides = list(run.overrides)
    if run.meta_vocab_size:
        overrides.append(f"vocab_size={run.meta_vocab_size}")
    return load_config(paths, overrides, find_files=True, cwd=nanogpt)


def _key(run: Run, *parts) -> str:
    from .reports import _engine_digest

    data = [_engine_digest(), run.program, run.configs, run.overrides, run.meta_vocab_size, run.command]
    data += [run.gpu_memory, list(run.capability), run.alloc_conf, *parts]
    return hashlib.sha256(json.dumps(data, default=str).encode()).hexdigest()[:24]


def predict(run: Run, nanogpt: str | Path | None = None, nanochat: str | Path | None = None) -> dict:
    """check -> {"allocated", "reserved", "fits", "verdict"} for each phase the run's program runs,
    as ``oomguide check`` says it for the run's settings and card (no batch search). Cached on disk,
    keyed by the engine's source (``OOMGUIDE_REPORTS_CACHE=0`` turns the disk off)."""
    disk = os.environ.get("OOMGUIDE_REPORTS_CACHE", "1") != "0"
    if run.program == "nanochat":
        if nanochat is None:
            raise LookupError("needs a nanochat checkout")
        from .nanochat.cases import checkout_digest

        key = _key(run, checkout_digest(Path(nanochat)))
    else:
        if nanogpt is None:
            raise LookupError("needs a nanoGPT checkout")
        key = _key(run, str(Path(nanogpt).resolve()))
    cached = CACHE_DIR / f"{key}.json"
    if disk and cached.is_file():
        return json.loads(cached.read_text())
    out = _nanochat(run, nanochat) if run.program == "nanochat" else _nanogpt(run, nanogpt)
    phases = {
        name: {
            "allocated": p["peak_bytes"],
            "reserved": p.get("reserved_bytes"),
            "fits": bool(p["fits"]),
            "verdict": p.get("verdict") or ("fits" if p["fits"] else "does_not_fit"),
        }
        for name, p in out["phases"].items()
        if name in CHECKS
    }
    if disk:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(phases))
    return phases


def _nanogpt(run: Run, nanogpt) -> dict:
    from . import verdict

    request = verdict.Request(
        config=settings(run, nanogpt),
        nanogpt=str(nanogpt),
        gpu_memory=run.gpu_memory,
        capability=run.capability,
        alloc_conf=run.alloc_conf,
        search=False,
        cwd=str(nanogpt),
    )
    return verdict.verdict(request)


def _nanochat(run: Run, nanochat) -> dict:
    from .nanochat import check

    request = check.Request(
        str(nanochat),
        list(run.command),
        gpu_memory=run.gpu_memory,
        capability=run.capability,
        alloc_conf=run.alloc_conf,
        search=False,
    )
    out = check.verdict(request, environ={})
    # nanochat's own peak is the whole run's: its training step's
    return {"phases": {"train_step": out["phases"]["train"]} if "train" in out["phases"] else out["phases"]}
