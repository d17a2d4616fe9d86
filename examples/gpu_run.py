"""The examples' CUDA branch up to the device calls: which full-scale nanoGPT runs are capped, to which
card, what each is compared with, what the run showed, and the report a reader shares.

On a GPU, ``pytest examples --nanogpt PATH`` runs each page's config at full scale with nanoGPT's own
train.py, as the page states it (compiled where it compiles), its caching allocator capped to the
``--gpu-memory`` card (docs/en/verify.md#gpu-memory). Nothing here touches the GPU: the
:class:`Device` is read from it once (``cuda_device``, through ``oomguide.memory``, the one module that
calls torch.cuda), or is a stand-in on the CPU, where CI runs every function below:

- :func:`plan`: the run's settings, code and card judged by the one verdict ``oomguide check`` calls
  (``oomguide.verdict.verdict``, on the patched copy, for this card's compute capability and
  allocator setting): the peak predicted per phase, and what the run must show. A phase that
  ``fits``: the run passes it; ``does_not_fit``: it runs out of memory there (or earlier, at a
  borderline phase); ``borderline``: either. A GPU smaller than the card cannot emulate it: skip.
- :func:`judge`: what the run recorded (``examples/nanogpt_run.py``: each phase's peaks, the phase it
  ran out of memory in) against the plan.
- :func:`report_document`: every judged run as a measurements document
  (``oomguide-measurements/1``, ``oomguide.measured``), written at the end of the session and
  named in the summary; copied into ``examples/measurements/``, the accuracy page counts it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from oomguide import measured, memory, placement, verdict
from oomguide.units import usable_bytes

ROOT = Path(__file__).resolve().parents[1]
# the order train.py goes through the phases with max_iters=1, eval_interval=1 (resume: before them)
ORDER = ("resume", "estimate_loss_first", "first_step", "estimate_loss", "train_step")
# the arguments that only shorten a run (nanogpt_checkout.scale_args), kept out of its settings
HARNESS = ("max_iters", "eval_interval", "log_interval", "always_save_checkpoint", "wandb_log", "out_dir")
ALLOC_CONF_LINE = re.compile(r"PYTORCH_CUDA_ALLOC_CONF=['\"]?([^'\"\s]+)")
ABOUT = (
    "pytest examples --nanogpt on one GPU: each page's config (its snippets applied as placed) run "
    "with nanoGPT's own train.py at full scale, compiled where the config compiles, for two "
    "iterations with an evaluation before each (max_iters=1, eval_interval=1, eval_iters=2), the "
    "caching allocator capped with torch.cuda.set_per_process_memory_fraction(cap_bytes / total_bytes); "
    "each phase's peak from torch.cuda.max_memory_allocated()/max_memory_reserved(), reset when an "
    "evaluation's first forward starts and when the first training forward after it starts; data: "
    "random tokens (vocabulary 50257, no meta.pkl) unless meta_vocab_size says. 'configs' are this "
    "repository's snippets, applied in order; 'snippets' lists every snippet in the copy, code changes "
    "included; 'predicted' is what oomguide check said for the run's settings, code and card."
)


@dataclass(frozen=True)
class Device:
    """The GPU the examples run on, as PyTorch reports it; a stand-in with the same fields on the CPU."""

    name: str
    total_bytes: int
    capability: tuple[int, int]
    torch: str
    driver: str | None = None
    alloc_conf: str = ""  # PYTORCH_CUDA_ALLOC_CONF of the session

    def machine(self) -> dict:
        import platform

        return {
            "device": self.name,
            "total_bytes": self.total_bytes,
            "capability": list(self.capability),
            "torch": self.torch,
            "python": platform.python_version(),
            "driver": self.driver,
        }


def cuda_device() -> Device | None:
    """This machine's GPU 0 (None without CUDA): the device calls, all in ``oomguide.memory``."""
    if not memory.cuda_available():
        return None
    import torch

    return Device(
        name=memory.cuda_device_name(),
        total_bytes=memory.cuda_total_bytes(),
        capability=tuple(memory.cuda_capability()),
        torch=torch.__version__,
        driver=memory.cuda_driver(),
        alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    )


@dataclass
class Plan:
    """One full-scale run on the GPU, decided before it starts."""

    label: str
    snippets: list  # every snippet in the copy, what they need included
    configs: list  # the config snippets, in order (snippets/...)
    overrides: list  # key=value: the reader's own (a shell line's --key=value) and the scaling's
    harness: list  # key=value that only shorten the run
    gpu_memory: int  # the card to emulate
    cap_bytes: int  # what the allocator may hold: the card less the CUDA context oomguide sets aside
    alloc_conf: str
    compiled: bool
    meta_vocab_size: int | None = None
    predicted: dict = field(default_factory=dict)  # phase -> {"allocated", "reserved", "verdict"}
    skip: str | None = None  # why it does not run (a GPU smaller than the card)

    @property
    def env(self) -> dict:
        """What the runner needs (nanogpt_run.cap): the card, and the allocator setting the page sets."""
        env = {"OOMGUIDE_GPU_MEMORY": str(self.gpu_memory)}
        if self.alloc_conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = self.alloc_conf
        return env

    @property
    def expected(self) -> tuple[str, list]:
        """("fits", []) the run must pass every phase; ("oom", [phases]) it must run out of memory in one
        of them; ("either", [phases]) it may run out in one of them or pass. From the verdicts in
        train.py's order: borderline phases may fail, the first does_not_fit phase must if none did."""
        may = []
        for name in ORDER:
            decided = self.predicted.get(name, {}).get("verdict")
            if decided == "does_not_fit":
                return ("oom", [*may, name])
            if decided == "borderline":
                may.append(name)
        return ("either", may) if may else ("fits", [])

    def describe(self) -> str:
        how, phases = self.expected
        said = {"fits": "fits", "oom": "runs out of memory in", "either": "is borderline in"}[how]
        return f"check says it {said}{' ' + ' or '.join(phases) if phases else ''}"


def alloc_conf_of(snippets, session: str = "") -> str:
    """PYTORCH_CUDA_ALLOC_CONF as the run gets it: a page's environment line, else the session's."""
    for rel in snippets:
        found = ALLOC_CONF_LINE.search((ROOT / "snippets" / rel).read_text(encoding="utf-8"))
        if found:
            return found.group(1)
    return session


def plan(folder: Path, configs, tail, applied, device: Device, gpu_memory: int, label: str, typed=()) -> Plan:
    """The plan of a full-scale run of the copy `folder` (its config files `configs`, train.py's
    arguments `tail`, the snippets `applied`; `typed`: a shell line's own key=value) on `device`."""
    places = placement.load()
    pairs = [a[2:] for a in tail if a.startswith("--")]
    settings = [*typed, *(p for p in pairs if p.split("=", 1)[0] not in HARNESS)]
    run = Plan(
        label=label,
        snippets=list(applied),
        configs=[f"snippets/{rel}" for rel in applied if places[rel].kind == "config"],
        overrides=settings,
        harness=[p for p in pairs if p.split("=", 1)[0] in HARNESS and not p.startswith("out_dir=")],
        gpu_memory=gpu_memory,
        cap_bytes=usable_bytes(gpu_memory),
        alloc_conf=alloc_conf_of(applied, device.alloc_conf),
        compiled=False,
    )
    if run.cap_bytes > device.total_bytes:
        run.skip = (
            f"{device.name} has {memory.fmt_bytes(device.total_bytes)}: it cannot emulate a card of "
            f"{memory.fmt_bytes(gpu_memory)} (pytest examples --gpu-memory SIZE, at most the GPU's own)"
        )
        return run  # nothing runs: nothing to compare with
    request = verdict.Request(
        configs=[str(folder / c) for c in configs],
        overrides=[*typed, *pairs],
        nanogpt=str(folder),
        gpu_memory=gpu_memory,
        capability=tuple(device.capability),
        alloc_conf=run.alloc_conf,
        search=False,
        cwd=str(folder),
    )
    out = verdict.verdict(request)
    run.compiled = bool(out["compiled"])
    vocab = out.get("vocab_from") or ""
    if isinstance(vocab, str) and "meta.pkl" in vocab:
        run.meta_vocab_size = out["shape"]["vocab_size"]
    run.predicted = {
        name: {"allocated": p["peak_bytes"], "reserved": p.get("reserved_bytes"), "verdict": p.get("verdict")}
        for name, p in out["phases"].items()
        if name in ORDER
    }
    return run


@dataclass
class Result:
    """What a full-scale run showed against its plan."""

    plan: Plan
    phases: dict  # phase -> {"allocated", "reserved"}, measured
    outcome: dict  # {"fits", "oom_phase", "message"}
    agrees: bool

    def line(self) -> str:
        """The summary's line: what ran, on which card, compiled or not, measured against predicted."""
        p = self.plan
        fmt = memory.fmt_bytes
        head = (
            f"GPU, full scale, {'compiled' if p.compiled else 'eager'}, capped to a card of "
            f"{fmt(p.gpu_memory)} ({fmt(p.cap_bytes)} for the allocator"
            + (f", {p.alloc_conf}" if p.alloc_conf else "")
            + f"): {p.label}"
        )
        parts = [
            f"{name} {fmt(got['allocated'])} measured / "
            + (f"{fmt(p.predicted[name]['allocated'])} predicted" if name in p.predicted else "not predicted")
            for name in ORDER
            if (got := self.phases.get(name)) is not None
        ]
        ran = "ran" if self.outcome["fits"] else f"out of memory in {self.outcome['oom_phase']}"
        agrees = "" if self.agrees else "DISAGREES: "
        return f"{head}: {agrees}{ran}; {p.describe()}" + (f": {'; '.join(parts)}" if parts else "")


def judge(run_plan: Plan, record: dict) -> Result:
    """The run's record (nanogpt_run.py) against its plan."""
    phases = {
        p["name"]: {"allocated": p["allocated"], "reserved": p["reserved"]}
        for p in record.get("phases", [])
        if p.get("allocated") is not None
    }
    oom = record.get("oom")
    if oom is not None:
        where = oom["phase"] or ("resume" if "resume" in run_plan.predicted else "estimate_loss_first")
        outcome = {"fits": False, "oom_phase": where, "message": oom["message"]}
    else:
        outcome = {"fits": not record.get("error"), "oom_phase": None, "message": record.get("error")}
    how, where = run_plan.expected
    if how == "fits":
        agrees = outcome["fits"]
    elif how == "oom":
        agrees = not outcome["fits"] and outcome["oom_phase"] in where
    else:
        agrees = outcome["fits"] or outcome["oom_phase"] in where
    return Result(run_plan, phases, outcome, agrees)


def check_on_the_gpu(run, results: list, report) -> bool:
    """A page's full-scale run on the GPU (``run.plan``; examples/test_nanogpt.py's check_run): skipped
    where the GPU cannot emulate the card; judged against check, added to `results` (once, for the
    report) and to the summary. True where the run went on to the end, so that the other checks apply;
    False where it ran out of memory where check says (nothing after that ran)."""
    import pytest

    if run.plan is None:
        return True
    if run.plan.skip:
        report(f"skipped on the GPU: {run.plan.label}: {run.plan.skip}")
        pytest.skip(run.plan.skip)
    result = judge(run.plan, run.record)
    if all(r.plan is not run.plan for r in results):  # a run two tests share is reported once
        results.append(result)
        report(result.line())
    assert result.agrees, f"{result.line()}\n{run.explain()}"
    return result.outcome["fits"]


def proof_lines(runs, results: list) -> list[str]:
    """The summary's account per page of the nanoGPT runs of this session (`runs`: nanogpt_checkout.Run):
    how many of its snippets' runs were made on the GPU at full scale (capped to which card, compiled or
    eager, as check says) or tiny on the CPU, and how many were skipped on the GPU and why."""
    pages: dict[str, dict] = {}
    for run in runs:
        if not run.requested:
            continue
        page = pages.setdefault(run.requested[0].split("/", 1)[0], {"gpu": [], "tiny": 0, "skipped": []})
        if run.plan is not None and run.plan.skip:
            page["skipped"].append(run.plan.skip)
        elif run.plan is not None:
            page["gpu"].append(run.plan)
        elif run.scale == "tiny":
            page["tiny"] += 1
    judged = {id(r.plan): r for r in results}
    lines = []
    for name, page in sorted(pages.items()):
        parts = []
        if page["gpu"]:
            cards = sorted({memory.fmt_bytes(p.gpu_memory) for p in page["gpu"]})
            compiled = sum(p.compiled for p in page["gpu"])
            agree = sum(1 for p in page["gpu"] if id(p) in judged and judged[id(p)].agrees)
            parts.append(
                f"{len(page['gpu'])} run{'s' * (len(page['gpu']) != 1)} on the GPU at full scale, capped to a card of {', '.join(cards)} "
                f"({compiled} compiled, {len(page['gpu']) - compiled} eager), {agree} measured as check says"
            )
        if page["tiny"]:
            parts.append(
                f"{page['tiny']} tiny run{'s' * (page['tiny'] != 1)} on the CPU (settings and losses, no peaks)"
            )
        if page["skipped"]:
            parts.append(f"{len(page['skipped'])} skipped on the GPU ({sorted(set(page['skipped']))[0]})")
        lines.append(f"nanoGPT, page {name}: " + "; ".join(parts))
    return lines


def report_run(result: Result, prefix: str = "") -> dict:
    """One run of the report, in the measurements format. Its name: the report's file stem, then the
    run's snippets, unique across the project's measurement files (the accuracy page keys its figures
    by the name)."""
    p = result.plan
    out = {
        "name": f"{prefix}/{p.label}" if prefix else p.label,
        "program": "nanoGPT",
        "configs": list(p.configs),
        "snippets": [f"snippets/{rel}" for rel in p.snippets],
        "overrides": list(p.overrides),
        "harness": list(p.harness),
        "cap_bytes": p.cap_bytes,
        "card": {"memory_gib": round(p.gpu_memory / memory.GiB, 2)},
        "alloc_conf": p.alloc_conf,
        "compiled": p.compiled,
        "phases": {k: v for k, v in result.phases.items() if k in measured.CHECKS},
        "outcome": dict(result.outcome),
        "predicted": {k: dict(v) for k, v in p.predicted.items() if k in measured.CHECKS},
        "agrees": result.agrees,
    }
    if p.meta_vocab_size:
        out["meta_vocab_size"] = p.meta_vocab_size
    return out


def report_document(device: Device, results: list[Result], prefix: str = "") -> dict:
    """The report: the machine and every judged run, checked as ``measured.load`` checks a file."""
    return measured.document(device.machine(), [report_run(r, prefix) for r in results], ABOUT)


def report_name(device: Device, today: datetime.date | None = None) -> str:
    """``nvidia-h100-80gb-hbm3-2026-11-26.json``: the card and the day, as the project's files are named."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.name.lower()).strip("-") or "gpu"
    return f"{slug}-{(today or datetime.date.today()).isoformat()}.json"


def write_report(folder: Path, device: Device, results: list[Result]) -> Path:
    """Write the report into `folder` (the directory pytest was started in); its path."""
    path = Path(folder) / report_name(device)
    doc = report_document(device, results, path.stem)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path
