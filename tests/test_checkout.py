"""The verdict is the reader's own run: their checkout decides which code runs (oomguide.checkout),
and `check`, `explain --config` and the pages give one answer for one config (oomguide.verdict).

Needs a nanoGPT checkout: OOMGUIDE_NANOGPT (.ci/run sets it to the unmodified checkout CI
uses); tests that need one skip, naming the variable, without it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from oomguide import checkout, memory, placement, verdict
from oomguide.cli import main

ROOT = Path(__file__).resolve().parents[1]
MESSAGE = ROOT / "tests" / "golden" / "messages" / "article-estimate-loss.txt"


def _nanogpt() -> Path | None:
    for candidate in (os.environ.get("OOMGUIDE_NANOGPT"), ROOT.parent / "shared" / "nanoGPT"):
        if candidate and (Path(candidate) / "train.py").is_file():
            return Path(candidate).resolve()
    return None


NANOGPT = _nanogpt()
needs_nanogpt = pytest.mark.skipif(NANOGPT is None, reason="set OOMGUIDE_NANOGPT to a nanoGPT checkout")


@pytest.fixture
def copy_of_nanogpt(tmp_path):
    """A copy of the reader's checkout, with the given snippets applied where placement.toml says."""

    def make(*snippets: str) -> Path:
        dest = tmp_path / f"nanoGPT-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(NANOGPT, dest, ignore=shutil.ignore_patterns(".git", "__pycache__", "data", "out*"))
        placement.apply_to(dest, snippets)
        return dest

    return make


def check_json(capsys, *argv) -> tuple[int, dict]:
    rc = main(["check", *argv, "--json"])
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    return rc, json.loads(out)


# --- what the checkout's code is ------------------------------------------------------------------
@needs_nanogpt
def test_known_models_are_nanogpts_model_py(copy_of_nanogpt):
    """KNOWN_MODELS, recomputed from the checkout: nanoGPT's model.py, and with the checkpointed
    forward; any other change (the chunked loss) is the reader's own model, run as it is."""
    assert checkout.model_kind(NANOGPT / "model.py") == "nanogpt"
    ckpt = copy_of_nanogpt("eval-oom-12gb/checkpointed_forward.py")
    assert checkout.model_kind(ckpt / "model.py") == "nanogpt+checkpointed_forward"
    chunked = copy_of_nanogpt("beyond/chunked-loss.py")
    assert checkout.model_kind(chunked / "model.py") == "own"


# What each of the guide's code changes is, read from a checkout that has it (what it needs included).
SNIPPET_CHANGES = {
    "eval-oom-12gb/estimate_loss_chunked.py": {"eval_batch_size": True},
    "eval-oom-12gb/get-batch-eval-call.py": {"eval_block_size": True},
    "beyond/drop-stale-logits.py": {"drops_stale_logits": True},
    "eval-oom-12gb/checkpointed_forward.py": {"model": "nanogpt+checkpointed_forward"},
}


@needs_nanogpt
@pytest.mark.parametrize("snippet", sorted(SNIPPET_CHANGES))
def test_the_code_read_from_a_checkout_is_the_code_of_its_snippets(copy_of_nanogpt, snippet):
    """A checkout with one of the guide's code changes applied reads as that change, and nothing else."""
    stock = checkout.read(NANOGPT)
    assert (stock.eval_batch_size, stock.eval_block_size, stock.drops_stale_logits, stock.model) == (
        False,
        False,
        False,
        "nanogpt",
    )
    patched = checkout.read(copy_of_nanogpt(snippet))
    expected = dict(eval_batch_size=False, eval_block_size=False, drops_stale_logits=False, model="nanogpt")
    expected.update(SNIPPET_CHANGES[snippet])
    for key, value in expected.items():
        assert getattr(patched, key) == value, key


def test_a_checkout_without_train_py_is_refused(tmp_path, capsys):
    rc = main(["check", "--nanogpt", str(tmp_path), "--no-search"])
    err = capsys.readouterr().err
    assert rc == 2 and "has no train.py" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# --- problem 1: a guide key counts only where the guide's change is in the code -------------------
@needs_nanogpt
def test_guide_keys_do_not_count_in_an_unchanged_checkout(tmp_path, capsys, copy_of_nanogpt):
    mine = tmp_path / "train_mine.py"
    mine.write_text((NANOGPT / "config" / "train_gpt2.py").read_text() + "eval_batch_size = 4\n")
    plain = verdict.verdict(
        verdict.Request(
            configs=[str(NANOGPT / "config" / "train_gpt2.py")], nanogpt=str(NANOGPT), search=False
        )
    )
    rc, out = check_json(
        capsys,
        str(mine),
        "--nanogpt",
        str(NANOGPT),
        "--set",
        "eval_block_size=512",
        "--set",
        "grad_checkpoint=True",
        "--phase",
        "estimate_loss_first",
        "--phase",
        "train_step",
    )
    notes = " ".join(out["warnings"])
    for key, anchor in (
        ("eval_batch_size", "eval-batch-size"),
        ("eval_block_size", "eval-block-size"),
        ("grad_checkpoint", "gradient-checkpointing"),
    ):
        assert f"{key} = " in notes and f"eval-oom-12gb.md#{anchor}" in notes
    assert "would stop on --eval_block_size" in notes
    first = out["phases"]["estimate_loss_first"]
    assert "[12288, 50304]" in first["largest_allocation"]  # whole batches of 12, as nanoGPT evaluates
    assert first["max_batch_size"] == 56 or first["max_batch_size"] > 12
    for name in ("estimate_loss_first", "train_step"):
        assert out["phases"][name]["peak_bytes"] == plain["phases"][name]["peak_bytes"], name
    assert out["settings"]["eval_batch_size"] is None and out["settings"]["grad_checkpoint"] is False


@needs_nanogpt
def test_guide_keys_count_where_the_change_is(tmp_path, capsys, copy_of_nanogpt):
    """With the guide's estimate_loss and checkpointed forward in the checkout, the same settings count;
    the first evaluation's largest batch is said not to depend on batch_size instead of searched."""
    patched = copy_of_nanogpt(
        "eval-oom-12gb/estimate_loss_chunked.py", "eval-oom-12gb/checkpointed_forward.py"
    )
    mine = tmp_path / "train_mine.py"
    mine.write_text((NANOGPT / "config" / "train_gpt2.py").read_text() + "eval_batch_size = 4\n")
    rc, out = check_json(capsys, str(mine), "--nanogpt", str(patched))
    assert out["code"]["eval_batch_size"] and out["code"]["model"] == "nanogpt+checkpointed_forward"
    assert out["settings"]["eval_batch_size"] == 4 and out["settings"]["grad_checkpoint"] is True
    first = out["phases"]["estimate_loss_first"]
    assert "[4096, 50304]" in first["largest_allocation"]  # 4 sequences at a time
    assert first["max_batch_size"] is None and "does not depend on batch_size" in first["max_batch_size_note"]
    assert not any("eval_batch_size = " in n for n in out["warnings"])


def test_without_a_checkout_the_assumption_is_said(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.py"
    config.write_text("batch_size = 4\nblock_size = 256\nn_layer = 2\neval_batch_size = 2\n")
    rc, out = check_json(capsys, str(config), "--no-search")
    assert out["code"]["where"].startswith("nanoGPT as released (no checkout found")
    assert any("eval_batch_size = 2" in n for n in out["warnings"])
    main(["check", str(config), "--no-search"])
    assert "code: nanoGPT as released (no checkout found" in capsys.readouterr().out


# --- problem 2: check and explain --config give one answer ---------------------------------------
@needs_nanogpt
@pytest.mark.parametrize("name", sorted(p.name for p in (NANOGPT / "config").glob("*.py")) if NANOGPT else [])
def test_check_and_explain_agree_on_nanogpts_configs(capsys, monkeypatch, name):
    monkeypatch.chdir(NANOGPT)
    config = f"config/{name}"
    assert main(["explain", str(MESSAGE), "--config", config, "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)["prediction"]
    card = explained["gpu_memory_bytes"]
    rc, checked = check_json(capsys, config, "--gpu-memory", f"{card / memory.GiB}GiB", "--no-search")
    assert checked["gpu_memory_bytes"] == card
    assert checked["compiled"] == explained["compiled"]
    keys = ("peak_bytes", "reserved_bytes", "fits", "failing_allocation_bytes", "largest_allocation")
    assert set(checked["phases"]) == set(explained["phases"])
    for phase, entry in checked["phases"].items():
        assert {k: entry.get(k) for k in keys} == {k: explained["phases"][phase].get(k) for k in keys}, phase


# --- problem 8: several GPUs are compiled as one is ---------------------------------------------
@needs_nanogpt
def test_ddp_ranks_are_compiled_like_one_gpu(capsys, monkeypatch):
    """nanoGPT compiles before it wraps the model in DDP: a rank is the one-GPU compiled run plus
    DDP's gradient buckets, not the eager model (13.31 GiB before)."""
    monkeypatch.chdir(NANOGPT)
    _, one = check_json(capsys, "config/train_gpt2.py", "--no-search", "--phase", "train_step")
    _, ddp = check_json(
        capsys, "config/train_gpt2.py", "--no-search", "--phase", "train_step", "--nproc-per-node", "8"
    )
    assert one["compiled"] and ddp["compiled"]
    buckets = ddp["ddp_bucket_bytes"]
    one_peak, rank_peak = one["phases"]["train_step"]["peak_bytes"], ddp["phases"]["train_step"]["peak_bytes"]
    assert 0 < rank_peak - one_peak <= buckets + 64 * memory.MiB
    assert ddp["phases"]["train_step"]["reserved_bytes"] >= rank_peak  # judged on reserved memory


@needs_nanogpt
def test_a_key_nanogpt_ignores_cannot_stop_the_run(capsys, copy_of_nanogpt, monkeypatch):
    """eval_block_size longer than block_size: ignored by an unchanged checkout (a note, a verdict),
    the end of the run where the guide's get_batch reads it (one line, exit 2)."""
    monkeypatch.chdir(NANOGPT)
    args = ["config/train_shakespeare_char.py", "--set", "eval_block_size=512", "--no-search"]
    rc, out = check_json(capsys, *args, "--phase", "train_step")
    assert any("eval_block_size = 512" in n for n in out["warnings"])
    patched = copy_of_nanogpt("eval-oom-12gb/get-batch-eval-call.py")
    rc = main(["check", *args, "--nanogpt", str(patched)])
    err = capsys.readouterr().err
    assert rc == 2 and "eval_block_size 512 is longer than block_size 256" in err
    assert len(err.strip().splitlines()) == 1
