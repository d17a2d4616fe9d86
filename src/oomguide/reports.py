"""Public OOM reports, re-predicted: the cases behind the page "How accurate is oomguide?".

Each case is a folder ``tests/reports/<case>/`` holding what a public report says, and nothing the
engine computed:

- ``case.toml``: the source address, the card (``memory`` as PyTorch reports its total), the run
  (config files of the folder, ``--key=value`` overrides, the world size), every value the report does
  not state (``[inferred]``: key -> why), the reported outcome (``oom`` or ``ran``, and for an OOM the
  phase: ``resume``, ``estimate_loss_first``, ``first_step``, ``train_step``, ``estimate_loss``,
  ``startup`` or ``unknown``),
  whether the message is complete, and the engine features that decide the case (``decided_by``);
- the config files, nanoGPT-style (plain assignments), inferred values marked in a comment;
- ``message.txt``: the OOM message as posted, when there is one; ``data/<dataset>/meta.pkl`` when the
  run read one.

``replay(case)`` re-predicts the case with ``oomguide.memory`` in the order train.py runs its phases
(resuming, the first ``estimate_loss()`` at iteration 0, the first step, a train step, a later ``estimate_loss()``),
stops at the first phase that does not fit the card, and reads the message with explain. It uses
what the engine offers when it offers it (the checks it names, ``compiled``, meta.pkl lookup, a world
size), found by looking at the engine's signatures, so a better engine needs no change here.
``summarize`` turns the verdicts into the figures the page prints.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import re
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import config as config_module
from . import memory
from .memory.gpus import DEFAULT_CAPABILITY

ROOT = Path(__file__).resolve().parents[2]
CASES_DIR = ROOT / "tests" / "reports"
CACHE_DIR = ROOT / ".cache" / "oomguide-reports"  # keyed by the engine's source: never stale

# train.py's order: resuming (init_from='resume': the checkpoint loaded), estimate_loss() at
# iteration 0 (before any optimizer step), the first step (AdamW's state made in it; not when
# resumed), the train steps, then every eval_interval a later estimate_loss() (AdamW state and the
# last logits alive).
RUN_ORDER = ("resume", "estimate_loss_first", "first_step", "train_step", "estimate_loss")
_CHECKS = {
    "estimate_loss_first": ("estimate_loss", "first"),
    "train_step": ("train_step", "training"),
    "estimate_loss": ("estimate_loss", "training"),
}
REPORTED_PHASES = (*RUN_ORDER, "startup", "unknown")
OUTCOMES = ("oom", "ran")

# What can decide a case, and how to tell whether the engine models it.
FEATURES = {
    "first_eval": "the first estimate_loss() at iteration 0, before any optimizer state",
    "first_step": "the first optimizer step: AdamW's state made while the gradients are alive",
    "resume": "init_from='resume': train.py's torch.load puts the checkpoint on the card",
    "init_from_gpt2": "init_from='gpt2*': GPT-2's shape and vocab, whatever the config says",
    "meta_vocab": "vocab_size from data/<dataset>/meta.pkl, as train.py reads it",
    "dropout_kernels": "CUDA's attention kernels and 1-byte dropout masks with dropout > 0",
    "compile": "torch.compile: Inductor's fused loss and what it keeps for backward",
    "ddp": "DDP's gradient buckets on each rank",
    "architecture": "a model other than nanoGPT's GPT (modded-nanogpt): not modelled",
    "nanochat": "nanochat's own model, optimizer and scripts from a checkout (oomguide check --nanochat)",
    "outside_this_run": "memory held outside this run (other processes, the node): not predictable",
    "short_message": "the short OOM message form ('GPU has X total, Y free, Z in use')",
    "no_request_message": "'CUDA error: out of memory', a message with no request",
}


class CaseError(ValueError):
    """A case folder that is incomplete or inconsistent; the message names the file and the problem."""


@dataclass
class Case:
    id: str
    path: Path
    source: str
    project: str
    what: str
    card: str
    gpu_memory: int
    capability: tuple[int, int]  # the card's compute capability: picks the attention kernel
    configs: list[Path]
    overrides: list[str]
    world_size: int
    inferred: dict[str, str]
    reported: str
    phase: str | None
    message: str | None
    message_complete: bool
    decided_by: list[str]
    nanochat: dict | None = None  # [nanochat]: the reporter's command line, run by oomguide.nanochat

    @property
    def key(self) -> str:
        """The case's id as a figure key: ``nanogpt-88-b32-16gb`` -> ``nanogpt_88_b32_16gb``."""
        return self.id.replace("-", "_")


def _need(data: dict, key: str, where: str, kind=str):
    if key not in data:
        raise CaseError(f"{where}: missing {key!r}")
    value = data[key]
    if not isinstance(value, kind):
        raise CaseError(f"{where}: {key!r} must be {kind.__name__}, got {value!r}")
    return value


def load_case(path: Path) -> Case:
    """Read and check one case folder."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, published as tomli
        import tomli as tomllib

    path = Path(path)
    where = f"tests/reports/{path.name}/case.toml"
    try:
        data = tomllib.loads((path / "case.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CaseError(f"{where}: not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"{where}: {exc}") from None
    source = _need(data, "source", where)
    if not source.startswith("https://"):
        raise CaseError(f"{where}: source must be a public https address, got {source!r}")
    card = _need(data, "card", where, dict)
    run = data.get("run", {})
    outcome = _need(data, "outcome", where, dict)
    reported = _need(outcome, "reported", where)
    if reported not in OUTCOMES:
        raise CaseError(f"{where}: outcome.reported must be one of {OUTCOMES}, got {reported!r}")
    phase = outcome.get("phase")
    if reported == "oom" and phase not in REPORTED_PHASES:
        raise CaseError(f"{where}: an OOM needs outcome.phase, one of {REPORTED_PHASES}; got {phase!r}")
    if reported == "ran" and phase is not None:
        raise CaseError(f"{where}: a run that ran has no outcome.phase")
    _need(outcome, "evidence", where)
    configs = [path / c for c in run.get("configs", [])]
    for c in configs:
        if not c.is_file():
            raise CaseError(f"{where}: config file {c.relative_to(path)} is missing")
    message_file = path / "message.txt"
    message = message_file.read_text(encoding="utf-8") if message_file.is_file() else None
    meta = data.get("message")
    if (message is None) != (meta is None):
        raise CaseError(f"{where}: a [message] table goes with a message.txt, and only with one")
    if meta is not None and not meta.get("complete", False) and not meta.get("note"):
        raise CaseError(f"{where}: an incomplete message needs a note saying what is missing")
    decided_by = data.get("engine", {}).get("decided_by", [])
    unknown = [f for f in decided_by if f not in FEATURES]
    if unknown:
        raise CaseError(f"{where}: unknown engine feature(s) {unknown}; known: {', '.join(FEATURES)}")
    inferred = data.get("inferred", {})
    for key, why in inferred.items():
        if not isinstance(why, str) or len(why) < 20:
            raise CaseError(f"{where}: inferred.{key} must say why, in a sentence")
    try:
        gpu_memory = memory.parse_size(_need(card, "memory", where))
    except ValueError as exc:
        raise CaseError(f"{where}: card.memory: {exc}") from None
    if not card.get("memory_from"):
        raise CaseError(f"{where}: card.memory_from must say where the card's size comes from")
    capability = card.get("capability", ".".join(map(str, DEFAULT_CAPABILITY)))
    if not re.fullmatch(r"\d+\.\d", str(capability)):
        raise CaseError(f"{where}: card.capability must read like '8.6', got {capability!r}")
    if "capability" in card and not card.get("capability_from"):
        raise CaseError(f"{where}: card.capability_from must say where the card's capability comes from")
    nanochat = data.get("nanochat")
    if nanochat is not None and not isinstance(nanochat.get("command"), str):
        raise CaseError(f"{where}: a [nanochat] table needs the reporter's command line as command")
    return Case(
        nanochat=nanochat,
        id=path.name,
        path=path,
        source=source,
        project=_need(data, "project", where),
        what=_need(data, "what", where),
        card=_need(card, "name", where),
        gpu_memory=gpu_memory,
        capability=tuple(int(x) for x in str(capability).split(".")),
        configs=configs,
        overrides=list(run.get("overrides", [])),
        world_size=int(run.get("world_size", 1)),
        inferred=dict(inferred),
        reported=reported,
        phase=phase,
        message=message,
        message_complete=bool(meta and meta.get("complete")),
        decided_by=list(decided_by),
    )


def load_cases(root: Path = CASES_DIR) -> list[Case]:
    return [load_case(p) for p in sorted(Path(root).iterdir()) if p.is_dir()]


# ------------------------------------------------------------------------------------------------
# the engine, as far as it goes
# ------------------------------------------------------------------------------------------------
def _accepts(func, name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def engine_features() -> dict[str, bool]:
    """Which FEATURES the installed engine models (looked up, not assumed)."""
    predict = memory.predict
    return {
        "first_eval": _accepts(predict, "state"),
        "first_step": "first_step" in getattr(memory, "CHECKS", {}),
        "resume": "resume" in getattr(memory, "CHECKS", {}),
        "init_from_gpt2": hasattr(config_module, "PRETRAINED_SHAPES"),
        "meta_vocab": _accepts(config_module.load_config, "find_files"),
        "dropout_kernels": hasattr(memory, "ATTENTION_BACKENDS") or hasattr(memory, "attention_backend"),
        "compile": _accepts(predict, "compiled"),
        "ddp": hasattr(_distributed(), "Parallel"),
        "architecture": False,
        "nanochat": _nanochat_cases() is not None and _nanochat_cases().checkout() is not None,
        "outside_this_run": False,
        "short_message": _explain_reads(
            "Tried to allocate 8.00 GiB. GPU has 79.19 GiB total, 6.68 GiB free, 72.48 GiB in use by this process."
        ),
        "no_request_message": _explain_reads("RuntimeError: CUDA error: out of memory"),
    }


def _nanochat_cases():
    try:
        return importlib.import_module("oomguide.nanochat.cases")
    except ImportError:
        return None


def _explain_module():
    """explain's module: the explain/ package once it exists, oom.py before."""
    for name in ("oomguide.explain", "oomguide.oom"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "explain"):
            return module
    raise ImportError("no oomguide explain module")


def _explain_reads(text: str) -> bool:
    module = _explain_module()
    try:
        module.explain(text, None, predict=False)
    except ValueError:
        return False
    return True


def case_config(case: Case):
    """The run's train.py settings: the case's config files and overrides (meta.pkl looked up in the
    case folder, as train.py would in its checkout, when the engine can)."""
    kwargs = {}
    if _accepts(config_module.load_config, "find_files"):
        kwargs = {"find_files": True, "cwd": case.path}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config_module.load_config(case.configs, case.overrides, **kwargs)


def _checks(config) -> list[str]:
    """The checks train.py goes through for `config`, in RUN_ORDER (eval_only stops after the first)."""
    run = getattr(memory, "checks_run", None)
    names = list(run(config)) if run else list(RUN_ORDER)
    return [c for c in RUN_ORDER if c in names]


def _engine_digest() -> str:
    """A hash of the engine's source (and torch's version): a cached prediction is only reused when
    the code that made it is unchanged."""
    import torch

    h = hashlib.sha256(torch.__version__.encode())
    src = Path(__file__).resolve().parent
    for path in sorted(src.rglob("*.py")):
        if path.name in ("reports.py", "site_hooks.py", "figures.py", "cli.py"):
            continue
        h.update(path.relative_to(src).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _distributed():
    try:
        return importlib.import_module("oomguide.memory.distributed")
    except ImportError:
        return None


def _predict_for(world_size: int):
    """(predict function, its Parallel argument or None): one rank of a DDP run when the engine
    models it (train.py divides ``gradient_accumulation_steps`` by the world size), else one GPU."""
    dist = _distributed()
    if world_size > 1 and dist is not None and hasattr(dist, "Parallel"):
        return dist.predict, dist.Parallel(world_size=world_size)
    return memory.predict, None


@dataclass
class Prediction:
    check: str
    peak_bytes: int
    fits: bool
    failing_allocation_bytes: int | None
    failing_allocation: str | None
    allocated_at_failure_bytes: int | None
    largest_allocation: str
    reserved_bytes: int | None = None  # the reserved peak on a card with room (None: not modelled)


class Predictor:
    """memory.predict for one check of one config on one card, cached in memory and, keyed by the
    engine's source, on disk (``.cache/``; ``OOMGUIDE_REPORTS_CACHE=0`` turns the disk off).

    The peaks depend on the card's compute capability (the attention kernel), not on its size, so a
    case without a message reuses a prediction made for another card of the same capability when
    the verdict is plain: it fits when even the reserved peak (every segment the allocator keeps)
    is within the usable memory, and not when the allocated peak is over it. Between the two, the
    allocator's verdict under this card's budget decides, so the phase is predicted for the card.
    A case with a message gets a prediction for its own card, whose failing allocation is compared
    with the message's request.
    """

    def __init__(self, disk: bool | None = None):
        self.memo: dict[str, dict[int, Prediction]] = {}
        self.disk = os.environ.get("OOMGUIDE_REPORTS_CACHE", "1") != "0" if disk is None else disk
        self.digest = _engine_digest()
        self.computed = 0

    def __call__(
        self,
        config,
        check: str,
        gpu_memory: int,
        world_size: int = 1,
        own_card: bool = False,
        capability: tuple[int, int] = DEFAULT_CAPABILITY,
    ) -> Prediction:
        phase, state = (getattr(memory, "CHECKS", None) or _CHECKS)[check]
        predict, parallel = _predict_for(world_size)
        kwargs = {"state": state}
        if _accepts(predict, "compiled"):
            kwargs["compiled"] = bool(config.values.get("compile", False))
        if _accepts(predict, "capability"):
            kwargs["capability"] = tuple(capability)
        key = hashlib.sha256(
            json.dumps(
                [
                    self.digest,
                    sorted(config.values.items(), key=str),
                    check,
                    world_size,
                    sorted(kwargs.items()),
                ],
                default=str,
            ).encode()
        ).hexdigest()[:24]
        known = self.memo.setdefault(key, {})
        path = CACHE_DIR / f"{key}.json"
        if not known and self.disk and path.is_file():
            known.update({int(b): Prediction(**p) for b, p in json.loads(path.read_text()).items()})
        if gpu_memory in known:
            return known[gpu_memory]
        usable = memory.usable_bytes(gpu_memory)
        if known and not own_card:
            other = next(iter(known.values()))
            if other.peak_bytes > usable:
                plain = False
            elif (other.reserved_bytes or other.peak_bytes) <= usable:
                plain = True
            else:
                plain = None  # the allocator's verdict under this budget decides
            if plain is not None:
                return replace(
                    other,
                    fits=plain,
                    failing_allocation_bytes=None,
                    failing_allocation=None,
                    allocated_at_failure_bytes=None,
                )
        if parallel is None:
            result = predict(config, phase, gpu_memory, **kwargs)
        else:
            result = predict(config, phase, gpu_memory, parallel, **kwargs)
        self.computed += 1
        known[gpu_memory] = Prediction(
            check=check,
            peak_bytes=result.peak_bytes,
            fits=bool(result.fits),
            failing_allocation_bytes=result.failing_allocation_bytes,
            failing_allocation=result.failing_allocation,
            allocated_at_failure_bytes=result.allocated_at_failure_bytes,
            largest_allocation=result.largest_allocation,
            reserved_bytes=getattr(result, "reserved_bytes", None),
        )
        if self.disk:
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({b: asdict(p) for b, p in known.items()}))
        return known[gpu_memory]


# ------------------------------------------------------------------------------------------------
# one case
# ------------------------------------------------------------------------------------------------
@dataclass
class Verdict:
    case: Case
    predicted: str  # "oom" or "ran"
    predicted_phase: str | None  # the first check that does not fit
    checks: dict[str, Prediction]
    usable_bytes: int
    features: dict[str, bool]
    explain: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def deciding(self) -> Prediction:
        """The check that decides: the first that does not fit, else the one with the highest peak."""
        if self.predicted_phase:
            return self.checks[self.predicted_phase]
        return max(self.checks.values(), key=lambda p: p.peak_bytes)

    @property
    def outcome_agrees(self) -> bool:
        return self.predicted == self.case.reported

    @property
    def phase_agrees(self) -> bool | None:
        """For an OOM reported at a known phase: whether the prediction fails there (None otherwise)."""
        if self.case.reported != "oom" or self.case.phase == "unknown":
            return None
        return self.predicted_phase == self.case.phase

    @property
    def agrees(self) -> bool:
        return self.outcome_agrees and self.phase_agrees is not False

    @property
    def missing_features(self) -> list[str]:
        """The features that decide this case and the engine does not model."""
        return [f for f in self.case.decided_by if not self.features.get(f)]


def replay(case: Case, predictor: Predictor | None = None, features: dict | None = None) -> Verdict:
    """Re-predict `case` phase by phase in train.py's order, and read its message with explain."""
    predictor = predictor or Predictor()
    features = features if features is not None else engine_features()
    config = case_config(case)
    checks: dict[str, Prediction] = {}
    failing = None
    if case.nanochat is not None:  # the reporter's command line, with nanochat's own code
        cache = CACHE_DIR if predictor.disk else None
        phases = _nanochat_cases().replay(
            case.nanochat, case.gpu_memory, case.capability, engine_digest=predictor.digest, cache_dir=cache
        )
        for phase in phases:
            checks[phase["check"]] = Prediction(**phase)
            if not phase["fits"]:
                failing = phase["check"]
                break
        config = None
    for check in _checks(config) if case.nanochat is None else ():
        pred = predictor(
            config,
            check,
            case.gpu_memory,
            case.world_size,
            own_card=case.message is not None,
            capability=case.capability,
        )
        checks[check] = pred
        if not pred.fits:
            failing = check
            break
    verdict = Verdict(
        case=case,
        predicted="oom" if failing else "ran",
        predicted_phase=failing,
        checks=checks,
        usable_bytes=memory.usable_bytes(case.gpu_memory),
        features=features,
    )
    if case.world_size > 1 and not features.get("ddp"):
        verdict.notes.append(f"predicted for one GPU of {case.world_size}, without DDP's buckets")
    if case.message is not None:
        verdict.explain = _explain(case, config, verdict)
    return verdict


_REQUEST = re.compile(r"Tried to allocate (\d+(?:\.\d+)? (?:bytes|KiB|MiB|GiB|TiB))")


def _explain(case: Case, config, verdict: Verdict) -> dict:
    """What explain makes of the case's message, and whether the prediction's failing allocation
    prints as the message's "Tried to allocate" (read from the text itself, so a message explain
    cannot read yet is still compared)."""
    module = _explain_module()
    out = {"read": False, "error": None, "request_printed": None, "request_matches_prediction": None}
    request = _REQUEST.search(case.message)
    if request:
        out["request_printed"] = request.group(1)
        pred = verdict.checks.get(verdict.predicted_phase) if verdict.predicted_phase else None
        if pred is not None and pred.failing_allocation_bytes:
            out["predicted_request_bytes"] = pred.failing_allocation_bytes
            out["predicted_request_printed"] = module.format_size(pred.failing_allocation_bytes)
            out["request_matches_prediction"] = out["predicted_request_printed"] == request.group(1)
    try:
        result = module.explain(case.message, config, gpu_memory=case.gpu_memory, predict=False)
    except ValueError as exc:  # ExplainError: a message explain cannot read
        out["error"] = str(exc)
        return out
    out["read"] = True
    figs = result.figures
    out["requested_bytes"] = getattr(figs, "requested", None)
    out["free_bytes"] = getattr(figs, "free", None)
    out["outside_pytorch_bytes"] = getattr(figs, "outside_pytorch", None)
    out["diagnosis"] = list(getattr(result, "diagnosis", []) or [])
    out["matched_tensor"] = bool(getattr(result, "matches", None))
    return out


# ------------------------------------------------------------------------------------------------
# all cases: the page's figures
# ------------------------------------------------------------------------------------------------
def summarize(verdicts: list[Verdict]) -> dict[str, tuple[float, str]]:
    """figure key -> (value, unit), for the page: per case and in total, per reported phase."""
    figs: dict[str, tuple[float, str]] = {"context": (memory.CONTEXT_BYTES, "mib")}
    for v in verdicts:
        figs[f"{v.case.key}_peak"] = (v.deciding.peak_bytes, "gib")
        figs[f"{v.case.key}_usable"] = (v.usable_bytes, "gib")
        figs[f"{v.case.key}_agree"] = (int(v.agrees), "mark")
    agree = [v for v in verdicts if v.agrees]
    figs["cases"] = (len(verdicts), "int")
    figs["agree"] = (len(agree), "int")
    figs["agree_share"] = (len(agree) / len(verdicts), "percent")
    for outcome in OUTCOMES:
        group = [v for v in verdicts if v.case.reported == outcome]
        figs[f"{outcome}_cases"] = (len(group), "int")
        figs[f"{outcome}_agree"] = (sum(v.agrees for v in group), "int")
        figs[f"{outcome}_outcome_agree"] = (sum(v.outcome_agrees for v in group), "int")
    for phase in REPORTED_PHASES:
        group = [v for v in verdicts if v.case.reported == "oom" and v.case.phase == phase]
        figs[f"phase_{phase}_cases"] = (len(group), "int")
        figs[f"phase_{phase}_agree"] = (sum(v.agrees for v in group), "int")

    def size(nbytes):
        return (nbytes, "gib" if nbytes >= memory.GiB else "mib")

    for v in verdicts:  # the message's own figures, and the prediction's request, for the page's text
        ex = v.explain or {}
        for what in ("requested", "free", "outside_pytorch", "predicted_request"):
            if ex.get(f"{what}_bytes") is not None:
                figs[f"{v.case.key}_{'pred_requested' if what == 'predicted_request' else 'msg_' + what}"] = (
                    size(ex[f"{what}_bytes"])
                )
    messages = [v for v in verdicts if v.explain is not None]
    figs["messages"] = (len(messages), "int")
    figs["messages_read"] = (sum(v.explain["read"] for v in messages), "int")
    compared = [v for v in messages if v.explain.get("request_matches_prediction") is not None]
    figs["requests_compared"] = (len(compared), "int")
    figs["requests_matched"] = (sum(bool(v.explain["request_matches_prediction"]) for v in compared), "int")
    return figs


def disagreements(verdicts: list[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if not v.agrees]
