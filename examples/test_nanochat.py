"""nanochat's own scripts, run for real on the CPU at a tiny scale, and every nanochat snippet in them.

``pytest examples --nanochat PATH`` (or ``OOMGUIDE_NANOCHAT=PATH``; CI: ``../shared/nanochat``).
A copy of the reader's checkout gets locally written data and a tokenizer trained by its own
``scripts.tok_train``; then the lines of its ``runs/speedrun.sh`` run as they are, scaled down
(examples/nanochat_checkout.py): base_train, base_eval on its checkpoint, chat_sft, chat_cli. Each
snippet of ``snippets/nanochat/`` goes where ``snippets/placement.toml`` says and runs the same way,
and what it claims is checked from outside, on what the script prints and on the forwards
examples/nanochat_run.py records:

- a changed ``--device-batch-size`` / ``--max-seq-len`` reaches the micro-steps (their shape), while
  ``--total-batch-size`` stays and only the gradient accumulation steps change;
- ``--window-pattern=L``: the model's windows and nanochat's SDPA warning;
- ``--depth``: the layers and the parameter count nanochat prints;
- ``--core-metric-every=-1``: no CORE evaluation in training, the same training step;
- base_eval's and chat_sft's ``--device-batch-size``: the batch of their forwards;
- the checkpointed Blocks: each Block runs twice per training forward, and the loss and the
  validation after the step are the stock run's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nanochat_checkout import DEPTH_SCALE, REFERENCE_BATCH, SEQ_SCALE, flags, parse_command
from oomguide import placement

ROOT = Path(__file__).resolve().parents[1]
PLACEMENTS = placement.load()
NANOCHAT = sorted(s for s, p in PLACEMENTS.items() if p.program == "nanochat")
SHELL = {
    s: (ROOT / "snippets" / s).read_text(encoding="utf-8") for s in NANOCHAT if PLACEMENTS[s].kind == "shell"
}
BASE_TRAIN = sorted(s for s, text in SHELL.items() if parse_command(text)[0] == "scripts.base_train")
CHECKPOINTED = "nanochat/checkpoint-blocks.py"
SDPA_WINDOW_WARNING = "SDPA has no support for sliding window attention"


@pytest.fixture(scope="module")
def nc(nanochat):
    """The runs every test here reads, started two at a time in the background: the compiled run,
    the longest by far, first, so that every other run (and the runs of the tests that follow a
    checkpoint, made as they come) goes beside it."""
    nanochat.prepare()
    jobs = [
        *compile_check(nanochat),
        {},
        *({"snippets": (s,)} for s in BASE_TRAIN),
        {"snippets": (CHECKPOINTED,)},
    ]
    nanochat.prefetch(jobs)
    return nanochat


def typed(rel: str) -> dict:
    return flags(parse_command(SHELL[rel], {"WANDB_RUN": "dummy"})[1])


def check_base_train(run):
    """What every tiny base_train run must show: the settings it was given, in the shapes it ran."""
    assert run.ok, run.explain()
    given = flags(run.argv)
    batch, seq = int(given["device-batch-size"]), int(given["max-seq-len"])
    total, steps = run.accumulation
    assert run.micro_batch == (batch, seq)
    assert total == int(given["total-batch-size"]) and steps == total // (batch * seq)
    assert run.model_config["sequence_len"] == seq and run.model_config["n_layer"] == int(given["depth"])
    train = run.forwards(training=True, grad=True)
    assert len(train) == steps, f"{len(train)} training forwards for one step of {steps} micro-steps"
    assert {tuple(f["shape"]) for f in train} == {(batch, seq)}
    evals = run.forwards(targets=True, training=False)
    assert evals and {tuple(f["shape"]) for f in evals} == {(batch, seq)}  # validation bpb: 1 batch each
    assert all(math.isfinite(x) for x in run.losses) and len(run.losses) == 1


# --------------------------------------------------------------------------------------------
# nanochat as the reader runs it
# --------------------------------------------------------------------------------------------


def test_tokenizer_trained_by_tok_train(nc):
    tokenizer = nc.prepare() / "tokenizer"
    assert (tokenizer / "tokenizer.pkl").is_file() and (tokenizer / "token_bytes.pt").is_file()
    assert "vocab_size: 512" in nc.tok_train_output


def test_speedrun_base_train_line(nc, report):
    """runs/speedrun.sh's base_train line, unchanged but for the scale: it trains a step, validates,
    runs the CORE evaluation on the uncompiled model, samples with the KV cache and saves."""
    run = nc.run()
    check_base_train(run)
    assert "--fp8" in run.argv
    assert "Warning: FP8 training requires CUDA, ignoring --fp8 flag" in run.output
    assert run.accumulation[0] == REFERENCE_BATCH // SEQ_SCALE
    assert run.model_config["window_pattern"] == "SSSL" and SDPA_WINDOW_WARNING in run.output
    assert run.line(r"Step 00001 \| CORE metric: (-?[\d.]+)")
    assert run.record["kv_caches"] and run.forwards(kv_cache=True)  # the samples
    assert list((run.base / "base_checkpoints").glob("d*/model_000001.pt"))
    report(
        f"nanochat base_train (speedrun line, tiny): {run.parameters['total']:,} parameters, "
        f"micro-batch {run.micro_batch}, accumulation {run.accumulation}, loss {run.losses[0]:.4f}"
    )


def test_speedrun_base_eval_line(nc):
    stock = nc.run()
    run = nc.run(command=speedrun_line(nc, "scripts.base_eval"), after=stock)
    assert run.ok, run.explain()
    batch, seq = int(flags(run.argv)["device-batch-size"]), stock.model_config["sequence_len"]
    bpb = run.forwards(targets=True, kv_cache=False)
    assert len(bpb) == 2 and {tuple(f["shape"]) for f in bpb} == {(batch, seq)}  # train and val split
    assert run.line(r"CORE metric: (-?[\d.]+)") and run.forwards(kv_cache=True)


def test_speedrun_chat_sft_line_and_chat_cli(nc):
    stock = nc.run()
    sft = nc.run(command=speedrun_line(nc, "scripts.chat_sft"), after=stock)
    assert sft.ok, sft.explain()
    assert sft.line(r"Inherited device_batch_size=(\d+) from pretrained checkpoint")[1] == str(
        stock.micro_batch[0]
    )
    assert sft.accumulation == stock.accumulation  # inherited: the same total and micro-batch
    # --num-iterations=2 counts batches drawn, so the first step's micro-steps end the run: one step
    assert len(sft.forwards(training=True, grad=True)) == sft.accumulation[1]
    assert list((sft.base / "chatsft_checkpoints").glob("d*/model_*.pt"))
    cli = nc.run(command='python -m scripts.chat_cli -p "Why is the sky blue?"', after=sft)
    assert cli.ok, cli.explain()
    assert "Assistant:" in cli.output and cli.record["kv_caches"]
    decode = [f for f in cli.forwards(kv_cache=True) if f["shape"][1] == 1]
    assert decode, "no single-token decode steps through the KV cache"


def speedrun_line(nc, module: str) -> str:
    from nanochat_checkout import speedrun_line as line

    return line(nc.source, module)


# --------------------------------------------------------------------------------------------
# the chapter's snippets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", BASE_TRAIN)
def test_base_train_snippet(nc, report, relative):
    stock, run = nc.run(), nc.run(relative)
    check_base_train(run)
    given = typed(relative)
    batch = int(given.get("device-batch-size", 32))
    seq = int(given.get("max-seq-len", 2048)) // SEQ_SCALE
    assert run.micro_batch == (batch, seq)
    assert run.model_config["n_layer"] == max(2, int(given.get("depth", 20)) // DEPTH_SCALE)
    assert run.model_config["window_pattern"] == given.get("window-pattern", "SSSL")
    # --total-batch-size kept: only the accumulation follows the tokens of a micro-step
    assert run.accumulation[0] == stock.accumulation[0]
    ratio = (stock.micro_batch[0] * stock.micro_batch[1]) / (batch * seq)
    assert run.accumulation[1] == stock.accumulation[1] * ratio
    claims = CLAIMS.get(relative)
    if claims:
        claims(run, stock)
    report(
        f"nanochat {relative}: micro-batch {run.micro_batch}, total {run.accumulation[0]:,} tokens, "
        f"{run.accumulation[1]} accumulation steps (stock {stock.accumulation[1]}), "
        f"{run.parameters['total']:,} parameters"
    )


def window_pattern(run, stock):
    assert SDPA_WINDOW_WARNING not in run.output and SDPA_WINDOW_WARNING in stock.output
    seq = run.model_config["sequence_len"]
    assert {tuple(w) for w in run.record["window_sizes"]} == {(seq, 0)}
    assert {tuple(w) for w in stock.record["window_sizes"]} != {(seq, 0)}  # S layers: shorter windows


def depth(run, stock):
    assert run.model_config["n_layer"] < stock.model_config["n_layer"]
    assert run.parameters["total"] < stock.parameters["total"]


def core_metric_off(run, stock):
    assert not run.lines(r"CORE metric") and stock.line(r"CORE metric: (-?[\d.]+)")
    # the CORE evaluation runs the uncompiled model on prompts of changing length; none here
    core = {f["shape"][1] for f in stock.forwards(targets=False, kv_cache=False)}
    assert core and not run.forwards(targets=False, kv_cache=False)
    assert run.losses == stock.losses  # the training step itself is unchanged


CLAIMS = {
    "nanochat/window-pattern.sh": window_pattern,
    "nanochat/depth.sh": depth,
    "nanochat/core-metric-off.sh": core_metric_off,
}


def test_checkpointed_blocks(nc, report):
    stock, run = nc.run(), nc.run(CHECKPOINTED)
    check_base_train(run)
    assert run.snippets == ["nanochat/checkpoint-import.py", CHECKPOINTED]
    n_layer = run.model_config["n_layer"]
    train = len(run.forwards(training=True, grad=True))
    assert run.record["block_calls"]["training"] == 2 * n_layer * train  # each Block recomputed once
    assert stock.record["block_calls"]["training"] == n_layer * train
    assert run.losses == stock.losses
    assert run.lines(r"Validation bpb: ([\d.]+)")[-1][1] == stock.lines(r"Validation bpb: ([\d.]+)")[-1][1]
    report(
        f"nanochat {CHECKPOINTED}: {run.record['block_calls']['training']} Block calls in training "
        f"(stock {stock.record['block_calls']['training']}), loss {run.losses[0]} = stock's"
    )


def test_base_eval_batch(nc, report):
    stock = nc.run()
    line = nc.run(command=speedrun_line(nc, "scripts.base_eval"), after=stock)
    run = nc.run("nanochat/base-eval-batch.sh", after=stock)
    assert run.ok, run.explain()
    seq = stock.model_config["sequence_len"]
    bpb = {tuple(f["shape"]) for f in run.forwards(targets=True, kv_cache=False)}
    assert bpb == {(int(typed("nanochat/base-eval-batch.sh")["device-batch-size"]), seq)}
    assert {tuple(f["shape"]) for f in line.forwards(targets=True, kv_cache=False)} == {(16, seq)}
    # the CORE evaluation and the samples are not batched by the flag: the same forwards either way
    others = [tuple(f["shape"]) for f in run.forwards(targets=False)]
    assert others == [tuple(f["shape"]) for f in line.forwards(targets=False)]
    report(f"nanochat base-eval-batch.sh: bpb forwards {sorted(bpb)} (speedrun line: 16 rows)")


def test_sft_device_batch_size(nc, report):
    stock = nc.run()
    line = nc.run(command=speedrun_line(nc, "scripts.chat_sft"), after=stock)
    run = nc.run("nanochat/sft-device-batch-size.sh", after=stock)
    assert run.ok, run.explain()
    batch = int(typed("nanochat/sft-device-batch-size.sh")["device-batch-size"])
    assert run.line(rf"NOTE: --device-batch-size={batch} overrides pretrained value of (\d+)")[1] == str(
        stock.micro_batch[0]
    )
    assert run.micro_batch == (batch, stock.micro_batch[1])
    assert run.accumulation[0] == line.accumulation[0]
    assert run.accumulation[1] == line.accumulation[1] * line.micro_batch[0] // batch
    assert {tuple(f["shape"]) for f in run.forwards(training=True, grad=True)} == {run.micro_batch}
    report(
        f"nanochat sft-device-batch-size.sh: accumulation {run.accumulation} (speedrun line {line.accumulation})"
    )


# the base_train lines, each run by test_base_train_snippet (with its claim in CLAIMS where it has one)
BASE_TRAIN_LINES = (
    "nanochat/core-metric-off.sh",
    "nanochat/depth.sh",
    "nanochat/device-batch-size.sh",
    "nanochat/max-seq-len.sh",
    "nanochat/window-pattern.sh",
)


# Inductor compiles nanochat's GPT layer by layer: about 80 s of CPU for the 6 layers of the tiny
# speedrun line, about 30 s for 2 (measured on 2 cores), so this check runs the speedrun line at 2 layers;
# its run starts first and its test comes last, so that the runs of the tests above go on beside it
def compile_check(nc) -> list[dict]:
    """The speedrun line at --depth=8 (2 layers at the tiny scale), compiled and eager."""
    line = f"{speedrun_line(nc, 'scripts.base_train')} --depth=8"
    return [{"command": line, "compiled": True}, {"command": line}]


def test_compiled_as_nanochat_compiles(nc, report):
    """The speedrun line with nanochat's torch.compile on gives the numbers of the eager runs the
    other tests make (which record the forwards from outside), so those stand for the compiled run."""
    compiled, eager = (nc.run(**kwargs) for kwargs in compile_check(nc))
    assert compiled.ok, compiled.explain()
    assert compiled.accumulation == eager.accumulation and compiled.micro_batch == eager.micro_batch
    assert math.isclose(compiled.losses[0], eager.losses[0], rel_tol=1e-4)
    bpb = [float(m[1]) for m in compiled.lines(r"Validation bpb: ([\d.]+)")]
    assert bpb == pytest.approx([float(m[1]) for m in eager.lines(r"Validation bpb: ([\d.]+)")], rel=1e-4)
    report(f"nanochat base_train compiled: loss {compiled.losses[0]:.6f}, eager {eager.losses[0]:.6f}")


def test_every_nanochat_snippet_is_run_here():
    """Each nanochat snippet is run by a test of this module (a new one needs its test)."""
    assert tuple(BASE_TRAIN) == BASE_TRAIN_LINES
    ran = {
        *BASE_TRAIN_LINES,
        CHECKPOINTED,
        "nanochat/checkpoint-import.py",
        "nanochat/base-eval-batch.sh",
        "nanochat/sft-device-batch-size.sh",
    }
    assert set(NANOCHAT) == ran


def test_the_checks_have_teeth(nc):
    """Each snippet's check fails on the speedrun's own line: it sees the snippet, not just a run."""
    stock = nc.run()
    for claim in CLAIMS.values():
        with pytest.raises(AssertionError):
            claim(stock, stock)
    n_layer = stock.model_config["n_layer"]
    assert stock.record["block_calls"]["training"] != 2 * n_layer * len(
        stock.forwards(training=True, grad=True)
    )
    for relative in BASE_TRAIN_LINES:  # each line changes a setting the stock run prints otherwise
        given = typed(relative)
        changed = (
            int(given.get("device-batch-size", 32)) != stock.micro_batch[0]
            or int(given.get("max-seq-len", 2048)) // SEQ_SCALE != stock.micro_batch[1]
            or given.get("window-pattern", "SSSL") != stock.model_config["window_pattern"]
            or max(2, int(given.get("depth", 20)) // DEPTH_SCALE) != stock.model_config["n_layer"]
            or relative in CLAIMS
        )
        assert changed, f"{relative} changes nothing that the checks would see"


def test_a_wrong_placement_fails(nc):
    """The checks have teeth: the checkpointed line placed elsewhere is refused, or caught by its test."""
    source = (nc.source / "nanochat" / "gpt.py").read_text(encoding="utf-8")
    text = (ROOT / "snippets" / CHECKPOINTED).read_text(encoding="utf-8")
    missing = placement.Placement(CHECKPOINTED, "replace_line", "nanochat/gpt.py", "x = block(x)")
    with pytest.raises(placement.PlacementError, match="has no line"):
        placement.apply(missing, text, source)
