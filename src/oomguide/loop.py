"""nanoGPT's training loop, one step at a time, and its estimate_loss.

``train_step`` does what the body of train.py's ``while True`` loop does: micro-steps under
the autocast context with the loss divided by ``gradient_accumulation_steps``, the next batch
fetched during the forward, GradScaler (float16 only), gradient clipping, AdamW, and
``zero_grad(set_to_none=True)``. Like train.py, the ``logits`` of the last micro-step stay
referenced until the next forward returns (docs/en/beyond.md#drop-stale-logits): the state keeps them.

``estimate_loss`` is train.py's ``estimate_loss()``: ``@torch.no_grad()``, ``model.eval()``, ``eval_iters``
batches of the training ``batch_size``, each loss kept as a CPU scalar. ``estimate_loss_batched``
is the guide's change that evaluates each batch in chunks of ``eval_batch_size``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

PTDTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def write_tokens(path: str | Path, n_tokens: int, vocab_size: int, seed: int = 0) -> Path:
    """Write synthetic tokens in nanoGPT's format (a flat uint16 .bin file). Tests make their own data."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    # a repeating pattern plus noise: a model can learn something from it in a few steps
    pattern = rng.integers(0, vocab_size, size=97, dtype=np.int64)
    tokens = np.resize(pattern, n_tokens)
    noise = rng.random(n_tokens) < 0.2
    tokens[noise] = rng.integers(0, vocab_size, size=int(noise.sum()))
    tokens.astype(np.uint16).tofile(path)
    return path


def write_dataset(data_dir: str | Path, vocab_size: int, n_train: int = 200_000, n_val: int = 20_000) -> Path:
    data_dir = Path(data_dir)
    write_tokens(data_dir / "train.bin", n_train, vocab_size, seed=1)
    write_tokens(data_dir / "val.bin", n_val, vocab_size, seed=2)
    return data_dir


@dataclass
class BinData:
    """nanoGPT's ``get_batch``: random windows of a uint16 memmap, re-opened per batch like train.py."""

    data_dir: Path
    batch_size: int
    block_size: int
    device: str = "cpu"
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(1337))

    def get_batch(self, split: str, batch_size: int | None = None, block_size: int | None = None):
        batch_size = batch_size or self.batch_size
        block_size = block_size or self.block_size
        name = "train.bin" if split == "train" else "val.bin"
        data = np.memmap(Path(self.data_dir) / name, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block_size, (batch_size,), generator=self.generator)
        x = torch.stack([torch.from_numpy(data[i : i + block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + block_size].astype(np.int64)) for i in ix])
        if self.device.startswith("cuda"):
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(
                self.device, non_blocking=True
            )
        return x.to(self.device), y.to(self.device)


def autocast_context(device_type: str, dtype: str):
    """train.py's ``ctx``: autocast on CUDA, nothing on CPU."""
    if device_type == "cpu":
        return nullcontext()
    return torch.amp.autocast(device_type=device_type, dtype=PTDTYPE[dtype])


def make_optimizer(model, config, device_type: str):
    """AdamW as nanoGPT's ``configure_optimizers`` builds it: decay on 2-D weights, fused on CUDA.

    Built here rather than through ``model.configure_optimizers`` so that any nanoGPT-style model works.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=config.learning_rate, betas=(config.beta1, config.beta2), fused=(device_type == "cuda")
    )


def make_scaler(dtype: str, device_type: str = "cuda"):
    """The current spelling of train.py's scaler (https://github.com/karpathy/nanoGPT/issues/635):
    no FutureWarning; only float16 enables it."""
    return torch.amp.GradScaler(device_type, enabled=(dtype == "float16" and device_type == "cuda"))


def loss_value(loss) -> float:
    """``loss.item()``; a fake tensor (memory prediction) has no value, it reads as NaN."""
    from torch._subclasses.fake_tensor import FakeTensor

    return float("nan") if isinstance(loss, FakeTensor) else loss.item()


@dataclass
class TrainState:
    """What train.py keeps between iterations: model, optimizer, scaler, ctx, the next batch, the last logits."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    ctx: object
    X: torch.Tensor | None = None
    Y: torch.Tensor | None = None
    logits: torch.Tensor | None = None  # as train.py's: alive while the next forward (or estimate_loss) runs
    clip_parameters: object = None  # what clip_grad_norm_ sees, if not model.parameters() (a function)


def train_step(state: TrainState, get_batch, gradient_accumulation_steps: int, grad_clip: float = 1.0):
    """One optimizer step of train.py. Returns the last micro-step's (scaled) loss tensor."""
    model, optimizer, scaler = state.model, state.optimizer, state.scaler
    if state.X is None:
        state.X, state.Y = get_batch("train")
    loss = None
    for micro_step in range(gradient_accumulation_steps):
        if hasattr(model, "require_backward_grad_sync"):  # DDP: sync gradients in the last micro-step only
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with state.ctx:
            # the previous state.logits stays referenced until this call returns, as in train.py
            state.logits, loss = model(state.X, state.Y)
            loss = loss / gradient_accumulation_steps
        state.X, state.Y = get_batch("train")  # prefetch, as train.py does during the forward
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        params = state.clip_parameters() if state.clip_parameters else model.parameters()
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss


@torch.no_grad()
def estimate_loss(model, get_batch, eval_iters: int, ctx) -> dict[str, float]:
    """train.py's estimate_loss: ``eval_iters`` batches of the training batch_size per split."""
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = []  # CPU scalars: eval_iters changes the time, not the peak memory
        for _ in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                logits, loss = model(X, Y)
            losses.append(loss_value(loss))
        out[split] = sum(losses) / len(losses)
    model.train()
    return out


@torch.no_grad()
def estimate_loss_batched(model, get_batch, eval_iters: int, ctx, eval_batch_size: int) -> dict[str, float]:
    """estimate_loss over the same batches, each forwarded in chunks of ``eval_batch_size`` rows.

    The mean over a batch equals the size-weighted mean of its chunks' means, so the estimate is
    unchanged; only a (eval_batch_size, T, V) logits tensor is alive at a time.
    """
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = []
        for _ in range(eval_iters):
            X, Y = get_batch(split)
            total = 0.0
            for start in range(0, X.size(0), eval_batch_size):
                x, y = X[start : start + eval_batch_size], Y[start : start + eval_batch_size]
                with ctx:
                    logits, loss = model(x, y)
                total += loss_value(loss) * x.size(0)
            losses.append(total / X.size(0))
        out[split] = sum(losses) / len(losses)
    model.train()
    return out
