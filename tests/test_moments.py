"""The moments of a run besides a step and an evaluation (oomguide.memory.moments, issue 19):

- the first train step: AdamW's state made inside ``optimizer.step()`` while the gradients are alive
  (checked against the CPU allocator's own record of a real first step);
- resuming: the checkpoint on the card (nanoGPT's ``map_location=device``) or not (``'cpu'``), and
  ``optimizer.load_state_dict`` sharing a same-device state (checked against PyTorch itself);
- sample.py (``check --sample``): its own keys, a peak set by the longest forward (the crop at
  block_size), not by num_samples; bad keys are one-line errors;
- explain: the moment named from a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from oomguide import checkout, loop, memory
from oomguide import explain as ex
from oomguide.cli import main
from oomguide.config import load_config
from oomguide.memory import reserved
from oomguide.model import GPT
from oomguide.sample_config import load_sample_config

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20
TINY = ["n_layer=2", "n_head=2", "n_embd=64", "block_size=64", "vocab_size=512", "batch_size=4"]
# a model whose weights, not its activations, make the first step's peak: AdamW's state decides it
WIDE = ["n_layer=2", "n_head=4", "n_embd=512", "block_size=8", "vocab_size=512", "batch_size=1"]


def _nanogpt() -> Path | None:
    for candidate in (os.environ.get("OOMGUIDE_NANOGPT"), ROOT.parent / "shared" / "nanoGPT"):
        if candidate and (Path(candidate) / "train.py").is_file():
            return Path(candidate).resolve()
    return None


NANOGPT = _nanogpt()
needs_nanogpt = pytest.mark.skipif(NANOGPT is None, reason="set OOMGUIDE_NANOGPT to a nanoGPT checkout")


def _check(capsys, *argv) -> tuple[int, dict]:
    rc = main(["check", "--json", *argv])
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    return rc, json.loads(out)


def _sets(args) -> list[str]:
    return sum((["--set", a] for a in args), [])


def _param_bytes(config) -> int:
    """float32 weights as CUDA's allocator books them: each tensor rounded up to 512 bytes."""
    with torch.device("meta"):
        model = GPT(config.gpt_config())
    return sum(memory.block_size(p.numel() * 4) for p in model.parameters())


# --- the first step ------------------------------------------------------------------------------
def test_phases_in_the_order_train_py_runs_them(capsys):
    _, scratch = _check(capsys, "--no-search", *_sets(TINY))
    assert list(scratch["phases"]) == ["estimate_loss_first", "first_step", "train_step", "estimate_loss"]
    _, gpt2 = _check(capsys, "--no-search", "--phase", "first_step", "--set", "init_from=gpt2")
    assert list(gpt2["phases"]) == ["first_step"]
    _, resumed = _check(capsys, "--no-search", *_sets([*TINY, "init_from=resume"]))
    assert list(resumed["phases"]) == ["resume", "estimate_loss_first", "train_step", "estimate_loss"]
    assert resumed["checkpoint"] == {"read_by": "train.py", "map_location": "device", "on_card": True}


def test_first_step_makes_adamw_state_while_the_gradients_are_alive():
    """With weights W (float32), the first step's peak comes in optimizer.step(): weights, gradients
    and the new exp_avg and exp_avg_sq (2 W) are alive together; a later step has that state from the
    start, so its peak comes in the forward and backward passes."""
    config = load_config([], [*WIDE, "dtype=float32"])
    weights = _param_bytes(config)
    first = memory.predict(config, "train_step", 8 * 2**30, state="first")
    later = memory.predict(config, "train_step", 8 * 2**30, state="training")
    assert first.peak_moment == "optimizer_step" and later.peak_moment == "forward_backward"
    states = first.breakdown["optimizer_state"]
    # exp_avg and exp_avg_sq of every parameter, and fused AdamW's step (a float32 scalar each)
    n_params = len(list(GPT(config.gpt_config()).parameters()))
    assert states == 2 * weights + n_params * memory.block_size(4)
    assert first.breakdown["gradients"] == weights == first.breakdown["weights"]
    assert first.peak_bytes >= 4 * weights
    assert later.peak_bytes > first.peak_bytes  # the later step carries the state through its forward


def test_first_step_peak_against_the_cpu_allocator():
    """A real first step of train.py's loop on CPU tensors (float32, fused AdamW made fresh, two
    micro-steps): the CPU allocator's recorded peak above the weights equals the predicted peak
    above the weights, within the 512-byte rounding of CUDA's allocator the prediction adds."""
    config = load_config([], [*WIDE, "dtype=float32", "gradient_accumulation_steps=2"])
    torch.manual_seed(0)
    model = GPT(config.gpt_config())
    optimizer = loop.make_optimizer(model, config, "cuda")  # fused=True, as train.py on CUDA
    state = loop.TrainState(
        model, optimizer, torch.amp.GradScaler("cpu", enabled=False), loop.autocast_context("cpu", "float32")
    )
    vocab = config.vocab_size

    def get_batch(split):
        return torch.randint(0, vocab, (1, 8)), torch.randint(0, vocab, (1, 8))

    state.X, state.Y = get_batch("train")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loop.train_step(state, get_batch, 2, config.grad_clip)
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
        key=lambda e: e.start_ns(),
    )
    current = measured = 0
    for e in events:
        current += e.nbytes()
        measured = max(measured, current)
    predicted = memory.predict(config, "train_step", None, state="first")
    weights = _param_bytes(config)
    # the prediction counts the weights and the batch it starts with; the profile counts neither
    # ... nor cuBLAS's workspaces, which a CUDA run has and the CPU has not (memory/kernels.py)
    above = predicted.peak_bytes - weights - 2 * memory.block_size(8 * 8) - predicted.breakdown["workspaces"]
    tensors = 4 * len(list(model.parameters())) + 200  # each live tensor rounds up by < 512 bytes
    assert measured > 4 * MiB
    assert measured <= above <= measured + 512 * tensors, (above, measured)


# --- resuming ------------------------------------------------------------------------------------
def test_optimizer_load_state_dict_shares_a_state_on_the_same_device(tmp_path):
    """What the resume moment assumes of PyTorch: ``optimizer.load_state_dict`` keeps a loaded state
    tensor that is already on the parameter's device (Tensor.to returns it), and copies one from
    elsewhere; checked on real tensors."""
    config = load_config([], [*TINY, "dtype=float32"])
    model = GPT(config.gpt_config())
    optimizer = loop.make_optimizer(model, config, "cuda")
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    torch.save({"optimizer": optimizer.state_dict()}, tmp_path / "ckpt.pt")
    checkpoint = torch.load(tmp_path / "ckpt.pt", map_location="cpu")  # the parameters' device
    fresh = loop.make_optimizer(model, config, "cuda")
    fresh.load_state_dict(checkpoint["optimizer"])
    saved = checkpoint["optimizer"]["state"][0]["exp_avg"]
    assert fresh.state[next(iter(model.parameters()))]["exp_avg"].data_ptr() == saved.data_ptr()
    other = loop.make_optimizer(model, config, "cuda")
    as_double = {
        **checkpoint["optimizer"],
        "state": {
            i: {k: v.double() for k, v in s.items()} for i, s in checkpoint["optimizer"]["state"].items()
        },
    }
    other.load_state_dict(as_double)  # a copy (another dtype stands for another device)
    assert other.state[next(iter(model.parameters()))]["exp_avg"].data_ptr() != saved.data_ptr()


def test_resume_on_the_card_and_from_the_cpu():
    """map_location=device: the checkpoint's weights W and AdamW state 2 W are on the card when
    model.to(device) adds the weights (4 W); map_location='cpu': the state is copied onto the card
    by load_state_dict (3 W). They differ by the saved weights, which train.py's state_dict then
    keeps on the card in every later phase."""
    config = load_config([], [*WIDE, "dtype=float32", "init_from=resume"])
    weights = _param_bytes(config)
    card, cpu = (
        memory.predict(config, "resume", 8 * 2**30, state="first", checkpoint_on_card=on)
        for on in (True, False)
    )
    assert card.peak_moment == "model_to_device" and cpu.peak_moment == "optimizer_load_state_dict"
    assert card.breakdown["checkpoint"] >= 3 * weights and "checkpoint" not in cpu.breakdown
    assert card.peak_bytes - cpu.peak_bytes == weights
    later = [
        memory.predict(config, "train_step", 8 * 2**30, state="training", checkpoint_on_card=on).peak_bytes
        for on in (True, False)
    ]
    assert later[0] - later[1] == weights


def test_resume_does_not_fit_where_scratch_does(capsys):
    """nanoGPT issue 158's pattern: a card on which the first step fits runs out while resuming, or
    after, because the checkpoint is on it."""
    args = [*WIDE, "dtype=float32"]
    _, scratch = _check(capsys, "--no-search", *_sets(args))
    peak = max(p["reserved_bytes"] for p in scratch["phases"].values())
    # room for the reserved peak and the verdict's margin over it (memory/reserved.py: "fits" for certain)
    card = f"{(reserved.within(peak, reserved.RESERVED_UNCERTAINTY) + 256 * MiB) / MiB + 2:.0f}MiB"
    _, scratch = _check(capsys, "--no-search", "--gpu-memory", card, *_sets(args))
    _, resumed = _check(capsys, "--no-search", "--gpu-memory", card, *_sets([*args, "init_from=resume"]))
    assert scratch["fits"] and not resumed["fits"]


@needs_nanogpt
def test_the_checkout_decides_where_the_checkpoint_goes(tmp_path, capsys):
    """A checkout whose train.py and sample.py load with map_location='cpu' (the guide's change) puts
    no checkpoint on the card; nanoGPT's own loads it there."""
    dest = tmp_path / "nanoGPT"
    shutil.copytree(NANOGPT, dest, ignore=shutil.ignore_patterns(".git", "__pycache__", "data", "out*"))
    assert not checkout.read(dest).resume_to_cpu and not checkout.read(dest).sample_to_cpu
    for name in ("train.py", "sample.py"):
        text = (dest / name).read_text()
        assert "map_location=device" in text
        (dest / name).write_text(text.replace("map_location=device", "map_location='cpu'"))
    code = checkout.read(dest)
    assert code.resume_to_cpu and code.sample_to_cpu
    args = ["--nanogpt", str(dest), "--no-search", *_sets([*TINY, "init_from=resume"])]
    _, out = _check(capsys, *args)
    assert out["checkpoint"] == {"read_by": "train.py", "map_location": "cpu", "on_card": False}
    assert "checkpoint" not in out["phases"]["resume"]["breakdown"]
    rc = main(["check", "--nanogpt", str(dest), "--no-search", *_sets([*TINY, "init_from=resume"])])
    assert rc in (0, 1)
    assert "loads it to the CPU (map_location='cpu')" in capsys.readouterr().out


# --- sample.py -----------------------------------------------------------------------------------
def _sample(capsys, *sets, search=False) -> dict:
    _, out = _check(
        capsys, "--sample", "--gpu-memory", "12GiB", *([] if search else ["--no-search"]), *_sets(sets)
    )
    assert list(out["phases"]) == ["sample"]
    return out


def test_sample_peak_follows_the_longest_forward_not_num_samples(capsys):
    """gpt2 (block 1024, a 1-token prompt): num_samples changes nothing, max_new_tokens changes the
    longest forward up to the crop at block_size, and nothing after it."""
    peak = {}
    for n, new in ((1, 20), (10, 20), (1, 40), (1, 200), (10, 1024)):
        out = _sample(capsys, f"num_samples={n}", f"max_new_tokens={new}", "init_from=gpt2")
        peak[n, new] = out["phases"]["sample"]["peak_bytes"]
        assert out["sample"]["longest_context"] == min(new, 1024)
    assert peak[1, 20] == peak[10, 20]
    assert peak[1, 20] < peak[1, 40] < peak[1, 200] < peak[10, 1024]
    out = _sample(capsys, "max_new_tokens=2000", "init_from=gpt2", search=True)
    # cropped at block_size either way: only the int64 sequence (1, 2000) and its next copy are longer
    assert 0 <= out["phases"]["sample"]["peak_bytes"] - peak[10, 1024] <= 2 * memory.block_size(8 * 2000)
    entry = out["phases"]["sample"]
    assert entry["searched"] == "max_new_tokens" and entry["max_batch_size"] is None
    assert "crops the context at block_size" in entry["max_batch_size_note"]
    assert entry["peak_moment"] == "generate"


def test_sample_reads_sample_py_keys(tmp_path, monkeypatch, capsys):
    """A config file's sample.py keys count; its training keys are the model's shape only without a
    checkpoint; init_from='resume' loads the checkpoint, AdamW's state with it, onto the card."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("num_samples = 3\nmax_new_tokens = 7\ndtype = 'float16'\nn_layer = 3\n")
    sample = load_sample_config([tmp_path / "mine.py"], ["start='ab'"], cwd=tmp_path)
    assert (sample.num_samples, sample.max_new_tokens, sample.dtype, sample.start) == (3, 7, "float16", "ab")
    assert sample.model.n_layer == 3 and sample.model.init_from == "resume"
    _, out = _check(capsys, "--sample", str(tmp_path / "mine.py"), "--no-search")
    assert out["sample"]["num_samples"] == 3 and out["checkpoint"]["read_by"] == "sample.py"
    breakdown = out["phases"]["sample"]["breakdown"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # num_samples, max_new_tokens: not train.py's keys
        config = load_config([tmp_path / "mine.py"], [])
    assert breakdown["checkpoint"] >= 3 * _param_bytes(config)  # weights and AdamW's exp_avg, exp_avg_sq


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["batch_size=4"], "sample.py would stop on --batch_size"),
        (["max_new_tokens=abc"], "max_new_tokens must be an integer"),
        (["num_samples=0"], "num_samples must be a positive integer"),
        (["init_from=scratch"], "init_from must be 'resume'"),
        (["device=cpu"], "sample.py runs on the CPU"),
        (["start=FILE:nowhere.txt"], "no file nowhere.txt"),
    ],
)
def test_bad_sample_keys_are_one_line_exit_2(tmp_path, monkeypatch, capsys, sets, says):
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--sample", *_sets(sets)]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# --- explain -------------------------------------------------------------------------------------
TRACEBACKS = {
    "resume": 'File "train.py", line 162, in <module>\n    checkpoint = torch.load(ckpt_path, map_location=device)\n'
    '  File "torch/serialization.py", line 135, in _cuda_deserialize\n',
    "first_step": 'File "train.py", line 311, in <module>\n    scaler.step(optimizer)\n'
    '  File "torch/optim/adamw.py", line 160, in step\n    has_complex = self._init_group(\n',
    "optimizer_step": 'File "train.py", line 311, in <module>\n    scaler.step(optimizer)\n'
    '  File "torch/optim/adamw.py", line 566, in _multi_tensor_adamw\n',
    "generate": 'File "sample.py", line 86, in <module>\n    y = model.generate(x, max_new_tokens)\n',
}


@pytest.mark.parametrize("moment", list(TRACEBACKS))
def test_explain_names_the_moment_and_its_section(moment):
    message = (
        "Traceback (most recent call last):\n  " + TRACEBACKS[moment] + "torch.OutOfMemoryError: CUDA out of "
        "memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 39.38 GiB of which 15.38 MiB "
        "is free. Including non-PyTorch memory, this process has 39.36 GiB memory in use. Of the allocated "
        "memory 38.73 GiB is allocated by PyTorch, and 138.61 MiB is reserved by PyTorch but unallocated.\n"
    )
    result = ex.explain(message)
    assert result.context == moment and result.moment == moment
    anchor = {"resume": "resume", "generate": "sample"}.get(moment, "first-step")
    assert result.sections[0] == ("run-moments", anchor)
    assert re.search(rf"run-moments\.md#{anchor}", "\n".join(result.to_json("en")["link_paths"]))


@needs_nanogpt
def test_sample_peak_against_nanogpt_generate_on_the_cpu(tmp_path, monkeypatch):
    """nanoGPT's own GPT.generate (its model.py), every iteration, float32 on real CPU tensors:
    the CPU allocator's recorded peak above the weights equals the predicted peak above the weights
    (generate()'s first and longest forwards, the crop at block_size reached), but for
    multinomial's workspace inside the kernel, within CUDA's 512-byte rounding."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nanogpt_model_for_sample", NANOGPT / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shape.py").write_text(
        "n_layer = 2\nn_head = 4\nn_embd = 128\nblock_size = 32\nvocab_size = 4096\nbias = True\n"
    )
    sample = load_sample_config(
        [tmp_path / "shape.py"], ["max_new_tokens=48", "dtype='float32'"], cwd=tmp_path
    )
    g = sample.model.gpt_config()
    torch.manual_seed(0)
    model = module.GPT(
        module.GPTConfig(
            n_layer=g.n_layer,
            n_head=g.n_head,
            n_embd=g.n_embd,
            block_size=g.block_size,
            vocab_size=g.vocab_size,
        )
    )
    model.eval()
    x = torch.zeros(1, 1, dtype=torch.long)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model.generate(x, 48, temperature=0.8, top_k=200)
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
        key=lambda e: e.start_ns(),
    )
    current = measured = 0
    for e in events:
        current += e.nbytes()
        measured = max(measured, current)
    predicted = memory.predict(
        sample.model, "sample", None, state="first", sample=sample, checkpoint_on_card=False
    )
    weights = sum(memory.block_size(p.numel() * 4) for p in model.parameters())
    # cuBLAS's workspace is a CUDA run's, not the CPU's (memory/kernels.py)
    above = predicted.peak_bytes - weights - predicted.breakdown["workspaces"]
    assert predicted.peak_moment == "generate" and measured > 100 * 1024
    # what the prediction does not see: kernels' own workspaces (the output's footer says so), here
    # CPU multinomial's float64 cumulative distribution over the vocabulary
    workspace = 8 * g.vocab_size
    assert abs(above + workspace - measured) <= 512 * 8, (above, measured)


def test_resume_on_several_processes_is_each_ranks_own_load(capsys):
    """torchrun: every rank loads the checkpoint onto its own card before DDP wraps the model, so the
    resume moment is one GPU's on each; the output says what the later phases leave out."""
    args = ["--no-search", "--nproc-per-node", "2", *_sets([*TINY, "init_from=resume"])]
    _, out = _check(capsys, *args)
    _, single = _check(capsys, "--no-search", *_sets([*TINY, "init_from=resume"]))
    assert out["phases"]["resume"]["peak_bytes"] == single["phases"]["resume"]["peak_bytes"]
    assert any("each rank's resume is predicted as one GPU's" in n for n in out["warnings"])
