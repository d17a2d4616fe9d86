"""Page run-moments: when the run dies later — resuming from a checkpoint, the first optimizer step,
sampling with sample.py (docs/en/run-moments.md).

Every figure of the page is what ``oomguide check`` says (its phases ``resume``, ``first_step`` and
``sample``): for the page's configs as they are (``check_says``, the page's own ``oomguide`` lines),
and, for the page's code changes (``map_location='cpu'`` in train.py or sample.py), for the code a
checkout with that change has (``check_with_code``: the same verdict, with what ``checkout.read``
finds in such a checkout), which examples/test_nanogpt.py checks to the byte against ``oomguide
check`` in a nanoGPT checkout with the change. Every snippet also runs in nanoGPT itself there:
train.py resumed from a checkpoint that a tiny run wrote, sample.py sampling from one
(``test_snippet_in_nanogpt``, ``test_sample_snippet_in_nanogpt``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shlex

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import SNIPPETS, check_json, check_says
from oomguide import loop, memory
from oomguide.config import load_config
from oomguide.model import GPT, GPTConfig

RESUME = "run-moments/resume-situation.py"
MAP_CPU = "run-moments/map-location-cpu.py"
FREE_STATE_DICT = "run-moments/free-state-dict.py"
FIRST = "run-moments/first-step-situation.py"
LARGE = "run-moments/first-step-large.py"
SAMPLE_MAP_CPU = "run-moments/sample-map-location-cpu.py"
SAMPLE_FEWER = "run-moments/sample-fewer.sh"
SAMPLE_FLOAT32 = "run-moments/sample-float32.sh"
SAMPLE_CPU = "run-moments/sample-cpu.sh"
CHECK_RESUME = "run-moments/check-resume.sh"
CHECK_FIRST = "run-moments/check-first-step.sh"
CHECK_SAMPLE = "run-moments/check-sample.sh"


RESUME_CARD = ("--gpu", "RTX 3080 10GB")
FIRST_CARD = ("--gpu", "RTX 4090")
SAMPLE_CARD = ("--gpu", "RTX 3070")


def check_lines(relative: str) -> list[list[str]]:
    """The `oomguide check` lines of a shell snippet, each as its arguments after `oomguide check`."""
    out = []
    for line in (SNIPPETS / relative).read_text(encoding="utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            assert words[:2] == ["oomguide", "check"], f"snippets/{relative}: {line}"
            out.append(words[2:])
    return out


def settings_of(relative: str) -> list[str]:
    """The --key=value settings of a snippet's `python sample.py ...` line, as `check --set` takes them."""
    (line,) = [ln for ln in (SNIPPETS / relative).read_text(encoding="utf-8").splitlines() if ln.strip()]
    words = shlex.split(line)
    assert words[:2] == ["python", "sample.py"], line
    return [w for arg in words[2:] for w in ("--set", arg[2:])]


def check_with_code(*argv: str, **code) -> dict:
    """`oomguide check ... --json --no-search` (as check_json runs it) for a nanoGPT checkout whose code
    is nanoGPT's with the page's change: `code` sets what ``checkout.read`` finds in such a checkout
    (``resume_to_cpu``: train.py's torch.load with map_location='cpu'; ``sample_to_cpu``: sample.py's)."""
    from oomguide import cli, verdict

    args = cli.build_parser().parse_args(["check", *argv, "--json", "--no-search"])
    run = verdict.prepare(cli.request_of(args))
    run = dataclasses.replace(run, code=dataclasses.replace(run.code, **code))
    return json.loads(json.dumps(verdict.verdict(run)))


def n_params(*snippets: str, snippet) -> int:
    config = snippet.config(*snippets)
    with torch.device("meta"):
        return sum(p.numel() for p in GPT(config.gpt_config()).parameters())


# --------------------------------------------------------------------------------------------
# resuming
# --------------------------------------------------------------------------------------------
def test_resume_as_nanogpt_does_it(snippet, figure, report):
    """train.py resumed: the checkpoint on the card next to the model while loading, and afterwards
    the copy of the weights that its global `state_dict` keeps, which makes the training step of
    a run that fits from scratch too large for the card."""
    assert check_lines(CHECK_RESUME) == [["config/train_gpt2_10gb.py", *RESUME_CARD]]
    config = snippet.config(RESUME)
    assert config.init_from == "resume"
    out = check_says(RESUME, argv=RESUME_CARD)
    scratch = check_says(RESUME, argv=(*RESUME_CARD, "--set", "init_from=scratch"))
    assert out["checkpoint"]["on_card"] is True and out["checkpoint"]["map_location"] == "device"
    loading = out["phases"]["resume"]
    weights, held = loading["breakdown"]["weights"], loading["breakdown"]["checkpoint"]
    assert weights == 4 * n_params(RESUME, snippet=snippet)  # float32
    # the weights and AdamW's two moments (and a one-element `step` per parameter)
    assert held == pytest.approx(3 * weights, rel=1e-4)
    assert loading["peak_moment"] == "model_to_device" and loading["fits"]
    figure("resume_card", out["usable_bytes"], "gib")
    figure("weights_bytes", weights, "gib")
    figure("checkpoint_bytes", held, "gib")
    figure("resume_peak", loading["peak_bytes"], "gib")
    train, fresh = out["phases"]["train_step"], scratch["phases"]["train_step"]
    kept = train["breakdown"]["weights"] - fresh["breakdown"]["weights"]
    assert kept == weights, "train.py's state_dict keeps the checkpoint's weights on the card"
    # the page's words: from scratch borderline; resumed, even the allocated peak is over the card
    assert fresh["verdict"] == "borderline", fresh
    assert train["verdict"] == "does_not_fit", "resumed, the training step does not fit"
    figure("scratch_train_peak", fresh["peak_bytes"], "gib")
    figure("scratch_train_reserved", fresh["reserved_bytes"], "gib")
    figure("resume_train_peak", train["peak_bytes"], "gib")
    figure("resume_train_reserved", train["reserved_bytes"], "gib")
    first = out["phases"]["estimate_loss_first"]
    figure("resume_first_eval_peak", first["peak_bytes"], "gib")
    figure("scratch_first_eval_peak", scratch["phases"]["estimate_loss_first"]["peak_bytes"], "gib")
    report(
        f"resume on {RESUME_CARD[1]}: loading {memory.fmt_bytes(loading['peak_bytes'])}, train step "
        f"{memory.fmt_bytes(train['peak_bytes'])} / {memory.fmt_bytes(train['reserved_bytes'])} reserved "
        f"(from scratch {memory.fmt_bytes(fresh['peak_bytes'])} / {memory.fmt_bytes(fresh['reserved_bytes'])})"
    )


def test_resume_with_the_checkpoint_on_the_cpu(figure, report):
    """With map_location='cpu' (and state_dict dropped), loading puts only the model and AdamW's state
    on the card, and the run afterwards is the run from scratch: same peaks, same verdict."""
    files = [str(SNIPPETS / RESUME)]
    out = check_with_code(*files, *RESUME_CARD, resume_to_cpu=True)
    scratch = check_says(RESUME, argv=(*RESUME_CARD, "--set", "init_from=scratch"))
    assert out["checkpoint"]["on_card"] is False
    loading = out["phases"]["resume"]
    assert "checkpoint" not in loading["breakdown"] or loading["breakdown"]["checkpoint"] == 0
    assert loading["breakdown"]["optimizer_state"] == pytest.approx(
        2 * loading["breakdown"]["weights"], rel=1e-4
    )
    figure("fixed_resume_peak", loading["peak_bytes"], "gib")
    for phase in ("train_step", "estimate_loss"):
        assert out["phases"][phase]["peak_bytes"] == scratch["phases"][phase]["peak_bytes"], phase
        assert out["phases"][phase]["reserved_bytes"] == scratch["phases"][phase]["reserved_bytes"], phase
    assert out["phases"]["train_step"]["verdict"] == scratch["phases"]["train_step"]["verdict"]
    figure("fixed_train_peak", out["phases"]["train_step"]["peak_bytes"], "gib")
    figure("fixed_first_eval_peak", out["phases"]["estimate_loss_first"]["peak_bytes"], "gib")
    report(
        f"resume with map_location='cpu': loading {memory.fmt_bytes(loading['peak_bytes'])}, train step "
        f"{memory.fmt_bytes(out['phases']['train_step']['peak_bytes'])} (= from scratch)"
    )


def test_the_resume_fixes_are_one_line_each(snippet):
    """What the reader pastes: one line each, in nanoGPT's spelling (run in nanoGPT by test_nanogpt.py)."""
    assert (
        snippet.path(MAP_CPU).read_text().startswith("checkpoint = torch.load(ckpt_path, map_location='cpu')")
    )
    assert snippet.path(FREE_STATE_DICT).read_text().startswith("state_dict = None")


# --------------------------------------------------------------------------------------------
# the first optimizer step
# --------------------------------------------------------------------------------------------
def test_adamw_creates_its_state_in_the_first_step():
    """The page's account of the first step, on real tensors: before it AdamW has no state and every
    gradient is alive; step() creates exp_avg and exp_avg_sq, each the size of its parameter, in
    float32; zero_grad(set_to_none=True) frees the gradients only afterwards."""
    torch.manual_seed(0)
    config = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64)
    model = GPT(config)
    optimizer = loop.make_optimizer(model, load_config([], []), "cpu")  # train.py's AdamW settings
    x, y = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    model(x, y)[1].backward()
    params = [p for p in model.parameters() if p.requires_grad]
    assert not optimizer.state and all(p.grad is not None for p in params)
    optimizer.step()
    for p in params:
        state = optimizer.state[p]
        for name in ("exp_avg", "exp_avg_sq"):
            assert state[name].shape == p.shape and state[name].dtype == torch.float32
        assert p.grad is not None
    state_bytes = sum(
        t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if t.dim()
    )
    assert state_bytes == 2 * sum(p.numel() * 4 for p in params)
    optimizer.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in params)


def test_first_step(snippet, figure, report):
    """GPT-2 XL's shape on a 24 GB card, batch 1: the first evaluation fits, the first optimizer step
    does not: weights, gradients and the new AdamW state alone nearly fill the card."""
    assert check_lines(CHECK_FIRST) == [["config/train_xl_24gb.py", *FIRST_CARD]]
    out = check_says(FIRST, argv=FIRST_CARD)
    params = n_params(FIRST, snippet=snippet)
    figure("xl_params", params, "millions")
    figure("xl_model_state", 16 * params, "gib")  # float32 weights, gradients, exp_avg, exp_avg_sq
    figure("first_card", out["usable_bytes"], "gib")
    assert 0.9 * out["usable_bytes"] < 16 * params < out["usable_bytes"]
    phases = out["phases"]
    assert phases["estimate_loss_first"]["fits"]
    step = phases["first_step"]
    assert not step["fits"] and step["peak_moment"] == "optimizer_step"
    assert step["breakdown"]["optimizer_state"] == pytest.approx(8 * params, rel=1e-4)
    assert step["breakdown"]["gradients"] == pytest.approx(4 * params, rel=1e-4), "every gradient is alive"
    figure("xl_first_eval_peak", phases["estimate_loss_first"]["peak_bytes"], "gib")
    figure("xl_first_step_peak", step["peak_bytes"], "gib")
    figure("xl_first_step_reserved", step["reserved_bytes"], "gib")
    figure("xl_train_peak", phases["train_step"]["peak_bytes"], "gib")
    assert not phases["train_step"]["fits"]
    # batch_size is 1 already: the step's peak is the model's state, whatever the batch
    assert snippet.config(FIRST).batch_size == 1
    # the fix that lowers it: fewer parameters (GPT-2 Large's shape)
    large = check_says(FIRST, LARGE, argv=FIRST_CARD)
    lparams = n_params(FIRST, LARGE, snippet=snippet)
    figure("large_params", lparams, "millions")
    figure("large_model_state", 16 * lparams, "gib")
    lphases = large["phases"]
    assert all(p["fits"] for p in lphases.values())
    figure("large_first_step_peak", lphases["first_step"]["peak_bytes"], "gib")
    figure("large_train_peak", lphases["train_step"]["peak_bytes"], "gib")
    figure("large_train_reserved", lphases["train_step"]["reserved_bytes"], "gib")
    report(
        f"first step on {FIRST_CARD[1]}: XL shape {memory.fmt_bytes(step['peak_bytes'])} / "
        f"{memory.fmt_bytes(step['reserved_bytes'])} reserved, does not fit; Large shape "
        f"{memory.fmt_bytes(lphases['first_step']['peak_bytes'])}, fits"
    )


# --------------------------------------------------------------------------------------------
# sampling
# --------------------------------------------------------------------------------------------
class _Casts(TorchDispatchMode):
    """Counts autocast's casts of the given tensors (aten._to_copy with one of them as input)."""

    def __init__(self, tensors):
        super().__init__()
        self.ids = {id(t) for t in tensors}
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and args and id(args[0]) in self.ids:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_autocast_keeps_a_low_precision_copy_of_the_weights_while_sampling():
    """sample.py samples every sequence inside one `with ctx:` (autocast): autocast caches its cast of
    each float32 weight until the outermost context exits (aten/src/ATen/autocast_mode.cpp,
    cached_cast: leaf tensors that require grad, which parameters do under no_grad too). Shown with
    CPU autocast, which uses the same cache: the second forward in the context casts no weight."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64)).eval()
    weights = [p for p in model.parameters() if p.dim() == 2]
    x = torch.randint(0, 64, (1, 8))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with _Casts(weights) as first:
            model(x)
        with _Casts(weights) as later:
            model(x)
            model(x[:, :4])
    assert first.count >= len(weights) - 1  # wte and lm_head are one tensor: cast once
    assert later.count == 0, "the copies stay for as long as the autocast context is open"
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), _Casts(weights) as again:
        model(x)
    assert again.count == first.count, "a new context casts again"


def test_sampling_gpt2_xl_on_an_8gb_card(figure, report):
    """sample.py with GPT-2 XL's weights: the float32 weights and autocast's bfloat16 copies do not fit
    an 8 GB card; in float32 (autocast off) the copies are gone and it fits. num_samples and
    max_new_tokens change the time, not the peak."""
    lines = check_lines(CHECK_SAMPLE)
    assert [a for a in lines[0] if a.startswith("init_from")] == ["init_from=gpt2-xl"]
    assert lines[1] == [*lines[0][:-2], *settings_of(SAMPLE_FLOAT32), *lines[0][-2:]]
    assert lines[2] == ["--sample", *SAMPLE_CARD]  # the reader's own checkpoint: below
    plain, f32 = check_json(*lines[0]), check_json(*lines[1])
    xl, xl32 = plain["phases"]["sample"], f32["phases"]["sample"]
    assert not xl["fits"] and xl32["fits"] and xl32["peak_bytes"] < xl["peak_bytes"]
    figure("sample_card", plain["usable_bytes"], "gib")
    figure("xl_sample_peak", xl["peak_bytes"], "gib")
    figure("xl_sample_reserved", xl["reserved_bytes"], "gib")
    figure("xl_sample_weights", xl["breakdown"]["weights"], "gib")
    figure("xl_f32_peak", xl32["peak_bytes"], "gib")
    figure("xl_f32_reserved", xl32["reserved_bytes"], "gib")
    figure("xl_f32_weights", xl32["breakdown"]["weights"], "gib")
    assert xl["breakdown"]["weights"] == pytest.approx(1.5 * xl32["breakdown"]["weights"], rel=0.01)
    fewer = check_json("--sample", "--set", "init_from=gpt2-xl", *settings_of(SAMPLE_FEWER), *SAMPLE_CARD)
    short = fewer["phases"]["sample"]
    figure("xl_fewer_peak", short["peak_bytes"], "gib")
    assert short["peak_bytes"] <= xl["peak_bytes"] and not short["fits"]
    assert xl["peak_bytes"] - short["peak_bytes"] < 0.01 * xl["peak_bytes"], "the peak barely moves"
    report(
        f"sample.py gpt2-xl on {SAMPLE_CARD[1]}: {memory.fmt_bytes(xl['peak_bytes'])} (bf16), "
        f"{memory.fmt_bytes(xl32['peak_bytes'])} (float32), {memory.fmt_bytes(short['peak_bytes'])} "
        "(1 sample of 100 tokens)"
    )


def test_sampling_on_the_cpu_is_not_a_card_question():
    """--device=cpu: sample.py puts nothing on a card; check says so rather than predicting a card."""
    from oomguide.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["check", "--sample", *settings_of(SAMPLE_CPU), *SAMPLE_CARD])
    assert rc == 2 and "device='cpu'" in err.getvalue() + out.getvalue()


def test_sampling_your_own_checkpoint(figure, report):
    """sample.py on the checkpoint of the page's GPT-2 Large-shaped run: unchanged, the checkpoint
    (weights and AdamW's state) stays on the card for the whole run next to the model; with
    map_location='cpu' only the model is there."""
    files = [str(SNIPPETS / FIRST), str(SNIPPETS / LARGE)]
    stock = check_says(FIRST, LARGE, argv=("--sample", *SAMPLE_CARD))
    fixed = check_with_code("--sample", *files, *SAMPLE_CARD, sample_to_cpu=True)
    assert stock["checkpoint"]["on_card"] is True and fixed["checkpoint"]["on_card"] is False
    mine, mine_fixed = stock["phases"]["sample"], fixed["phases"]["sample"]
    assert not mine["fits"] and mine_fixed["fits"]
    assert mine["breakdown"]["checkpoint"] == pytest.approx(3 * 4 * n_params_of(stock), rel=1e-4)
    figure("large_sample_peak", mine["peak_bytes"], "gib")
    figure("large_sample_checkpoint", mine["breakdown"]["checkpoint"], "gib")
    figure("large_sample_fixed_peak", mine_fixed["peak_bytes"], "gib")
    report(
        f"sample.py on the Large-shaped checkpoint, {SAMPLE_CARD[1]}: {memory.fmt_bytes(mine['peak_bytes'])} "
        f"as nanoGPT loads it, {memory.fmt_bytes(mine_fixed['peak_bytes'])} with map_location='cpu'"
    )


def n_params_of(out: dict) -> int:
    shape = out["shape"]
    config = GPTConfig(
        **{k: shape[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias")}
    )
    with torch.device("meta"):
        return sum(p.numel() for p in GPT(config).parameters())


# --------------------------------------------------------------------------------------------
# the page's oomguide lines, typed in a nanoGPT checkout as the page says
# --------------------------------------------------------------------------------------------
def _in_checkout(nanogpt, monkeypatch, snippets, argv, checkpoint=None) -> dict:
    from oomguide import placement

    folder = nanogpt.copy("moments-check")
    placement.apply_to(folder, snippets)
    if checkpoint is not None:  # out/ckpt.pt: check reads its model_args only
        (folder / "out").mkdir()
        torch.save({"model_args": checkpoint}, folder / "out" / "ckpt.pt")
    monkeypatch.chdir(folder)
    return check_json(*argv)


def same_peaks(theirs: dict, ours: dict, phases) -> None:
    for phase in phases:
        for key in ("peak_bytes", "reserved_bytes", "fits"):
            assert theirs["phases"][phase][key] == ours["phases"][phase][key], (phase, key)


def test_the_page_lines_say_what_the_page_prints(nanogpt, monkeypatch, report):
    """Each `oomguide check` line of the page, run in a copy of the reader's nanoGPT checkout with the
    page's config (and, for sample.py, a checkpoint of the page's Large-shaped run in out/), says what
    the page prints: what check says for the config (check_says), and with the page's code changes in
    the checkout, what check says for that code (check_with_code)."""
    (resume_line,) = check_lines(CHECK_RESUME)
    resume_files = [str(SNIPPETS / RESUME)]
    out = _in_checkout(nanogpt, monkeypatch, [RESUME], resume_line)
    same_peaks(out, check_says(RESUME, argv=RESUME_CARD), ("resume", "train_step", "estimate_loss_first"))
    fixed = _in_checkout(nanogpt, monkeypatch, [FREE_STATE_DICT], resume_line)
    assert fixed["checkpoint"]["on_card"] is False
    ours = check_with_code(*resume_files, *RESUME_CARD, resume_to_cpu=True)
    same_peaks(fixed, ours, ("resume", "train_step", "estimate_loss_first"))
    (first_line,) = check_lines(CHECK_FIRST)
    xl = _in_checkout(nanogpt, monkeypatch, [FIRST], first_line)
    same_peaks(xl, check_says(FIRST, argv=FIRST_CARD), ("first_step", "train_step"))
    large = _in_checkout(nanogpt, monkeypatch, [LARGE], first_line)
    same_peaks(large, check_says(FIRST, LARGE, argv=FIRST_CARD), ("first_step", "train_step"))
    own = check_lines(CHECK_SAMPLE)[-1]
    shape = dict(large["shape"])  # the model_args of the Large-shaped run's checkpoint
    mine = _in_checkout(nanogpt, monkeypatch, [], own, checkpoint=shape)
    assert mine["checkpoint"]["on_card"] is True
    same_peaks(mine, check_says(FIRST, LARGE, argv=("--sample", *SAMPLE_CARD)), ("sample",))
    mine_fixed = _in_checkout(nanogpt, monkeypatch, [SAMPLE_MAP_CPU], own, checkpoint=shape)
    sample_files = [str(SNIPPETS / FIRST), str(SNIPPETS / LARGE)]
    ours = check_with_code("--sample", *sample_files, *SAMPLE_CARD, sample_to_cpu=True)
    same_peaks(mine_fixed, ours, ("sample",))
    report("run-moments: every oomguide line of the page, run in nanoGPT, prints the page's figures")
