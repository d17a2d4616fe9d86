"""Every snippet of the guide, applied to a copy of the reader's nanoGPT and run with its own train.py.

``pytest examples --nanogpt PATH`` (or ``OOMGUIDE_NANOGPT=PATH``; CI: ``../shared/nanoGPT``). Each
snippet goes where ``snippets/placement.toml`` says — the line the pages print next to it — with
everything it needs, and ``train.py`` runs two iterations with an evaluation before each (the first
``estimate_loss()`` and a later one): tiny on the CPU, full scale on CUDA (examples/nanogpt_checkout.py).
Each run is checked from the outside (examples/nanogpt_run.py records it):

- every setting the config lines make is the one train.py ran with (scaled where the run is tiny);
- training forwards have shape (batch_size, block_size), gradient_accumulation_steps of them per
  iteration; each evaluation forwards 2 x eval_iters batches, in chunks of eval_batch_size and
  eval_block_size tokens where the page's code changes are in;
- what each code change claims: Blocks recomputed in backward, the loss in chunks with no full
  logits, the stale logits gone before a later evaluation, the empty_cache() report before each
  evaluation, no GradScaler FutureWarning, the allocator setting in the environment;
- the moments around the loop: AdamW's state appears in the first optimizer step, while every gradient
  is alive (loaded before it when the run resumes); a resumed run loads out/ckpt.pt (which the same
  config wrote from scratch first) with the map_location its train.py has, and what train.py still
  holds of the checkpoint at the first forward;
- sample.py (its code changes and `python sample.py ...` lines), on a checkpoint that a tiny run of
  train.py wrote: the settings it ran with, the number and length of the samples, the context cropped
  at block_size, where torch.load put the checkpoint, the same samples as stock sample.py;
- the losses equal stock nanoGPT's (the same config lines on unmodified train.py and model.py) where a
  change claims to compute the same thing;
- on a GPU, a page's run at full scale, compiled where it compiles, capped to the --gpu-memory card:
  each phase measured against what `oomguide check` says for the same settings, code and card, and
  the run passes or runs out of memory where check says (examples/gpu_run.py; the report).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import gpu_run
from conftest import check_json, compare_figure, figures_exact
from nanogpt_checkout import DROP_STALE, SAMPLE_SCALE, starts_sampling, starts_training
from oomguide import memory, placement

ROOT = Path(__file__).resolve().parents[1]
PLACEMENTS = placement.load()

# run in nanoGPT with its train.py: config lines, code changes, environment settings, and the shell
# lines that start train.py. The oomguide commands of index/ run in a copy of the checkout in
# test_site_snippets.py (test_oomguide_lines_run); those typed in a checkout of oomguide (verify/, beyond/four-gb-run.sh) in test_site_snippets.py and
# test_beyond.py; the other shell lines around a run (nvidia-smi, kill, ...) in their page's examples.
IN_TRAIN = sorted(
    s
    for s, p in PLACEMENTS.items()
    if p.program == "nanogpt"
    and (
        (p.kind != "shell" and p.file != "sample.py")
        or (p.kind == "shell" and starts_training(s) and not s.startswith("index/"))
    )
)
# run with nanoGPT's sample.py, on a checkpoint that its train.py wrote: the code changes to
# sample.py and the shell lines that start it
IN_SAMPLE = sorted(
    s
    for s, p in PLACEMENTS.items()
    if p.program == "nanogpt"
    and ((p.is_code and p.file == "sample.py") or (p.kind == "shell" and starts_sampling(s)))
)

CHUNKED_EVAL = "eval-oom-12gb/estimate_loss_chunked.py"
EVAL_BLOCK_CALL = "eval-oom-12gb/get-batch-eval-call.py"
RECOMPUTED = {"eval-oom-12gb/checkpointed_forward.py", "beyond/four-gb-model.py"}
CHUNKED_LOSS = {"beyond/chunked-loss.py", "beyond/four-gb-model.py"}
LOSS_CHUNK_SIZE = 1024  # rows, as the chunked-loss snippets set it
EMPTY_CACHE = "estimate-loss-oom/empty-cache.py"
GRADSCALER = "estimate-loss-oom/gradscaler.py"
MAP_CPU = "run-moments/map-location-cpu.py"  # train.py loads the checkpoint into host memory
FREE_STATE_DICT = "run-moments/free-state-dict.py"  # and drops its last reference after loading
SAMPLE_MAP_CPU = "run-moments/sample-map-location-cpu.py"
# code changes that claim to compute what stock nanoGPT computes (the estimate with
# eval_block_size set is a different estimate, on purpose)
SAME_COMPUTATION = {
    CHUNKED_EVAL,
    "eval-oom-12gb/eval-batch-size-default.py",
    "eval-oom-12gb/eval-block-size-default.py",
    "eval-oom-12gb/get_batch_eval_block.py",
    *RECOMPUTED,
    *CHUNKED_LOSS,
    DROP_STALE,
    EMPTY_CACHE,
    GRADSCALER,
    MAP_CPU,
    FREE_STATE_DICT,
}

# every combination the guide recommends, across pages too
COMBINATIONS = {
    "12gb-expected": ("estimate-loss-oom/expected.py",),
    "12gb-expected-float16-scaler": (
        "estimate-loss-oom/expected.py",
        "estimate-loss-oom/float16.py",
        GRADSCALER,
    ),
    "4070-recommended-checkpointed": (
        "eval-oom-12gb/recommended.py",
        "eval-oom-12gb/checkpointed_forward.py",
    ),
    "4070-source-corrected": ("eval-oom-12gb/source-combination.py",),
    "eval-options-1-and-2": ("eval-oom-12gb/eval-batch-size.py", "eval-oom-12gb/eval-block-size.py"),
    "4gb-recipe": ("beyond/four-gb-config.py",),
    "chunked-loss-chunked-eval-no-stale": (
        "beyond/chunked-loss.py",
        "eval-oom-12gb/eval-batch-size.py",
        DROP_STALE,
    ),
}


# --------------------------------------------------------------------------------------------
# the checks every run gets
# --------------------------------------------------------------------------------------------
def assigned_keys(run) -> set[str]:
    keys = set()
    for rel in run.snippets:
        if PLACEMENTS[rel].kind == "config":
            namespace: dict = {}
            exec((ROOT / "snippets" / rel).read_text(encoding="utf-8"), namespace)
            keys |= {k for k in namespace if not k.startswith("__")}
    return keys


def check_settings(run):
    """Each setting of the config lines (and of the scaling) is what train.py ran with."""
    scaled = {a[2:].split("=", 1)[0] for a in run.record["argv"] if a.startswith("--")}
    for key in sorted(assigned_keys(run) | scaled):
        if key == "out_dir":
            continue
        assert run.settings.get(key) == run.expected[key], (
            f"{key}: train.py ran with {run.settings.get(key)!r}, the config says {run.expected[key]!r}"
        )


def check_shapes(run):
    e = run.expected
    gas, batch, block = e["gradient_accumulation_steps"], e["batch_size"], e["block_size"]
    train = run.forwards(True)
    assert len(train) == 2 * gas, f"{len(train)} training forwards for 2 iterations of {gas} micro-steps"
    assert {tuple(f["shape"]) for f in train} == {(batch, block)}
    eval_batch = (run.settings.get("eval_batch_size") or batch) if CHUNKED_EVAL in run.snippets else batch
    eval_block = (run.settings.get("eval_block_size") or block) if EVAL_BLOCK_CALL in run.snippets else block
    chunks = [min(eval_batch, batch - i) for i in range(0, batch, eval_batch)]
    assert len(run.evaluations) == 2, "an evaluation before each of the two iterations"
    for evaluation in run.evaluations:
        assert [f["shape"] for f in evaluation] == [[c, eval_block] for c in chunks] * (2 * e["eval_iters"])


def check_claims(run):
    applied = set(run.snippets)
    # compiled (a page's config on the GPU): Blocks and lm_head run inside the graph, uncounted; the
    # tiny eager runs on the CPU check these two claims
    eager = not run.record.get("compiled")
    if eager and applied & RECOMPUTED:
        assert run.recompute_factor == 2, "each Block runs again in backward"
    elif eager:
        assert run.recompute_factor == 1
    if eager and applied & CHUNKED_LOSS:
        rows = [c["rows"] for c in run.record["lm_head"] if c["training"] and c["grad"]]
        bt = run.expected["batch_size"] * run.expected["block_size"]
        assert max(rows) <= LOSS_CHUNK_SIZE < bt, f"lm_head saw {max(rows)} rows at once, of {bt}"
        assert sum(rows) == 2 * len(run.forwards(True)) * bt  # forward + recomputation in backward
        assert all(f["logits"] is None for f in run.record["forwards"] if f["loss"] is not None)
    later = run.evaluations[1][0]
    if DROP_STALE in applied or applied & CHUNKED_LOSS:
        assert later["stale_logits"] is None, "no logits left over from training during estimate_loss()"
    else:  # stock train.py keeps the last micro-step's logits alive (its module-level `logits`)
        assert later["stale_logits"] == [
            *run.forwards(True)[-1]["shape"],
            run.forwards(True)[-1]["logits"][-1],
        ]
    if EMPTY_CACHE in applied:
        lines = [ln for ln in run.output.splitlines() if "empty_cache():" in ln or ln.startswith("step ")]
        assert [ln.split(":")[0] for ln in lines] == [
            "before empty_cache()",
            "after empty_cache()",
            "step 0",
        ] + [
            "before empty_cache()",
            "after empty_cache()",
            "step 1",
        ]
    scaler_warnings = [w for w in run.record["warnings"] if "FutureWarning" in w and "GradScaler" in w]
    assert bool(scaler_warnings) is (GRADSCALER not in applied), run.record["warnings"]
    check_moments(run)


def check_moments(run):
    """AdamW's state appears in the first optimizer step, with every gradient alive (loaded before it
    when resumed); a resumed run loads out/ckpt.pt where its train.py says and keeps what it keeps."""
    applied = set(run.snippets)
    first = run.record["optimizer_steps"][0]
    n = first["before"]["params"]
    assert first["before"]["with_grad"] == n, "every gradient is alive when the optimizer steps"
    assert first["after"]["with_state"] == n, "after the first step, every parameter has AdamW state"
    if run.settings["init_from"] != "resume":
        assert first["before"]["with_state"] == 0, "AdamW's state does not exist before the first step"
        assert run.record["torch_load"] == []
        return
    assert first["before"]["with_state"] == n, "resumed: the state was loaded from the checkpoint"
    assert [c["file"] for c in run.record["torch_load"]] == ["ckpt.pt"]
    where = run.record["torch_load"][0]["map_location"]
    assert where == ("cpu" if MAP_CPU in applied else run.settings["device"]), where
    refs = run.record["checkpoint_refs"]
    assert refs["checkpoint"] is False, "train.py's `checkpoint = None` (nanoGPT PR #236)"
    assert refs["state_dict"] is (FREE_STATE_DICT not in applied), refs


def check_against_stock(run, nanogpt):
    """Where every code change claims the same computation, the losses are stock nanoGPT's."""
    code = [s for s in run.snippets if PLACEMENTS[s].is_code]
    if not code:
        return
    stock = nanogpt.run(*run.requested, code=False, scale=run.scale)
    assert stock.ok, stock.explain()
    # the CPU is deterministic; CUDA's kernels (bf16 autocast, atomic adds in backward) are not quite
    rel, digits = (2e-5, 2e-4) if run.scale == "tiny" else (2e-3, 5e-3)
    assert run.train_losses == pytest.approx(stock.train_losses, rel=rel)
    if set(code) <= SAME_COMPUTATION:
        for mine, theirs in zip(run.estimates, stock.estimates, strict=True):
            assert mine == pytest.approx(theirs, abs=digits), (run.estimates, stock.estimates)


def check_run(run, nanogpt, report):
    if not gpu_run.check_on_the_gpu(run, nanogpt.results, report):
        return  # out of memory where check says: the run stopped there
    assert run.ok, run.explain()
    check_settings(run)
    check_shapes(run)
    check_claims(run)
    check_against_stock(run, nanogpt)


# --------------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------------
def has_code(snippets) -> bool:
    return any(PLACEMENTS[s].is_code for s in placement.expand(snippets, PLACEMENTS))


@pytest.fixture(scope="module")
def ng(nanogpt, request):
    """The nanogpt fixture, with the runs of this module's selected tests started in the background."""
    selected = {item.name for item in request.session.items if item.module.__name__ == __name__}
    wanted = [
        *((f"test_snippet_in_nanogpt[{s}]", (s,)) for s in IN_TRAIN),
        *((f"test_combination_in_nanogpt[{n}]", c) for n, c in sorted(COMBINATIONS.items())),
    ]
    jobs = []
    for test, snippets in wanted:
        if test in selected:
            jobs.append((snippets, {}))
            if has_code(snippets):
                jobs.append((snippets, {"code": False}))
    if "test_eval_batch_size_on_the_command_line" in selected:
        jobs += [
            ((CHUNKED_EVAL,), {"extra": ("--eval_batch_size=2",)}),
            (("eval-oom-12gb/situation.py",), {"code": False, "extra": ("--eval_batch_size=2",)}),
            (("eval-oom-12gb/eval-batch-size.py",), {"code": False, "extra": ("--eval_batch_size=2",)}),
        ]
    if "test_eval_block_size_longer_than_block_size_is_named" in selected:
        jobs.append((("eval-oom-12gb/eval-block-size.py",), {"extra": ("--eval_block_size=4096",)}))
    nanogpt.prefetch(jobs)
    return nanogpt


def test_every_snippet_has_a_placement():
    files = sorted(
        p.relative_to(ROOT / "snippets").as_posix()
        for p in (ROOT / "snippets").rglob("*")
        if p.is_file() and p.name != "placement.toml" and "__pycache__" not in p.parts
    )
    assert sorted(PLACEMENTS) == files


@pytest.mark.parametrize("relative", IN_TRAIN)
def test_snippet_in_nanogpt(ng, report, relative):
    run = ng.run(relative)
    check_run(run, ng, report)
    if "PYTORCH_CUDA_ALLOC_CONF" in (ROOT / "snippets" / relative).read_text():  # it reaches train.py
        assert run.record["alloc_conf"] == "expandable_segments:True"
        assert run.record["cuda_initialized_at_start"] is False


def sample_settings(relative: str) -> dict:
    """sample.py's settings as the run gets them: the scaling, then the snippet's own line."""
    out = {}
    argv = [*SAMPLE_SCALE]
    if PLACEMENTS[relative].kind == "shell":
        argv += [
            a for line in (ROOT / "snippets" / relative).read_text().splitlines() for a in line.split()[2:]
        ]
    for arg in argv:
        key, _, value = arg[2:].partition("=")
        out[key] = int(value) if value.isdigit() else value
    return out


@pytest.mark.parametrize("relative", IN_SAMPLE)
def test_sample_snippet_in_nanogpt(ng, report, relative):
    """sample.py with the snippet, on a checkpoint that a tiny run of train.py wrote: the settings the
    snippet makes are the ones sample.py ran with, and the samples are what they ask for."""
    run = ng.sample(relative)
    assert run.ok, run.explain()
    settings = sample_settings(relative)
    for key, value in settings.items():
        assert run.settings[key] == value, f"{key}: sample.py ran with {run.settings[key]!r}, not {value!r}"
    calls = run.record["generate"]
    assert len(calls) == settings["num_samples"], "one generate() per sample"
    assert all(c["length"] == c["prompt"] + settings["max_new_tokens"] for c in calls), calls
    forwards = run.record["forwards"]
    assert len(forwards) == sum(c["max_new_tokens"] for c in calls), "one forward per new token"
    assert all(not f["training"] and not f["grad"] and f["shape"][0] == 1 for f in forwards)
    longest = max(f["shape"][1] for f in forwards)
    assert longest == min(run.expected["block_size"], calls[0]["length"] - 1), "the context is cropped"
    assert run.output.count("---------------") == settings["num_samples"]
    where = [c["map_location"] for c in run.record["torch_load"]]
    assert where == ["cpu" if relative == SAMPLE_MAP_CPU else run.settings["device"]], where
    if PLACEMENTS[relative].is_code:
        stock = ng.sample(relative, code=False)
        assert stock.ok, stock.explain()
        assert run.output == stock.output, "the same samples as sample.py without the change"
    report(
        f"nanoGPT sample.py + {relative}: {len(calls)} samples of {settings['max_new_tokens']} tokens, "
        f"checkpoint loaded with map_location={where[0]!r}"
    )


def test_the_checkpoint_goes_to_the_cpu_whatever_the_device(ng, report):
    """With map_location='cpu', torch.load no longer follows train.py's (or sample.py's) `device`. On a
    machine without a GPU this shows with a device that is not spelled 'cpu': 'cpu:0' runs everywhere
    else in both scripts, but torch.load cannot restore a checkpoint to a location named so. Unchanged,
    both scripts pass `device` to torch.load and fail; with the change, both run."""
    device = ("--device=cpu:0",)
    fixed = ng.run(MAP_CPU, extra=device)
    assert fixed.ok, fixed.explain()
    assert fixed.settings["device"] == "cpu:0" and fixed.record["torch_load"][0]["map_location"] == "cpu"
    stock = ng.run(MAP_CPU, extra=device, code=False)
    assert not stock.ok and "tagged with cpu:0" in stock.output, stock.output[-2000:]
    sampled = ng.sample(SAMPLE_MAP_CPU, extra=device)
    assert sampled.ok and sampled.settings["device"] == "cpu:0", sampled.explain()
    unchanged = ng.sample(SAMPLE_MAP_CPU, extra=device, code=False)
    assert not unchanged.ok and "tagged with cpu:0" in unchanged.output, unchanged.output[-2000:]
    report(
        "nanoGPT: with device='cpu:0', train.py and sample.py load the checkpoint only with map_location='cpu'"
    )


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_combination_in_nanogpt(ng, report, name):
    run = ng.run(*COMBINATIONS[name])
    check_run(run, ng, report)
    report(
        f"nanoGPT combination {name}: {len(run.snippets)} snippets, train loss {run.train_losses[-1]:.4f}, "
        f"estimates {run.estimates}"
    )


def test_eval_batch_size_on_the_command_line(ng):
    """With the default line in train.py, --eval_batch_size=2 is a setting like any other (problem 7)."""
    run = ng.run(CHUNKED_EVAL, extra=("--eval_batch_size=2",))
    assert run.ok, run.explain()
    assert {f["shape"][0] for e in run.evaluations for f in e} == {2}
    # stock train.py: unknown on the command line ...
    stock = ng.run("eval-oom-12gb/situation.py", code=False, extra=("--eval_batch_size=2",))
    assert not stock.ok and "Unknown config key: eval_batch_size" in stock.output
    # ... but accepted once a config file defines it, and then ignored: full batches
    ignored = ng.run("eval-oom-12gb/eval-batch-size.py", code=False, extra=("--eval_batch_size=2",))
    assert ignored.ok, ignored.explain()
    assert {f["shape"][0] for e in ignored.evaluations for f in e} == {ignored.expected["batch_size"]}


def test_eval_block_size_longer_than_block_size_is_named(ng):
    run = ng.run("eval-oom-12gb/eval-block-size.py", extra=("--eval_block_size=4096",))
    assert not run.ok
    block = run.expected["block_size"]
    assert f"ValueError: eval_block_size = 4096 is longer than block_size = {block}" in run.output


def test_a_wrong_placement_fails(ng, report):
    """The checks have teeth: a snippet put at a wrong target is caught, by the patcher or by the run."""
    source = (ng.source / "train.py").read_text(encoding="utf-8")
    text = (ROOT / "snippets" / DROP_STALE).read_text(encoding="utf-8")
    # a target that is not in train.py: the patcher refuses
    missing = placement.Placement(DROP_STALE, "before", "train.py", "losses = estimate_loss(model)")
    with pytest.raises(placement.PlacementError, match="has no line"):
        placement.apply(missing, text, source)
    # one line too late: the run completes, but the stale logits are alive during the evaluation
    late = dict(PLACEMENTS)
    late[DROP_STALE] = placement.Placement(DROP_STALE, "after", "train.py", "losses = estimate_loss()")
    run = ng.run(DROP_STALE, placements=late)
    assert run.ok, run.explain()
    with pytest.raises(AssertionError, match="no logits left over"):
        check_claims(run)
    report("nanoGPT: drop-stale-logits.py placed after estimate_loss() instead of before: caught")


# --------------------------------------------------------------------------------------------
# the figures: the patched nanoGPT model.py and the project's GPT agree within 1%
# --------------------------------------------------------------------------------------------
def stored(page: str, key: str) -> int:
    from oomguide import figures

    return figures.load()[page][key]["value"]


EAGER = ("compile=False",)  # the figures a page gives for the model run eagerly: check --set compile=False
FIGURES = [
    # (snippets: the page's config and code, --set, check's phase, page, figure)
    (("eval-oom-12gb/situation.py",), EAGER, "train_step", "eval-oom-12gb", "train_peak"),
    (("eval-oom-12gb/situation.py",), EAGER, "estimate_loss", "eval-oom-12gb", "eval_peak"),
    (("eval-oom-12gb/situation.py",), EAGER, "estimate_loss_first", "eval-oom-12gb", "eval_peak_first"),
    (("eval-oom-12gb/situation.py",), (), "train_step", "eval-oom-12gb", "train_peak_compiled"),
    (("eval-oom-12gb/situation.py",), (), "estimate_loss", "eval-oom-12gb", "eval_peak_compiled"),
    (("eval-oom-12gb/eval-batch-size.py",), EAGER, "estimate_loss", "eval-oom-12gb", "eval_peak_b4"),
    (("eval-oom-12gb/eval-block-size.py",), EAGER, "estimate_loss", "eval-oom-12gb", "eval_peak_block512"),
    (("eval-oom-12gb/n-embd-512.py",), EAGER, "estimate_loss", "eval-oom-12gb", "eval_peak_512"),
    (("eval-oom-12gb/n-embd-448.py",), EAGER, "estimate_loss", "eval-oom-12gb", "eval_peak_448"),
    (
        ("eval-oom-12gb/situation.py", "eval-oom-12gb/checkpointed_forward.py"),
        EAGER,
        "train_step",
        "eval-oom-12gb",
        "ckpt_train_peak",
    ),
    (("eval-oom-12gb/recommended.py",), EAGER, "train_step", "eval-oom-12gb", "rec_train_peak"),
    (("eval-oom-12gb/recommended.py",), EAGER, "estimate_loss", "eval-oom-12gb", "rec_eval_peak"),
    (("eval-oom-12gb/source-combination.py",), EAGER, "train_step", "eval-oom-12gb", "src_train_peak"),
    (("eval-oom-12gb/source-combination.py",), EAGER, "estimate_loss", "eval-oom-12gb", "src_eval_peak"),
    (
        ("estimate-loss-oom/situation.py",),
        (),
        "estimate_loss_first",
        "estimate-loss-oom",
        "first_eval_peak_before",
    ),
    (
        ("estimate-loss-oom/situation.py",),
        EAGER,
        "estimate_loss_first",
        "estimate-loss-oom",
        "eager_first_eval_peak_before",
    ),
    (
        ("estimate-loss-oom/batch-size.py",),
        (),
        "train_step",
        "estimate-loss-oom",
        "fix_batch_peak_train_step",
    ),
    (
        ("estimate-loss-oom/batch-size.py",),
        (),
        "estimate_loss",
        "estimate-loss-oom",
        "fix_batch_peak_estimate_loss",
    ),
    (("estimate-loss-oom/block-size.py",), (), "train_step", "estimate-loss-oom", "block_train_peak"),
    (
        ("estimate-loss-oom/block-size.py",),
        (),
        "estimate_loss_first",
        "estimate-loss-oom",
        "block_first_eval_peak",
    ),
    (("estimate-loss-oom/expected.py",), (), "train_step", "estimate-loss-oom", "expected_peak_train_step"),
    (
        ("estimate-loss-oom/expected.py",),
        (),
        "estimate_loss",
        "estimate-loss-oom",
        "expected_peak_estimate_loss",
    ),
    (("beyond/four-gb-config.py",), EAGER, "train_step", "beyond", "four_gb_peak_train_step"),
    (("beyond/four-gb-config.py",), EAGER, "estimate_loss", "beyond", "four_gb_peak_estimate_loss"),
    (("beyond/four-gb-config.py",), (), "train_step", "beyond", "four_gb_compiled_peak_train_step"),
    (("beyond/four-gb-config.py",), (), "estimate_loss", "beyond", "four_gb_compiled_peak_estimate_loss"),
]
_CHECKED: dict = {}


def check_on_nanogpt(nanogpt, snippets, overrides) -> dict:
    """`oomguide check --json` in a copy of the reader's checkout with `snippets` applied where
    placement.toml says (code in train.py/model.py, config lines in the checkout's config file), on
    that config file, as a reader would run it."""
    key = (snippets, overrides)
    if key not in _CHECKED:
        folder = nanogpt.copy("check-" + Path(snippets[-1]).stem)
        configs, _, _ = nanogpt.apply(folder, snippets)
        files = [str(folder / c) for c in configs]
        _CHECKED[key] = check_json(*files, "--nanogpt", str(folder), *(f"--set={o}" for o in overrides))
    return _CHECKED[key]


@pytest.mark.parametrize("snippets, overrides, check, page, key", FIGURES, ids=[f[-1] for f in FIGURES])
def test_page_figures_are_what_check_says_in_nanogpt(nanogpt, report, snippets, overrides, check, page, key):
    """Each peak a page prints for a config is, to the byte with CI's torch, what `oomguide check` says
    for exactly that config in a nanoGPT checkout with the page's snippets (the code the checkout then
    has decides); with another torch, or on a GPU, within the stated tolerance (conftest.compare_figure)."""
    out = check_on_nanogpt(nanogpt, snippets, overrides)
    theirs = out["phases"][check]["peak_bytes"]
    ours = stored(page, key)
    report(
        f"check in nanoGPT + {', '.join(snippets)}{' --set ' + ' '.join(overrides) if overrides else ''}: "
        f"{check} {memory.fmt_bytes(theirs)}, page {page}.{key} {memory.fmt_bytes(ours)} "
        f"(model.py: {out['code']['model']})"
    )
    ok, line = compare_figure(f"{page}.{key}", theirs, {"value": ours}, "gib", figures_exact())
    if line:
        report(line)
    assert ok, line


def test_only_the_calling_thread_parses(ng, monkeypatch):
    """Runs started in the background parse nothing in their threads: two threads in ast.parse at once
    fail on CPython 3.11 ("AST constructor recursion depth mismatch", python/cpython#106905), which
    made this suite fail on busy machines. Every ast.parse while two runs go on comes from this thread."""
    import ast
    import threading

    seen = []
    real = ast.parse

    def parse(*args, **kwargs):
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    jobs = [(("eval-oom-12gb/situation.py",), {"extra": (f"--log_interval={n}",)}) for n in (2, 3)]
    ng.prefetch(jobs)
    runs = [ng.run(*snippets, **kwargs) for snippets, kwargs in jobs]
    assert all(run.ok for run in runs), [run.explain() for run in runs]
    assert seen, "placing snippets and reading configs parse Python: the wrapper saw nothing"
    assert set(seen) == {threading.current_thread().name}
