"""One rank of a real multi-process run, for tests/test_distributed.py (started by torchrun, gloo, CPU).

Each case trains the project's GPT the way nanoGPT's train.py does under torchrun (micro-steps per
rank = gradient_accumulation_steps // world size, DDP syncing in the last one), on real CPU tensors,
with oomguide's allocation tracker watching every storage from before the model exists. Writes,
per rank, the peak of the third train step and of the estimate_loss after it, and DDP's logging
data (its buckets as rebuilt after the first iteration).

    torchrun --standalone --nproc_per_node=2 tests/distributed_worker.py CASES.json OUT_DIR
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

from oomguide import loop
from oomguide.config import load_config
from oomguide.memory import distributed
from oomguide.memory.cuda_model import cuda_autocast_context
from oomguide.memory.models import ModelSource
from oomguide.memory.tracker import AllocationTracker


def _reset_peak(tracker: AllocationTracker) -> None:
    tracker._sweep()
    tracker.peak = tracker.current
    tracker._record_peak()


def run_case(case: dict) -> dict:
    world = dist.get_world_size()
    parallel = distributed.Parallel(world, case["strategy"], case.get("view", False))
    config = distributed.per_rank_config(load_config([], case["overrides"]), parallel)
    gpt_config = config.gpt_config()
    ctx = cuda_autocast_context(config.dtype)
    torch.manual_seed(1000 + dist.get_rank())
    out: dict = {}
    tracker = AllocationTracker(vocab_size=gpt_config.vocab_size)
    with tracker:
        if parallel.strategy == "ddp":
            model = DDP(
                ModelSource().build(gpt_config),
                gradient_as_bucket_view=parallel.gradient_as_bucket_view,
            )
            optimizer = loop.make_optimizer(model.module, config, "cuda")  # fused, as on CUDA
        else:
            with torch.device("meta"):
                model = ModelSource().build(gpt_config)
            distributed.shard(model, init_device_mesh("cpu", (world,)), config.dtype)
            model.to_empty(device="cpu")
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_(0.0, 0.02)
            optimizer = loop.make_optimizer(model, config, "cuda")
        state = loop.TrainState(model, optimizer, loop.make_scaler(config.dtype, "cpu"), ctx)
        block, vocab = config.block_size, gpt_config.vocab_size

        def get_batch(split):
            x = torch.randint(0, vocab, (config.batch_size, block))
            return x, torch.randint(0, vocab, (config.batch_size, block))

        for step in range(3):
            if step == 2:
                _reset_peak(tracker)
            loss = loop.train_step(state, get_batch, config.gradient_accumulation_steps, config.grad_clip)
        out["train_step"] = tracker.peak
        if parallel.strategy == "ddp":  # after the first iteration, DDP has rebuilt its buckets
            data = model._get_ddp_logging_data()
            out["logging"] = {k: v for k, v in data.items() if isinstance(v, (int, str))}
        out["loss"] = float(loss.item())
        _reset_peak(tracker)
        loop.estimate_loss(model, get_batch, 1, ctx)
        out["estimate_loss"] = tracker.peak
    return out


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    out_dir = Path(sys.argv[2])
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    results = {name: run_case(case) for name, case in cases.items()}
    (out_dir / f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
