"""The examples' GPU branch, run on the CPU up to the device calls (no branch only a GPU reaches).

A stand-in :class:`gpu_run.Device` with an H100's figures takes the place of the GPU: the page's runs
are prepared as on the GPU (the copy, the snippets, the plan: cap, card, what `oomguide check` says
of each phase), a run's record is judged against its plan, and the report is written through the
same code as on a GPU and read back with ``oomguide.measured.load``. Only the device calls differ:
the cap and the peaks in ``nanogpt_run.py``, through ``oomguide.memory``. Needs ``--nanogpt``.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import torch

import gpu_run
from conftest import finish_report
from nanogpt_run import PhaseLog
from oomguide import measured, memory

CARD = memory.parse_size("11.69GiB")
STAND_IN = gpu_run.Device(
    name="NVIDIA H100 80GB HBM3",
    total_bytes=85_017_493_504,
    capability=(9, 0),
    torch=torch.__version__,
    driver="stand-in",
)
PAGE_RUNS = {
    # the run whose plan ended in "its GPTConfig has no grad_checkpoint field" (issue 30): the config
    # asks for grad_checkpoint, nanoGPT's model.py has the guide's checkpointed forward but no such field
    "source": ("eval-oom-12gb/source-combination.py",),
    "situation-a": ("estimate-loss-oom/situation.py",),
    "expected-a": ("estimate-loss-oom/expected.py",),
    "expandable": ("estimate-loss-oom/expandable-segments.sh",),
}


@pytest.fixture(scope="module")
def planned(nanogpt, tmp_path_factory):
    """The page runs prepared as on the GPU (stand-in device), nothing run: name -> the prepared job."""
    from nanogpt_checkout import NanoGPT

    probe = NanoGPT(nanogpt.source, tmp_path_factory.mktemp("gpu-plan"), device=STAND_IN, gpu_memory=CARD)
    jobs = {name: probe._prepare(snippets, "full", (), True, None) for name, snippets in PAGE_RUNS.items()}
    jobs["stock"] = probe._prepare(PAGE_RUNS["expected-a"], "full", (), False, None)
    jobs["extra"] = probe._prepare(PAGE_RUNS["expected-a"], "full", ("--batch_size=2",), True, None)
    return jobs


def test_a_page_run_is_planned_against_check(planned, report):
    """Each page run gets the card, the cap and check's verdict per phase before it starts; the
    source's combination too (today's cap_for stopped there on every GPU)."""
    for name in PAGE_RUNS:
        plan = planned[name]["plan"]
        assert plan is not None and plan.skip is None, name
        assert plan.gpu_memory == CARD and plan.cap_bytes == CARD - memory.CONTEXT_BYTES
        assert planned[name]["env"]["OOMGUIDE_GPU_MEMORY"] == str(CARD)
        assert set(plan.predicted) >= {"estimate_loss_first", "first_step", "train_step", "estimate_loss"}
        report(f"planned on a stand-in {STAND_IN.name}: {plan.label}: {plan.describe()}")
    source = planned["source"]["plan"]
    assert "eval-oom-12gb/checkpointed_forward.py" in source.snippets
    assert source.configs[-1] == "snippets/eval-oom-12gb/source-combination.py"


def test_the_page_states_the_run(planned):
    """The run is the page's: compiled where the config compiles (situation A: compile = True), eager where
    it does not (its fix: compile = False), the page's allocator setting, and what the pages say:
    situation A runs out of memory in its first evaluation, its fix fits."""
    a, fix = planned["situation-a"]["plan"], planned["expected-a"]["plan"]
    assert a.compiled and not fix.compiled
    assert not any(arg.startswith("--compile") for arg in planned["situation-a"]["tail"])
    assert a.expected == ("oom", ["estimate_loss_first"])
    assert fix.expected == ("fits", [])
    assert planned["expandable"]["plan"].alloc_conf == "expandable_segments:True"
    assert planned["expandable"]["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_comparison_runs_are_not_capped(planned):
    """Stock nanoGPT and settings added on the command line are compared with, not judged: uncapped."""
    for name in ("stock", "extra"):
        assert planned[name]["plan"] is None and planned[name]["env"] == {}, name


def test_a_gpu_smaller_than_the_card_skips(nanogpt, tmp_path):
    from nanogpt_checkout import NanoGPT

    small = gpu_run.Device("NVIDIA T4", 15_655_829_504, (7, 5), torch.__version__)
    probe = NanoGPT(nanogpt.source, tmp_path, device=small, gpu_memory=memory.parse_size("23.55GiB"))
    job = probe._prepare(PAGE_RUNS["expected-a"], "full", (), True, None)
    assert "NVIDIA T4 has 14.58 GiB: it cannot emulate a card of 23.55 GiB" in job["plan"].skip
    run = probe._launch(job)  # nothing runs
    assert run.record == {} and run.plan is job["plan"]


def stand_in_record(plan, oom_in=None) -> dict:
    """What nanogpt_run.py records on a GPU, with the plan's predicted peaks as stand-in measurements."""
    phases = []
    for name in ("estimate_loss_first", "first_step", "estimate_loss", "train_step"):
        want = plan.predicted[name]
        phases.append({"name": name, "allocated": want["allocated"], "reserved": want["reserved"]})
        if name == oom_in:
            break
    record = {"phases": phases, "error": None}
    if oom_in:
        message = "CUDA out of memory. Tried to allocate 6.14 GiB. GPU 0 has a total capacity of 79.19 GiB"
        record.update(error=f"OutOfMemoryError: {message}", oom={"phase": oom_in, "message": message})
    return record


def test_a_run_is_judged_where_check_says(planned):
    a, fix = planned["situation-a"]["plan"], planned["expected-a"]["plan"]
    assert gpu_run.judge(a, stand_in_record(a, "estimate_loss_first")).agrees
    assert not gpu_run.judge(a, stand_in_record(a, "train_step")).agrees, "out of memory, but later"
    assert not gpu_run.judge(a, stand_in_record(a)).agrees, "said not to fit, and ran"
    assert gpu_run.judge(fix, stand_in_record(fix)).agrees
    assert not gpu_run.judge(fix, stand_in_record(fix, "first_step")).agrees, "said to fit, ran out"
    line = gpu_run.judge(fix, stand_in_record(fix)).line()
    assert line.startswith("GPU, full scale, eager, capped to a card of 11.69 GiB")
    assert ": ran; check says it fits: estimate_loss_first " in line
    assert (
        "DISAGREES: out of memory in first_step; check says it fits"
        in gpu_run.judge(fix, stand_in_record(fix, "first_step")).line()
    )


def test_the_phases_of_a_run_are_logged():
    """nanogpt_run.PhaseLog names train.py's phases from its forwards; on a GPU the peaks come from
    the device (here a stand-in), and an out-of-memory error names the phase it happened in."""
    rec: dict = {}
    figures = iter([(1, 2), (10, 20), (30, 40), (15, 40), (35, 40)])
    log = PhaseLog(rec, lambda: next(figures))
    for kind in ("eval", "eval", "step", "step", "eval", "step"):
        log.enter(kind)
    log.end(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.54 GiB."))
    assert [p["name"] for p in rec["phases"]] == [
        "estimate_loss_first",
        "first_step",
        "estimate_loss",
        "train_step",
    ]
    assert rec["before_phases"] == {"allocated": 1, "reserved": 2}
    assert rec["phases"][-1] == {"name": "train_step", "allocated": 35, "reserved": 40}
    assert rec["oom"] == {"phase": "train_step", "message": "CUDA out of memory. Tried to allocate 1.54 GiB."}


def test_a_tiny_run_logs_its_phases(nanogpt):
    """The same log in nanoGPT's own train.py (tiny, on the CPU: no peaks, the device's only)."""
    run = nanogpt.run(*PAGE_RUNS["expected-a"])
    assert run.ok, run.explain()
    assert [p["name"] for p in run.record["phases"]] == [
        "estimate_loss_first",
        "first_step",
        "estimate_loss",
        "train_step",
    ]
    assert all(p["allocated"] is None for p in run.record["phases"])


def test_the_report_is_written_and_read_back(planned, tmp_path):
    """The report (on a GPU, at the end of pytest examples) through the same code, with stand-in figures:
    the measurements format, read back by oomguide.measured as the accuracy page reads the project's."""
    a, fix = planned["situation-a"]["plan"], planned["expected-a"]["plan"]
    results = [
        gpu_run.judge(a, stand_in_record(a, "estimate_loss_first")),
        gpu_run.judge(fix, stand_in_record(fix)),
    ]
    path = finish_report(STAND_IN, results, tmp_path)
    assert path.name == f"nvidia-h100-80gb-hbm3-{datetime.date.today().isoformat()}.json"
    runs = measured.load(path)
    assert [r.name for r in runs] == [f"{path.stem}/{a.label}", f"{path.stem}/{fix.label}"]
    assert runs[0].outcome == {
        "fits": False,
        "oom_phase": "estimate_loss_first",
        "message": stand_in_record(a, "estimate_loss_first")["oom"]["message"],
    }
    assert runs[1].outcome["fits"] and runs[1].cap_bytes == fix.cap_bytes
    assert runs[1].machine == STAND_IN.machine() and runs[1].capability == (9, 0)
    assert runs[1].configs == [
        "snippets/estimate-loss-oom/situation.py",
        "snippets/estimate-loss-oom/expected.py",
    ]
    assert runs[1].phases["train_step"]["allocated"] == fix.predicted["train_step"]["allocated"]
    doc = json.loads(path.read_text())
    assert doc["runs"][1]["predicted"]["train_step"]["verdict"] == fix.predicted["train_step"]["verdict"]
    assert doc["runs"][0]["compiled"] is True and doc["machine"]["driver"] == "stand-in"
    from conftest import _REPORT

    assert _REPORT and str(path) in _REPORT[-1]
    _REPORT.pop()  # a stand-in's report is not this session's


def test_the_runner_measures_on_the_device(tmp_path, snippet):
    """The page examples' runner on a GPU (conftest.Runner with a device): the measurement goes to the
    device call, with the run's data and card; the prediction beside it is for the device's compute
    capability, compiled where the config compiles; the summary says both. Here the device call is a
    stand-in that returns the prediction as its measurement; a GPU smaller than the card skips."""
    import conftest

    calls = []

    def stand_in(config, phase, data_dir, gpu_memory, **extra):
        calls.append((phase, gpu_memory, (data_dir / "val.bin").is_file(), extra))
        return memory.predict(config, phase, gpu_memory, **extra)

    runner = conftest.Runner(CARD, "11.69GiB", tmp_path, device=STAND_IN, measure=stand_in)
    config = snippet.config("estimate-loss-oom/situation.py")
    assert config.compile
    result = runner.phase(config, "estimate_loss", label="page A's situation")
    assert calls == [
        ("estimate_loss", CARD, True, {"state": "training", "source": None, "stale_logits": True})
    ]
    line = conftest._LINES[-1]
    assert line.startswith(
        f"page A's situation: CUDA run on {STAND_IN.name} under 11.69GiB, compiled: measured "
        f"{memory.fmt_bytes(result.peak_bytes)} allocated"
    )
    compiled = memory.predict(config, "estimate_loss", CARD, capability=(9, 0), compiled=True)
    assert f"(predicted {memory.fmt_bytes(compiled.peak_bytes)} / " in line

    def too_small(*args, **kwargs):
        raise memory.CardTooSmall("NVIDIA T4 has 14.58 GiB: it cannot emulate a 23.55 GiB card")

    runner.measure = too_small
    with pytest.raises(pytest.skip.Exception, match="cannot emulate"):
        runner.phase(config, "estimate_loss", label="page A's situation")
    assert conftest._LINES[-1].startswith("skipped on the GPU: page A's situation: NVIDIA T4")


def test_check_run_on_the_gpu_judges_reports_and_stops(planned):
    """test_nanogpt.check_run's GPU step (gpu_run.check_on_the_gpu) with stand-in records: a run out of
    memory where check says passes and stops the other checks; one where check says it fits fails;
    a shared run is reported once; a plan that cannot run skips; the per-page account says it all."""
    from types import SimpleNamespace

    from nanogpt_checkout import Run

    a, fix = planned["situation-a"]["plan"], planned["expected-a"]["plan"]
    results, lines = [], []

    def run_of(plan, record, requested, scale="full"):
        return Run(Path("."), 1, record, "", plan.snippets if plan else [], scale, {}, [], requested, plan)

    oom = run_of(a, stand_in_record(a, "estimate_loss_first"), ("estimate-loss-oom/situation.py",))
    assert gpu_run.check_on_the_gpu(oom, results, lines.append) is False
    assert gpu_run.check_on_the_gpu(oom, results, lines.append) is False  # shared by two tests
    assert len(results) == 1 and len(lines) == 1
    ran = run_of(fix, stand_in_record(fix), ("estimate-loss-oom/expected.py",))
    assert gpu_run.check_on_the_gpu(ran, results, lines.append) is True
    wrong = run_of(fix, stand_in_record(fix, "train_step"), ("estimate-loss-oom/expected.py",))
    with pytest.raises(AssertionError, match="DISAGREES"):
        gpu_run.check_on_the_gpu(wrong, [], lines.append)
    cannot = gpu_run.Plan(
        **{**vars(fix), "skip": "NVIDIA T4 has 14.58 GiB: it cannot emulate a card of 23.55 GiB"}
    )
    with pytest.raises(pytest.skip.Exception):
        gpu_run.check_on_the_gpu(
            run_of(cannot, {}, ("estimate-loss-oom/block-size.py",)), results, lines.append
        )
    assert lines[-1].startswith("skipped on the GPU: ")
    assert gpu_run.check_on_the_gpu(SimpleNamespace(plan=None), results, lines.append) is True  # CPU path
    tiny = run_of(None, {}, ("eval-oom-12gb/situation.py",), scale="tiny")
    account = gpu_run.proof_lines(
        [oom, ran, run_of(cannot, {}, ("estimate-loss-oom/block-size.py",)), tiny], results
    )
    assert account == [
        "nanoGPT, page estimate-loss-oom: 2 runs on the GPU at full scale, capped to a card of 11.69 GiB "
        "(1 compiled, 1 eager), 2 measured as check says; 1 skipped on the GPU (NVIDIA T4 has 14.58 GiB: "
        "it cannot emulate a card of 23.55 GiB)",
        "nanoGPT, page eval-oom-12gb: 1 tiny run on the CPU (settings and losses, no peaks)",
    ]


COMPILED_PROBE = """
import json, sys, torch
sys.path.insert(0, {examples!r})
sys.path.insert(0, ".")
import nanogpt_run
rec = {{"forwards": [], "lm_head": [], "block_calls": {{"training": 0, "eval": 0}}, "checkpoint_refs": None,
       "torch_load": [], "optimizer_steps": [], "generate": []}}
log = nanogpt_run.PhaseLog(rec, nanogpt_run.no_peaks)
nanogpt_run.instrument(rec, log)
import model
m = model.GPT(model.GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, dropout=0.0))
compiled = torch.compile(m, backend="eager")  # train.py's call, as the runner wraps it (no Inductor here)
x = torch.randint(0, 64, (2, 16))
compiled.eval()
with torch.no_grad():
    compiled(x, x)
compiled.train()
_, loss = compiled(x, x)
loss.backward()
log.end(None)
print(json.dumps({{"compiled": rec.get("compiled"), "forwards": [[f["training"], f["shape"]] for f in rec["forwards"]],
                  "phases": [p["name"] for p in rec["phases"]], "blocks": rec["block_calls"]}}))
"""


def test_a_compiled_model_is_recorded_outside_its_graph(nanogpt):
    """On a GPU the page's config runs compiled: nanogpt_run wraps train.py's torch.compile so that the
    forwards (and the phases) are recorded by the compiled module's forward, outside the graph, and the
    wrappers inside it step aside while torch.compile traces (Blocks then go uncounted). Here with
    TorchDynamo's eager backend, in a copy of the checkout."""
    import subprocess
    import sys

    folder = nanogpt.copy("compile-probe")
    code = COMPILED_PROBE.format(examples=str(Path(__file__).parent))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["compiled"] is True
    assert out["forwards"] == [[False, [2, 16]], [True, [2, 16]]]
    assert out["phases"] == ["estimate_loss_first", "first_step"]
    assert out["blocks"] == {"training": 0, "eval": 0}, "Blocks inside the graph are not counted"
