"""A public nanochat report re-predicted with nanochat's own code: the accuracy page's nanochat cases.

A case folder (``tests/reports/<case>/``, read by ``oomguide.reports``) whose ``case.toml`` has a
``[nanochat]`` table holds the reporter's command line as they typed it (``command``), and where
the report implies them, the tok_train line that trained their tokenizer (``tokenizer``) and the
base_train line of the model a later script loads (``from_base``). ``replay`` gives it to
``check.verdict`` exactly as ``oomguide check --nanochat PATH --gpu-memory ... -- <command>`` would,
with the checkout named by ``OOMGUIDE_NANOCHAT`` (the one the tests use), and returns each phase
the script runs, in the plan's order, as the accuracy page's predictions. No batch search: the
case is the reporter's own run. Predictions are cached on disk like nanoGPT's, keyed by the
engine's source and the checkout's code. Never imports torch.cuda.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

ENV = "OOMGUIDE_NANOCHAT"
MISSING = f"needs a nanochat checkout for the nanochat cases: {ENV}=PATH"


def checkout() -> Path | None:
    """The nanochat checkout the cases are predicted with (``OOMGUIDE_NANOCHAT``), or None."""
    value = os.environ.get(ENV)
    if value and (Path(value) / "nanochat" / "gpt.py").is_file():
        return Path(value)
    return None


def checkout_digest(path: Path) -> str:
    """A hash of the checkout's code (nanochat/*.py, scripts/*.py): what the prediction runs."""
    h = hashlib.sha256()
    for sub in ("nanochat", "scripts"):
        for file in sorted((path / sub).glob("*.py")):
            h.update(file.name.encode())
            h.update(file.read_bytes())
    return h.hexdigest()[:16]


def replay(table: dict, gpu_memory: int, capability: tuple, *, engine_digest: str, cache_dir: Path | None) -> list[dict]:
    """The phases of the reporter's run, in the order of the plan: dicts with the fields of
    ``reports.Prediction`` (check, peak, fits, failing allocation, largest allocation, reserved)."""
    from . import check

    path = checkout()
    if path is None:
        raise LookupError(MISSING)
    request = check.Request(
        str(path),
        table["command"],
        gpu_memory=gpu_memory,
        capability=tuple(capability),
        search=False,
        from_base=table.get("from_base"),
        tokenizer=table.get("tokenizer"),
    )
    key = hashlib.sha256(
        json.dumps([engine_digest, checkout_digest(path), sorted(table.items()), gpu_memory, list(capability)]).encode()
    ).hexdigest()[:24]
    cached = cache_dir / f"nanochat-{key}.json" if cache_dir is not None else None
    if cached is not None and cached.is_file():
        return json.loads(cached.read_text())
    out = check.verdict(request, environ={})
    phases = [
        {
            "check": name,
            "peak_bytes": r["peak_bytes"],
            "fits": bool(r["fits"]),
            "failing_allocation_bytes": r.get("failing_allocation_bytes"),
            "failing_allocation": r.get("failing_allocation"),
            "allocated_at_failure_bytes": r.get("allocated_at_failure_bytes"),
            "largest_allocation": r["largest_allocation"],
            "reserved_bytes": r.get("reserved_bytes"),
        }
        for name, r in out["phases"].items()
    ]
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(phases))
    return phases
