"""Measure a phase on a real CUDA GPU: the only module of oomguide that calls torch.cuda.

``measure`` runs the same phase as ``predict`` on the GPU, capped to a budget with
``torch.cuda.set_per_process_memory_fraction`` (docs/en/verify.md#gpu-memory). Nothing else in oomguide
may touch CUDA.
"""

from __future__ import annotations

import gc
from pathlib import Path

import torch

from .. import loop
from ..config import TrainConfig
from .kernels import sdpa_backend
from .models import ModelSource
from .predict import PhaseResult
from .units import CONTEXT_BYTES, GiB, MiB, usable_bytes


def cuda_available() -> bool:
    return torch.cuda.is_available()


def cuda_total_bytes() -> int:
    return torch.cuda.get_device_properties(0).total_memory


def cuda_device_name() -> str:
    return torch.cuda.get_device_name(0)


class CardTooSmall(RuntimeError):
    """This GPU is smaller than the card to emulate: a capped run would not be that card (skip it)."""


def cuda_capability() -> tuple[int, int]:
    """The compute capability of GPU 0 (which picks the attention kernel, as ``kernels.sdpa_backend``)."""
    return tuple(torch.cuda.get_device_capability(0))


def cuda_driver() -> str | None:
    """The driver of GPU 0: NVIDIA's driver version where NVML answers, else the CUDA driver API version
    PyTorch reads (``CUDA 12.4``), else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no pynvml, or no NVML library: what PyTorch knows
        pass
    try:
        number = torch._C._cuda_getDriverVersion()
    except (AttributeError, RuntimeError):
        return None
    return f"CUDA {number // 1000}.{number % 1000 // 10}" if number else None


def phase_peaks(reset: bool = True) -> tuple[int, int]:
    """(allocated, reserved) peaks since the last reset, then reset them: one phase of a real run
    (``examples/nanogpt_run.py`` calls it at each phase boundary of nanoGPT's train.py)."""
    out = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return out


def non_pytorch_bytes() -> int:
    """Memory in use on GPU 0 outside this process's caching allocator (CUDA context, other processes)."""
    free, total = torch.cuda.mem_get_info(0)
    return total - free - torch.cuda.memory_reserved(0)


def limit_cuda_memory(gpu_memory: int, context_bytes: int = CONTEXT_BYTES) -> float:
    """Cap this process's caching allocator to a smaller card's usable memory
    (docs/en/verify.md#gpu-memory). Returns the
    fraction. A card smaller than asked is ``CardTooSmall``; a budget under the context a ValueError."""
    usable = usable_bytes(gpu_memory, context_bytes)
    if usable <= 0:
        raise ValueError(
            f"a {gpu_memory / MiB:.0f} MiB card leaves nothing after the {context_bytes / MiB:.0f} MiB "
            "set aside for the CUDA context"
        )
    total = cuda_total_bytes()
    if usable > total:
        raise CardTooSmall(
            f"{cuda_device_name()} has {total / GiB:.2f} GiB: it cannot emulate a {gpu_memory / GiB:.2f} GiB card"
        )
    fraction = usable / total
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    return fraction


def _release() -> None:
    gc.collect()  # tensors in reference cycles first, or empty_cache cannot give their blocks back
    torch.cuda.empty_cache()


def measure(
    config: TrainConfig,
    phase: str,
    data_dir: str | Path,
    gpu_memory: int | None = None,
    *,
    source: ModelSource | None = None,
    state: str = "training",
    iters: int = 1,
    context_bytes: int = CONTEXT_BYTES,
    stale_logits: bool = True,
) -> PhaseResult:
    """Run `phase` for real on CUDA and report the allocator's peaks. An OOM is a result (fits=False).
    Compiled with ``torch.compile`` where the config compiles (``compile = True``), as train.py runs it.

    As ``predict`` models it: the state before the phase (a real training step for ``state="training"``)
    is built without the cap; then the cache is emptied, the cap set (``set_per_process_memory_fraction``
    limits *reserved* memory) and the peak statistics reset, and the phase runs under it. What earlier
    code left allocated (``baseline_bytes``) is subtracted from both peaks. A warm-up that runs out of
    memory is reported as such (``failing_allocation`` starts with "warm-up"). The cap is always lifted
    and the memory given back at the end, whatever happens. `stale_logits=False`: drop the warm-up
    step's last logits before the phase (as predict's option).
    """
    if not cuda_available():
        raise RuntimeError("measure() needs a CUDA GPU; use predict() elsewhere")
    source = source or ModelSource()
    device = "cuda"
    budget = None if gpu_memory is None else usable_bytes(gpu_memory, context_bytes)
    _release()
    baseline = torch.cuda.memory_allocated()
    data = loop.BinData(Path(data_dir), config.batch_size, config.block_size, device)
    model = optimizer = train_state = None
    fits, failing, stage = True, None, "warm-up"
    try:
        model = source.build(config.gpt_config()).to(device)
        model.train()
        optimizer = loop.make_optimizer(model, config, device)
        if config.compile:  # as train.py: the optimizer on the module, the steps through the compiled one
            model = torch.compile(model)
        ctx = loop.autocast_context(device, config.dtype)
        train_state = loop.TrainState(model, optimizer, loop.make_scaler(config.dtype, device), ctx)
        if state == "training":
            # one real step first: AdamW's state and the last logits exist, as during training
            loop.train_step(train_state, data.get_batch, 1, config.grad_clip)
            if not stale_logits:
                train_state.logits = None
        torch.cuda.synchronize()
        _release()
        if gpu_memory is not None:
            limit_cuda_memory(gpu_memory, context_bytes)
        torch.cuda.reset_peak_memory_stats()
        stage = "phase"
        if phase == "train_step":
            for _ in range(iters):
                loop.train_step(
                    train_state, data.get_batch, config.gradient_accumulation_steps, config.grad_clip
                )
        else:

            def get_batch(split):
                return data.get_batch(split, config.batch_size, config.eval_block)

            if config.eval_batch_size and config.eval_batch_size < config.batch_size:
                loop.estimate_loss_batched(model, get_batch, iters, ctx, config.eval_batch_size)
            else:
                loop.estimate_loss(model, get_batch, iters, ctx)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        fits, failing = False, str(exc).splitlines()[0][:300]
        if stage == "warm-up":
            failing = "warm-up (before the phase, uncapped): " + failing
    finally:
        peak = torch.cuda.max_memory_allocated() - baseline
        reserved = torch.cuda.max_memory_reserved()
        del model, optimizer, train_state
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
        _release()
    if budget is not None and reserved > budget:
        fits = False  # never under a working cap; a card smaller than the budget would show it
    return PhaseResult(
        phase=phase,
        mode="measured",
        batch_size=config.batch_size,
        peak_bytes=peak,
        largest_allocation_bytes=0,
        largest_allocation="(not measured)",
        budget_bytes=budget,
        fits=fits if budget is not None else None,
        failing_allocation=failing,
        reserved_bytes=reserved,
        baseline_bytes=baseline,
        attention=sdpa_backend(
            cuda_capability(),
            loop.PTDTYPE[config.dtype],
            config.n_embd // config.n_head,
            False,
            config.dropout,
        ),
    )


def empty_cache_effect(live_bytes: int = 256 * MiB, freed_bytes: int = 512 * MiB) -> dict[str, int]:
    """What ``torch.cuda.empty_cache()`` gives back (docs/en/estimate-loss-oom.md#empty-cache), on the GPU:
    keep `live_bytes` in a tensor,
    free `freed_bytes`, and read allocated/reserved before and after ``empty_cache()``."""
    if not cuda_available():
        raise RuntimeError("empty_cache_effect() needs a CUDA GPU")
    torch.cuda.empty_cache()
    live = torch.empty(live_bytes, dtype=torch.uint8, device="cuda")
    freed = torch.empty(freed_bytes, dtype=torch.uint8, device="cuda")
    del freed
    before = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    torch.cuda.empty_cache()
    after = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    out = {f"{k}_before": v for k, v in before.items()} | {f"{k}_after": v for k, v in after.items()}
    out["live_bytes"] = live.numel()
    del live
    torch.cuda.empty_cache()
    return out


def expandable_segments_in_use() -> bool | None:
    """Whether the caching allocator made its segments expandable (CUDA only): allocate, then read the
    memory snapshot's ``is_expandable`` flags. None when this PyTorch's snapshot has no such flag."""
    if not cuda_available():
        raise RuntimeError("expandable_segments_in_use() needs a CUDA GPU")
    probe = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    segments = torch.cuda.memory_snapshot()
    del probe
    flags = [seg["is_expandable"] for seg in segments if "is_expandable" in seg]
    return any(flags) if flags else None
