"""Examples of the page "GPU memory overflow during evaluation on a 12 GB card" (eval-oom-12gb).

Every snippet of the page runs here on the project's GPT: the config snippets are loaded as nanoGPT
config files on top of ``situation.py`` and predicted at full scale; the code changes
(``estimate_loss_chunked.py``, ``get_batch_eval_block.py``, ``checkpointed_forward.py``) run on small
real models and are compared with the unchanged code. Every figure the page prints is checked here.
"""

from __future__ import annotations

import functools
import math
import statistics
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from oomguide import loop, memory
from oomguide.config import ConfigError
from oomguide.memory.allocator import alloc_conf_from_env, parse_alloc_conf
from oomguide.model import GPT, GPTConfig

PAGE = "eval-oom-12gb"
SITUATION = f"{PAGE}/situation.py"
ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
_PREDICTIONS: dict = {}


def predict(
    config, phase: str, state: str = "training", eval_iters: int = 1, alloc_conf=None, compiled: bool = False
) -> memory.PhaseResult:
    """memory.predict for the 12 GB card, cached: several sections of the page share predictions.

    Eager unless `compiled` (the page's figures are eager; its first note gives the compiled ones)."""
    key = (tuple(sorted(config.values.items())), phase, state, eval_iters, alloc_conf, compiled)
    if key not in _PREDICTIONS:
        _PREDICTIONS[key] = memory.predict(
            config,
            phase,
            memory.DEFAULT_GPU_MEMORY,
            state=state,
            eval_iters=eval_iters,
            alloc_conf=alloc_conf,
            compiled=compiled,
        )
    return _PREDICTIONS[key]


def n_params(config) -> int:
    with torch.device("meta"):
        return GPT(config.gpt_config()).get_num_params(non_embedding=False)


def logits_bytes(config) -> int:
    """One (batch_size, block_size, vocab_size) logits tensor in the config's dtype."""
    itemsize = loop.PTDTYPE[config.dtype].itemsize
    return config.batch_size * config.block_size * config.vocab_size * itemsize


@contextmanager
def one_thread():
    """Small CPU runs: one thread is faster and steadier than several on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def small_gpt(seed: int = 0, **shape) -> GPT:
    torch.manual_seed(seed)
    args = dict(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=512)
    args.update(shape)
    return GPT(GPTConfig(**args))


def replay(get_batch, n: int):
    """Draw n batches per split once; return a get_batch that hands out the same batches again."""
    batches = {s: [get_batch(s) for _ in range(n)] for s in ("train", "val")}

    def make():
        its = {s: iter(b) for s, b in batches.items()}
        return lambda split: next(its[split])

    return make


def fake_eval_peak(config, lengths: dict[str, int], eval_iters: int = 2) -> int:
    """estimate_loss's peak on fake tensors (CUDA modelled) when each split has its own sequence length."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gpt = config.gpt_config()
    tracker = memory.AllocationTracker(vocab_size=gpt.vocab_size)
    ctx = memory.cuda_autocast_context(config.dtype)
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = memory.ModelSource().build(gpt)
        tracker.register(model.parameters(), "weights")

        def get_batch(split):
            shape = (config.batch_size, lengths[split])
            return torch.randint(0, gpt.vocab_size, shape), torch.randint(0, gpt.vocab_size, shape)

        with tracker:
            loop.estimate_loss(model, get_batch, eval_iters, ctx)
    return tracker.peak


def write_context_data(data_dir: Path, vocab: int = 64, doc: int = 256, words: int = 2) -> Path:
    """Text in which context matters: each document of `doc` tokens uses `words` tokens of its own."""
    rng = np.random.default_rng(0)
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, n_tokens in (("train.bin", 200_000), ("val.bin", 40_000)):
        docs = [rng.choice(rng.choice(vocab, words, replace=False), doc) for _ in range(n_tokens // doc)]
        np.concatenate(docs).astype(np.uint16).tofile(data_dir / name)
    return data_dir


# --------------------------------------------------------------------------------------------
# the situation and the root cause
# --------------------------------------------------------------------------------------------
def test_situation(snippet, figure, report):
    config = snippet.config(SITUATION)
    assert (config.n_layer, config.n_head, config.n_embd, config.batch_size, config.block_size) == (
        12,
        12,
        576,
        16,
        1024,
    )
    assert (config.gradient_accumulation_steps, config.dtype, config.eval_iters) == (32, "float16", 200)
    figure("params_576", n_params(config), "int")  # the source's "about 77M"
    figure("card_gib", memory.DEFAULT_GPU_MEMORY, "gib")
    figure("usable_gib", memory.usable_bytes(memory.DEFAULT_GPU_MEMORY), "gib")
    figure("context_mib", memory.CONTEXT_BYTES, "mib")
    train = predict(config, "train_step")
    figure("train_peak", train.peak_bytes, "gib")
    figure("train_activations", train.breakdown["activations"], "gib")
    assert train.fits is False  # eager: the training step alone is over the card (see the compile note)
    report(f"{PAGE}: eager train_step {memory.fmt_bytes(train.peak_bytes)} at batch_size=16 (does not fit)")


VERDICT_VALUE = {"does_not_fit": 0, "borderline": 1, "fits": 2}  # figures' unit "verdict": ✗, ≈, ✓


def test_eager_and_compiled(snippet, figure, report):
    """The page's first note: both phases eager and compiled (nanoGPT's default, compile = True).

    Compiled, Inductor's fused loss never creates the log-probabilities nor their float32 copy
    (memory.compiled); the rest of the page is eager, where every tensor of the loss is visible."""
    config = snippet.config(SITUATION)
    assert config.compile is True  # the situation keeps nanoGPT's default
    rows = {}
    for phase, name in (("train_step", "train"), ("estimate_loss", "eval")):
        eager, compiled = predict(config, phase), predict(config, phase, compiled=True)
        figure(f"{name}_fits", VERDICT_VALUE[eager.verdict], "verdict")
        figure(f"{name}_peak_compiled", compiled.peak_bytes, "gib")
        figure(f"{name}_fits_compiled", VERDICT_VALUE[compiled.verdict], "verdict")
        assert compiled.peak_bytes < eager.peak_bytes
        rows[name] = (eager, compiled)
    # the note's words: eagerly the training step is over the card (and the later evaluation fails on
    # reserved memory, see "What really happens"); compiled, the evaluation fits and the training step is
    # borderline, and fits with expandable segments
    assert rows["train"][0].verdict == "does_not_fit" and not rows["eval"][0].fits
    assert rows["eval"][1].verdict == "fits" and rows["train"][1].verdict == "borderline"
    assert rows["train"][1].verdict_with_expandable_segments == "fits"
    # compiled or not, the logits are the evaluation's largest term: compiled, three float16 logits
    # tensors (the current batch's, the previous batch's, the last training micro-step's), no loss terms
    compiled_eval = rows["eval"][1]
    terms = compiled_eval.breakdown
    assert max(terms, key=terms.get) == "logits_and_loss"
    assert terms["logits_and_loss"] == 3 * logits_bytes(config)
    figure("eval_logits_term_compiled", terms["logits_and_loss"], "gib")
    report(
        f"{PAGE}: compiled train_step {memory.fmt_bytes(rows['train'][1].peak_bytes)}, "
        f"estimate_loss {memory.fmt_bytes(compiled_eval.peak_bytes)} ({rows['train'][1].verdict}, {rows['eval'][1].verdict})"
    )


def test_source_kv_arithmetic_is_not_what_evaluation_holds(figure):
    """The source's "KV cache": 12 x 12 x 1024 x 576 x 2 bytes is 0.17 GB, not 1.6 GB; and there is none."""
    kv = 12 * 12 * 1024 * 576 * 2
    assert kv == 169_869_312
    figure("source_kv_mib", kv, "mib")
    figure("source_kv_gb", round(kv / 1e9, 2), "float")
    assert 1.6e9 / kv > 9  # the source's claim is about ten times its own formula
    # no module of the GPT keeps keys or values between calls: attention is SDPA on fresh q, k, v
    model = small_gpt()
    assert not list(model.buffers())


EXPANDABLE = parse_alloc_conf("expandable_segments:True", "")


def test_what_really_happens(snippet, figure):
    config = snippet.config(SITUATION)
    one = logits_bytes(config)
    figure("logits_gib", one, "gib")  # the source's "1.6 GB per forward" is right (in GB)
    later = predict(config, "estimate_loss", state="training")
    first = predict(config, "estimate_loss", state="first")
    b = later.breakdown
    figure("eval_peak", later.peak_bytes, "gib")
    figure("eval_peak_first", first.peak_bytes, "gib")
    figure("eval_growth", later.peak_bytes - first.peak_bytes, "gib")
    figure("eval_headroom", memory.usable_bytes(memory.DEFAULT_GPU_MEMORY) - later.peak_bytes, "gib")
    # no graph: no gradients, and the activations at the peak are a few MiB
    assert b["gradients"] == 0
    figure("eval_activations_mib", b["activations"], "mib")
    figure("weights_gib", b["weights"], "gib")
    figure("adam_state_gib", b["optimizer_state"], "gib")
    # the logits term, in units of one float16 (16, 1024, 50304) logits tensor:
    # logits + log-probs + float32 copy (2) + the previous batch's logits = 5 at the first evaluation,
    # + the last training micro-step's logits = 6 at every later one
    assert first.breakdown["logits_and_loss"] == 5 * one
    assert b["logits_and_loss"] == (1 + 1 + 2 + 1 + 1) * one
    figure("eval_logits_units", b["logits_and_loss"] // one, "int")
    figure("eval_logits_term", b["logits_and_loss"], "gib")
    figure("eval_logits_share", b["logits_and_loss"] / later.peak_bytes, "percent")
    # the largest single block is nll_loss's float32 copy of the log-probabilities
    assert later.largest_allocation_bytes == 2 * one and "float32" in later.largest_allocation
    figure("fp32_copy_gib", later.largest_allocation_bytes, "gib")
    # the growth from the first evaluation to the later ones: AdamW state + the stale logits
    # (and the backward's cuBLAS workspace, made in the first step: memory/kernels.py)
    assert later.peak_bytes - first.peak_bytes == b["optimizer_state"] + one + (
        b["workspaces"] - first.breakdown["workspaces"]
    )
    # live bytes fit the card at both evaluations...
    assert later.allocated_fits and first.allocated_fits and first.fits
    # ...but reserved memory does not at the later one: the training step's segments are cut to its own
    # sizes, and the float32 copy of the log-probabilities finds no piece large enough (issue 15)
    assert not later.fits and "float32" in later.failing_allocation
    assert later.failing_allocation_bytes == 2 * one + (-2 * one) % (2 * memory.MiB)
    figure("eval_fail_request", later.failing_allocation_bytes, "gib")
    figure("eval_fail_allocated", later.allocated_at_failure_bytes, "gib")
    figure("eval_fail_reserved", later.reserved_at_failure_bytes, "gib")
    figure("eval_fail_unallocated", later.reserved_at_failure_bytes - later.allocated_at_failure_bytes, "gib")
    # with expandable segments the same evaluation fits: free pages go back to CUDA
    expandable = predict(config, "estimate_loss", state="training", alloc_conf=EXPANDABLE)
    assert expandable.fits and expandable.peak_bytes == later.peak_bytes
    usable = memory.usable_bytes(memory.DEFAULT_GPU_MEMORY)
    figure("eval_expandable_reserved", expandable.reserved_within_budget_bytes, "gib")
    figure("eval_expandable_headroom", usable - expandable.reserved_within_budget_bytes, "mib")


# --------------------------------------------------------------------------------------------
# fix 1: eval_batch_size (a code change)
# --------------------------------------------------------------------------------------------
def test_estimate_loss_chunked_gives_the_same_loss(snippet, runner):
    """The snippet's estimate_loss on real tokens: the same estimate as the full batch and as the engine."""
    mod = snippet.module(f"{PAGE}/estimate_loss_chunked.py")
    with one_thread():
        model = small_gpt()
        data = loop.BinData(runner.data_dir(512), batch_size=8, block_size=64)
        batches = replay(data.get_batch, 3)
        ctx = loop.autocast_context("cpu", "float32")
        full = loop.estimate_loss(model, batches(), 3, ctx)
        engine = loop.estimate_loss_batched(model, batches(), 3, ctx, 3)
        # train.py's globals, which the pasted function reads
        mod.model, mod.ctx, mod.eval_iters = model, ctx, 3
        for eval_batch_size in (0, 3, 4, 8):  # 3 leaves a chunk of 2: the mean is weighted by size
            mod.get_batch, mod.eval_batch_size = batches(), eval_batch_size
            chunked = mod.estimate_loss()
            for split in ("train", "val"):
                assert float(chunked[split]) == pytest.approx(full[split], rel=1e-6)
                assert float(chunked[split]) == pytest.approx(engine[split], rel=1e-6)
        assert model.training  # back to train mode, as nanoGPT's


def test_estimate_loss_chunked_holds_what_the_engine_predicts(snippet, runner):
    """On real CPU tensors under CUDA's autocast rules: the snippet and the engine's batched loop peak alike."""
    mod = snippet.module(f"{PAGE}/estimate_loss_chunked.py")
    with one_thread():
        model = small_gpt(vocab_size=512)
        data = loop.BinData(runner.data_dir(512), batch_size=8, block_size=64)
        batches = replay(data.get_batch, 2)
        peaks = {}
        for name in ("snippet", "engine"):
            tracker = memory.AllocationTracker(vocab_size=512)
            tracker.register(model.parameters(), "weights")
            ctx = memory.cuda_autocast_context("float16")
            with tracker:
                if name == "snippet":
                    mod.model, mod.ctx, mod.eval_iters, mod.eval_batch_size = model, ctx, 2, 2
                    mod.get_batch = batches()
                    mod.estimate_loss()
                else:
                    loop.estimate_loss_batched(model, batches(), 2, ctx, 2)
            peaks[name] = tracker.peak
    # the snippet keeps its losses in CPU tensors, as train.py does (two 512-byte blocks here; CPU
    # memory in train.py, not GPU memory); otherwise both hold the same tensors
    assert 0 <= peaks["snippet"] - peaks["engine"] <= 2 * 512, peaks


def test_eval_batch_size(snippet, figure):
    base = snippet.config(SITUATION)
    config = snippet.config(SITUATION, f"{PAGE}/eval-batch-size.py")
    assert config.eval_batch_size == 4
    full = predict(base, "estimate_loss")
    four = predict(config, "estimate_loss")
    two = predict(config.replace(eval_batch_size=2), "estimate_loss")
    figure("eval_peak_b4", four.peak_bytes, "gib")
    figure("eval_peak_b2", two.peak_bytes, "gib")
    figure("eval_b4_fraction", four.peak_bytes / full.peak_bytes, "percent")  # the source: "about a quarter"
    assert two.peak_bytes < four.peak_bytes < full.peak_bytes
    assert four.peak_bytes / full.peak_bytes > 0.4  # not a quarter: weights, AdamW, stale logits stay
    # the last training step's (16, 1024, V) logits are still there: eval_batch_size does not touch them
    one = logits_bytes(base)
    assert four.breakdown["logits_and_loss"] == one + (1 + 1 + 2 + 1) * one // 4


def test_nanogpt_has_no_eval_batch_size():
    """nanoGPT's train.py has no such global (get_batch() reads batch_size); oomguide lists it among
    its extensions (docs/en/eval-oom-12gb.md#eval-batch-size)."""
    from oomguide.config import EXTENSION_DEFAULTS, NANOGPT_DEFAULTS

    assert "eval_batch_size" not in NANOGPT_DEFAULTS and "eval_batch_size" in EXTENSION_DEFAULTS


# --------------------------------------------------------------------------------------------
# fix 2: eval_block_size (a code change)
# --------------------------------------------------------------------------------------------
def test_get_batch_eval_block(snippet, runner):
    mod = snippet.module(f"{PAGE}/get_batch_eval_block.py")
    mod.data_dir, mod.batch_size, mod.block_size = str(runner.data_dir(512)), 4, 64
    mod.device, mod.device_type = "cpu", "cpu"
    x, y = mod.get_batch("train")
    assert x.shape == y.shape == (4, 64) and torch.equal(x[:, 1:], y[:, :-1])
    x, y = mod.get_batch("val", 16)
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])


def test_eval_block_size_memory(snippet, figure):
    base = snippet.config(SITUATION)
    config = snippet.config(SITUATION, f"{PAGE}/eval-block-size.py")
    assert config.eval_block_size == 512
    short = predict(config, "estimate_loss")
    figure("eval_peak_block512", short.peak_bytes, "gib")
    assert short.peak_bytes < predict(base, "estimate_loss").peak_bytes
    # the source's variant shortens only the 'val' split: estimate_loss evaluates 'train' too, and its
    # second batch runs with the first one's logits alive: the peak does not move
    full = fake_eval_peak(base, {"train": 1024, "val": 1024})
    val_only = fake_eval_peak(base, {"train": 1024, "val": 512})
    both = fake_eval_peak(base, {"train": 512, "val": 512})
    assert val_only == full
    assert both < full


def test_eval_block_size_changes_the_estimate(snippet, figure, report, tmp_path):
    """A real small GPT trained on the CPU: the loss over shorter sequences is higher."""
    mod = snippet.module(f"{PAGE}/get_batch_eval_block.py")
    data_dir = write_context_data(tmp_path / "context")
    block, steps = 64, 200
    with one_thread():
        model = small_gpt(n_layer=1, n_head=1, n_embd=64, block_size=block, vocab_size=64)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        mod.data_dir, mod.batch_size, mod.block_size = str(data_dir), 16, block
        mod.device, mod.device_type = "cpu", "cpu"
        torch.manual_seed(1)
        for _ in range(steps):
            _, loss = model(*mod.get_batch("train"))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        mod.batch_size = 64
        ctx = loop.autocast_context("cpu", "float32")
        losses = {}
        for length in (block, block // 2):
            torch.manual_seed(2)
            estimate = loop.estimate_loss(model, functools.partial(mod.get_batch, length=length), 10, ctx)
            losses[length] = estimate["val"]
    figure("ctx_steps", steps, "int")
    figure("ctx_loss_full", losses[block], "float", rel=0.05)
    figure("ctx_loss_half", losses[block // 2], "float", rel=0.05)
    increase = losses[block // 2] / losses[block] - 1
    assert increase > 0.02
    figure("ctx_loss_increase", increase, "percent", rel=0.5, decimals=1)
    report(
        f"{PAGE}: val loss {losses[block]:.3f} at {block} tokens, {losses[block // 2]:.3f} at {block // 2}"
    )


# --------------------------------------------------------------------------------------------
# fix 3: eval_iters
# --------------------------------------------------------------------------------------------
def test_eval_iters_changes_time_not_memory(snippet, figure, runner):
    base = snippet.config(SITUATION)
    config = snippet.config(SITUATION, f"{PAGE}/eval-iters.py")
    assert (base.eval_iters, config.eval_iters) == (200, 50)
    # the predictor runs 1 batch per split by default; 3 batches per split peak exactly as high
    one = predict(config, "estimate_loss", eval_iters=1)
    three = predict(config, "estimate_loss", eval_iters=3)
    assert one.peak_bytes == three.peak_bytes == predict(base, "estimate_loss").peak_bytes
    # time: forwards counted and timed on a small real model
    with one_thread():
        model = small_gpt()
        calls = []
        model.register_forward_hook(lambda *a: calls.append(1))
        data = loop.BinData(runner.data_dir(512), batch_size=8, block_size=64)
        ctx = loop.autocast_context("cpu", "float32")
        loop.estimate_loss(model, data.get_batch, 5, ctx)  # warm-up
        # both lengths in alternation, the order swapped each round, and the median of the rounds'
        # ratios: a shared, busy CPU slows both runs of a round alike (one run each read 2.48x for
        # 3.90x under load)
        ratios, forwards = [], {}
        for round_ in range(4):
            seconds = {}
            order = (config.eval_iters, base.eval_iters)
            for iters in order if round_ % 2 else order[::-1]:
                calls.clear()
                start = time.perf_counter()
                loop.estimate_loss(model, data.get_batch, iters, ctx)
                seconds[iters], forwards[iters] = time.perf_counter() - start, len(calls)
            ratios.append(seconds[base.eval_iters] / seconds[config.eval_iters])
    assert forwards == {50: 100, 200: 400}  # 2 splits x eval_iters
    figure("forwards_200", forwards[200], "int")
    figure("forwards_50", forwards[50], "int")
    figure("eval_time_ratio", statistics.median(ratios), "ratio", rel=0.35)
    # the standard error of a mean of n batch losses goes as 1/sqrt(n)
    figure("eval_noise_ratio", math.sqrt(base.eval_iters / config.eval_iters), "ratio")


# --------------------------------------------------------------------------------------------
# fix 4: a smaller n_embd
# --------------------------------------------------------------------------------------------
def test_smaller_n_embd(snippet, figure):
    base = snippet.config(SITUATION)
    c512 = snippet.config(SITUATION, f"{PAGE}/n-embd-512.py")
    c448 = snippet.config(SITUATION, f"{PAGE}/n-embd-448.py")
    assert n_params(base) == 77_431_680
    figure("params_512", n_params(c512), "int")  # the source: "about 62M"
    figure("params_448", n_params(c448), "int")  # the source: "about 53M"
    assert (n_params(c512), n_params(c448)) == (64_109_568, 51_967_104)
    # the source's n_head = 12 divides neither
    for extra in ("n-embd-512.py", "n-embd-448.py"):
        with pytest.raises(ConfigError, match="divisible by n_head"):
            snippet.config(SITUATION, f"{PAGE}/{extra}", overrides=["n_head=12"])
    full = predict(base, "estimate_loss")
    p512, p448 = predict(c512, "estimate_loss"), predict(c448, "estimate_loss")
    figure("eval_peak_512", p512.peak_bytes, "gib")
    figure("eval_peak_448", p448.peak_bytes, "gib")
    figure("saving_512_mib", full.peak_bytes - p512.peak_bytes, "mib")
    figure("saving_448_mib", full.peak_bytes - p448.peak_bytes, "mib")
    # the (B*T, V) logits term, the largest, is the same for all three
    terms = {r.breakdown["logits_and_loss"] for r in (full, p512, p448)}
    assert terms == {full.breakdown["logits_and_loss"]}
    assert p448.peak_bytes < p512.peak_bytes < full.peak_bytes
    assert (full.peak_bytes - p448.peak_bytes) < 0.05 * full.peak_bytes


# --------------------------------------------------------------------------------------------
# fix 5: gradient checkpointing (a code change)
# --------------------------------------------------------------------------------------------
def checkpointed_class(mod):
    class CheckpointedGPT(GPT):
        forward = mod.forward

    return CheckpointedGPT


def test_checkpointed_forward_gives_identical_gradients(snippet):
    mod = snippet.module(f"{PAGE}/checkpointed_forward.py")
    CheckpointedGPT = checkpointed_class(mod)
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64)
    torch.manual_seed(0)
    plain = GPT(cfg).double()
    ckpt = CheckpointedGPT(cfg).double()
    ckpt.load_state_dict(plain.state_dict())
    idx = torch.randint(0, 64, (4, 16))
    targets = torch.randint(0, 64, (4, 16))
    losses = [m(idx, targets)[1] for m in (plain, ckpt)]
    assert torch.equal(losses[0], losses[1])
    for loss in losses:
        loss.backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        assert torch.equal(a.grad, b.grad), name
    # estimate_loss and generation: no checkpointing under no_grad, same outputs
    with torch.no_grad():
        assert torch.equal(plain.eval()(idx)[0], ckpt.eval()(idx)[0])


def test_checkpointed_forward_saves_what_the_engine_predicts(snippet):
    """The snippet's forward and oomguide's GPTConfig(grad_checkpoint=True) hold the same memory."""
    mod = snippet.module(f"{PAGE}/checkpointed_forward.py")
    source = memory.ModelSource(gpt_class=checkpointed_class(mod))
    small = snippet.config(SITUATION).replace(
        n_layer=2, n_embd=64, n_head=2, block_size=64, batch_size=4, dtype="float32"
    )
    theirs = memory.predict(small, "train_step", source=source)
    ours = memory.predict(small.replace(grad_checkpoint=True), "train_step")
    plain = memory.predict(small, "train_step")
    assert theirs.peak_bytes == ours.peak_bytes < plain.peak_bytes


def test_gradient_checkpointing_memory(snippet, figure):
    base = snippet.config(SITUATION)
    config = base.replace(grad_checkpoint=True)  # oomguide's key for the checkpointed forward
    plain, ckpt = predict(base, "train_step"), predict(config, "train_step")
    figure("ckpt_train_peak", ckpt.peak_bytes, "gib")
    figure("ckpt_train_activations", ckpt.breakdown["activations"], "gib")
    saving = 1 - ckpt.breakdown["activations"] / plain.breakdown["activations"]
    figure("ckpt_activation_saving", saving, "percent")  # the source: "about 50-60%"
    figure("ckpt_peak_saving", 1 - ckpt.peak_bytes / plain.peak_bytes, "percent")
    assert saving > 0.6
    # the logits term is outside the Blocks: checkpointing leaves it alone
    assert ckpt.breakdown["logits_and_loss"] == plain.breakdown["logits_and_loss"]
    # estimate_loss runs under no_grad: checkpointing changes nothing there
    assert predict(config, "estimate_loss").peak_bytes == predict(base, "estimate_loss").peak_bytes


def test_gradient_checkpointing_time(snippet, figure, report):
    """Forward + backward on the CPU, with and without the snippet's forward, in alternation.

    The median over rounds of the per-round time ratio: a shared, busy CPU slows both runs of a round alike.
    """
    mod = snippet.module(f"{PAGE}/checkpointed_forward.py")
    CheckpointedGPT = checkpointed_class(mod)
    cfg = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128, vocab_size=512)
    with one_thread():
        torch.manual_seed(0)
        models = {"plain": GPT(cfg), "checkpointed": CheckpointedGPT(cfg)}
        models["checkpointed"].load_state_dict(models["plain"].state_dict())
        idx = torch.randint(0, 512, (8, 128))
        ratios = []
        for repeat in range(12):
            times = {}
            for name, model in models.items():
                start = time.perf_counter()
                model(idx, idx)[1].backward()
                times[name] = time.perf_counter() - start
                model.zero_grad(set_to_none=True)
            if repeat:  # the first round warms up
                ratios.append(times["checkpointed"] / times["plain"])
    ratio = statistics.median(ratios)
    assert ratio > 1.0
    figure("ckpt_time_ratio", ratio, "ratio", rel=0.3)
    report(f"{PAGE}: checkpointed forward+backward takes {ratio:.2f}x the plain one on this CPU")


# --------------------------------------------------------------------------------------------
# the combination for the 4070, and the allocator setting
# --------------------------------------------------------------------------------------------
def test_recommended_combination(snippet, figure, runner):
    config = snippet.config(SITUATION, f"{PAGE}/recommended.py")
    assert config.batch_size * config.gradient_accumulation_steps == 16 * 32  # the same step
    assert (config.n_embd, config.eval_batch_size, config.eval_iters) == (576, 4, 100)
    # evaluation time per training iteration, against the situation's (eval_iters / eval_interval)
    base = snippet.config(SITUATION)
    per_iter = (config.eval_iters / config.eval_interval) / (base.eval_iters / base.eval_interval)
    figure("rec_eval_time_ratio", per_iter, "ratio")
    train, evaluation = predict(config, "train_step"), predict(config, "estimate_loss")
    figure("rec_train_peak", train.peak_bytes, "gib")
    figure("rec_eval_peak", evaluation.peak_bytes, "gib")
    assert train.fits and evaluation.fits
    for phase in memory.PHASES:
        assert runner.phase(config, phase, label=f"{PAGE} recommended.py").fits
    with one_thread():
        result = runner.scaled_down(config, label=f"{PAGE} recommended.py")
    assert result["val"] < math.log(config.vocab_size) + 1


def test_source_combination_corrected(snippet, figure, runner):
    config = snippet.config(SITUATION, f"{PAGE}/source-combination.py")
    assert (config.n_embd, config.n_head, config.grad_checkpoint) == (512, 8, True)
    with pytest.raises(ConfigError, match="divisible by n_head"):
        snippet.config(SITUATION, f"{PAGE}/source-combination.py", overrides=["n_head=12"])
    train, evaluation = predict(config, "train_step"), predict(config, "estimate_loss")
    figure("src_train_peak", train.peak_bytes, "gib")
    figure("src_eval_peak", evaluation.peak_bytes, "gib")
    # live tensors fit; reserved memory does not in the training step (issue 15): nll_loss's backward
    # asks for a float32 (B*T, V) buffer that no cached piece can hold and no segment can be freed for
    assert train.allocated_fits and evaluation.allocated_fits and evaluation.fits
    assert not train.fits and "float32" in train.failing_allocation
    figure("src_fail_request", train.failing_allocation_bytes, "gib")
    figure("src_fail_allocated", train.allocated_at_failure_bytes, "gib")
    figure("src_fail_reserved", train.reserved_at_failure_bytes, "gib")
    assert predict(config, "train_step", alloc_conf=EXPANDABLE).fits  # with the allocator setting it fits
    # on this machine's path (a real CUDA run, or the prediction): fits only with expandable segments
    expandable = alloc_conf_from_env().expandable_segments
    assert runner.phase(config, "train_step", label=f"{PAGE} source-combination.py").fits == expandable


def test_source_shortcut_fixes_only_the_evaluation(snippet):
    """The source's "just eval_batch_size = 2, eval_iters = 100": the evaluation fits; training is unchanged."""
    base = snippet.config(SITUATION)
    config = snippet.config(SITUATION, overrides=["eval_batch_size=2", "eval_iters=100"])
    assert predict(config, "estimate_loss").fits
    assert predict(config, "train_step").peak_bytes == predict(base, "train_step").peak_bytes


def test_expandable_segments(snippet, runner):
    """The shell line reaches the process before CUDA is initialised (and, on CUDA, the allocator uses it)."""
    path = snippet.path(f"{PAGE}/expandable-segments.sh")
    code = (
        "import os, torch\nprint(os.environ['PYTORCH_CUDA_ALLOC_CONF'])\nprint(torch.cuda.is_initialized())\n"
    )
    if runner.cuda:
        code += "from oomguide import memory\nprint(memory.expandable_segments_in_use())\n"
    proc = subprocess.run(
        ["bash", "-c", f'. "{path}" && "{sys.executable}" -c "$0"', code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[:2] == ["expandable_segments:True", "False"]
    if runner.cuda:
        if lines[2] == "False":
            pytest.skip("this platform has no expandable segments: PyTorch warns and ignores the setting")
        assert lines[2] in ("True", "None")
