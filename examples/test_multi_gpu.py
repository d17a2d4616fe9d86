"""Page multi-gpu: nanoGPT on several GPUs, per rank, under DDP and FSDP2.

The figures are per-rank predictions (``oomguide.memory.distributed``) on fake tensors: DDP's
reducer modelled (checked against real 2-process runs in tests/test_distributed.py), FSDP2 run for
real over the fake process group. A machine with one GPU cannot measure eight ranks, so these are
predictions on every machine.

The snippets run inside a copy of nanoGPT (``OOMGUIDE_NANOGPT`` or ``../shared/nanoGPT``) with
``torchrun --standalone --nproc_per_node=2`` and gloo on the CPU, at tiny scale. nanoGPT's train.py
cannot run DDP on a CPU as it stands: it pins every rank to ``cuda:LOCAL_RANK`` and passes
``device_ids`` to DDP, which a CPU module refuses. The harness, not the snippet, changes that: in
the copy, the two device lines keep the configured ``device='cpu'``, and a small launcher around
train.py drops ``device_ids`` for a CPU module and records what DDP and fully_shard were given.
The snippets themselves go where ``snippets/placement.toml`` says, through ``oomguide.placement``.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from torch._subclasses.fake_tensor import FakeTensorMode

from oomguide import placement
from oomguide.config import load_config
from oomguide.memory import distributed, parse_size, predict
from oomguide.memory.models import ModelSource

ROOT = Path(__file__).resolve().parents[1]
PLACEMENTS = placement.load()
CARD_24GB = parse_size("23.69GiB")  # what PyTorch reports for a 24 GB card
WORLD_SIZES = (2, 4, 8)
# config/finetune_shakespeare.py: gpt2-xl, one sequence per micro-step, 32 micro-steps
XL = ["init_from='gpt2-xl'", "batch_size=1", "gradient_accumulation_steps=32"]


@functools.cache
def _predict(overrides: tuple, phase: str, world: int = 1, strategy: str | None = None, view: bool = False):
    config = load_config([], list(overrides))
    if world == 1:
        return predict(config, phase, CARD_24GB)
    return distributed.predict(config, phase, CARD_24GB, distributed.Parallel(world, strategy, view))


def test_gradient_accumulation_and_tokens_per_step(figure, snippet):
    """train.py under torchrun: micro-steps per rank = 40 // world size; tokens per step unchanged."""
    command = shlex.split(snippet.path("multi-gpu/ddp-launch.sh").read_text())
    assert command[:3] == ["torchrun", "--standalone", "--nproc_per_node=8"]
    config = load_config([])  # config/train_gpt2.py sets train.py's defaults: batch 12, block 1024, 40
    figure("launch_gpus", int(command[2].split("=")[1]), "int")
    figure("default_gas", config.gradient_accumulation_steps, "int")
    tokens = set()
    for world in (1, *WORLD_SIZES):
        parallel = distributed.Parallel(world, "ddp" if world > 1 else None)
        figure(
            f"gas_per_rank_{world}",
            distributed.per_rank_config(config, parallel).gradient_accumulation_steps,
            "int",
        )
        figure(
            f"batch_per_step_{world}",
            world
            * distributed.per_rank_config(config, parallel).gradient_accumulation_steps
            * config.batch_size,
            "int",
        )
        tokens.add(distributed.tokens_per_iter(config, parallel))
    assert len(tokens) == 1
    figure("tokens_per_step", tokens.pop(), "int")


def test_ddp_cost_per_rank(figure):
    """GPT-2 124M at nanoGPT's defaults on 8 GPUs: each rank = the single-GPU peak + the buckets."""
    single = {phase: _predict((), phase) for phase in ("train_step", "estimate_loss")}
    ddp = {phase: _predict((), phase, 8, "ddp") for phase in ("train_step", "estimate_loss")}
    buckets = distributed.modelled_bucket_bytes(load_config([]))
    grads_fp32 = single["train_step"].breakdown["gradients"]  # float32, one per parameter
    for phase in single:
        # must show: per rank = single GPU + the buckets, within 2% of the float32 gradients
        assert abs(ddp[phase].peak_bytes - single[phase].peak_bytes - buckets) <= 0.02 * grads_fp32
        assert ddp[phase].breakdown["ddp_buckets"] == buckets
    figure("single_peak_train", single["train_step"].peak_bytes, "gib")
    figure("ddp_peak_train", ddp["train_step"].peak_bytes, "gib")
    figure("single_peak_eval", single["estimate_loss"].peak_bytes, "gib")
    figure("ddp_peak_eval", ddp["estimate_loss"].peak_bytes, "gib")
    figure("bucket_bytes", buckets, "gib")
    figure("grads_fp32", grads_fp32, "gib")


def test_gradient_as_bucket_view(figure, snippet):
    """The saving needs a syncing micro-step whose peak comes after the gradients exist.

    nanoGPT syncs only in the last micro-step: before it, DDP's reducer is idle and the gradients
    are tensors of their own. GPT-2 124M peaks at the start of the backward pass (the logits), when
    hardly any gradient exists, so the view saves nothing there, accumulating or not. gpt2-xl at
    batch 1 with one micro-step per rank peaks with gradients and buckets both alive; with the view
    that moment is gone, and the peak moves into the backward pass, a little lower.
    """
    line = snippet.path("multi-gpu/bucket-view.py").read_text().strip()
    assert line.startswith("model = DDP(model, device_ids=[ddp_local_rank]")
    assert line.endswith("gradient_as_bucket_view=True)")
    plain = _predict((), "train_step", 8, "ddp").peak_bytes
    view = _predict((), "train_step", 8, "ddp", True).peak_bytes
    once = ("gradient_accumulation_steps=8",)  # one micro-step per rank: every backward syncs
    view_once = _predict(once, "train_step", 8, "ddp", True).peak_bytes
    assert (
        abs(plain - view) < 0.01 * plain
        and abs(_predict(once, "train_step", 8, "ddp").peak_bytes - view_once) < 0.01 * plain
    )
    figure("view_peak_accum", view, "gib")
    figure("view_saving_accum", plain - view, "gib")
    xl_once = (*XL[:2], "gradient_accumulation_steps=8")
    xl_plain = _predict(xl_once, "train_step", 8, "ddp")
    xl_view = _predict(xl_once, "train_step", 8, "ddp", True)
    grads = xl_plain.breakdown["gradients"]
    # the copy at the end of the backward pass is gone, but the peak moves into the backward pass
    assert 0 < xl_plain.peak_bytes - xl_view.peak_bytes < grads
    figure("sync_gas", 8, "int")
    figure("xl_plain_peak_once", xl_plain.peak_bytes, "gib")
    figure("xl_view_peak_once", xl_view.peak_bytes, "gib")
    figure("xl_view_saving_once", xl_plain.peak_bytes - xl_view.peak_bytes, "gib")
    figure("xl_grads", grads, "gib")


def test_gpt2_xl_fine_tuning_on_24gb_cards(figure):
    """nanoGPT #208: gpt2-xl at batch 1 does not fit one 24 GB card; DDP never helps, FSDP2 does."""
    single = _predict(tuple(XL), "train_step")
    assert not single.fits
    figure("xl_card", CARD_24GB, "gib")
    with FakeTensorMode():
        model = ModelSource().build(load_config([], XL).gpt_config())
        figure("xl_params", sum(p.numel() for p in model.parameters()), "millions")  # wte = lm_head: once
    figure("xl_single_peak", single.peak_bytes, "gib")
    figure("xl_single_opt", single.breakdown["optimizer_state"], "gib")
    figure("xl_gas", 32, "int")
    fits_from = None
    for world in WORLD_SIZES:
        ddp = _predict(tuple(XL), "train_step", world, "ddp")
        fsdp = _predict(tuple(XL), "train_step", world, "fsdp")
        assert not ddp.fits  # a whole copy of everything on each card, plus the buckets
        figure(f"xl_ddp_peak_{world}", ddp.peak_bytes, "gib")
        figure(f"xl_fsdp_peak_{world}", fsdp.peak_bytes, "gib")
        figure(f"xl_fsdp_opt_{world}", fsdp.breakdown["optimizer_state"], "gib")
        if fsdp.fits and fits_from is None:
            fits_from = world
    # must show: per-rank optimizer state about 1/8 of the single-GPU one on 8 cards
    ratio = (
        single.breakdown["optimizer_state"]
        / _predict(tuple(XL), "train_step", 8, "fsdp").breakdown["optimizer_state"]
    )
    assert 7.9 < ratio < 8.1, ratio
    assert _predict(tuple(XL), "train_step", 8, "fsdp").fits
    figure("xl_fsdp_fits_from", fits_from, "int")


# --- the snippets inside nanoGPT, 2 processes, gloo, CPU ------------------------------------------

TINY = [
    "--backend=gloo", "--device=cpu", "--compile=False", "--wandb_log=False", "--dataset=tiny",
    "--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=4",
    "--gradient_accumulation_steps=4", "--max_iters=2", "--eval_interval=1", "--eval_iters=2",
    "--log_interval=1", "--out_dir=out", "--always_save_checkpoint=True",
]  # fmt: skip
# the harness's own change (see the module docstring): keep the configured device under torchrun
HARNESS = {
    "device = f'cuda:{ddp_local_rank}'": "device = f'cuda:{ddp_local_rank}' if device.startswith('cuda') else device",
    "torch.cuda.set_device(device)": "torch.cuda.set_device(device) if device.startswith('cuda') else None",
}
LAUNCHER = """
import json, os, runpy, sys
import torch.distributed.fsdp as fsdp
import torch.nn.parallel as parallel

record = {"ddp": [], "fully_shard": 0}
DDP, fully_shard = parallel.DistributedDataParallel, fsdp.fully_shard

class RecordingDDP(DDP):
    def __init__(self, module, *args, **kwargs):
        if next(module.parameters()).device.type == "cpu":
            kwargs.pop("device_ids", None)  # DDP refuses device_ids for a CPU module
        super().__init__(module, *args, **kwargs)
        data = self._get_ddp_logging_data()
        record["ddp"].append({"gradient_as_bucket_view": data["gradient_as_bucket_view"], "world_size": data["world_size"]})

def recording_fully_shard(module, *args, **kwargs):
    record["fully_shard"] += 1
    record["param_dtype"] = str(kwargs["mp_policy"].param_dtype)
    return fully_shard(module, *args, **kwargs)

parallel.DistributedDataParallel = RecordingDDP
fsdp.fully_shard = recording_fully_shard
sys.argv = ["train.py", *sys.argv[1:]]
try:
    runpy.run_path("train.py", run_name="__main__")
finally:
    with open(f"record_rank{os.environ['RANK']}.json", "w") as f:
        json.dump(record, f)
# train.py ended (its process group destroyed): skip the interpreter's teardown, where gloo's
# threads sometimes abort the process ("terminate called without an active exception")
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def _nanogpt() -> Path:
    path = Path(os.environ.get("OOMGUIDE_NANOGPT", ROOT.parent / "shared" / "nanoGPT"))
    if not (path / "train.py").is_file():
        pytest.skip(f"no nanoGPT checkout at {path}: set OOMGUIDE_NANOGPT=PATH")
    return path


def _place(text: str, target: str, replacement: str) -> str:
    """The harness's own change: `replacement` for the one line of train.py that reads `target`."""
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == target]
    assert len(hits) == 1, f"{target!r} is in train.py {len(hits)} times"
    line = lines[hits[0]]
    lines[hits[0]] = line[: len(line) - len(line.lstrip())] + replacement
    return "\n".join(lines)


def _run(tmp_path: Path, command: list[str], snippets: list[str]) -> tuple[list[dict], str]:
    """Copy nanoGPT, put `snippets` (and what they need) where snippets/placement.toml says, run `command`."""
    folder = tmp_path / "nanoGPT"
    shutil.copytree(_nanogpt(), folder, ignore=shutil.ignore_patterns(".git", "data"))
    train = (folder / "train.py").read_text()
    for target, replacement in HARNESS.items():
        train = _place(train, target, replacement)
    for name in placement.expand(snippets, PLACEMENTS):
        where = PLACEMENTS[name]
        assert where.is_code and where.file == "train.py", name
        train = placement.apply(where, (ROOT / "snippets" / name).read_text(), train)
    (folder / "train.py").write_text(train)
    (folder / "launch_cpu.py").write_text(LAUNCHER)
    data = folder / "data" / "tiny"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 20_000), ("val", 4_000)):
        rng.integers(0, 256, n).astype(np.uint16).tofile(data / f"{split}.bin")
    (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 256}))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    (tmp_path / "output.txt").write_text(output)
    assert proc.returncode == 0, output[-4000:]
    return [json.loads((folder / f"record_rank{r}.json").read_text()) for r in range(2)], output


def _torchrun(launch_line: str) -> list[str]:
    """The page's torchrun line for 2 CPU processes: train.py started through the harness's launcher."""
    args = shlex.split(launch_line)
    assert args[0] == "torchrun" and "train.py" in args
    args = [a if not a.startswith("--nproc_per_node=") else "--nproc_per_node=2" for a in args[1:]]
    args[args.index("train.py")] = "launch_cpu.py"
    return [sys.executable, "-m", "torch.distributed.run", *args, *TINY]


def _losses(output: str) -> list[float]:
    return [
        float(line.split("loss ")[1].split(",")[0])
        for line in output.splitlines()
        if line.startswith("iter ")
    ]


def test_ddp_launch_in_nanogpt(tmp_path, snippet):
    launch = _torchrun(snippet.path("multi-gpu/ddp-launch.sh").read_text())
    records, output = _run(tmp_path, [*launch, "--dtype=float32"], [])
    for record in records:
        assert record["ddp"] == [{"gradient_as_bucket_view": 0, "world_size": 2}]
    # gradient_accumulation_steps 4 // 2 ranks = 2 micro-steps each: 2 x 2 ranks x 4 x 64 tokens
    assert "tokens per iteration will be: 1,024" in output
    assert len(_losses(output)) == 3 and all(np.isfinite(_losses(output)))


def test_bucket_view_in_nanogpt(tmp_path, snippet):
    launch = snippet.path("multi-gpu/ddp-launch.sh").read_text()
    records, output = _run(
        tmp_path,
        [*_torchrun(launch), "--dtype=float32"],
        ["multi-gpu/bucket-view.py"],
    )
    for record in records:
        assert record["ddp"] == [{"gradient_as_bucket_view": 1, "world_size": 2}]
    assert len(_losses(output)) == 3 and all(np.isfinite(_losses(output)))


def test_fsdp2_in_nanogpt(tmp_path, snippet):
    launch = snippet.path("multi-gpu/ddp-launch.sh").read_text()
    changes = ["multi-gpu/fsdp2.py", "multi-gpu/fsdp2-unwrap.py", "multi-gpu/fsdp2-eval.py"]
    records, output = _run(tmp_path, [*_torchrun(launch), "--dtype=bfloat16"], changes)
    for record in records:
        assert record["ddp"] == []  # no DDP left
        assert record["fully_shard"] == 3  # 2 Blocks and the model
        assert record["param_dtype"] == "torch.bfloat16"
    losses = _losses(output)
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert output.count("step 1: train loss") == 1  # rank 0 evaluated, with the other rank's help
    assert (tmp_path / "nanoGPT" / "out" / "ckpt.pt").is_file()
