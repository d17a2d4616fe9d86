"""The engine: model, config reader, loop and memory predictor (issue 2's must-shows)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap

import pytest
import torch

from oomguide import loop, memory
from oomguide.cli import main
from oomguide.config import ConfigError, load_config
from oomguide.model import GPT, GPTConfig, pretrained_config

GiB = 1024**3
LOGITS_64_BF16 = 64 * 1024 * 50304 * 2
TINY = ["n_layer=2", "n_head=2", "n_embd=32", "block_size=32", "vocab_size=128", "batch_size=4"]


def count(config: GPTConfig) -> int:
    with torch.device("meta"):
        return GPT(config).get_num_params(non_embedding=False)


# --- model -----------------------------------------------------------------------------------
def test_parameter_counts_match_nanogpt():
    assert count(GPTConfig()) == 124_475_904  # bias=True, wte tied to lm_head (nanoGPT), vocab 50304
    assert count(GPTConfig(vocab_size=50257)) == 124_439_808
    with torch.device("meta"):
        assert GPT(GPTConfig()).get_num_params() == 123_689_472  # nanoGPT prints 123.69M
    # n_embd 576 / 512 / 448 at 12 layers (n_head must divide n_embd: 12, 8, 7), against the closed form
    # V*C + T*C (embeddings) + L*(12*C^2 + 13*C) (blocks, with biases) + 2*C (ln_f)
    for n_embd, n_head, expected in [(576, 12, 77_431_680), (512, 8, 64_109_568), (448, 7, 51_967_104)]:
        closed_form = 50304 * n_embd + 1024 * n_embd + 12 * (12 * n_embd**2 + 13 * n_embd) + 2 * n_embd
        assert closed_form == expected
        assert count(GPTConfig(n_embd=n_embd, n_head=n_head)) == expected
    assert count(pretrained_config("gpt2-xl")) == 1_557_611_200


def test_forward_shapes_follow_nanogpt():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32))
    idx = torch.randint(0, 32, (3, 8))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 8, 32) and loss.ndim == 0  # full sequence with targets
    logits, loss = model(idx)
    assert logits.shape == (3, 1, 32) and loss is None  # last position for generation
    assert model.lm_head.weight is model.transformer.wte.weight


def test_checkpointed_blocks_give_identical_gradients():
    torch.manual_seed(0)
    cfg = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=32)
    a, b = GPT(GPTConfig(**cfg)).double(), GPT(GPTConfig(**cfg, grad_checkpoint=True)).double()
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 32, (2, 8))
    for m in (a, b):
        m(idx, idx)[1].backward()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa.grad, pb.grad), name


# --- config ----------------------------------------------------------------------------------
def test_config_file_reads_like_nanogpt(tmp_path):
    path = tmp_path / "train_mine.py"
    path.write_text(
        textwrap.dedent("""\
        import time
        out_dir = 'out-mine'
        wandb_run_name = 'ft-' + str(time.time())
        batch_size = 8
        gradient_accumulation_steps = 5 * 8
        learning_rate = 6e-4 / 10
        init_from = 'gpt2-medium'
    """)
    )
    with pytest.warns(UserWarning) as caught:
        config = load_config([path], ["--batch_size=4"])
    messages = " ".join(str(w.message) for w in caught)
    assert "train_mine.py:1" in messages and "train_mine.py:3" in messages
    assert config.batch_size == 4 and config.gradient_accumulation_steps == 40
    assert config.learning_rate == pytest.approx(6e-5)
    g = config.gpt_config()
    assert (g.n_layer, g.n_head, g.n_embd, g.vocab_size, g.bias) == (24, 16, 1024, 50257, True)


def test_memory_key_that_cannot_be_read_is_an_error(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("import os\nbatch_size = int(os.environ['B'])\n")
    with pytest.raises(ConfigError, match=r"c.py:2: cannot read batch_size"):
        load_config([path])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["n_embd=100", "n_head=12"], "divisible by n_head"),
        (["batch_size=0"], "batch_size must be a positive integer"),
        (["init_from='gpt2'", "block_size=2048"], "above the model's 1024"),
        (["batch_size=abc"], "batch_size must be an integer"),
        (["dtype=float8"], "dtype must be one of"),
    ],
)
def test_bad_settings_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config([], overrides)


# --- loop ------------------------------------------------------------------------------------
def _tiny_model(seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=16, vocab_size=64)).double()


def test_gradient_accumulation_equals_the_large_batch():
    """One batch of 16 and four micro-batches of 4 give the same gradients (float64)."""
    a, b = _tiny_model(), _tiny_model()
    X = torch.randint(0, 64, (16, 16))
    Y = torch.randint(0, 64, (16, 16))
    a(X, Y)[1].backward()
    for i in range(4):
        (b(X[4 * i : 4 * i + 4], Y[4 * i : 4 * i + 4])[1] / 4).backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert (pa.grad - pb.grad).norm() / pa.grad.norm() < 1e-6


def test_batched_estimate_loss_equals_unbatched():
    model = _tiny_model()
    batches = {
        s: [(torch.randint(0, 64, (8, 16)), torch.randint(0, 64, (8, 16))) for _ in range(3)]
        for s in ("train", "val")
    }

    def replay():
        iters = {s: iter(b) for s, b in batches.items()}
        return lambda split: next(iters[split])

    full = loop.estimate_loss(model, replay(), 3, loop.autocast_context("cpu", "float32"))
    chunked = loop.estimate_loss_batched(model, replay(), 3, loop.autocast_context("cpu", "float32"), 3)
    for split in full:
        assert chunked[split] == pytest.approx(full[split], rel=1e-12)
    assert model.training


def test_train_step_runs_on_nanogpt_bin_data(tmp_path):
    config = load_config([], TINY + ["gradient_accumulation_steps=2", "dtype=float32"])
    data = loop.BinData(loop.write_dataset(tmp_path, 128, 5000, 1000), 4, 32)
    torch.manual_seed(0)
    model = GPT(config.gpt_config())
    state = loop.TrainState(
        model,
        loop.make_optimizer(model, config, "cpu"),
        loop.make_scaler("float32"),
        loop.autocast_context("cpu", "float32"),
    )
    first = loop.train_step(state, data.get_batch, 2).item()
    for _ in range(10):
        last = loop.train_step(state, data.get_batch, 2).item()
    assert last < first
    assert state.logits.shape == (4, 32, 128)  # the last micro-step's logits stay referenced, as in train.py


# --- memory ----------------------------------------------------------------------------------
def test_first_estimate_loss_at_batch_64_reproduces_the_articles_error():
    config = load_config([], ["batch_size=64"])
    result = memory.predict(config, "estimate_loss", memory.DEFAULT_GPU_MEMORY, state="first")
    assert result.fits is False
    assert result.failing_allocation_bytes == LOGITS_64_BF16  # "Tried to allocate 6.14 GiB"
    assert "[65536, 50304]" in result.failing_allocation and "bfloat16" in result.failing_allocation
    # the float32 copy nll_loss makes under CUDA autocast (autocast_mode.h's fp32 list) is the largest block
    assert result.largest_allocation_bytes == 2 * LOGITS_64_BF16
    small = memory.predict(load_config([], ["batch_size=4"]), "estimate_loss", memory.DEFAULT_GPU_MEMORY)
    assert small.fits is True


def test_nanogpt_default_train_step_is_between_11_and_14_gib():
    result = memory.predict(load_config(), "train_step")
    assert 11 * GiB < result.peak_bytes < 14 * GiB
    b = result.breakdown
    # exp_avg + exp_avg_sq in float32, plus one 512-byte `step` tensor per parameter
    with torch.device("meta"):
        n_params = len(list(GPT(load_config().gpt_config()).parameters()))
    assert b["optimizer_state"] == 2 * b["gradients"] + 512 * n_params
    # one float32 gradient per parameter, each block rounded up to the allocator's 512 bytes: counted
    # from the parameter shapes, not from the tracker
    with torch.device("meta"):
        shapes = [p.numel() for p in GPT(load_config().gpt_config()).parameters()]
    assert b["gradients"] == sum(-(-4 * n // 512) * 512 for n in shapes)


@pytest.mark.parametrize(
    "batch_size, printed", [(32, "Tried to allocate 6.14 GiB"), (2, "Tried to allocate 394.00 MiB")]
)
def test_the_float32_copy_of_nanogpt_issue_88(batch_size, printed):
    """https://github.com/karpathy/nanoGPT/issues/88: eager float16 runs that asked for a float32
    (B*T, V) buffer.

    The observed messages, not the predictor's autocast model, say how large the largest block is:
    the predicted largest allocation of the train step, rounded as the caching allocator rounds it,
    must be what PyTorch printed."""
    config = load_config([], [f"batch_size={batch_size}", "dtype=float16", "compile=False"])
    result = memory.predict(config, "train_step")
    size = memory.segment_size(result.largest_allocation_bytes)
    shown = f"{size / GiB:.2f} GiB" if size >= GiB else f"{size / 1024**2:.2f} MiB"
    assert f"Tried to allocate {shown}" == printed


@pytest.mark.parametrize("phase", memory.PHASES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_fake_prediction_equals_the_tracker_on_real_tensors(phase, dtype):
    config = load_config([], TINY + [f"dtype={dtype}", "gradient_accumulation_steps=2"])
    fake = memory.predict(config, phase, fake=True)
    real = memory.predict(config, phase, fake=False)
    # the fake prediction is a CUDA run's, with cuBLAS's workspaces; real CPU tensors have none
    cuda_only = fake.breakdown.get("workspaces", 0)
    assert abs(fake.peak_bytes - cuda_only - real.peak_bytes) <= 0.01 * real.peak_bytes
    assert fake.largest_allocation_bytes == real.largest_allocation_bytes


def test_max_batch_size_is_the_boundary():
    config = load_config([], ["n_layer=2", "n_embd=128", "n_head=4", "block_size=256"])
    budget = memory.parse_size("1GiB")
    best = memory.max_batch_size(config, "train_step", budget)
    assert memory.predict(config, "train_step", budget, batch_size=best).fits
    assert not memory.predict(config, "train_step", budget, batch_size=best + 1).fits


@pytest.mark.parametrize(
    ("phase", "state", "compiled"),
    [
        ("train_step", "training", False),
        ("estimate_loss", "first", True),
        ("estimate_loss", "training", False),
    ],
)
def test_search_probes_equal_runs(phase, state, compiled):
    """The batch-size search's probes (``predict(search=True)``) come from two real runs (the config's
    batch size and the next one, memory/batches.py): peak and verdict as a run at that batch size
    gives them, below and above the card (200 MiB usable: 9 fits, 13 fits on allocated memory)."""
    from oomguide.memory import batches

    config = load_config([], ["n_layer=2", "n_embd=128", "n_head=4", "block_size=256", "vocab_size=4096"])
    config = config.replace(batch_size=3, gradient_accumulation_steps=2)
    card = memory.parse_size("456MiB")
    options = dict(state=state, compiled=compiled)
    memory.predict(config, phase, card, **options)  # the first run, as `oomguide check` makes it
    sizes = (1, 2, 5, 9, 12, 13, 17, 33, 65)
    derived = [memory.predict(config, phase, card, batch_size=b, search=True, **options) for b in sizes]
    assert [r.largest_allocation for r in derived[1:]] == [""] * (len(sizes) - 1)  # not runs
    real = [memory.predict(config, phase, card, batch_size=b, **options) for b in sizes]
    assert [(r.peak_bytes, r.fits) for r in derived] == [(r.peak_bytes, r.fits) for r in real]
    assert {r.fits for r in real} == {True, False}
    assert not any(family.broken for family in batches._FAMILIES.values())  # every run agreed


@pytest.mark.parametrize("as_view", [False, True])
def test_search_probes_equal_runs_under_ddp(as_view):
    """The same for one rank of DDP, whose verdict is on allocated memory (``batches.trace_fits``)."""
    from oomguide.memory import batches, distributed

    config = load_config([], ["n_layer=2", "n_embd=128", "n_head=4", "block_size=256", "vocab_size=4096"])
    config = config.replace(batch_size=3, gradient_accumulation_steps=4)
    parallel = distributed.Parallel(2, "ddp", as_view)
    card = memory.parse_size("456MiB")
    distributed.predict(config, "train_step", card, parallel)
    sizes = (2, 5, 9, 12, 13, 17, 33)
    derived = [
        distributed.predict(config, "train_step", card, parallel, batch_size=b, search=True) for b in sizes
    ]
    assert [r.largest_allocation for r in derived] == [""] * len(sizes)
    real = [distributed.predict(config, "train_step", card, parallel, batch_size=b) for b in sizes]
    assert [(r.peak_bytes, r.fits) for r in derived] == [(r.peak_bytes, r.fits) for r in real]
    assert {r.fits for r in real} == {True, False}
    assert not any(family.broken for family in batches._FAMILIES.values())


@pytest.mark.parametrize(
    ("phase", "state", "gas"),
    [
        ("train_step", "training", 4),
        ("train_step", "training", 2),
        ("estimate_loss", "first", 2),
        ("estimate_loss", "training", 2),
    ],
)
def test_search_probes_equal_runs_under_fsdp(phase, state, gas):
    """The same for one rank of FSDP2 (the fake process group): its traces are affine in the batch
    size too, so the search's probes come from two runs; peak and verdict as real runs give them."""
    from oomguide.memory import batches, distributed

    config = load_config([], ["n_layer=2", "n_embd=128", "n_head=4", "block_size=256", "vocab_size=4096"])
    config = config.replace(batch_size=1, gradient_accumulation_steps=gas, dtype="bfloat16")
    parallel = distributed.Parallel(2, "fsdp")
    card = memory.parse_size("456MiB")
    distributed.predict(config, phase, card, parallel, state=state)  # the config's run, as check makes it
    sizes = (2, 5, 9, 12, 13, 17, 33, 65)
    derived = [
        distributed.predict(config, phase, card, parallel, state=state, batch_size=b, search=True)
        for b in sizes
    ]
    assert [r.largest_allocation for r in derived[1:]] == [""] * (len(sizes) - 1)  # not runs
    real = [distributed.predict(config, phase, card, parallel, state=state, batch_size=b) for b in sizes]
    assert [(r.peak_bytes, r.fits) for r in derived] == [(r.peak_bytes, r.fits) for r in real]
    assert {r.fits for r in real} == {True, False}
    assert not any(family.broken for family in batches._FAMILIES.values())


@pytest.mark.parametrize(
    "text, expected", [("11.69GiB", int(11.69 * GiB)), ("12GB", 12 * 10**9), ("4096MiB", 4 * GiB)]
)
def test_sizes(text, expected):
    assert memory.parse_size(text) == expected


def test_segment_size_rounds_like_the_caching_allocator():
    assert memory.segment_size(2 * 1024 * 50304 * 4) == 394 * 1024**2  # "Tried to allocate 394.00 MiB"
    assert memory.segment_size(100) == 2 * 1024**2
    assert memory.segment_size(3 * 1024**2) == 20 * 1024**2


# --- CLI -------------------------------------------------------------------------------------
def test_check_json_on_the_default_config(capsys):
    code = main(["check", "--json", "--set", "batch_size=4"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    for phase in memory.PHASES:
        entry = out["phases"][phase]
        assert entry["fits"] is True and entry["max_batch_size"] >= 4
        # the five categories, and cuBLAS's workspaces (memory/kernels.py)
        assert set(entry["breakdown"]) == {*memory.CATEGORIES, "workspaces"}
        assert entry["peak_bytes"] > entry["largest_allocation_bytes"] > 0
    assert out["gpu_memory_bytes"] == memory.DEFAULT_GPU_MEMORY


def test_check_exit_1_when_a_phase_does_not_fit(capsys):
    assert main(["check", "--no-search", "--set", "batch_size=64"]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_check_a_users_own_nanogpt_model(tmp_path, capsys):
    """A nanoGPT-style model.py written here (manual attention, no SDPA), checked through --model."""
    model_py = tmp_path / "model.py"
    model_py.write_text(
        textwrap.dedent("""\
        import math
        from dataclasses import dataclass
        import torch, torch.nn as nn
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
                self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd)
                self.proj = nn.Linear(c.n_embd, c.n_embd)
                self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(), nn.Linear(4 * c.n_embd, c.n_embd))
                self.ln2 = nn.LayerNorm(c.n_embd)
                self.h = c.n_head
                self.register_buffer("mask", torch.tril(torch.ones(c.block_size, c.block_size)))
            def forward(self, x):
                B, T, C = x.shape
                q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
                q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
                att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
                att = F.softmax(att.masked_fill(self.mask[:T, :T] == 0, float("-inf")), dim=-1)
                x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
                return x + self.mlp(self.ln2(x))

        class GPT(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.wte = nn.Embedding(config.vocab_size, config.n_embd)
                self.wpe = nn.Embedding(config.block_size, config.n_embd)
                self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
                self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
                print("number of parameters: lots")
            def forward(self, idx, targets=None):
                x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
                for b in self.blocks:
                    x = b(x)
                logits = self.lm_head(x)
                loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
                return logits, loss
    """)
    )
    code = main(
        [
            "check",
            "--json",
            "--no-search",
            "--model",
            str(model_py),
            "--set",
            "batch_size=2",
            "--set",
            "block_size=256",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["model"] == str(model_py)
    ours = memory.predict(load_config([], ["batch_size=2", "block_size=256"]), "train_step")
    # manual attention keeps (B, nh, T, T) scores: the user's model takes more than the SDPA one
    assert out["phases"]["train_step"]["peak_bytes"] > ours.peak_bytes


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "missing.py"], "config file not found: missing.py"),
        (["check", "--set", "n_embd=100"], "divisible by n_head"),
        (["check", "--set", "batch_size=0"], "batch_size must be a positive integer"),
        (["check", "--set", "block_size=4096", "--set", "init_from=gpt2"], "above the model's 1024"),
        (["check", "--gpu-memory", "12XB"], "unknown size unit"),
        (["check", "--model", "{model}"], "no GPT class"),
        (["check", "{syntax}"], "syntax error"),
        (["check", "{unreadable}"], "is not a text config file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "model.py").write_text("class NotGPT:\n    pass\n")
    (tmp_path / "bad.py").write_text("batch_size = = 3\n")
    (tmp_path / "bin.py").write_bytes(b"\xff\xfe\x00batch")
    paths = {"model": tmp_path / "model.py", "syntax": tmp_path / "bad.py", "unreadable": tmp_path / "bin.py"}
    args = [a.format(**paths) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "oomguide", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_output_piped_into_a_closed_reader_is_silent():
    """`oomguide explain ... | head -1`: the reader stops reading, oomguide stops quietly."""
    message = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.14 GiB. GPU 0 has a total "
        "capacity of 15.77 GiB of which 2.31 GiB is free. Including non-PyTorch memory, this process "
        "has 13.45 GiB memory in use. Of the allocated memory 12.96 GiB is allocated by PyTorch, and "
        "120.00 MiB is reserved by PyTorch but unallocated."
    )
    proc = subprocess.run(
        f"{shlex.quote(sys.executable)} -m oomguide explain - --json | head -c 1",
        shell=True,
        input=message,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout == "{"
    assert proc.stderr == "", proc.stderr


@pytest.mark.parametrize("extra", [[], ["--nproc-per-node", "2"]], ids=["one-gpu", "ddp"])
def test_the_program_prints_what_main_prints(capsys, extra):
    """`python -m oomguide check` (TorchDynamo loaded lazily, the searches' second runs made by a
    forked child, the interpreter left without its teardown) prints what main() prints in-process.
    A 512 MiB card: on 300 MiB (44 MiB for PyTorch) the measured margin of a verdict
    (memory.reserved.UNCERTAINTY_FLOOR) leaves no batch size that fits for certain."""
    argv = ["check", *(f"--set={s}" for s in TINY), "--set=compile=True", "--gpu-memory", "512MiB", *extra]
    argv += ["--json"]
    rc = main(argv)
    out = capsys.readouterr().out
    proc = subprocess.run(
        [sys.executable, "-m", "oomguide", *argv], capture_output=True, text=True, timeout=300
    )
    assert (proc.returncode, proc.stdout) == (rc, out), proc.stderr
    assert all(phase["max_batch_size"] > 4 for phase in json.loads(out)["phases"].values())


def test_frees_before_a_growing_resize_are_judged_where_the_tracker_books_them():
    """tracker.as_judged: a free recorded before a resize_ that grows a storage is held back until
    the next op's allocation, unless that resize could make a new peak or cross the budget."""
    from oomguide.memory.allocator import ALLOC, FREE, Trace
    from oomguide.memory.tracker import as_judged

    kib = 1024

    def trace(resized: int) -> Trace:
        return Trace(
            pre=[(1, kib, "weights")],
            events=[
                (ALLOC, 2, 8 * kib, "op"),  # the peak: 9 KiB
                (FREE, 2, 0, None),
                (ALLOC, 3, 2 * kib, "op"),
                (FREE, 3, 0, None),  # died before the resize, recorded there
                (FREE, 1, 0, None),
                (ALLOC, 1, resized, "resize_"),
                (ALLOC, 4, kib, "op"),
            ],
            sweeps=[(1, 1, False), (3, 1, True), (6, 0, False)],
        )

    small = trace(4 * kib)  # 3 KiB booked (the dead one too) + 3 KiB grown: below the peak
    held = [small.events[i] for i in (0, 1, 2, 4, 5, 3, 6)]
    assert as_judged(small, budget=None).events == held
    assert as_judged(small, budget=10 * kib).events == held
    large = trace(8 * kib)  # 3 + 7 KiB would make a new peak: swept first, where it was recorded
    assert as_judged(large, budget=None).events == large.events
