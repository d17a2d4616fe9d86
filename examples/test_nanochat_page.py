"""The figures of the page "Fitting nanochat on a card smaller than 80 GB" (docs/<lang>/nanochat.md).

examples/test_nanochat.py runs nanochat's own scripts with each nanochat snippet (the page's
claims about what a flag does); this module computes what the page prints about memory, all of it
with ``oomguide check --nanochat`` on the reader's checkout (``--nanochat PATH`` or
``OOMGUIDE_NANOCHAT``), called in this process (``oomguide.cli.main``, the command's own code) so
that the searches of one prediction share their runs (``memory.batches``):

- the table: the largest ``--device-batch-size`` of base_train's training step per depth and card,
  the peaks of base_train's CORE evaluation and of chat_cli's generation, and chat_sft's step; a
  row's five cards with ``check.verdicts``, the function behind the command given the row's five
  requests at once, so that their runs on fake tensors are made once (each card's answer is the
  command's own for that card alone: tests/test_nanochat_check.py);
- what gradient accumulation does: the speedrun's line and the page's halved line;
- each "below batch 1" option at ``--device-batch-size=1``, the Blocks' checkpointing in a copy of
  the checkout with the page's change to ``nanochat/gpt.py``;
- the oomguide lines the page shows (snippets/nanochat/check-*.sh), run as written.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
from pathlib import Path

import pytest

from oomguide import placement
from oomguide.cli import main
from oomguide.memory import gpus
from oomguide.nanochat.check import Request, fa3_for, verdicts

PAGE_FIGURES = "nanochat"
ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "snippets"

# the table's cards: the memory PyTorch reports for each (memory/gpus.json)
CARDS = {
    "12": "GeForce RTX 3060 12GB",
    "16": "GeForce RTX 4060 Ti 16GB",
    "24": "GeForce RTX 4090",
    "40": "A100 40GB",
    "80": "H100 80GB",
}
DEPTHS = (12, 20, 24, 26)
# every card of the table runs FA3 in bfloat16 (compute capability 8.0 to 9.0): the prediction is
# the same at each of these capabilities, so the table predicts them all at one, and the searches
# of one depth share their runs
CAPABILITY = "8.0"
TRAIN_ONLY = ["--eval-every=-1", "--core-metric-every=-1", "--sample-every=-1"]

_CACHE: dict = {}


def check(checkout, *argv: str, command: list[str], search: bool = True) -> dict:
    """`oomguide check --nanochat CHECKOUT ARGV --json -- COMMAND`, in this process, as a dict."""
    key = (str(checkout), argv, tuple(command), search)
    if key not in _CACHE:
        out = io.StringIO()
        words = [
            "check",
            "--nanochat",
            str(checkout),
            *argv,
            "--json",
            *([] if search else ["--no-search"]),
            "--",
            *command,
        ]
        with contextlib.redirect_stdout(out):
            rc = main(words)
        assert rc in (0, 1), out.getvalue()
        _CACHE[key] = json.loads(out.getvalue())
    return _CACHE[key]


def snippet_line(relative: str, checkout) -> list[str]:
    """An oomguide snippet's words, with the reader's checkout for ~/nanochat and $WANDB_RUN set."""
    text = (SNIPPETS / relative).read_text(encoding="utf-8").strip()
    assert "\n" not in text, f"{relative}: one line"
    words = shlex.split(text.replace("$WANDB_RUN", "dummy"))
    return [str(checkout) if w == "~/nanochat" else w for w in words]


def run_snippet(relative: str, checkout) -> dict:
    words = snippet_line(relative, checkout)
    assert words[:2] == ["oomguide", "check"] and "--" in words, relative
    sep = words.index("--")
    argv = words[2:sep]
    at = argv.index("--nanochat")
    return check(argv[at + 1], *argv[:at], *argv[at + 2 :], command=words[sep + 1 :])


def nanochat_line(relative: str) -> list[str]:
    """A nanochat snippet's command line (the words after its torchrun or python)."""
    return shlex.split(
        (SNIPPETS / relative).read_text(encoding="utf-8").strip().replace("$WANDB_RUN", "dummy")
    )


def with_batch(words: list[str], batch: int) -> list[str]:
    return [w for w in words if not w.startswith("--device-batch-size=")] + [f"--device-batch-size={batch}"]


def card_memory(size: str) -> str:
    return f"{gpus.find_gpu(CARDS[size]).total_memory / 2**30:.2f}GiB"


def card_args(size: str) -> tuple[str, ...]:
    return ("--gpu-memory", card_memory(size), "--capability", CAPABILITY)


def card_request(checkout, size: str, command: list[str]) -> Request:
    """The request ``check --nanochat CHECKOUT card_args(size) -- COMMAND`` makes (the options read
    by the command's own readers)."""
    memory, capability = gpus.card_memory(card_memory(size)), gpus.parse_capability(CAPABILITY)
    return Request(str(checkout), command, gpu_memory=memory, capability=capability)


_ROWS: dict = {}


def row(checkout, depth: int) -> dict:
    """A row of the table: base_train's line on the 12 GB card (every phase) and its training step
    alone on the others, as ``check --nanochat --json`` gives each (card size -> the output)."""
    key = (str(checkout), depth)
    if key not in _ROWS:
        sizes = list(CARDS)
        requests = [card_request(checkout, s, base(depth) + ([] if s == "12" else TRAIN_ONLY)) for s in sizes]
        outs = verdicts(requests)
        _ROWS[key] = {s: json.loads(json.dumps(out)) for s, out in zip(sizes, outs)}
    return _ROWS[key]


@pytest.fixture(scope="module")
def checkout(request):
    path = getattr(request.config, "_oomguide_nanochat", None)
    if path is None:
        pytest.skip("needs a nanochat checkout: pytest examples --nanochat PATH (or OOMGUIDE_NANOCHAT=PATH)")
    return path


def base(depth: int) -> list[str]:
    return ["python", "-m", "scripts.base_train", f"--depth={depth}"]


def test_every_card_runs_the_same_kernels():
    """The table predicts every card at one compute capability: each runs FA3 in bfloat16."""
    for name in CARDS.values():
        card = gpus.find_gpu(name)
        assert (8, 0) <= tuple(card.capability) < (10, 0) and fa3_for(card.capability, "bfloat16"), name


@pytest.mark.parametrize("depth", DEPTHS)
def test_table(checkout, figure, depth):
    """One row per depth: the largest device batch of the training step on each card, and the peaks
    of base_train's CORE evaluation and of chat_cli, which --device-batch-size does not batch."""
    cards = row(checkout, depth)
    full = cards["12"]
    assert full["phases"]["train_step"]["searched"] == "device_batch_size"
    figure(f"train_d{depth}_12", full["phases"]["train_step"]["max_batch_size"], "int")
    figure(f"core_d{depth}", full["phases"]["core"]["peak_bytes"], "gib")
    for size in ("16", "24", "40", "80"):
        out = cards[size]
        assert list(out["phases"]) == ["train_step"]
        figure(f"train_d{depth}_{size}", out["phases"]["train_step"]["max_batch_size"], "int")
    cli = check(
        checkout,
        *card_args("12"),
        "--from-base",
        " ".join(base(depth)),
        command=["python", "-m", "scripts.chat_cli"],
    )
    figure(f"chat_d{depth}", cli["phases"]["chat"]["peak_bytes"], "gib")


def test_chat_sft_steps_like_base_train(checkout, figure):
    """chat_sft trains the base model with base_train's optimizer: its step's peak and largest
    device batch are base_train's (d20, 24 GB)."""
    args = card_args("24")
    sft = check(
        checkout, *args, "--from-base", " ".join(base(20)), command=["python", "-m", "scripts.chat_sft"]
    )
    pre = row(checkout, 20)["24"]  # check CHECKOUT card_args("24") -- base(20) + TRAIN_ONLY
    assert sft["phases"]["train_step"]["peak_bytes"] == pre["phases"]["train_step"]["peak_bytes"]
    assert sft["phases"]["train_step"]["max_batch_size"] == pre["phases"]["train_step"]["max_batch_size"]
    figure("sft_total_batch", sft["total_batch_size"], "int")
    figure("sft_accum", sft["gradient_accumulation_steps"], "int")


def test_gradient_accumulation(checkout, figure):
    """The speedrun's line (the page's check-speedrun.sh) and the page's halved line: same total
    batch, twice the accumulation steps."""
    speedrun = run_snippet("nanochat/check-speedrun.sh", checkout)
    halved = check(
        checkout, "--gpu", "H100 80GB", command=nanochat_line("nanochat/device-batch-size.sh"), search=False
    )
    assert halved["device_batch_size"] * 2 == speedrun["device_batch_size"] == 16
    assert halved["total_batch_size"] == speedrun["total_batch_size"]
    assert halved["gradient_accumulation_steps"] == 2 * speedrun["gradient_accumulation_steps"]
    figure("speedrun_total_batch", speedrun["total_batch_size"], "int")
    figure("speedrun_accum", speedrun["gradient_accumulation_steps"], "int")
    figure("halved_accum", halved["gradient_accumulation_steps"], "int")
    figure("speedrun_tokens_micro", speedrun["device_batch_size"] * speedrun["shape"]["sequence_len"], "int")
    figure("speedrun_train_peak", speedrun["phases"]["train_step"]["peak_bytes"], "gib")
    figure("halved_train_peak", halved["phases"]["train_step"]["peak_bytes"], "gib")


# the "below batch 1" options: each nanochat line of the page at --device-batch-size=1, per rank
OPTIONS = {
    "seq": "nanochat/max-seq-len.sh",
    "window": "nanochat/window-pattern.sh",
    "depth": "nanochat/depth.sh",
}


def peaks(out: dict) -> dict:
    return {name: phase["peak_bytes"] for name, phase in out["phases"].items()}


def test_below_batch_1(checkout, figure, tmp_path):
    """Each option's training-step peak at --device-batch-size=1 against the speedrun line's, per rank
    of the speedrun's eight, on the 80 GB card (FA3) and, for the window pattern, a card without FA3."""
    card = ("--gpu", "H100 80GB")
    speedrun = with_batch(nanochat_line("nanochat/device-batch-size.sh"), 1)
    stock = check(checkout, *card, command=speedrun, search=False)
    figure("b1_train", stock["phases"]["train_step"]["peak_bytes"], "gib")
    figure("b1_core", stock["phases"]["core"]["peak_bytes"], "gib")
    # at batch 1 the training step is the run's highest phase: leaving CORE out lowers no peak here
    assert stock["phases"]["core"]["peak_bytes"] < stock["phases"]["train_step"]["peak_bytes"]
    figure("b1_accum", stock["gradient_accumulation_steps"], "int")
    for key, rel in OPTIONS.items():
        # the training step alone: its peak does not depend on the evaluations after it
        out = check(checkout, *card, command=with_batch(nanochat_line(rel), 1) + TRAIN_ONLY, search=False)
        saved = stock["phases"]["train_step"]["peak_bytes"] - out["phases"]["train_step"]["peak_bytes"]
        if key == "window":  # FA3's windows cost nothing: the pattern changes no peak on this card
            assert saved == 0, saved
            continue
        assert saved > 0, (key, saved)
        figure(f"b1_{key}_saved", saved, "gib")
        if key == "seq":
            assert out["total_batch_size"] == stock["total_batch_size"]
            figure("b1_seq_accum", out["gradient_accumulation_steps"], "int")
    # without FA3 (fp8 and FA3 need a card of compute capability 8.9/9.0; here an SDPA card)
    sdpa = ("--gpu-memory", "24GiB", "--capability", "7.5")
    ssl = check(checkout, *sdpa, command=speedrun + TRAIN_ONLY, search=False)
    full = check(
        checkout, *sdpa, command=with_batch(nanochat_line(OPTIONS["window"]), 1) + TRAIN_ONLY, search=False
    )
    figure(
        "b1_window_saved_sdpa",
        ssl["phases"]["train_step"]["peak_bytes"] - full["phases"]["train_step"]["peak_bytes"],
        "gib",
    )
    # the Blocks recomputed in backward: the page's change, in a copy of the checkout
    copy = tmp_path / "nanochat"
    shutil.copytree(
        checkout, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv", "dev", "*.ipynb")
    )
    applied = placement.apply_to(copy, ["nanochat/checkpoint-blocks.py"])[2]
    assert applied == ["nanochat/checkpoint-import.py", "nanochat/checkpoint-blocks.py"], applied
    ckpt = check(copy, *card, command=speedrun + TRAIN_ONLY, search=False)
    saved = stock["phases"]["train_step"]["peak_bytes"] - ckpt["phases"]["train_step"]["peak_bytes"]
    assert saved > 0, saved
    figure("b1_ckpt_saved", saved, "gib")
    figure("b1_ckpt_train", ckpt["phases"]["train_step"]["peak_bytes"], "gib")


def test_page_lines(checkout, figure):
    """The oomguide lines the page shows, run as written (with the reader's checkout for ~/nanochat)."""
    one = run_snippet("nanochat/check-one-card.sh", checkout)
    figure("one_card_max", one["phases"]["train_step"]["max_batch_size"], "int")
    assert one["device_batch_size"] == 32 and not one["phases"]["train_step"]["fits"]
    speedrun = run_snippet("nanochat/check-speedrun.sh", checkout)
    assert speedrun["world_size"] == 8 and speedrun["device_batch_size"] == 16
    assert speedrun["fits"], "the page says the speedrun's line fits its eight H100s"
    figure("speedrun_core", speedrun["phases"]["core"]["peak_bytes"], "gib")
    figure("speedrun_max", speedrun["phases"]["train_step"]["max_batch_size"], "int")
    # issue #443: depth 20, device batch 32, 8 x H100 80GB
    i443 = run_snippet("nanochat/check-443.sh", checkout)
    step = i443["phases"]["train_step"]
    assert step["fits"], "the page says the reporter's line fits with this checkout's vocabulary"
    figure("i443_peak", step["peak_bytes"], "gib")
    figure("i443_max", step["max_batch_size"], "int")
    figure("i443_vocab", i443["shape"]["vocab_size"], "int")
    # the buffer of the report: (B*T, V) in bfloat16 with the vocabulary the reporter names (65536)
    figure("i443_buffer", 32 * i443["shape"]["sequence_len"] * 65536 * 2, "gib")
    figure("i443_buffer_here", 32 * i443["shape"]["sequence_len"] * i443["shape"]["vocab_size"] * 2, "gib")
    # pull request #237: device batch 4 on one 24 GB card
    p237 = run_snippet("nanochat/check-237.sh", checkout)
    assert p237["phases"]["train_step"]["fits"], "the page says pull request #237's batch fits"
    figure("p237_peak", p237["phases"]["train_step"]["peak_bytes"], "gib")
    figure("p237_max", p237["phases"]["train_step"]["max_batch_size"], "int")
