"""`oomguide explain` and `oomguide check` print what they printed when the outputs were recorded.

The recorded outputs live in tests/golden/: the messages explain reads (tests/golden/messages/,
the messages of tests/test_explain.py, of the estimate-loss-oom page and of the home page's
snippets), and for each case the exact stdout and exit code of the command, in every language, as
text and as JSON. A change of wording, of a figure or of a link fails here with a diff.

When a change of output is intended (a new sentence, a better prediction), re-record and commit the
difference with the change, so that the review sees it:

    pytest tests/test_cli_golden.py --update-golden

Predictions are computed once per (config, phase, card) and shared by the languages and formats of
a case, so that this module costs about as much as one `check` per config.
"""

from __future__ import annotations

import difflib
import inspect
import re
from pathlib import Path

import pytest
import torch

from oomguide import memory
from oomguide.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
MESSAGES = GOLDEN / "messages"
LANGS = ("en", "ja", "zh", "de", "fr")

# explain: (message, variant name, extra arguments). Without a config, every message.
ESTIMATE_LOSS_SITUATION = "snippets/estimate-loss-oom/situation.py"
EVAL_12GB_SITUATION = "snippets/eval-oom-12gb/situation.py"
EXPLAIN_CASES: list[tuple[str, str, tuple[str, ...]]] = [
    (path.stem, "", ()) for path in sorted(MESSAGES.glob("*.txt"))
] + [
    ("article-estimate-loss", "estimate-loss-situation", ("--config", ESTIMATE_LOSS_SITUATION)),
    ("article-estimate-loss", "eval-12gb-situation", ("--config", EVAL_12GB_SITUATION)),
    ("issue88-394-pre2.1", "batch2-float16", ("--set", "batch_size=2", "--set", "dtype=float16")),
    (
        "issue88-6.14-eval",
        "batch64-bf16-no-predict",
        ("--set", "batch_size=64", "--set", "dtype=bfloat16", "--no-predict"),
    ),
    (
        "gpt2xl-24gb",
        "gpt2-xl-no-predict",
        ("--set", "init_from=gpt2-xl", "--set", "batch_size=1", "--no-predict"),
    ),
    (
        "gpt2xl-24gb",
        "gpt2-xl-24GB-no-predict",
        ("--set", "init_from=gpt2-xl", "--set", "batch_size=1", "--gpu-memory", "24GB", "--no-predict"),
    ),
    # a resumed run's checkpoint on the card, named from the prediction (the message has no traceback)
    ("nanogpt236-resume-pre2.1", "resume-124m", ("--set", "init_from=resume", "--set", "batch_size=8")),
]

# check: (variant name, arguments)
CHECK_CASES: list[tuple[str, tuple[str, ...]]] = [
    ("estimate-loss-situation", (ESTIMATE_LOSS_SITUATION,)),
    (
        "estimate-loss-situation-batch8-12GiB",
        (ESTIMATE_LOSS_SITUATION, "--set", "batch_size=8", "--gpu-memory", "12GiB"),
    ),
    ("eval-12gb-situation", (EVAL_12GB_SITUATION,)),
    # (situation.py + recommended.py is left out: with eval_batch_size its batch search runs
    # thousands of chunked forwards, minutes on a shared 2-core machine)
    ("beyond-four-gb", ("snippets/beyond/four-gb-config.py", "--gpu-memory", "4GiB")),
    # resuming: the checkpoint on the card, then the phases with AdamW's state from it
    ("estimate-loss-situation-resume", (ESTIMATE_LOSS_SITUATION, "--set", "init_from=resume", "--no-search")),
    # sample.py: its own keys; the largest max_new_tokens
    ("sample-gpt2-xl-12GiB", ("--sample", "--set", "init_from=gpt2-xl", "--gpu-memory", "12GiB")),
    # two ranks under DDP: the lines only several processes print (one phase, no search: seconds)
    (
        "beyond-four-gb-ddp2-train-step",
        (
            "snippets/beyond/four-gb-config.py",
            "--gpu-memory",
            "4GiB",
            "--nproc-per-node",
            "2",
            "--phase",
            "train_step",
            "--no-search",
        ),
    ),
]


def _key(func, args, kwargs):
    """A hashable key for a call of memory.predict / max_batch_size: the config by its values."""
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    parts = []
    for name, value in bound.arguments.items():
        if name in ("known", "progress"):
            continue
        if hasattr(value, "values") and hasattr(value, "gpt_config"):
            value = ("config", repr(sorted(value.values.items())))
        elif isinstance(value, dict):
            value = repr(sorted(value.items()))
        parts.append(
            (name, value if isinstance(value, (str, int, float, bool, type(None), tuple)) else repr(value))
        )
    return tuple(parts)


@pytest.fixture(scope="module")
def shared_predictions():
    """memory.predict and memory.max_batch_size computed once per arguments for the whole module."""
    mp = pytest.MonkeyPatch()
    cache: dict = {}

    def memo(func):
        def wrapper(*args, **kwargs):
            key = (func.__name__, _key(func, args, kwargs))
            if key not in cache:
                cache[key] = func(*args, **kwargs)
            return cache[key]

        return wrapper

    mp.setattr(memory, "predict", memo(memory.predict))
    mp.setattr(memory, "max_batch_size", memo(memory.max_batch_size))
    yield
    mp.undo()


def _run(capsys, argv: list[str]) -> str:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's errors (an option's value refused) exit from the parser
        rc = exc.code
    out, err = capsys.readouterr()
    text = f"$ oomguide {' '.join(argv)}\nexit {rc}\n{out}"
    if err:
        text += "".join(f"stderr: {line}\n" for line in err.splitlines())
    # check names the torch it ran: recorded as <torch>, so that the record holds for any build;
    # and the folders it looked in: recorded as <repo>, so that the record holds in any checkout;
    # "Read next"'s line of a heading as <line>, so that an edit above it on a page changes no record
    # (tests/test_explain.py opens each one and finds the heading there)
    text = text.replace(torch.__version__, "<torch>").replace(str(ROOT), "<repo>")
    return re.sub(r"(\.md):\d+\b", r"\1:<line>", text)


def _compare(path: Path, actual: str, update: bool) -> None:
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.is_file(), (
        f"{path.relative_to(ROOT)} is missing: record it with pytest {Path(__file__).name} --update-golden"
    )
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                f"{path.relative_to(ROOT)} (recorded)",
                "now",
            )
        )
        pytest.fail(
            f"output differs from {path.relative_to(ROOT)}; if intended, re-record with "
            f"--update-golden and commit the diff:\n{diff[:6000]}",
            pytrace=False,
        )


@pytest.fixture
def cli_env(monkeypatch):
    monkeypatch.chdir(ROOT)  # paths in the output are relative to the repository
    monkeypatch.delenv("OOMGUIDE_SITE_URL", raising=False)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)


@pytest.mark.parametrize(
    ("message", "variant", "extra"), EXPLAIN_CASES, ids=[f"{m}+{v}" if v else m for m, v, _ in EXPLAIN_CASES]
)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_explain_output_is_unchanged(
    capsys, request, cli_env, shared_predictions, message, variant, extra, fmt
):
    update = request.config.getoption("--update-golden")
    file = f"tests/golden/messages/{message}.txt"
    parts = []
    for lang in LANGS:
        argv = ["explain", file, *extra, "--lang", lang] + (["--json"] if fmt == "json" else [])
        parts.append(_run(capsys, argv))
    name = f"{message}+{variant}" if variant else message
    _compare(GOLDEN / "explain" / f"{name}.{'json' if fmt == 'json' else 'txt'}", "\n".join(parts), update)


@pytest.mark.parametrize(("variant", "args"), CHECK_CASES, ids=[v for v, _ in CHECK_CASES])
def test_check_output_is_unchanged(capsys, request, cli_env, shared_predictions, variant, args):
    """check's text in every language, one file per case (the languages one after the other)."""
    update = request.config.getoption("--update-golden")
    parts = [_run(capsys, ["check", *args, "--lang", lang]) for lang in LANGS]
    _compare(GOLDEN / "check" / f"{variant}.txt", "\n".join(parts), update)


@pytest.mark.parametrize(("variant", "args"), CHECK_CASES, ids=[v for v, _ in CHECK_CASES])
def test_check_json_is_unchanged_and_the_same_in_every_language(
    capsys, request, cli_env, shared_predictions, variant, args
):
    update = request.config.getoption("--update-golden")
    english = _run(capsys, ["check", *args, "--json"])
    for lang in LANGS[1:]:
        other = _run(capsys, ["check", *args, "--json", "--lang", lang])
        assert other.replace(f" --lang {lang}", "", 1) == english, f"--json differs with --lang {lang}"
    _compare(GOLDEN / "check" / f"{variant}.json", english, update)


# the CLI's one-line errors, in every language: (name, arguments)
ERROR_CASES: list[tuple[str, tuple[str, ...]]] = [
    ("config-not-found", ("check", "no/such/config.py")),
    ("config-is-a-folder", ("check", "tests/golden/messages")),
    (
        "not-a-text-config",
        ("check", "tests/reports/nanogpt-234-shakespeare-char-k80/data/shakespeare_char/meta.pkl"),
    ),
    ("unknown-card", ("check", ESTIMATE_LOSS_SITUATION, "--gpu", "RTX 4090 Super Duper")),
    ("ambiguous-card", ("check", ESTIMATE_LOSS_SITUATION, "--gpu", "RTX 4060 Ti")),
    ("bad-size", ("check", ESTIMATE_LOSS_SITUATION, "--gpu-memory", "12XB")),
    ("negative-size", ("check", ESTIMATE_LOSS_SITUATION, "--gpu-memory", "-3GiB")),
    ("no-train-py", ("check", ESTIMATE_LOSS_SITUATION, "--nanogpt", "snippets")),
    ("explain-file-not-found", ("explain", "no/such/message.txt")),
]


def test_error_lines_are_unchanged(capsys, request, cli_env):
    """Each error line in every language: the library's figures and paths kept, the words translated."""
    update = request.config.getoption("--update-golden")
    parts = []
    for name, args in ERROR_CASES:
        for lang in LANGS:
            parts.append(f"# {name}\n" + _run(capsys, [*args, "--lang", lang]))
    _compare(GOLDEN / "errors.txt", "\n".join(parts), update)


# check --nanochat: lines of nanochat's own runs/ scripts, with the checkout the tests use
NANOCHAT_ENV = "OOMGUIDE_NANOCHAT"
NANOCHAT_SPEEDRUN = (
    "torchrun --standalone --nproc_per_node=8 -m scripts.base_train -- --depth=24 "
    "--target-param-data-ratio=8 --device-batch-size=16 --fp8 --run=dummy"
)
NANOCHAT_RUNCPU = (
    "python -m scripts.base_train --depth=6 --head-dim=64 --window-pattern=L --max-seq-len=512 "
    "--device-batch-size=32 --total-batch-size=16384 --eval-every=100 --eval-tokens=524288 "
    "--core-metric-every=-1 --sample-every=100 --num-iterations=5000 --run=dummy"
)
NANOCHAT_CASES: list[tuple[str, tuple[str, ...]]] = [
    ("nanochat-speedrun-base-train", ("--gpu", "H100 80GB", "--", *NANOCHAT_SPEEDRUN.split())),
    ("nanochat-runcpu-base-train", ("--gpu", "RTX 4090", "--", *NANOCHAT_RUNCPU.split())),
    (
        "nanochat-speedrun-chat-sft",
        ("--gpu", "H100 80GB", "--no-search", "--from-base", NANOCHAT_SPEEDRUN, "--",
         "torchrun", "--standalone", "--nproc_per_node=8", "-m", "scripts.chat_sft", "--", "--run=dummy"),
    ),
    ("nanochat-tok-train-refused", ("--", "python", "-m", "scripts.tok_train")),
    ("nanochat-batch-refused", ("--", "torchrun", "--nproc_per_node=8", "-m", "scripts.base_train", "--", "--device-batch-size=19")),
]


@pytest.fixture(scope="module")
def nanochat_checkout():
    import os

    path = os.environ.get(NANOCHAT_ENV)
    if not path or not (Path(path) / "nanochat" / "gpt.py").is_file():
        pytest.skip(f"needs a nanochat checkout: {NANOCHAT_ENV}=PATH")
    from oomguide.nanochat import check

    mp = pytest.MonkeyPatch()
    cache: dict = {}
    verdict = check.verdict

    def memo(request, progress=None, environ=None):  # one prediction per request, for every language
        key = repr(request)
        if key not in cache:
            cache[key] = verdict(request, progress, environ)
        return cache[key]

    mp.setattr(check, "verdict", memo)
    yield Path(path).resolve()
    mp.undo()


@pytest.mark.parametrize(("variant", "args"), NANOCHAT_CASES, ids=[v for v, _ in NANOCHAT_CASES])
def test_check_nanochat_output_is_unchanged(capsys, request, cli_env, nanochat_checkout, variant, args):
    """check --nanochat's text in every language and its JSON (the same in every language)."""
    update = request.config.getoption("--update-golden")
    at = args.index("--")
    options, line = list(args[:at]), list(args[at:])

    def run(*extra):
        argv = ["check", "--nanochat", str(nanochat_checkout), *options, *extra, *line]
        return _run(capsys, argv).replace(str(nanochat_checkout), "<nanochat>")

    parts = [run("--lang", lang) for lang in LANGS]
    _compare(GOLDEN / "check" / f"{variant}.txt", "\n".join(parts), update)
    english = run("--json")
    if "exit 2" not in english:
        for lang in LANGS[1:]:
            assert run("--json", "--lang", lang).replace(f" --lang {lang}", "", 1) == english
        _compare(GOLDEN / "check" / f"{variant}.json", english, update)
