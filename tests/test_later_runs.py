"""A later phase (state "training") made in the same run as the first one (``phases.run_phase``'s
`later` tracker) is the run it stands for: its result and its traces equal those of the phase run on
its own, for the settings that change what the run allocates (dtype, clipping, compile, the stale
logits, a card too small, gradient accumulation)."""

from __future__ import annotations

import importlib

import pytest

from oomguide.config import load_config
from oomguide.memory import ModelSource

predict_module = importlib.import_module("oomguide.memory.predict")

TINY = ["n_layer=2", "n_head=2", "n_embd=64", "block_size=64", "vocab_size=512", "batch_size=4"]
CASES = {
    "bfloat16": [],
    "float32": ["dtype=float32"],
    "no clipping": ["grad_clip=0.0"],
    "one micro-step": ["gradient_accumulation_steps=1"],
    "compiled": ["compile=True"],
    "no stale logits": [],
    "card too small": [],
}


def _run(config, phase, state, budget, **options):
    run = dict(
        source=ModelSource(),
        state=state,
        fake=True,
        seed=0,
        eval_iters=1,
        stale_logits=options.get("stale_logits", True),
        compiled=bool(config.compile),
        peak_only=False,
        capability=(8, 6),
        checkpoint_on_card=True,
        sample=None,
    )
    return predict_module._run(config, phase, config.batch_size, budget, config, **run)


@pytest.mark.parametrize("phase", ["train_step", "estimate_loss"])
@pytest.mark.parametrize("case", list(CASES))
def test_later_run_equals_its_own_run(case, phase):
    config = load_config([], TINY + CASES[case])
    options = {"stale_logits": case != "no stale logits"}
    budget = 2 << 20 if case == "card too small" else 1 << 40
    predict_module._LATER.clear()
    alone = _run(config, phase, "training", budget, **options)
    _run(config, phase, "first", budget, **options)
    assert len(predict_module._LATER) == 1, "the first run keeps the later one"
    beside = _run(config, phase, "training", budget, **options)
    assert not predict_module._LATER, "the later prediction took it"
    assert beside[0].to_json() == alone[0].to_json()
    assert beside[2] == alone[2]
    assert beside[1] == alone[1]
    if case == "card too small":
        assert alone[0].fits is False


def test_float16_and_resume_run_alone():
    """GradScaler (float16) unscales per optimizer, and a resumed run's state differs otherwise: no
    later run is made beside those first ones."""
    predict_module._LATER.clear()
    _run(load_config([], TINY + ["dtype=float16"]), "train_step", "first", None)
    assert not predict_module._LATER


@pytest.mark.parametrize("phase", ["train_step", "estimate_loss"])
@pytest.mark.parametrize("case", ["bfloat16", "one micro-step", "no stale logits", "card too small"])
@pytest.mark.parametrize("strategy", ["fsdp", "ddp", "ddp as bucket view"])
def test_parallel_later_run_equals_its_own_run(strategy, case, phase):
    """The same for one rank of FSDP2 (``distributed._run_fsdp_phase``'s `later` tracker) and of DDP
    (its buckets registered with both trackers, gradients copied or made bucket views)."""
    from oomguide.memory import distributed

    per_rank = {"one micro-step": ["gradient_accumulation_steps=4"]}  # 1 per rank of 4
    config = load_config([], TINY + per_rank.get(case, CASES[case]))
    parallel = distributed.Parallel(4, strategy.split()[0], strategy.endswith("view"))
    gpu = 3 << 20 if case == "card too small" else 1 << 40
    options = dict(stale_logits=case != "no stale logits", capability=(8, 6))
    distributed._LATER.clear()
    alone = distributed.predict(config, phase, gpu, parallel, state="training", **options)
    distributed.predict(config, phase, gpu, parallel, state="first", **options)
    assert len(distributed._LATER) == 1, "the first run keeps the later one"
    beside = distributed.predict(config, phase, gpu, parallel, state="training", **options)
    assert not distributed._LATER, "the later prediction took it"
    assert beside.to_json() == alone.to_json()
    if case == "card too small":
        assert alone.fits is False
