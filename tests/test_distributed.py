"""Several GPUs (memory/distributed.py): the per-rank prediction against real 2-process runs on the CPU.

The real runs (tests/distributed_worker.py, torchrun with gloo) train the project's GPT as nanoGPT's
train.py does under torchrun, with the allocation tracker on real tensors; the predictions run on
fake tensors with DDP's reducer modelled, or FSDP2 for real over the fake process group.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from oomguide import cli
from oomguide.config import load_config
from oomguide.memory import distributed
from oomguide.memory.predict import predict

WORKER = Path(__file__).with_name("distributed_worker.py")
TINY = ["n_layer=3", "n_head=3", "n_embd=96", "block_size=64", "vocab_size=1024", "batch_size=4"]
CASES = {
    # global gradient_accumulation_steps; each of the 2 ranks does half
    "ddp": {"strategy": "ddp", "overrides": [*TINY, "dtype='float32'", "gradient_accumulation_steps=4"]},
    "ddp_view_sync_every_step": {
        "strategy": "ddp",
        "view": True,
        "overrides": [*TINY, "dtype='float32'", "gradient_accumulation_steps=2"],
    },
    "ddp_view_accumulating": {
        "strategy": "ddp",
        "view": True,
        "overrides": [*TINY, "dtype='float32'", "gradient_accumulation_steps=8"],
    },
    "fsdp": {"strategy": "fsdp", "overrides": [*TINY, "dtype='bfloat16'", "gradient_accumulation_steps=4"]},
    "fsdp_one_micro_step": {
        "strategy": "fsdp",
        "overrides": [*TINY, "dtype='bfloat16'", "gradient_accumulation_steps=2"],
    },
}


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory) -> list[dict]:
    """Both ranks' results of every case, from one torchrun launch."""
    tmp = tmp_path_factory.mktemp("dist")
    (tmp / "cases.json").write_text(json.dumps(CASES))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(WORKER),
            str(tmp / "cases.json"),
            str(tmp),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def _predicted(name: str, phase: str) -> int:
    case = CASES[name]
    parallel = distributed.Parallel(2, case["strategy"], case.get("view", False))
    result = distributed.predict(load_config([], case["overrides"]), phase, None, parallel)
    # the real run is on the CPU: no cuBLAS workspaces, which the prediction of a CUDA rank holds
    return result.peak_bytes - result.breakdown.get("workspaces", 0)


def test_ddp_bucket_bytes_are_what_ddp_reports(real_runs):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomguide.memory.models import ModelSource

    with FakeTensorMode():
        model = ModelSource().build(load_config([], CASES["ddp"]["overrides"]).gpt_config())
        modelled = distributed.bucket_bytes(model)
        total = sum(p.numel() * p.element_size() for p in model.parameters())  # wte = lm_head: once
    for rank in real_runs:
        logging = rank["ddp"]["logging"]
        reported = [int(n) for n in logging["bucket_sizes"].split(",")]
        assert sum(reported) == sum(modelled) == total == logging["total_parameter_size_bytes"]
        assert logging["gradient_as_bucket_view"] == 0 and logging["world_size"] == 2


@pytest.mark.parametrize(
    "name", ["ddp", "ddp_view_sync_every_step", "ddp_view_accumulating", "fsdp", "fsdp_one_micro_step"]
)
@pytest.mark.parametrize("phase", ["train_step", "estimate_loss"])
def test_per_rank_peak_matches_a_real_two_process_run(real_runs, name, phase):
    predicted = _predicted(name, phase)
    for rank in real_runs:
        measured = rank[name][phase]
        assert abs(predicted - measured) <= 0.02 * measured, (name, phase, predicted, measured)


def test_gradient_as_bucket_view_saves_the_gradients_only_when_every_micro_step_syncs(real_runs):
    """With nanoGPT's accumulation the reducer is idle until the last micro-step: no saving."""
    runs = real_runs[0]
    grads = sum(p.numel() * 4 for p in _tiny_params())
    sync_every_step = _predicted("ddp", "train_step") - _predicted("ddp_view_sync_every_step", "train_step")
    assert sync_every_step > 0.5 * grads
    assert runs["ddp_view_accumulating"]["train_step"] >= runs["ddp"]["train_step"] - grads // 100


def _tiny_params():
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomguide.memory.models import ModelSource

    with FakeTensorMode():
        model = ModelSource().build(load_config([], TINY).gpt_config())
        return [torch.empty(p.shape) for p in model.parameters()]


def test_ddp_per_rank_peak_is_the_single_gpu_peak_plus_the_buckets():
    config = load_config([], TINY)
    single = predict(config.replace(gradient_accumulation_steps=20), "train_step", None).peak_bytes
    ddp = distributed.predict(config, "train_step", None, distributed.Parallel(2, "ddp")).peak_bytes
    buckets = distributed.modelled_bucket_bytes(config)
    assert ddp == single + buckets


def test_gradient_accumulation_and_tokens_follow_nanogpt():
    config = load_config([])  # train.py's defaults: 40 micro-steps, batch 12, block 1024
    for world, steps in ((1, 40), (2, 20), (4, 10), (8, 5)):
        parallel = distributed.Parallel(world, "ddp" if world > 1 else None)
        assert distributed.per_rank_config(config, parallel).gradient_accumulation_steps == steps
        assert distributed.tokens_per_iter(config, parallel) == 40 * 12 * 1024


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nproc-per-node", "0"], "--nproc-per-node must be 1 or more, got 0"),
        (["--nproc-per-node", "-2"], "--nproc-per-node must be 1 or more, got -2"),
        (["--nproc-per-node", "2", "--strategy", "zero3"], "unknown strategy 'zero3'"),
        (["--strategy", "fsdp"], "--strategy fsdp needs several processes"),
        (["--nproc-per-node", "1", "--strategy", "ddp"], "--strategy ddp needs several processes"),
        (["--nproc-per-node", "3"], "not divisible by 3 processes"),
        (["--nproc-per-node", "two"], "invalid int value: 'two'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    try:
        code = cli.main(["check", "--no-search", *args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1, err


def test_check_under_fsdp_is_the_same_with_and_without_the_prefetching_child(tmp_path):
    """The program `oomguide check` under FSDP2: its searches derive their probes from two runs each
    (memory/batches.py), the second ones made by a forked child (memory/prefetch.py) or, with
    OOMGUIDE_PREFETCH=0, by the process itself; the answer is the same, byte for byte."""
    import os

    args = [
        "--nproc-per-node",
        "2",
        "--strategy",
        "fsdp",
        "--gpu-memory",
        "512MiB",
        "--json",
    ]  # 256 MiB for PyTorch: room beyond the verdict's margin
    sets = [a for o in [*TINY, "dtype='bfloat16'", "gradient_accumulation_steps=2"] for a in ("--set", o)]
    outs = []
    for prefetch in ("1", "0"):
        env = {**os.environ, "OOMGUIDE_PREFETCH": prefetch}
        proc = subprocess.run(
            [sys.executable, "-m", "oomguide", "check", *sets, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=600,
        )
        assert proc.returncode in (0, 1), proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    phases = json.loads(outs[0])["phases"]
    assert all(entry["max_batch_size"] for entry in phases.values())
