"""One verdict: a nanoGPT run as the reader has it -> each phase's peak, whether it fits, the largest batch.

``oomguide check``, ``oomguide explain --config``, the pages' figures and the notebooks call
:func:`verdict`, so that one config gives one answer everywhere. What it decides, in order:

1. the settings: the config files and ``--key=value`` overrides, read as train.py reads them
   (``config.load_config``; the data's meta.pkl and a resumed checkpoint found as train.py finds them);
2. the code that runs (``checkout``): the reader's nanoGPT checkout (``--nanogpt``, else the one the
   config or the working directory belongs to), or, without one, nanoGPT as released, said in the
   output. A setting only the guide's code changes read counts only where that change is in the
   code; otherwise one note names the section that adds it, and the prediction is the unchanged run;
3. the card (``--gpu``, or ``--gpu-memory`` with an assumed compute capability) and the allocator;
4. the processes (one, or ``torchrun``'s ranks under DDP or FSDP2) and whether the model is compiled;
5. each phase train.py goes through, predicted on fake tensors (``memory``), and the batch search.

The result is a plain dict (the ``--json`` output); ``cli`` and ``explain.render`` only word it.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass, field, replace

from . import checkout, memory, versions
from .config import DEFAULTS, EXTENSION_DEFAULTS, TrainConfig, load_config
from .memory import reserved
from .memory.allocator import with_expandable_segments


@dataclass
class Request:
    """A run to judge: what the reader types (`check`'s options), in the library's terms."""

    configs: list = field(default_factory=list)
    overrides: list = field(default_factory=list)  # key=value, as train.py's --key=value
    nanogpt: str | None = None  # the reader's checkout (None: found from the config or the cwd)
    model: str | None = None  # a model.py to run instead of the checkout's
    gpu: str | None = None
    gpu_memory: int = memory.DEFAULT_GPU_MEMORY
    capability: str | None = None  # "X.Y"; None: the card's, or assumed (said in the output)
    alloc_conf: str | None = None  # PYTORCH_CUDA_ALLOC_CONF's syntax; None: the environment's
    nproc_per_node: int = 1
    strategy: str | None = None
    gradient_as_bucket_view: bool = False
    phases: list | None = None  # only these of memory.CHECKS (None: every phase train.py runs)
    search: bool = True  # the largest batch_size that fits
    cwd: str | None = None
    config: TrainConfig | None = None  # settings already read (explain), instead of configs/overrides
    sample: bool = False  # sample.py's run instead of train.py's (configs/overrides: sample.py's keys)


class BadRequest(ValueError):
    """A request that names no possible run; the message is the one line the reader sees."""


@dataclass
class Run:
    """What :func:`prepare` decided: the settings, the code and the card a prediction runs with."""

    config: TrainConfig
    code: checkout.Code
    source: memory.ModelSource | None
    stale_logits: bool
    card: object
    parallel: object
    phases: list
    notes: list
    search: bool = True  # the largest batch_size that fits, per phase
    sample: object = None  # sample.py's settings (sample_config.SampleConfig), for phase "sample"

    @property
    def compiled(self) -> bool:
        return bool(self.config.compile)

    @property
    def checkpoint_on_card(self) -> bool:
        """Whether torch.load puts the checkpoint on the card: the reader's train.py (or sample.py)
        with nanoGPT's map_location=device, not the guide's map_location='cpu' (``checkout``)."""
        return not (self.code.sample_to_cpu if self.sample is not None else self.code.resume_to_cpu)

    def options(self, name: str) -> dict:
        """The predictor's options for the check `name`: its state, and compiled when the model is."""
        return {
            "state": memory.CHECKS[name][1],
            "stale_logits": self.stale_logits,
            **({"compiled": True} if self.compiled else {}),
            **(
                {"checkpoint_on_card": False}
                if not self.checkpoint_on_card and (self.parallel.single or name == "resume")
                else {}
            ),
            **({"sample": self.sample} if name == "sample" else {}),
        }

    def predictor(self, alloc_conf=None):
        """The predict function of this run's processes, on its card (`alloc_conf`: another allocator setting)."""
        card = self.card
        conf = card.alloc_conf if alloc_conf is None else alloc_conf
        if self.parallel.single:
            return functools.partial(memory.predict, alloc_conf=conf, capability=card.gpu.capability)
        from .memory import distributed

        return functools.partial(
            distributed.predict,
            parallel=self.parallel,
            capability=card.gpu.capability,
            alloc_conf=conf,
        )


def _meaningful(value) -> bool:
    return value not in (None, 0, False)


def apply_code(config: TrainConfig, code: checkout.Code, model_path: str | None) -> tuple[TrainConfig, list]:
    """The settings as the reader's code reads them: the guide's keys only where its change is there."""
    notes = []
    changes = {}
    for key, (reader, page, anchor) in checkout.GUIDE_KEYS.items():
        value = config.values[key]
        if not _meaningful(value):
            continue
        if key == "grad_checkpoint" and model_path is not None:
            continue  # the reader's model.py decides below
        if code.reads(key):
            continue
        refused = (
            key in config.overridden
            and code.command_line_keys is not None
            and key not in code.command_line_keys
        )
        notes.append(
            f"{key} = {value!r} is read only by {reader} as the guide changes it ({page}.md#{anchor}); "
            f"{code.where} does not have that change, so nanoGPT ignores {key}"
            + (f" (and train.py would stop on --{key}: 'Unknown config key')" if refused else "")
            + ": predicted without it"
        )
        changes[key] = EXTENSION_DEFAULTS[key]
    block, eval_block = config.block_size, config.values["eval_block_size"]
    if "eval_block_size" not in changes and _meaningful(eval_block) and eval_block > block:
        # what the guide's get_batch raises (eval-oom-12gb/get_batch_eval_block.py): the run stops
        raise BadRequest(
            f"eval_block_size {eval_block} is longer than block_size {block}: the run stops there"
        )
    if code.grad_checkpoint and not config.grad_checkpoint and model_path is None:
        changes["grad_checkpoint"] = True  # model.py checkpoints every Block in training, whatever the config
    if code.command_line_keys is not None:
        unknown = sorted(config.overridden - code.command_line_keys - set(checkout.GUIDE_KEYS))
        for key in unknown:
            notes.append(
                f"train.py would stop on --{key}: 'Unknown config key' (not a global of its train.py)"
            )
    return (config.replace(**changes) if changes else config), notes


def refuse_unknown_overrides(config: TrainConfig, code: checkout.Code) -> None:
    """An override no train.py reads stops the run, as nanoGPT's configurator.py raises
    ``ValueError(f"Unknown config key: {key}")`` for a --key=value whose key is not a global of train.py.
    Known: train.py's globals (nanoGPT's, or those of the reader's train.py) and oomguide's extension keys,
    which a note explains where the reader's code does not read them (apply_code)."""
    known = set(DEFAULTS) | set(code.command_line_keys or ())
    for key in sorted(config.overridden - known):
        raise BadRequest(
            f"train.py would stop on --{key}: 'Unknown config key' (not a global of its train.py)"
        )


def prepare(request: Request) -> Run:
    """Read the settings, find the code, resolve the card and the processes (no prediction yet)."""
    from .memory.distributed import Parallel

    if request.nproc_per_node <= 0:
        raise BadRequest(f"--nproc-per-node must be 1 or more, got {request.nproc_per_node}")
    if request.strategy is not None and request.nproc_per_node == 1:
        raise BadRequest(
            f"--strategy {request.strategy} needs several processes: add --nproc-per-node N (N > 1)"
        )
    parallel = Parallel(request.nproc_per_node, request.strategy, request.gradient_as_bucket_view)
    if request.gradient_as_bucket_view and parallel.strategy != "ddp":
        raise BadRequest("--gradient-as-bucket-view is a DDP setting: use it with --strategy ddp")
    sample = None
    if request.sample:
        from .sample_config import load_sample_config

        if request.nproc_per_node != 1:
            raise BadRequest("--sample predicts sample.py, one process: leave out --nproc-per-node")
        sample = load_sample_config(request.configs, request.overrides, cwd=request.cwd)
        config, notes = sample.model, list(sample.notes)
    elif request.config is not None:
        config, notes = request.config, []
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = load_config(request.configs, request.overrides, find_files=True, cwd=request.cwd)
        notes = [str(w.message) for w in caught] + list(config.notes)
    code = checkout.find(request.configs, request.cwd, request.nanogpt)
    if sample is None:
        refuse_unknown_overrides(config, code)
    notes += list(code.notes)
    model_path = request.model or (str(code.model_path) if code.model_path else None)
    if sample is None:
        config, code_notes = apply_code(config, code, model_path)
        notes += code_notes
    source = memory.load_model_source(model_path) if model_path else None
    if source is not None and config.grad_checkpoint:
        if "grad_checkpoint" not in inspect.signature(source.config_class).parameters:
            notes.append(
                f"grad_checkpoint = True is not a field of {model_path}'s GPTConfig: its forward decides "
                "whether it checkpoints (eval-oom-12gb.md#gradient-checkpointing); predicted as it is"
            )
            config = config.replace(grad_checkpoint=False)
    run = memory.checks_run(config, sample=sample is not None)
    if "resume" in run and not parallel.single:
        notes.append(
            "several processes: each rank's resume is predicted as one GPU's (train.py loads the "
            "checkpoint before DDP wraps the model); the phases after it leave out the saved weights "
            "that train.py's state_dict keeps on each card"
        )
    if sample is None and config.eval_only and "train_step" not in run:
        notes.append("eval_only=True: train.py stops after the first estimate_loss(); nothing else runs")
    phases = [name for name in run if not request.phases or name in request.phases]
    skipped = [name for name in request.phases or () if name not in run]
    if skipped:
        if config.eval_only and sample is None:
            notes.append(f"not run by this config (eval_only): {', '.join(skipped)}")
        else:
            notes.append(f"not run by this config: {', '.join(skipped)}")
    return Run(
        config=config,
        code=code,
        source=source,
        stale_logits=not code.drops_stale_logits,
        card=card_of(request),
        parallel=parallel,
        phases=phases,
        notes=notes,
        search=request.search,
        sample=sample,
    )


def card_of(request: Request):
    """The card (--gpu, or --gpu-memory with --capability or an assumed 8.6) and the allocator setting."""
    from types import SimpleNamespace

    from .memory import allocator, gpus

    gpu = gpus.resolve_card(request.gpu, request.gpu_memory, request.capability)
    if request.alloc_conf is not None:
        conf = allocator.parse_alloc_conf(request.alloc_conf, "--alloc-conf")
    else:
        conf = allocator.alloc_conf_from_env()
    return SimpleNamespace(gpu=gpu, total_memory=gpu.total_memory, alloc_conf=conf)


def judge(request: Request):
    """(the prepared run, a function card bytes -> its verdict on that card): settings and code read
    once, the card given later (explain: the card of the message)."""
    run = prepare(request)

    def on_card(card_bytes: int) -> dict:
        return verdict(replace(run, card=card_of(replace(request, gpu_memory=card_bytes))))

    return run, on_card


def search_note(run: Run, name: str) -> str | None:
    """Why the largest batch_size is not searched for phase `name`, or None when it is."""
    config = run.config
    phase, state = memory.CHECKS[name]
    if phase == "resume":
        return "does not depend on batch_size: the checkpoint, the weights and AdamW's state only"
    if phase != "estimate_loss" or not (run.code.eval_batch_size and _meaningful(config.eval_batch_size)):
        return None
    if state == "first" or not run.stale_logits:
        return (
            f"does not depend on batch_size: estimate_loss() forwards eval_batch_size = "
            f"{config.eval_batch_size} sequences at a time"
        )
    return None


def _moments(run: Run) -> dict:
    """What the output says of a resumed run's checkpoint and of sample.py's settings."""
    out = {}
    sample = run.sample
    resumed = run.config.init_from == "resume"
    if resumed:
        out["checkpoint"] = {
            "read_by": "sample.py" if sample is not None else "train.py",
            "map_location": "device" if run.checkpoint_on_card else "cpu",
            "on_card": run.checkpoint_on_card,
        }
    if sample is not None:
        out["sample"] = {
            **{
                k: sample.values[k]
                for k in ("init_from", "out_dir", "start", "num_samples", "max_new_tokens")
            },
            **{k: sample.values[k] for k in ("temperature", "top_k", "seed", "device", "dtype", "compile")},
            "prompt_tokens": sample.prompt_tokens,
            "prompt_from": sample.prompt_from,
            "longest_context": sample.longest_context,
            "config": sample.sources,
        }
    return out


def _sample_search(run: Run, predictor, options: dict, result) -> dict:
    """sample.py's largest setting that fits. It runs batch 1, num_samples times one after the other:
    neither changes the peak. What does is generate()'s longest forward, the prompt and
    max_new_tokens - 1 new tokens cropped at block_size: the largest max_new_tokens that fits (None
    where every one does: the crop is reached and fits; 0 where not even the weights do)."""
    sample, config, card = run.sample, run.config, run.card
    entry = {"searched": "max_new_tokens", "num_samples_changes_peak": False}
    crop = sample.crop_reached_at

    def fits(n: int) -> bool:
        opts = dict(options, sample=sample.with_max_new_tokens(n))
        return bool(predictor(config, "sample", card.total_memory, **opts).fits)

    if (result.fits and sample.values["max_new_tokens"] >= crop) or fits(crop):
        entry["max_batch_size"] = None
        entry["max_batch_size_note"] = (
            f"every max_new_tokens fits: generate() crops the context at block_size "
            f"({config.gpt_config().block_size} tokens) from max_new_tokens = {crop} on"
        )
        return entry
    low, high = 0, crop  # fits(low) (0: nothing generated), not fits(high)
    if result.fits:
        low = sample.values["max_new_tokens"]
    else:
        high = min(high, sample.values["max_new_tokens"])
    if low == 0 and not fits(1):
        entry["max_batch_size"] = 0
        return entry
    low = max(low, 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    entry["max_batch_size"] = low
    return entry


def verdict(request: Request | Run, progress=None, prefetch: bool = False) -> dict:
    """The whole answer for a run, as a plain dict (see the module's docstring).

    `progress(phase)` returns a callback for the batch search's progress (or None).
    `prefetch=True` (the CLI program only): a forked child makes the searches' second runs meanwhile.
    """
    run = request if isinstance(request, Run) else prepare(request)
    search = run.search
    config, card, parallel, source = run.config, run.card, run.parallel, run.source
    shape = config.gpt_config()
    code = run.code
    out = {
        "gpu_memory_bytes": card.total_memory,
        "usable_bytes": memory.usable_bytes(card.total_memory),
        "context_bytes": memory.CONTEXT_BYTES,
        "gpu": card.gpu.name,
        "compute_capability": ".".join(map(str, card.gpu.capability)),
        "compute_capability_assumed": card.gpu.capability_assumed,
        "alloc_conf": card.alloc_conf.describe(),
        "mode": "predicted",
        **versions.describe(),  # the PyTorch whose code the prediction ran
        "config": config.sources,
        "code": {
            "where": code.where,
            "path": str(code.path) if code.path else None,
            "eval_batch_size": code.eval_batch_size,
            "eval_block_size": code.eval_block_size,
            "drops_stale_logits": code.drops_stale_logits,
            "model": code.model,
        },
        "model": str(source.path) if source is not None else "oomguide.model.GPT",
        "shape": {
            k: getattr(shape, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias")
        },
        "settings": {
            k: config.values[k]
            for k in (
                "batch_size",
                "dtype",
                "gradient_accumulation_steps",
                "compile",
                "eval_batch_size",
                "eval_block_size",
                "grad_checkpoint",
                "init_from",
            )
        },
        "vocab_from": config.vocab_from,
        **_moments(run),
        "compiled": run.compiled,
        "warnings": run.notes,
        "phases": {},
    }
    predictor = run.predictor()
    single = functools.partial(memory.predict, alloc_conf=card.alloc_conf, capability=card.gpu.capability)
    if not parallel.single:
        from .memory import distributed

        out.update(distributed.describe(config, parallel, source))
    if prefetch and search:
        from .memory import prefetch as prefetching
        from .memory import search as searching

        checks = [
            (memory.CHECKS[name][0], run.options(name))
            for name in run.phases
            if name != "sample" and search_note(run, name) is None
        ]
        prefetching.start(searching.second_runs(predictor, config, checks, source=source))
    for name in run.phases:
        phase, state = memory.CHECKS[name]
        options = run.options(name)
        # each rank resumes before train.py wraps the model (DDP): the one-GPU moment, on its card
        call = single if name == "resume" else predictor
        result = call(config, phase, card.total_memory, source=source, **options)
        entry = {"check": name, "state": state, **result.to_json()}
        if name == "sample":
            if search:
                entry.update(_sample_search(run, predictor, options, result))
        elif search:
            why = search_note(run, name)
            if why is not None:
                entry["max_batch_size"] = None
                entry["max_batch_size_note"] = why
            else:
                entry["max_batch_size"] = memory.max_batch_size(
                    config,
                    phase,
                    card.total_memory,
                    source=source,
                    known={config.batch_size: result},
                    progress=progress(name) if progress else None,
                    predictor=functools.partial(predictor, **options),
                )
                if not card.alloc_conf.expandable_segments:
                    # the remedy of a borderline phase: the largest batch_size with expandable segments
                    expandable = run.predictor(with_expandable_segments(card.alloc_conf))
                    entry["max_batch_size_expandable_segments"] = memory.max_batch_size(
                        config,
                        phase,
                        card.total_memory,
                        source=source,
                        predictor=functools.partial(expandable, **options),
                    )
        out["phases"][name] = entry
    out["fits"] = all(p["fits"] for p in out["phases"].values())
    out["verdict"] = worst(p.get("verdict") for p in out["phases"].values())
    return out


def worst(verdicts) -> str | None:
    """A run's verdict from its phases': the worst of fits < borderline < does_not_fit (None: no card)."""
    order = (reserved.FITS, reserved.BORDERLINE, reserved.DOES_NOT_FIT)
    found = [v for v in verdicts if v in order]
    return max(found, key=order.index) if found else None
