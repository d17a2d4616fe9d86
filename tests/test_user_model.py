"""`oomguide check --model`: a reader's own model.py, written the ways the guide's snippets write it.

- checkpointing however the model reaches it: ``from torch.utils.checkpoint import checkpoint`` at
  module level, ``torch.utils.checkpoint.checkpoint``, reentrant or not;
- a forward that returns no logits (a chunked loss): no stale (B, T, V) logits are counted;
- a model that cannot run on fake tensors: one line naming the file, exit 2.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from oomguide import memory
from oomguide.config import load_config

SMALL = ["n_layer=2", "n_head=2", "n_embd=64", "block_size=64", "vocab_size=512", "batch_size=4"]

# A short nanoGPT-shaped model; FORWARD_BLOCKS and RETURN are filled in per variant.
MODEL = """\
{imports}
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln = nn.LayerNorm(c.n_embd)
        self.attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.proj = nn.Linear(c.n_embd, c.n_embd)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(), nn.Linear(4 * c.n_embd, c.n_embd))
        self.n_head = c.n_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.attn(self.ln(x)).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(x)


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
{blocks}
        logits = self.lm_head(x)
        if targets is None:
            return logits[:, [-1], :], None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
{ret}
"""

PLAIN = "            x = block(x)"
CHECKPOINTED = """\
            if self.training and torch.is_grad_enabled():
                x = {call}(block, x, use_reentrant={reentrant})
            else:
                x = block(x)"""


def write_model(tmp_path, name, imports="", blocks=PLAIN, ret="        return logits, loss"):
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL.format(imports=imports, blocks=blocks, ret=ret), encoding="utf-8")
    return path


def predict(path, phase, **kw):
    config = load_config([], SMALL + ["dtype=bfloat16"])
    return memory.predict(config, phase, source=memory.load_model_source(path), **kw)


@pytest.mark.parametrize(
    "imports, call, reentrant",
    [
        ("from torch.utils.checkpoint import checkpoint", "checkpoint", False),
        ("import torch.utils.checkpoint", "torch.utils.checkpoint.checkpoint", False),
        ("from torch.utils.checkpoint import checkpoint as ckpt", "ckpt", True),
    ],
)
def test_checkpointing_however_it_is_imported(tmp_path, imports, call, reentrant):
    plain = write_model(tmp_path, "plain")
    ckpt = write_model(tmp_path, "ckpt", imports, CHECKPOINTED.format(call=call, reentrant=reentrant))
    p, c = predict(plain, "train_step"), predict(ckpt, "train_step")
    assert c.breakdown["activations"] < p.breakdown["activations"]
    # the recomputed Blocks ran under CUDA's autocast: the rest of the step is the same
    assert c.breakdown["logits_and_loss"] == p.breakdown["logits_and_loss"]
    assert c.breakdown["gradients"] == p.breakdown["gradients"]


def test_a_forward_without_logits_leaves_no_stale_logits(tmp_path):
    with_logits = write_model(tmp_path, "with_logits")
    without = write_model(tmp_path, "without", ret="        return None, loss")
    config = load_config([], SMALL + ["dtype=bfloat16"])
    one = config.batch_size * config.block_size * config.vocab_size * 2  # bf16 (B, T, V)
    kept = predict(with_logits, "estimate_loss")
    none = predict(without, "estimate_loss")
    # two (B, T, V) tensors fewer: train.py's stale `logits`, and the previous batch's in estimate_loss
    assert kept.breakdown["logits_and_loss"] - none.breakdown["logits_and_loss"] == 2 * one
    # the same as asking for no stale logits explicitly
    assert none.peak_bytes == predict(without, "estimate_loss", stale_logits=False).peak_bytes


def test_a_model_that_cannot_run_on_fake_tensors_is_one_line_exit_2(tmp_path):
    path = write_model(
        tmp_path,
        "data_dependent",
        ret="        if loss.item() > 100:  # data-dependent: no value on a fake tensor\n"
        "            raise RuntimeError('diverged')\n"
        "        return logits, loss",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "oomguide", "check", "--no-search", "--model", str(path)]
        + [a for s in SMALL for a in ("--set", s)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in lines[0] and "fake tensors" in lines[0]
