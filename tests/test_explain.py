"""`oomguide explain`: both OOM formats, the tensor behind the request, the diagnosis, the links.

Every message here is built by `new_message` / `old_message` from byte figures, with sizes printed the
way PyTorch's ``format_size`` prints them (written out again below, independently of oomguide's).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oomguide import explain as ex
from oomguide import memory
from oomguide.cli import main
from oomguide.config import load_config
from oomguide.explain import links
from oomguide.i18n import gettext_for

ROOT = Path(__file__).resolve().parents[1]
KiB, MiB, GiB = 1024, 1024**2, 1024**3
LOGITS_6_14 = 6_593_445_888  # 32·1024·50304·4 = 64·1024·50304·2 (nanoGPT issue #88)
LOGITS_394 = 412_090_368  # 2·1024·50304·4 (nanoGPT issue #88), printed rounded up to 2 MiB
GPT2_XL_PARAMS = 1_557_611_200
CARD_24GB = int(23.69 * GiB)  # what PyTorch reports for a "24 GB" card (RTX 3090/4090)


# --- messages, built like PyTorch builds them ------------------------------------------------
def fmt(n: int) -> str:
    """c10's format_size: bytes up to 1 KiB, then KiB / MiB / GiB with two decimals."""
    if n <= 1024:
        return f"{n} bytes"
    for limit, unit, div in ((MiB, "KiB", KiB), (GiB, "MiB", MiB)):
        if n <= limit:
            return f"{n / div:.2f} {unit}"
    return f"{n / GiB:.2f} GiB"


def new_message(req, capacity, free, in_use, allocated, unallocated, processes=(), capacity_word="capacity"):
    """The 2.1+ message (with optional "Process N has X memory in use." lines for other processes)."""
    others = "".join(f"Process {pid} has {fmt(n)} memory in use. " for pid, n in processes)
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {fmt(req)}. GPU 0 has a total "
        f"{capacity_word} of {fmt(capacity)} of which {fmt(free)} is free. {others}Including non-PyTorch memory, "
        f"this process has {fmt(in_use)} memory in use. Of the allocated memory {fmt(allocated)} is allocated "
        f"by PyTorch, and {fmt(unallocated)} is reserved by PyTorch but unallocated. If reserved but unallocated "
        "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
        "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-"
        "variables)\n"
    )


def old_message(req, capacity, allocated, free, reserved):
    """The pre-2.1 message."""
    return (
        f"RuntimeError: CUDA out of memory. Tried to allocate {fmt(req)} (GPU 0; {fmt(capacity)} total capacity; "
        f"{fmt(allocated)} already allocated; {fmt(free)} free; {fmt(reserved)} reserved in total by PyTorch) If "
        "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
        "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
    )


def traceback(message: str, in_eval: bool = True) -> str:
    frames = [
        'Traceback (most recent call last):\n  File "/home/me/nanoGPT/train.py", line 264, in <module>\n',
        "    losses = estimate_loss()\n" if in_eval else "    scaler.scale(loss).backward()\n",
    ]
    if in_eval:
        frames.append(
            '  File "/home/me/nanoGPT/train.py", line 223, in estimate_loss\n    logits, loss = model(X, Y)\n'
        )
    frames.append('  File "/home/me/nanoGPT/model.py", line 185, in forward\n    logits = self.lm_head(x)\n')
    return "".join(frames) + message


def msg_6_14(capacity=int(15.77 * GiB)):
    """nanoGPT issue #88: a 16 GB card, the (B·T, V) buffer of 6.14 GiB does not fit."""
    allocated = int(9.10 * GiB)
    return new_message(segment(LOGITS_6_14), capacity, int(5.50 * GiB), int(9.75 * GiB), allocated, 200 * MiB)


def segment(n):
    return memory.segment_size(n)


def run_main(capsys, *argv, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(["explain", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def message_file(tmp_path):
    def write(text: str, name: str = "ex.txt") -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write


# --- sizes as PyTorch prints them -----------------------------------------------------------
def test_format_size_is_pytorchs():
    for n in (0, 512, 1024, 1025, 20 * MiB, MiB, MiB + 1, GiB, GiB + 1, LOGITS_394, LOGITS_6_14):
        assert ex.format_size(n) == fmt(n)
    assert fmt(segment(LOGITS_394)) == "394.00 MiB"  # 393 MiB rounded up to the allocator's 2 MiB
    assert LOGITS_6_14 % (2 * MiB) == 0 and fmt(segment(LOGITS_6_14)) == "6.14 GiB"
    assert fmt(segment(4 * MiB)) == "20.00 MiB" and fmt(segment(512)) == "2.00 MiB"


# --- https://github.com/karpathy/nanoGPT/issues/88: 6.14 GiB ----------------------------------
def test_6_14_gib_is_logits_at_batch_32_float32_and_batch_64_bf16():
    result = ex.explain(msg_6_14())
    assert result.matched_by == "search"
    found = {(m["dtype"], m["batch_size"], m["block_size"], m["vocab_size"]): m for m in result.matches}
    bf16 = found[(ex.SIXTEEN_BIT, 64, 1024, 50304)]
    fp32 = found[("float32", 32, 1024, 50304)]
    assert bf16["bytes"] == fp32["bytes"] == LOGITS_6_14 == 64 * 1024 * 50304 * 2 == 32 * 1024 * 50304 * 4
    assert bf16["shape"] == [65536, 50304] and fp32["shape"] == [32768, 50304]
    assert result.matches[0] is bf16 and result.matches[1] is fp32  # block 1024, vocab 50304 first
    text = ex.render(result, "en")
    assert (
        "batch 64 × block 1024 × vocab 50,304 × 2 bytes (bfloat16/float16) = 6,593,445,888 bytes → 6.14 GiB"
        in text
    )
    assert "batch 32 × block 1024 × vocab 50,304 × 4 bytes (float32) = 6,593,445,888 bytes → 6.14 GiB" in text
    assert result.diagnosis == ["too_little_memory"]


def test_6_14_gib_with_a_config_names_that_configs_bf16_logits(capsys, message_file):
    path = message_file(msg_6_14())
    rc, out, err = run_main(
        capsys, path, "--set", "batch_size=64", "--set", "dtype=bfloat16", "--no-predict", "--json"
    )
    assert rc == 0, err
    data = json.loads(out)
    assert data["matched_by"] == "config"
    assert data["matches"] == [
        {
            "tensor": "logits",
            "shape": [65536, 50304],
            "dtype": "bfloat16",
            "bytes": LOGITS_6_14,
            "batch_size": 64,
            "block_size": 1024,
            "vocab_size": 50304,
        }
    ]
    assert "prediction" not in data
    assert all(
        isinstance(v, int) for k, v in data["figures"].items() if k.endswith("_bytes") and v is not None
    )
    assert data["figures"]["requested_bytes"] == pytest.approx(LOGITS_6_14, abs=0.005 * GiB)
    assert data["diagnosis"] == ["too_little_memory"] and data["links"]
    rc, out, _ = run_main(capsys, path, "--set", "batch_size=64", "--no-predict")
    assert "In this config, 6.14 GiB is the size of:" in out
    assert "the (B·T, V) logits: shape (65536, 50304), bfloat16, 6,593,445,888 bytes → 6.14 GiB" in out


# --- nanoGPT issue #88: 394.00 MiB ------------------------------------------------------------
def test_394_mib_is_the_float32_copy_at_batch_2(capsys, message_file):
    capacity = int(15.75 * GiB)
    message = old_message(segment(LOGITS_394), capacity, int(14.20 * GiB), int(250 * MiB), int(14.30 * GiB))
    plain = ex.explain(message)
    assert {
        "dtype": "float32",
        "batch_size": 2,
        "block_size": 1024,
        "vocab_size": 50304,
        "bytes": LOGITS_394,
    }.items() <= next(m for m in plain.matches if m["dtype"] == "float32").items()

    # with the config of the report, and the engine's prediction for both phases on the card of the message
    path = message_file(message)
    rc, out, err = run_main(capsys, path, "--set", "batch_size=2", "--set", "dtype=float16", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert [(m["tensor"], m["shape"], m["dtype"], m["bytes"], m["batch_size"]) for m in data["matches"]] == [
        ("logits_float32", [2048, 50304], "float32", LOGITS_394, 2)
    ]
    prediction = data["prediction"]
    assert prediction["gpu_memory_bytes"] == data["figures"]["capacity_bytes"]
    assert set(prediction["phases"]) == {"estimate_loss_first", "first_step", "train_step", "estimate_loss"}
    for phase in prediction["phases"].values():
        assert phase["peak_bytes"] > 0 and phase["fits"] in (True, False)
        assert phase["fits"] or phase["failing_allocation_bytes"] > 0


# --- https://github.com/karpathy/nanoGPT/issues/208: gpt2-xl, batch 1, a 24 GB card -------------
def test_gpt2_xl_model_states_against_a_24gb_card(capsys, message_file):
    message = new_message(2 * MiB, CARD_24GB, 1 * MiB, int(23.67 * GiB), int(23.21 * GiB), 150 * MiB)
    config = load_config([], ["init_from=gpt2-xl", "batch_size=1"])
    result = ex.explain(message, config, predict=False)
    states = result.model_states
    assert states["parameters"] == GPT2_XL_PARAMS
    assert states["states_bytes"] == 16 * GPT2_XL_PARAMS == 24_921_779_200  # 24.92 GB = 23.21 GiB
    # 23.21 GiB alone stays below the 23.69 GiB card (and the 23.44 GiB left after the CUDA context) ...
    assert states["states_bytes"] < memory.usable_bytes(CARD_24GB) < CARD_24GB
    # ... but not with autocast's bf16 copies of the Linear weights (2 bytes each): 26.11 GiB
    assert states["states_bytes"] + states["autocast_copies_bytes"] > CARD_24GB
    assert result.diagnosis[0] == "model_states_with_copies_exceed_card"
    assert "model_states_exceed_card" not in result.diagnosis
    text = ex.render(result, "en")
    assert (
        "= 23.21 GiB (24.92 GB), which alone fits the 23.44 GiB PyTorch can use of this 23.69 GiB card"
        in text
    )
    assert "it is 26.11 GiB: more than the card" in text
    assert "smaller batch cannot help" in text

    # "24 GB" in decimal (docs/en/multi-gpu.md#gpt2-xl's wording), as --gpu-memory: the model states
    # alone exceed it
    path = message_file(message)
    rc, out, err = run_main(
        capsys,
        path,
        "--set",
        "init_from=gpt2-xl",
        "--set",
        "batch_size=1",
        "--gpu-memory",
        "24GB",
        "--no-predict",
        "--json",
    )
    assert rc == 0, err
    data = json.loads(out)
    assert data["diagnosis"][0] == "model_states_exceed_card"
    assert data["model_states"]["card_bytes"] == 24 * 10**9
    assert data["model_states"]["states_bytes"] > 24 * 10**9
    assert data["link_paths"][:3] == [  # the pages' sources (links: their installed files, site_url local)
        "docs/en/eval-oom-12gb.md#smaller-n-embd",
        "docs/en/where-the-memory-goes.ipynb",
        "docs/en/multi-gpu.md#gpt2-xl",  # several cards: FSDP2 shards the model states
    ]
    assert data["links"][:3] == [
        ex.file_link("eval-oom-12gb", "smaller-n-embd", "en"),
        ex.file_link("where-the-memory-goes", None, "en"),
        ex.file_link("multi-gpu", "gpt2-xl", "en"),
    ]
    assert not any("reduce-batch-size" in link for link in data["links"])


# --- fragmentation and other processes ---------------------------------------------------------
def test_fragmentation_is_diagnosed():
    # 3 GiB cached but unallocated, a 2.50 GiB request: the memory was there, not in one piece
    message = new_message(
        int(2.5 * GiB), CARD_24GB, int(400 * MiB), int(23.30 * GiB), int(19.90 * GiB), 3 * GiB
    )
    result = ex.explain(message)
    assert "fragmentation" in result.diagnosis and "other_processes" not in result.diagnosis
    assert ("estimate-loss-oom", "expandable-segments") in result.sections
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in ex.render(result, "en")
    # the same card with only 150 MiB cached: no fragmentation
    tight = new_message(
        int(2.5 * GiB), CARD_24GB, int(400 * MiB), int(23.30 * GiB), int(22.75 * GiB), 150 * MiB
    )
    assert ex.explain(tight).diagnosis == ["too_little_memory"]


def test_other_processes_are_diagnosed():
    capacity, free, in_use = CARD_24GB, 300 * MiB, 10 * GiB
    message = new_message(
        1 * GiB, capacity, free, in_use, int(9.40 * GiB), 200 * MiB, processes=[(4242, 13 * GiB)]
    )
    result = ex.explain(message)
    figs = result.figures
    assert figs.processes == [{"pid": 4242, "bytes": 13 * GiB, "printed": "13.00 GiB"}]
    assert figs.other_processes == pytest.approx(capacity - free - in_use, abs=10 * MiB)
    assert "other_processes" in result.diagnosis
    assert ("estimate-loss-oom", "hardware-setup") in result.sections
    text = ex.render(result, "en")
    assert "Other processes hold 13.40 GiB of this card" in text and "process 4242: 13.00 GiB" in text
    # pre-2.1: this process's total is not in the message; what PyTorch does not hold, less 1 GiB for the
    # CUDA context, is what other processes hold at least
    old = ex.explain(old_message(1 * GiB, capacity, int(9.40 * GiB), free, int(9.60 * GiB)))
    assert "other_processes" in old.diagnosis
    assert "13.80 GiB of the card is not held by PyTorch in this process" in ex.render(old, "en")
    alone = ex.explain(old_message(1 * GiB, capacity, int(22.60 * GiB), free, int(22.80 * GiB)))
    assert alone.diagnosis == ["too_little_memory"]  # 600 MiB outside PyTorch: the CUDA context, not others


# --- advice that can work: expandable segments only where F + U could hold X (issue 18) ----------------
EXPANDABLE = ("estimate-loss-oom", "expandable-segments")


def _advice(result) -> dict[str, bool]:
    """Whether `result` gives the fragmentation advice (its code, its section, its sentence in any
    language) and whether it says why expandable segments cannot help."""
    # each sentence's last part, after its last figure: the advice itself ("). Set PYTORCH_CUDA_ALLOC_CONF…")
    sentence = [gettext_for(lang)(ex.TEXT["fragmentation"]).rsplit("}", 1)[1] for lang in ex.LANGS]
    cannot = [
        gettext_for(lang)(ex.TEXT["expandable_segments_cannot_help"]).rsplit("}", 1)[1] for lang in ex.LANGS
    ]
    texts = [ex.render(result, lang) for lang in ex.LANGS]
    return {
        "code": "fragmentation" in result.diagnosis,
        "section": EXPANDABLE in result.sections,
        "sentence": any(s in text for s, text in zip(sentence, texts)),
        "cannot_help": "expandable_segments_cannot_help" in result.diagnosis
        and all(c in text for c, text in zip(cannot, texts)),
    }


def _check_advice_can_work(result, where: str) -> str:
    """The rule, on any message: no fragmentation advice where free + cached is less than the request
    (beyond the rounding of the printed figures); the advice where it could hold it and the cache is
    more than noise. Returns which side of the rule the message is on."""
    figs = result.figures
    F, U, X, T = figs.free, figs.reserved_unallocated, figs.requested, figs.capacity
    advice = _advice(result)
    if F + U + ex.diagnosis.PRINTED_ROUNDING < X:
        assert not (advice["code"] or advice["section"] or advice["sentence"]), (where, advice)
        assert advice["cannot_help"] == (U >= 0.10 * T), (where, advice)
        return "cannot"
    if U >= 0.01 * T:
        assert advice["code"] and advice["section"] and advice["sentence"], (where, advice)
        assert not advice["cannot_help"], where
        return "can"
    return "no cache"


# (F, U, X) in GiB on an 11.69 GiB card: the issue's message (F + U = 4.71 < 6.14), a traceback's
# (F + U = 2.63 < 3.07), and the same cache large enough for the request
CANNOT_HELP = [(2.68, 2.03, 6.14), (1.20, 1.43, 3.07)]
CAN_HELP = [(2.68, 2.03, 4.50), (0.40, 3.00, 2.50), (1.20, 1.43, 2.60)]


def _message_of_format(fmt_name: str, free: int, unalloc: int, req: int, capacity: int = int(11.69 * GiB)):
    allocated = capacity - free - unalloc - 300 * MiB  # the CUDA context: not other processes
    if fmt_name == "2.1+":
        return new_message(req, capacity, free, allocated + unalloc + 300 * MiB, allocated, unalloc)
    if fmt_name == "pre-2.1":
        return old_message(req, capacity, allocated, free, allocated + unalloc)
    return cached_message(req, capacity, allocated, free, unalloc)  # 1.0-1.3


@pytest.mark.parametrize("fmt_name", ["2.1+", "pre-2.1", "1.0-1.3"])
@pytest.mark.parametrize(("F", "U", "X"), CANNOT_HELP + CAN_HELP)
def test_expandable_segments_only_where_free_plus_cached_could_hold_the_request(fmt_name, F, U, X):
    for text in (_message_of_format(fmt_name, int(F * GiB), int(U * GiB), int(X * GiB)),):
        for tb in (text, traceback(text), traceback(text, in_eval=False)):
            result = ex.explain(tb)
            assert result.figures.format == fmt_name
            side = _check_advice_can_work(result, (fmt_name, F, U, X))
            assert side == ("cannot" if (F, U, X) in CANNOT_HELP else "can")


def test_the_issue_messages_get_the_fix_that_works_first():
    """Issue 18: 6.14 GiB asked, 2.68 GiB free and 2.03 GiB cached; a traceback with 2.63 GiB free
    and cached against 3.07 GiB. Neither gets the fragmentation advice; each is told why the setting
    cannot help, and what makes the failing tensor smaller comes first."""
    alone = ex.explain((ROOT / "tests/golden/messages/cached-too-small.txt").read_text(encoding="utf-8"))
    assert alone.diagnosis == ["too_little_memory", "expandable_segments_cannot_help"]
    assert alone.sections == [("estimate-loss-oom", "reduce-batch-size"), ("beyond", "chunked-loss")]
    text = ex.render(alone, "en")
    assert "(2.68 GiB + 2.03 GiB = 4.71 GiB) is less than the 6.14 GiB request" in text
    assert "Set PYTORCH_CUDA_ALLOC_CONF" not in text
    tb = ex.explain(
        (ROOT / "tests/golden/messages/cached-too-small-traceback.txt").read_text(encoding="utf-8")
    )
    assert (tb.figures.format, tb.context) == ("pre-2.1", "estimate_loss")
    assert tb.diagnosis == ["too_little_memory", "expandable_segments_cannot_help"]
    assert tb.sections[0] == ("estimate-loss-oom", "reduce-batch-size") and EXPANDABLE not in tb.sections
    assert "(1.20 GiB + 1.43 GiB = 2.63 GiB) is less than the 3.07 GiB request" in ex.render(tb, "en")


def test_messages_on_disk_get_only_advice_that_can_work():
    """Every message the tests keep (tests/golden/messages/) and every real one of the accuracy page
    (tests/reports/*/message.txt, read as oomguide.reports reads them): the rule holds, and both
    sides of it occur, so the check can fail."""
    from oomguide import reports

    messages = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "tests/golden/messages").glob("*.txt")}
    messages.update({f"reports/{c.id}": c.message for c in reports.load_cases() if c.message is not None})
    assert any(name.startswith("reports/") for name in messages)
    sides = {}
    for name, text in messages.items():
        try:
            result = ex.explain(text)
        except ex.ExplainError:
            continue  # a report whose message was posted cut short (test_accuracy.py says which)
        if result.has_request:
            sides[name] = _check_advice_can_work(result, name)
    assert {"can", "cannot"} <= set(sides.values()), sides
    assert sides["reports/nanogpt-208-gpt2xl-24gb"] == "can"  # 85.06 MiB free + 256 MiB cached >= 100 MiB


def test_read_next_puts_what_fixes_the_message_first():
    """A fix that alone makes room comes first; closing other processes that cannot make room alone
    comes after what makes the tensor smaller."""
    article = ex.explain(
        (ROOT / "tests/golden/messages/article-estimate-loss.txt").read_text(encoding="utf-8")
    )
    assert article.diagnosis == ["too_little_memory", "other_processes"]  # 2.68 + 0.22 + 1.97 < 6.14
    assert article.sections[0] == ("estimate-loss-oom", "reduce-batch-size")
    assert article.sections[-1] == ("estimate-loss-oom", "hardware-setup")
    others = ex.explain((ROOT / "tests/golden/messages/other-processes.txt").read_text(encoding="utf-8"))
    assert others.sections[0] == (
        "estimate-loss-oom",
        "hardware-setup",
    )  # 13.40 GiB held: closing them is enough
    fragmented = ex.explain((ROOT / "tests/golden/messages/fragmentation.txt").read_text(encoding="utf-8"))
    assert fragmented.sections[0] == EXPANDABLE


# --- parsing --------------------------------------------------------------------------------------
def test_both_formats_give_the_same_figures():
    req, capacity, free, allocated, unallocated = (
        segment(LOGITS_6_14),
        int(15.77 * GiB),
        5 * GiB,
        9 * GiB,
        GiB // 4,
    )
    new, _ = ex.parse_message(new_message(req, capacity, free, 9 * GiB + GiB // 2, allocated, unallocated))
    old, _ = ex.parse_message(old_message(req, capacity, allocated, free, allocated + unallocated))
    assert (new.format, old.format) == ("2.1+", "pre-2.1")
    for name in ("requested", "capacity", "free", "allocated", "reserved_unallocated", "reserved", "gpu"):
        assert getattr(new, name) == getattr(old, name), name
    assert abs(new.requested - LOGITS_6_14) <= 0.005 * GiB  # "6.14 GiB": two decimals
    assert new.in_use is not None and old.in_use is None
    assert new.non_pytorch == pytest.approx(GiB // 4, abs=6 * MiB)  # in use − allocated − unallocated


def test_capacty_typo_and_wrapped_lines_parse():
    figures = dict(
        req=2 * GiB,
        capacity=int(7.79 * GiB),
        free=int(1.2 * GiB),
        in_use=int(6.4 * GiB),
        allocated=int(6.0 * GiB),
        unallocated=int(100 * MiB),
    )
    right, _ = ex.parse_message(new_message(**figures))
    typo, _ = ex.parse_message(new_message(**figures, capacity_word="capacty"))
    wrapped, _ = ex.parse_message(
        new_message(**figures).replace(" is free. ", " is free.\n").replace(" and ", "\nand ")
    )
    assert right == typo == wrapped


def test_traceback_through_estimate_loss_links_the_eval_pages():
    result = ex.explain(traceback(msg_6_14()))
    assert result.context == "estimate_loss"
    links = [ex.guide_url(p, a, "en") for p, a in result.sections]
    for expected in (
        "estimate-loss-oom/#reduce-batch-size",
        "eval-oom-12gb/#eval-batch-size",
        "beyond/#chunked-loss",
    ):
        assert f"http://127.0.0.1:8000/{expected}" in links
    train = ex.explain(traceback(msg_6_14(), in_eval=False))
    assert train.context == "train_step"
    assert train.sections[:2] == [("estimate-loss-oom", "reduce-batch-size"), ("beyond", "chunked-loss")]


def test_the_last_of_several_messages_is_explained():
    first = new_message(20 * MiB, CARD_24GB, 10 * MiB, 23 * GiB, 22 * GiB, 50 * MiB)
    text = (
        traceback(first)
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + msg_6_14()
    )
    result = ex.explain(text)
    assert result.messages_found == 2 and result.figures.printed["requested"] == "6.14 GiB"


def test_small_and_huge_requests():
    small = ex.explain(new_message(20 * MiB, CARD_24GB, 10 * MiB, 23 * GiB, 22 * GiB, 50 * MiB))
    assert small.matched_by == "small" and small.matches == []
    huge = ex.explain(new_message(130_000 * GiB, CARD_24GB, 16 * GiB, 7 * GiB, int(5.4 * GiB), GiB))
    assert "too_little_memory" in huge.diagnosis
    assert "larger than the whole card" in ex.render(huge, "en")


# --- languages and links -----------------------------------------------------------------------
def test_japanese_output_and_links(capsys, message_file, monkeypatch):
    monkeypatch.delenv(ex.SITE_URL_ENV, raising=False)
    rc, out, err = run_main(capsys, message_file(traceback(msg_6_14())), "--lang", "ja")
    assert rc == 0, err
    assert "読み取った数値" in out and "診断" in out and "評価中にメモリが不足した" in out
    assert "http" not in out  # mkdocs.yml's site_url is local: the links are the pages' files
    links = re.findall(r"docs/\S+", out)
    assert links and all(link.startswith("docs/ja/") for link in links)
    for lang in ex.LANGS:  # every language renders, with its own links
        text = ex.render(ex.explain(msg_6_14()), lang)
        assert gettext_for(lang)(ex.TEXT["h_diagnosis"]) in text
        links = re.findall(r"docs/\S+", text)
        assert links and all(link.startswith(f"docs/{lang}/") for link in links)


def test_site_url_from_the_environment(monkeypatch):
    monkeypatch.setenv(ex.SITE_URL_ENV, "https://example.org/oomguide/")
    assert ex.guide_url("beyond", "chunked-loss", "en") == "https://example.org/oomguide/beyond/#chunked-loss"
    assert (
        ex.guide_url("where-the-memory-goes", None, "zh")
        == "https://example.org/oomguide/zh/where-the-memory-goes/"
    )
    with pytest.raises(KeyError):
        ex.guide_url("beyond", "no-such-anchor", "en")


SECTIONS = [(lang, page) for lang in ex.LANGS for page, anchors in ex.GUIDE_SECTIONS.items() if anchors]


@pytest.mark.parametrize(("lang", "page"), SECTIONS, ids=[f"{lang}/{page}" for lang, page in SECTIONS])
def test_every_linked_anchor_exists(lang, page):
    """explain links to `{page}/#{anchor}`: each anchor is a heading attribute `{ #anchor }` of the page."""
    path = ROOT / "docs" / lang / f"{page}.md"
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    text = path.read_text(encoding="utf-8")
    missing = [
        a
        for a in ex.GUIDE_SECTIONS[page]
        if not re.search(r"\{\s*#" + re.escape(a) + r"(\s[^}]*)?\s*\}", text)
    ]
    assert not missing, f"{path.relative_to(ROOT)} lacks the anchors {missing}"


def test_the_notebook_page_exists():
    assert any(
        (ROOT / "docs" / "en" / f"where-the-memory-goes{ext}").is_file() for ext in (".ipynb", ".md", ".py")
    )


# --- bad input: one line on stderr, exit 2, no traceback ----------------------------------------
def _one_line_error(err: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        ((), "", "empty"),
        ((), "step 0: train loss 10.9, val loss 10.9\n", "no CUDA out-of-memory message"),
        ((), "torch.OutOfMemoryError: CUDA out of memory.\n", "no figures at all"),
        (
            (),
            "RuntimeError: MPS backend out of memory (MPS allocated: 1.2 GB). Tried to allocate 256.00 MB",
            "MPS",
        ),
        ((), "CUDA out of memory. Tried to allocate 2.00 GiB\n", "paste the whole message"),
        (("/no/such/ex.txt",), None, "file not found"),
        (("-", "--set", "batch_size=abc"), "MSG", "batch_size must be an integer"),
        (("-", "--set", "batch_size"), "MSG", "not key=value"),
    ],
)
def test_bad_input_in_process(capsys, monkeypatch, args, stdin, says):
    stdin = msg_6_14() if stdin == "MSG" else stdin
    rc, out, err = run_main(capsys, *args, stdin=stdin, monkeypatch=monkeypatch)
    assert rc == 2 and out == ""
    _one_line_error(err)
    assert err.startswith("oomguide explain: error: ") and says in err


def test_bad_language_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["explain", "--lang", "xx"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    _one_line_error(err)
    assert "--lang" in err


def test_cli_as_a_subprocess(tmp_path):
    """The real command line, as a user runs it (each process pays for importing torch)."""
    good = tmp_path / "ex.txt"
    good.write_text(traceback(msg_6_14()), encoding="utf-8")
    cases = {  # one per exit path, side by side; every bad input also runs in-process above
        "good": ([], good.read_text()),  # FILE defaults to stdin
        "missing": ([str(tmp_path / "missing.txt")], None),
        "lang": ([str(good), "--lang", "xx"], None),
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "oomguide", "explain", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        for name, (args, _) in cases.items()
    }
    results = {name: (p.communicate(cases[name][1], timeout=120), p.returncode) for name, p in procs.items()}
    (out, err), rc = results.pop("good")
    assert rc == 0, err
    assert "6.14 GiB" in out and f"\n    {ex.file_link('eval-oom-12gb', 'eval-batch-size', 'en')}\n" in out
    for name, ((out, err), rc) in results.items():
        assert rc == 2, (name, err)
        assert out == ""
        _one_line_error(err)


# --- the other formats (explain/formats.py, issue 10 item 6) --------------------------------------
def cached_message(req, capacity, allocated, free, cached):
    """PyTorch 1.0-1.3: the last figure is "cached", reserved but unallocated."""
    return (
        f"RuntimeError: CUDA out of memory. Tried to allocate {fmt(req)} (GPU 0; {fmt(capacity)} total "
        f"capacity; {fmt(allocated)} already allocated; {fmt(free)} free; {fmt(cached)} cached)\n"
    )


def test_cached_is_reserved_but_unallocated():
    """A 1.0-1.3 message: 5.90 GiB cached is PyTorch's, not other processes' (THCCachingAllocator)."""
    capacity, allocated, free, cached = int(11.17 * GiB), 5 * GiB, 100 * MiB, int(5.9 * GiB)
    result = ex.explain(cached_message(2 * GiB, capacity, allocated, free, cached))
    figs = result.figures
    assert figs.format == "1.0-1.3"
    assert figs.reserved_unallocated == pytest.approx(cached, abs=6 * MiB)
    assert figs.reserved == pytest.approx(allocated + cached, abs=6 * MiB)
    assert figs.outside_pytorch == pytest.approx(capacity - free - allocated - cached, abs=12 * MiB)
    assert "other_processes" not in result.diagnosis and "fragmentation" in result.diagnosis
    text = ex.render(result, "en")
    assert "reserved by PyTorch, unallocated: 5.90 GiB" in text
    assert "reserved by PyTorch in total (allocated + cached): 10.90 GiB" in text
    # the same figures as a 1.4-2.0 message with R = A + cached read the same
    same = ex.explain(old_message(2 * GiB, capacity, allocated, free, allocated + cached)).figures
    assert (same.reserved, same.reserved_unallocated) == (figs.reserved, figs.reserved_unallocated)


def test_short_form_with_and_without_a_request(capsys, monkeypatch):
    short = f"GPU 0 has {fmt(int(7.79 * GiB))} total, {fmt(30 * MiB)} free, {fmt(int(7.2 * GiB))} in use by this process"
    result = ex.explain(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {fmt(512 * MiB)}. {short}."
    )
    figs = result.figures
    assert (figs.format, figs.requested, figs.printed["in_use"]) == ("short", 512 * MiB, "7.20 GiB")
    assert figs.other_processes == pytest.approx(int(7.79 * GiB) - 30 * MiB - int(7.2 * GiB), abs=12 * MiB)
    assert "in use by this process: 7.20 GiB" in ex.render(result, "en")
    rc, out, err = run_main(capsys, "-", stdin=short + "\n", monkeypatch=monkeypatch)
    assert rc == 0, err
    assert "without a requested size" in out and "this process held 7.20 GiB of the 7.79 GiB card" in out


def test_cuda_malloc_async_format():
    message = (
        "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
        f"Currently allocated     : {fmt(int(10.5 * GiB))}\nRequested               : {fmt(LOGITS_6_14)}\n"
        f"Device limit            : {fmt(int(23.69 * GiB))}\nFree (according to CUDA): {fmt(int(1.2 * GiB))}\n"
        "PyTorch limit (set by user-supplied memory fraction)\n                        : "
        f"{fmt(int(12 * GiB))}\n"
    )
    result = ex.explain(message)
    figs = result.figures
    assert figs.format == "cudaMallocAsync" and figs.allowed == 12 * GiB
    assert figs.requested == pytest.approx(LOGITS_6_14, abs=0.005 * GiB)
    assert result.matches and result.matches[0]["batch_size"] == 64


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported\n",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCGeneral.cpp:50\n",
    ],
)
def test_a_message_without_a_request_is_explained(capsys, monkeypatch, message):
    tb = (
        'Traceback (most recent call last):\n  File "train.py", line 150, in <module>\n    model.to(device)\n'
    )
    rc, out, err = run_main(capsys, "-", stdin=tb + message, monkeypatch=monkeypatch)
    assert rc == 0 and err == ""
    assert "outside PyTorch's caching allocator" in out and "nvidia-smi" in out
    assert "moving tensors to the GPU" in out
    assert f"\n    {ex.file_link('estimate-loss-oom', 'hardware-setup', 'en')}\n" in out
    for lang in ex.LANGS:
        assert gettext_for(lang)(ex.TEXT["h_checks"]) in ex.render(ex.explain(message), lang)


# --- the prediction disagrees with the message ------------------------------------------------------
def test_disagreement_names_the_figures_that_explain_it():
    """The article's message, failed in estimate_loss, against a config whose evaluation fits."""
    message = traceback(
        new_message(segment(LOGITS_6_14), int(11.69 * GiB), int(2.68 * GiB), int(7.04 * GiB),
                    int(6.78 * GiB), int(224.9 * MiB))
    )  # fmt: skip
    config = load_config([], ["batch_size=8", "dtype=bfloat16"])
    result = ex.explain(message, config)
    assert result.prediction["phases"]["estimate_loss"]["fits"]
    d = result.disagreement
    assert d["phase"] == "estimate_loss"
    codes = {item["code"]: item for item in d["figures"]}
    peak = result.prediction["phases"]["estimate_loss"]["peak_bytes"]
    # other processes held 1.97 GiB: the card minus that still holds the predicted peak (a part only)
    assert codes["other_processes"]["bytes"] == pytest.approx(int(1.97 * GiB), abs=12 * MiB)
    assert codes["other_processes"]["explains"] is False
    # 6.78 GiB allocated + the 6.14 GiB request: far beyond the predicted peak of batch 8
    beyond = codes["allocated_beyond_prediction"]
    assert beyond["bytes"] == result.figures.allocated + result.figures.requested - peak > 0
    # 224.90 MiB reserved but unallocated is 1.9 % of the card: named, as fragmentation
    assert codes["fragmentation"]["bytes"] == pytest.approx(int(224.9 * MiB), abs=MiB)
    text = ex.render(result, "en")
    assert "Why the prediction and the message differ" in text
    assert "PyTorch held 6.78 GiB and asked for 6.14 GiB more" in text
    data = result.to_json("en")
    assert data["disagreement"] == d


# --- links: the published site's address (mkdocs.yml's site_url), else the page's installed file --------
def _link_lines(text: str, lang: str) -> list[str]:
    """The locations of "Read next" (each below its section's title)."""
    lines = text.splitlines()
    start = lines.index(gettext_for(lang)(ex.TEXT["h_links"])) + 1
    return [line.strip() for line in lines[start:] if line.startswith("    ")]


def _title_lines(text: str, lang: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(gettext_for(lang)(ex.TEXT["h_links"])) + 1
    return [line[4:] for line in lines[start:] if line.startswith("  - ")]


def test_links_are_the_pages_installed_files_while_site_url_is_local(monkeypatch):
    """Unpublished, a section is the page's file as the package installs it (here, a checkout: docs/
    itself) at its heading's line, under its title in the reader's language; never a path that means
    something only in the repository's root."""
    monkeypatch.delenv(ex.SITE_URL_ENV, raising=False)
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    configured = re.search(r"^site_url:\s*(\S+)", mkdocs, re.M).group(1)
    assert ex.site_url() == configured.rstrip("/")
    assert links.is_local(configured), "mkdocs.yml is set for publishing: this test assumes it is not"
    assert ex.published_url() is None
    assert (
        ex.page_path("eval-oom-12gb", "eval-batch-size", "ja") == "docs/ja/eval-oom-12gb.md#eval-batch-size"
    )
    assert ex.page_path("where-the-memory-goes", None, "fr") == "docs/fr/where-the-memory-goes.ipynb"
    heading = next(
        n
        for n, line in enumerate((ROOT / "docs/ja/eval-oom-12gb.md").read_text(encoding="utf-8").splitlines(), 1)
        if line.endswith("{ #eval-batch-size }")
    )
    assert ex.file_link("eval-oom-12gb", "eval-batch-size", "ja") == f"{ROOT}/docs/ja/eval-oom-12gb.md:{heading}"
    assert ex.file_link("where-the-memory-goes", None, "fr") == f"{ROOT}/docs/fr/where-the-memory-goes.ipynb"
    assert ex.section_title("beyond", "chunked-loss", "de") == "Jenseits der üblichen Lösungen › Cross-Entropy in Chunks"
    assert ex.section_title("where-the-memory-goes", None, "ja") == "メモリの内訳"
    result = ex.explain(traceback(msg_6_14()))
    for lang in ex.LANGS:
        text = ex.render(result, lang)
        printed = _link_lines(text, lang)
        assert printed == [ex.section_link(p, a, lang) for p, a in result.sections]
        assert _title_lines(text, lang) == [ex.section_title(p, a, lang) for p, a in result.sections]
        assert result.to_json(lang)["links"] == printed
        assert result.to_json(lang)["titles"] == _title_lines(text, lang)
        for (page, anchor), where in zip(result.sections, printed):
            path, _, line = where.rpartition(":")
            assert Path(path).is_absolute() and Path(path).is_file(), where
            assert Path(path) == ROOT / "docs" / lang / f"{page}.md"
            assert Path(path).read_text(encoding="utf-8").splitlines()[int(line) - 1].endswith(f"{{ #{anchor} }}")


def test_read_next_opens_from_outside_the_repository(tmp_path):
    """`oomguide explain` run in a folder that is not the repository (a nanoGPT checkout, a home folder):
    every location it prints opens there and is the section its title names."""
    from test_install import open_read_next

    (tmp_path / "oom.txt").write_text(traceback(msg_6_14()), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != ex.SITE_URL_ENV}
    for lang in ("en", "zh"):
        proc = subprocess.run(
            [sys.executable, "-m", "oomguide", "explain", "oom.txt", "--lang", lang],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        opened = open_read_next(proc.stdout, lang)
        assert len(opened) >= 3, proc.stdout


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8000/", True),
        ("http://localhost:8000/", True),
        ("", True),
        ("https://guide.example/oom/", False),
        ("https://user.github.io/oomguide", False),
    ],
)
def test_a_site_url_on_this_machine_is_not_published(url, local):
    assert links.is_local(url) is local


def test_links_go_to_the_published_site_in_each_language(monkeypatch, tmp_path):
    monkeypatch.delenv(ex.SITE_URL_ENV, raising=False)
    other = tmp_path / "mkdocs.yml"
    other.write_text("site_name: x\nsite_url: https://guide.example/oom/ # comment\n", encoding="utf-8")
    assert links.configured_site_url(other) == "https://guide.example/oom/"
    (tmp_path / "bare.yml").write_text("site_name: x\n", encoding="utf-8")
    assert links.configured_site_url(tmp_path / "bare.yml") == ""  # no site_url: not published
    monkeypatch.setattr(links, "configured_site_url", lambda: "https://guide.example/oom/")
    assert ex.published_url() == "https://guide.example/oom"
    result = ex.explain(traceback(msg_6_14()))
    for lang in ex.LANGS:
        prefix = "https://guide.example/oom/" + ("" if lang == "en" else f"{lang}/")
        printed = _link_lines(ex.render(result, lang), lang)
        assert printed == [ex.section_link(p, a, lang) for p, a in result.sections]
        assert f"{prefix}eval-oom-12gb/#eval-batch-size" in printed  # one link a line, nothing beside it
        assert _title_lines(ex.render(result, lang), lang) == [ex.section_title(p, a, lang) for p, a in result.sections]
        assert all(link.startswith(prefix) and "/#" in link for link in printed)
        assert result.to_json(lang)["links"] == printed
    assert (
        ex.section_link("where-the-memory-goes", None, "zh")
        == "https://guide.example/oom/zh/where-the-memory-goes/"
    )
    # the environment variable wins over mkdocs.yml, and is an address even when it is on this machine
    monkeypatch.setenv(ex.SITE_URL_ENV, "https://mirror.example/")
    assert ex.section_link("beyond", None, "zh") == "https://mirror.example/zh/beyond/"
    monkeypatch.setenv(ex.SITE_URL_ENV, "http://127.0.0.1:8000/")
    assert ex.section_link("beyond", "chunked-loss", "de") == "http://127.0.0.1:8000/de/beyond/#chunked-loss"


def test_check_fails_within_the_budget_when_the_model_states_do_not_fit(capsys):
    """gpt2-xl on a 12 GiB card: the failure is reported while the AdamW state is created, with less
    than the budget already allocated (it used to print 17.50 GiB for an 11.75 GiB budget)."""
    rc = main(["check", "--set", "init_from=gpt2-xl", "--gpu-memory", "12GiB", "--phase", "train_step",
               "--no-search", "--json"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    r = json.loads(out)["phases"]["train_step"]
    budget = memory.usable_bytes(12 * GiB)
    assert r["fits"] is False and r["budget_bytes"] == budget
    # the allocator fails when the new segment does not fit next to what it has *reserved* (issue 15)
    assert r["allocated_at_failure_bytes"] <= r["reserved_at_failure_bytes"] <= budget
    assert budget < r["reserved_at_failure_bytes"] + r["failing_allocation_bytes"]


# --- reading a message needs no tensors (issue 23) -------------------------------------------------
HEAVY = ("torch", "numpy")
READ_WITHOUT_TORCH = """
import contextlib, io, json, sys
from oomguide import cli
from oomguide import explain as ex

for path in sys.argv[1:]:
    for lang in ex.LANGS:
        for extra in ([], ["--json"]):
            sys.argv = ["oomguide", "explain", path, "--lang", lang, *extra]  # the program's own path
            with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
                rc = cli._main(None)
            assert rc == 0 and out.getvalue() or rc == 2, path  # 2: a message cut short, explained as such
    with open(path, encoding="utf-8") as f:
        try:
            ex.render(ex.explain(f.read()), "fr")  # the library's path
        except ex.ExplainError:
            pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy"))))
"""


def _messages_on_disk() -> list[Path]:
    """Every message the tests keep as a file: the golden ones and the accuracy page's reports."""
    return sorted((ROOT / "tests" / "golden" / "messages").glob("*.txt")) + sorted(
        (ROOT / "tests" / "reports").glob("*/message.txt")
    )


def test_reading_a_message_imports_neither_torch_nor_numpy():
    """Parsing, naming the tensor, the diagnosis and the answer (every language, text and JSON), in a
    fresh interpreter: torch is for a prediction only."""
    files = [str(p) for p in _messages_on_disk()]
    done = subprocess.run(
        [sys.executable, "-c", READ_WITHOUT_TORCH, *files], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_the_program_explains_without_importing_torch(tmp_path):
    """`python -m oomguide explain FILE` itself (main, its exit): no torch among the modules it imports;
    with a config it does import it, for the prediction."""
    message = tmp_path / "ex.txt"
    message.write_text(traceback(msg_6_14()), encoding="utf-8")

    def imported(*args: str) -> set[str]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "oomguide", "explain", str(message), *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "6.14 GiB" in done.stdout
        return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}

    assert not {m for m in imported() if m.split(".")[0] in HEAVY}
    assert "torch" in imported(
        "--set", "batch_size=32", "--no-predict"
    )  # the config's GPT: the check can fail


@pytest.mark.parametrize(
    "shape",
    [
        dict(init_from="gpt2"),
        dict(init_from="gpt2-xl"),
        dict(init_from="gpt2", block_size=256),  # from_pretrained, then crop_block_size
        dict(),  # nanoGPT's defaults: vocab 50304, bias
        dict(bias=False),
        dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65, bias=False),  # shakespeare_char
        dict(n_layer=2, n_head=2, n_embd=64, block_size=32, vocab_size=65),
    ],
    ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "defaults",
)
def test_parameter_count_from_the_shape_is_the_models(shape):
    """explain counts the model's parameters from its shape: the same count as the GPT on meta tensors."""
    import torch

    from oomguide.explain.diagnosis import gpt_parameters
    from oomguide.model import GPT

    g = load_config([], [f"{k}={v}" for k, v in shape.items()]).gpt_config()
    with torch.device("meta"):
        model = GPT(g)
    params = sum(p.numel() for p in model.parameters())  # lm_head's weight is wte's: counted once
    linear = {
        id(p): p.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters()
    }
    assert gpt_parameters(g) == (params, sum(linear.values()))
    if shape == dict(init_from="gpt2-xl"):
        assert params == GPT2_XL_PARAMS


@pytest.mark.parametrize("lang", ["en", "ja", "fr"])
def test_a_message_that_names_no_gpu_gets_a_title_without_one(capsys, message_file, lang):
    """Some releases' short form says "GPU has 79.19 GiB total" with no device number (nanochat #443): the
    title said "on GPU None" (a round-9 reviewer's find)."""
    path = message_file(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. \n"
        "GPU has 79.19 GiB total, 6.68 GiB free, 72.48 GiB in use by this process.\n"
    )
    rc, out, err = run_main(capsys, path, "--lang", lang)
    assert rc == 0, err
    title = out.splitlines()[0]
    assert "None" not in title and "GPU 0" not in title and "CUDA" in title, title


@pytest.mark.parametrize(
    ("lang", "quoted"), [("fr", "occupent «\u202f72.48 GiB\u202f» de la carte"), ("de", "„72.48 GiB“")]
)
def test_the_short_forms_memory_in_use_is_quoted_as_printed(lang, quoted):
    """The short form's "72.48 GiB in use by this process" stands for PyTorch's allocated memory in the
    diagnosis: it is a size read from the message, so it is quoted as printed, never recomputed as 72,48 Gio
    (a round-17 reviewer's find)."""
    result = ex.explain(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. \n"
        "GPU has 79.19 GiB total, 6.68 GiB free, 72.48 GiB in use by this process.\n"
    )
    text = ex.render(result, lang)
    assert quoted in text, text
    assert "72,48" not in text, text
