"""The cards of --gpu (memory/gpus.json), --gpu-memory and --capability, and the edge input they refuse.

Every name in the table resolves to its card; a name that several cards share (a card sold with two
memory sizes) is refused with the choices; --gpu-memory alone says which compute capability it
assumes and --capability sets it; a size, a capability or a config file that cannot be a card's or a
config's is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oomguide.cli import main
from oomguide.memory import gpus
from oomguide.memory.units import CONTEXT_BYTES, GiB, MiB

SMALL = ["n_layer=2", "n_head=4", "n_embd=128", "block_size=256", "vocab_size=512", "batch_size=4"]
CHECK = ["check", *(f"--set={s}" for s in SMALL), "--set=dtype=bfloat16", "--no-search"]
CHECK += ["--phase", "train_step"]
ROWS = json.loads(gpus.TABLE.read_text(encoding="utf-8"))["cards"]


def one_line(err: str) -> str:
    err = err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("row", ROWS, ids=[row["name"] for row in ROWS])
def test_every_card_in_the_table_resolves(row):
    gpu = gpus.find_gpu(row["name"])
    assert gpu.name == row["name"]
    assert gpu.capability == tuple(row["compute_capability"])
    assert CONTEXT_BYTES < gpu.total_memory < row["memory_gb"] * GiB  # PyTorch sees less than the board
    assert row["source"].startswith(("https://", "derived: ", "not traced: ")), row["source"]
    for alias in row["aliases"]:
        try:
            assert gpus.find_gpu(alias) == gpu
        except gpus.AmbiguousGpu as exc:  # a name shared with another card: this one is a choice
            assert row["name"] in str(exc)


def test_card_names_are_distinct():
    keys = [gpus._key(row["name"]) for row in ROWS]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    "name",
    [
        # the cards readers own
        "RTX 4060",
        "RTX 4060 Ti 8GB",
        "RTX 3060 Ti",
        "RTX 4070 Super",
        "RTX 4070 Ti Super",
        "RTX 2060 6GB",
        "RTX 5070",
        "RTX 5060 Ti 16GB",
        "GTX 1080 Ti",
        "GTX 1660 Super",
        "RTX 3050 8GB",
        "RTX 5090",
        # the ones they train on
        "T4",
        "L4",
        "A10",
        "A100 40GB",
        "A100 80GB",
        "H100",
        "H200",
        "L40S",
        "V100 16GB",
        "V100 32GB",
        "P100 16GB",
        "K80",
        "RTX A4000",
        "RTX A5000",
        "RTX A6000",
        # as PyTorch's torch.cuda.get_device_name() and nvidia-smi write them
        "NVIDIA GeForce RTX 4060 Ti 16GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H100 80GB HBM3",
        "Tesla V100-SXM2-32GB",
        "Tesla P100-PCIE-16GB",
        "NVIDIA GeForce RTX 4060 Laptop GPU",
        "4060ti-8g",
    ],
)
def test_the_cards_readers_name_are_known(name):
    assert gpus.find_gpu(name).total_memory > CONTEXT_BYTES


@pytest.mark.parametrize(
    "name, choices",
    [
        ("RTX 4060 Ti", ["GeForce RTX 4060 Ti 8GB", "GeForce RTX 4060 Ti 16GB"]),
        ("NVIDIA GeForce RTX 4060 Ti", ["GeForce RTX 4060 Ti 8GB", "GeForce RTX 4060 Ti 16GB"]),
        ("RTX 3080", ["GeForce RTX 3080 10GB", "GeForce RTX 3080 12GB"]),
        ("RTX 3060", ["GeForce RTX 3060 8GB", "GeForce RTX 3060 12GB"]),
        ("RTX 2060", ["GeForce RTX 2060 6GB", "GeForce RTX 2060 12GB"]),
        ("RTX 5060 Ti", ["GeForce RTX 5060 Ti 8GB", "GeForce RTX 5060 Ti 16GB"]),
        ("A100", ["A100 40GB", "A100 80GB"]),
        ("V100", ["Tesla V100 16GB", "Tesla V100 32GB"]),
        ("P100", ["Tesla P100 12GB", "Tesla P100 16GB"]),
        ("RTX 6000", ["Quadro RTX 6000 (24 GB)", "NVIDIA RTX 6000 Ada (48 GB)"]),
    ],
)
def test_a_name_sold_with_two_sizes_is_refused_with_the_choices(name, choices):
    with pytest.raises(gpus.AmbiguousGpu) as caught:
        gpus.find_gpu(name)
    message = str(caught.value)
    assert "\n" not in message
    for choice in choices:
        assert choice in message
    for choice in choices:  # each choice, as written, is a name that resolves
        gpus.find_gpu(choice.split(" (")[0])


def test_check_refuses_an_ambiguous_gpu_in_one_line(capsys):
    assert main(["check", "--gpu", "RTX 4060 Ti", "--no-search"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("oomguide check: error: ")
    assert "GeForce RTX 4060 Ti 8GB" in err and "GeForce RTX 4060 Ti 16GB" in err


def test_the_two_rtx_4060_ti_are_two_cards(capsys):
    sizes = {}
    for name in ("RTX 4060 Ti 8GB", "RTX 4060 Ti 16GB"):
        assert main([*CHECK, "--gpu", name, "--json"]) == 0
        sizes[name] = json.loads(capsys.readouterr().out)["gpu_memory_bytes"]
    assert sizes["RTX 4060 Ti 8GB"] < 8 * GiB < sizes["RTX 4060 Ti 16GB"] < 16 * GiB


def test_gpu_memory_alone_says_the_capability_it_assumed(capsys):
    assert main([*CHECK, "--gpu-memory", "16GiB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["compute_capability"] == "8.6" and out["compute_capability_assumed"] is True
    assert main([*CHECK, "--gpu-memory", "16GiB"]) == 0
    card = capsys.readouterr().out.splitlines()[0]
    assert card.startswith("card: a 16.00 GiB card, compute capability 8.6 (assumed"), card
    assert "--capability" in card
    assert main([*CHECK, "--gpu", "T4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compute_capability_assumed"] is False


def test_capability_picks_the_attention_kernel(capsys):
    """A P100-sized card: sm60 has no flash attention and no bf16 memory-efficient kernel, so
    bfloat16 attention keeps the float32 matrix (math); the assumed sm86 runs flash."""
    runs = {}
    for extra in ([], ["--capability", "6.0"], ["--capability", "8.6"]):
        assert main([*CHECK, "--gpu-memory", "16GiB", *extra, "--json"]) == 0
        runs[" ".join(extra)] = json.loads(capsys.readouterr().out)
    assert runs[""]["phases"]["train_step"]["attention"] == "flash"
    sm60 = runs["--capability 6.0"]
    assert sm60["compute_capability"] == "6.0" and sm60["compute_capability_assumed"] is False
    assert sm60["phases"]["train_step"]["attention"] == "math"
    assert sm60["phases"]["train_step"]["peak_bytes"] > runs[""]["phases"]["train_step"]["peak_bytes"]
    assert runs["--capability 8.6"]["phases"] == runs[""]["phases"]
    assert main([*CHECK, "--gpu-memory", "16GiB", "--capability", "6.0"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("card: a 16.00 GiB card, compute capability 6.0: ")
    assert "(attention: math)" in text


def test_capability_that_contradicts_the_gpu_is_refused(capsys):
    assert main(["check", "--gpu", "T4", "--capability", "8.6", "--no-search"]) == 2
    err = one_line(capsys.readouterr().err)
    assert "7.5" in err and "8.6" in err
    assert main([*CHECK, "--gpu", "T4", "--capability", "7.5", "--json"]) == 0


def test_resolve_card():
    assumed = gpus.resolve_card()
    assert assumed.capability == gpus.DEFAULT_CAPABILITY and assumed.capability_assumed
    given = gpus.resolve_card(None, 16 * GiB, (7, 5))
    assert given.capability == (7, 5) and not given.capability_assumed and given.total_memory == 16 * GiB
    assert gpus.resolve_card("RTX 4070", 4 * GiB) == gpus.find_gpu("RTX 4070")  # the name wins
    with pytest.raises(ValueError, match="nothing for PyTorch"):
        gpus.resolve_card(None, 100 * MiB)


@pytest.mark.parametrize("command", ["check", "explain"])
@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpu-memory", "1MiB"], "nothing for PyTorch"),
        (["--gpu-memory", "256MiB"], "nothing for PyTorch"),
        (["--gpu-memory", "-3GiB"], "cannot be negative"),
        (["--gpu-memory=-3GiB"], "cannot be negative"),
        (["--gpu-memory", "-0.5GB"], "cannot be negative"),
        (["--gpu-memory", "0GiB"], "above zero"),
    ],
)
def test_a_size_no_card_has_is_one_line_and_exit_2(capsys, command, args, message):
    with pytest.raises(SystemExit) as caught:
        main([command, *args])
    assert caught.value.code == 2
    err = one_line(capsys.readouterr().err)
    assert "--gpu-memory" in err and message in err


@pytest.mark.parametrize("value", ["8", "sm86", "8.6.1", "2.0", "86", "", "-8.6"])
def test_a_bad_capability_is_one_line_and_exit_2(capsys, value):
    with pytest.raises(SystemExit) as caught:
        main(["check", "--capability", value, "--no-search"])
    assert caught.value.code == 2
    err = one_line(capsys.readouterr().err)
    assert "--capability" in err and "8.6" in err


@pytest.mark.parametrize("kind", ["not-utf8", "nul-bytes"])
@pytest.mark.parametrize("command", ["check", "explain"])
def test_a_binary_config_is_named_in_one_line(tmp_path, capsys, kind, command):
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"\x80\x02\x8f\x00binary" if kind == "not-utf8" else b"batch_size = 4\x00\n")
    args = [str(path)] if command == "check" else ["--config", str(path), "/dev/null"]
    assert main([command, *args]) == 2
    err = one_line(capsys.readouterr().err)
    assert str(path) in err and "is not a text config file" in err
    assert "UnicodeDecodeError" not in err and "codec" not in err


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--gpu-memory", "-3GiB"],
        ["check", "--gpu-memory=-3GiB"],
        ["explain", "--gpu-memory", "-3GiB", "-"],
    ],
    ids=["check-space", "check-equals", "explain-space"],
)
def test_a_negative_size_from_the_shell(args):
    """The program itself (its arguments from sys.argv): argparse would read -3GiB as an option."""
    proc = subprocess.run(
        [sys.executable, "-m", "oomguide", *args], capture_output=True, text=True, input="", timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    err = one_line(proc.stderr)
    assert "cannot be negative" in err and "-3GiB" in err and "expected one argument" not in err
