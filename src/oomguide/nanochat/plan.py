"""A nanochat script's arguments -> the model it builds and the phases it runs (``PhaseSpec``).

What it does: for each script oomguide predicts, the shape and the batch as the script computes
them from its arguments (read by ``command``), with every value the command line does not decide
said as an assumption (``Plan.assumptions``):

- base_train.py: the model from ``--depth`` (its ``build_model_meta``: model_dim = depth x
  aspect_ratio rounded up to a multiple of head_dim, one head per head_dim), the total batch from
  ``--total-batch-size`` or, at -1, from its scaling law (computed with nanochat's own GPT on the
  meta device: ``num_scaling_params``), the gradient accumulation, and its phases: a training step
  (compiled), the validation bpb (compiled), the CORE evaluation and sampling (the uncompiled model);
- base_eval.py, chat_sft.py, chat_rl.py, chat_cli.py: the base model from its checkpoint's
  ``meta_<step>.json`` in ``$NANOCHAT_BASE_DIR`` (read as data), else from ``--from-base`` (the
  base_train line that made it), else base_train's defaults; chat_sft inherits ``max_seq_len``,
  ``device_batch_size`` and ``total_batch_size`` as its script does.

The vocabulary is the tokenizer's: scripts/tok_train.py's ``--vocab-size`` default. Never runs the
scripts; ``BadCommand`` for what the script itself would refuse (its asserts).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .command import BadCommand, Command, parse_line, script_arguments, script_parser
from .phases import PhaseSpec

CORE_ROWS = 5  # the most choices of a CORE task (commonsense_qa): one row each
SAMPLE_PROMPT = 16  # tokens of base_train's and base_eval's sample prompts (a short sentence)
RL_PROMPT = 512  # tokens of a GSM8K question rendered for completion (assumed)


@dataclass(frozen=True)
class BatchRule:
    """The ``--device-batch-size`` values a script accepts, and the micro-steps it derives from one.

    base_train.py and chat_sft.py: ``assert total_batch_size % (device_batch_size * max_seq_len *
    ddp_world_size) == 0``, then ``grad_accum_steps = total_batch_size // that``; chat_rl.py: ``assert
    inputs_all.size(0) % args.device_batch_size == 0`` (its --num-samples rows per example),
    ``num_passes`` passes per example and ``examples_per_step // ddp_world_size`` examples per step,
    every pass's gradients accumulated before the step."""

    script: str
    total: int  # tokens per step on all ranks (base_train, chat_sft), or samples per example (chat_rl)
    seq: int = 1  # tokens per row (max_seq_len); 1 for chat_rl
    world: int = 1  # ranks; 1 for chat_rl
    repeat: int = 1  # micro-steps per step that do not depend on the batch (chat_rl's examples per rank)

    def accum(self, batch: int) -> int | None:
        """The micro-steps (gradient accumulation) the script derives at `batch`, or None: refused."""
        if batch < 1 or self.total % (batch * self.seq * self.world):
            return None
        return self.repeat * (self.total // (batch * self.seq * self.world))

    def most(self) -> int:
        """The largest batch the script accepts: one micro-step of the whole step."""
        return self.total // (self.seq * self.world)

    def accepted(self, upto: int) -> list[int]:
        """The batch sizes from 1 to `upto` that the script accepts, ascending."""
        return [b for b in range(1, upto + 1) if self.accum(b) is not None]

    def refusal(self, batch: int) -> str:
        """The assert the script stops at for `batch`, in one line."""
        if self.seq == 1:
            return (
                f"scripts.{self.script} would stop at its assert: --num-samples ({self.total}) must be a multiple of "
                f"--device-batch-size ({batch})"
            )
        return (
            f"scripts.{self.script} would stop at its assert: total_batch_size ({self.total:,}) must be a multiple "
            f"of device_batch_size × max_seq_len × ranks ({batch} × {self.seq} × {self.world} = "
            f"{batch * self.seq * self.world:,})"
        )


@dataclass
class Plan:
    script: str
    world_size: int
    config: dict  # GPTConfig's fields
    phases: list  # PhaseSpec
    device_batch_size: int | None  # the --device-batch-size the searched phases run with
    grad_accum: int | None = None
    total_batch_size: int | None = None
    model_from: str = ""
    fp8: bool = False
    rule: BatchRule | None = None  # the --device-batch-size values the script accepts (None: any)
    assumptions: list = field(default_factory=list)
    environ: dict = field(default_factory=dict)


def vocab_size(checkout: Path, tokenizer: str | None = None) -> tuple[int, str]:
    """The tokenizer's vocabulary and where it comes from: the tok_train line that trained it
    (``--tokenizer``), else tok_train.py's --vocab-size default (what speedrun.sh trains)."""
    if tokenizer:
        args = script_arguments(checkout, parse_line(tokenizer, accept=("tok_train",)))
        return int(args.vocab_size), f"the tokenizer of --tokenizer (--vocab-size={args.vocab_size})"
    args = script_parser(checkout, "tok_train").parse_args([])
    return int(args.vocab_size), "tok_train.py's --vocab-size default (the tokenizer speedrun.sh trains; --tokenizer names another)"


def base_config(checkout: Path, args, vocab: int) -> dict:
    """GPTConfig of base_train.py's build_model_meta(args.depth)."""
    base_dim = args.depth * args.aspect_ratio
    model_dim = ((base_dim + args.head_dim - 1) // args.head_dim) * args.head_dim
    heads = model_dim // args.head_dim
    return dict(
        sequence_len=args.max_seq_len,
        vocab_size=vocab,
        n_layer=args.depth,
        n_head=heads,
        n_kv_head=heads,
        n_embd=model_dim,
        window_pattern=args.window_pattern,
    )


def _scaling_params(code, config: dict) -> int:
    from .phases import build_meta

    counts = build_meta(code, config).num_scaling_params()
    return counts["transformer_matrices"] + counts["lm_head"]


def total_batch(code, checkout: Path, args, config: dict, vocab: int) -> int:
    """base_train.py's total_batch_size: the argument, or at -1 its scaling-law estimate (the
    script's "2) Now that we have the token horizon" block, with its D_REF from d12 and B_REF 2**19)."""
    if args.total_batch_size != -1:
        return args.total_batch_size
    ratio = args.target_param_data_ratio
    target_tokens = int(ratio * _scaling_params(code, config))
    d_ref = ratio * _scaling_params(code, base_config(checkout, _with(args, depth=12), vocab))
    predicted = 2**19 * (target_tokens / d_ref) ** 0.383
    return 2 ** round(math.log2(predicted))


def _with(args, **changes):
    out = type(args)(**vars(args))
    for k, v in changes.items():
        setattr(out, k, v)
    return out


def _accum(rule: BatchRule, dbs: int) -> int:
    accum = rule.accum(dbs)
    if accum is None:
        raise BadCommand(rule.refusal(dbs))
    return accum


def make_plan(
    code, checkout: Path, command: Command, args, from_base: str | None = None, environ=None, tokenizer: str | None = None
) -> Plan:
    environ = dict(os.environ if environ is None else environ)
    environ.update(command.env)
    vocab, vocab_from = vocab_size(checkout, tokenizer)
    plan = _make(code, checkout, command, args, from_base, environ, vocab)
    if plan.config["vocab_size"] == vocab:  # (a checkpoint's meta file names its own)
        plan.assumptions.insert(0, f"vocabulary {vocab:,}: {vocab_from}")
    return plan


def _make(code, checkout: Path, command: Command, args, from_base, environ, vocab) -> Plan:
    world = command.world_size
    if command.script == "base_train":
        return _base_train(code, checkout, command, args, vocab)
    config, meta, source = base_model(code, checkout, args, environ, from_base, vocab, getattr(args, "source", None) or _SOURCE.get(command.script, "base"))
    plan = Plan(command.script, world, config, [], None, model_from=source)
    seq = config["sequence_len"]
    if command.script == "base_eval":
        modes = {m.strip() for m in args.eval.split(",")}
        plan.device_batch_size = args.device_batch_size
        if "sample" in modes:
            plan.phases.append(PhaseSpec("sample", "generate", 8, prompt=1, max_tokens=128, temperature=1.0, optimizer_state=False, searched=False))
        if "bpb" in modes:
            plan.phases.append(PhaseSpec("bpb", "bpb", args.device_batch_size, seq, optimizer_state=False))
        if "core" in modes:
            plan.phases.append(PhaseSpec("core", "core", CORE_ROWS, seq, optimizer_state=False, searched=False))
            plan.assumptions.append(_CORE_ASSUMPTION)
    elif command.script == "chat_sft":
        inherited = {}
        for name, fallback in (("max_seq_len", 2048), ("device_batch_size", 32), ("total_batch_size", 524288)):
            value = getattr(args, name)
            inherited[name] = value if value is not None else meta.get(name, fallback)
        seq, dbs, total = inherited["max_seq_len"], inherited["device_batch_size"], inherited["total_batch_size"]
        plan.rule = BatchRule("chat_sft", total, seq, world)
        accum = _accum(plan.rule, dbs)
        plan.device_batch_size, plan.grad_accum, plan.total_batch_size = dbs, accum, total
        plan.phases.append(PhaseSpec("train_step", "train", dbs, seq, compiled=True, grad_accum=accum))
        if args.eval_every > 0:
            plan.phases.append(PhaseSpec("val_bpb", "bpb", dbs, seq, compiled=True))
        if args.chatcore_every > 0:
            plan.phases += _chat_eval_phases(dbs, seq, num_samples=1, max_new_tokens=512, top_k=50, temperature=0.0)
            plan.assumptions.append(_CHAT_EVAL_ASSUMPTION.format(prompt=CHAT_PROMPT, seq=seq))
    elif command.script == "chat_eval":
        tasks = set(args.task_name.split("|")) if args.task_name else set(CHAT_TASKS)
        plan.device_batch_size = args.batch_size
        phases = _chat_eval_phases(args.batch_size, seq, args.num_samples, args.max_new_tokens, args.top_k, args.temperature)
        kinds = {CHAT_TASKS.get(t) for t in tasks}
        plan.phases += [p for p in phases if p.name.removeprefix("chat_eval_") in kinds]
        plan.assumptions.append(_CHAT_EVAL_ASSUMPTION.format(prompt=CHAT_PROMPT, seq=seq))
    elif command.script == "chat_rl":
        dbs = args.device_batch_size
        plan.rule = BatchRule("chat_rl", args.num_samples, repeat=max(1, args.examples_per_step // world))
        accum = _accum(plan.rule, dbs)
        plan.device_batch_size, plan.grad_accum = dbs, accum
        length = RL_PROMPT + args.max_new_tokens
        plan.phases.append(PhaseSpec("rollout", "generate", dbs, prompt=RL_PROMPT, max_tokens=args.max_new_tokens, top_k=args.top_k, temperature=args.temperature))
        plan.phases.append(PhaseSpec("train_step", "train", dbs, length, grad_accum=accum))
        plan.assumptions.append(f"chat_rl: a GSM8K prompt of {RL_PROMPT} tokens, every sample generated to --max-new-tokens")
    elif command.script in ("chat_cli", "chat_web"):
        max_tokens = 256  # chat_cli.py's generate_kwargs
        plan.phases.append(PhaseSpec("chat", "generate", 1, prompt=seq - max_tokens, max_tokens=max_tokens, top_k=args.top_k, temperature=args.temperature, optimizer_state=False, searched=False))
        plan.assumptions.append(
            f"chat: a conversation as long as the model's context ({seq - max_tokens} tokens before the reply of {max_tokens})"
        )
    return plan


# where the model comes from when the script's checkpoint is not there (render.py words it in the language)
DEFAULTS = "base_train.py's defaults (no checkpoint found; --from-base names the run)"
# the checkpoint folder each script loads (nanochat/checkpoint_manager.py's load_model sources)
_SOURCE = {"chat_rl": "sft", "chat_cli": "sft", "chat_web": "sft", "chat_eval": "sft"}
# scripts/chat_eval.py's tasks: categorical ones forward a batch of prompts, generative ones sample
CHAT_TASKS = {"ARC-Easy": "categorical", "ARC-Challenge": "categorical", "MMLU": "categorical", "GSM8K": "generative", "HumanEval": "generative"}
CHAT_PROMPT = 512  # tokens of a generative task's prompt (assumed, as chat_rl's)
_CHAT_EVAL_ASSUMPTION = (
    "chat evaluation: categorical prompts padded to the model's context ({seq} tokens, an upper bound), "
    "generative prompts of {prompt} tokens (the task data is not read)"
)


def _chat_eval_phases(batch, seq, num_samples, max_new_tokens, top_k, temperature):
    """scripts/chat_eval.py's run_categorical_eval (a batch of prompts forwarded, logits (B, T, V))
    and run_generative_eval (Engine.generate_batch of --num-samples), on the uncompiled model."""
    return [
        PhaseSpec("chat_eval_categorical", "forward", batch, seq, optimizer_state=False, searched=False),
        PhaseSpec(
            "chat_eval_generative", "generate", num_samples, prompt=CHAT_PROMPT, max_tokens=max_new_tokens,
            top_k=top_k or None, temperature=temperature, optimizer_state=False, searched=False,
        ),
    ]


_CORE_ASSUMPTION = (
    f"CORE evaluation: {CORE_ROWS} rows (the most choices of a CORE task) of max_seq_len tokens each, "
    "an upper bound (the eval bundle is not read)"
)  # each assumption is a msgid of messages.py: the output says it in the reader's language


def _base_train(code, checkout: Path, command: Command, args, vocab: int) -> Plan:
    config = base_config(checkout, args, vocab)
    world, dbs, seq = command.world_size, args.device_batch_size, args.max_seq_len
    total = total_batch(code, checkout, args, config, vocab)
    rule = BatchRule("base_train", total, seq, world)
    accum = _accum(rule, dbs)
    plan = Plan("base_train", world, config, [], dbs, accum, total, f"--depth={args.depth}", fp8=args.fp8, rule=rule)
    plan.phases.append(PhaseSpec("train_step", "train", dbs, seq, compiled=True, grad_accum=accum))
    if args.eval_every > 0:
        plan.phases.append(PhaseSpec("val_bpb", "bpb", dbs, seq, compiled=True))
    if args.core_metric_every > 0:
        plan.phases.append(PhaseSpec("core", "core", CORE_ROWS, seq, searched=False))
        plan.assumptions.append(_CORE_ASSUMPTION)
    if args.sample_every > 0:
        plan.phases.append(PhaseSpec("sample", "generate", 1, prompt=SAMPLE_PROMPT, max_tokens=16, searched=False))
    if args.fp8 and args.fp8_recipe != "tensorwise":
        raise BadCommand(f"scripts.base_train would stop: nanochat/fp8.py supports --fp8-recipe=tensorwise only, not {args.fp8_recipe}")
    return plan


def base_model(code, checkout: Path, args, environ: dict, from_base: str | None, vocab: int, source: str = "base"):
    """The model a script loads: (GPTConfig fields, the checkpoint's metadata, where from). A chat
    model (sft, rl) has its base model's shape."""
    if from_base:
        command = parse_line(from_base)
        if command.script != "base_train":
            raise BadCommand(f"--from-base: {command.script} is not base_train")
        base_args = script_arguments(checkout, command)
        config = base_config(checkout, base_args, vocab)
        meta = {  # what base_train.py writes into its checkpoint's meta_<step>.json
            "max_seq_len": base_args.max_seq_len,
            "device_batch_size": base_args.device_batch_size,
            "total_batch_size": total_batch(code, checkout, base_args, config, vocab),
        }
        return config, meta, f"--from-base --depth={base_args.depth}"
    base_dir = Path(environ.get("NANOCHAT_BASE_DIR") or Path.home() / ".cache" / "nanochat")
    folder = {"base": "base_checkpoints", "sft": "chatsft_checkpoints", "rl": "chatrl_checkpoints"}[source]
    tag = getattr(args, "model_tag", None)
    found = _checkpoint_meta(base_dir / folder, tag) or (None if source == "base" else _checkpoint_meta(base_dir / "base_checkpoints", tag))
    if found is not None:
        path, meta = found
        config = dict(meta["model_config"])
        config.setdefault("window_pattern", "L")
        return config, meta, str(path)
    defaults = script_parser(checkout, "base_train").parse_args([])
    return base_config(checkout, defaults, vocab), {}, DEFAULTS


def _checkpoint_meta(root: Path, tag: str | None):
    """nanochat/checkpoint_manager.py's choice: the tag given, else the deepest d<N>; the last step."""
    if not root.is_dir():
        return None
    if tag is None:
        tags = [(int(m.group(1)), d.name) for d in root.iterdir() if d.is_dir() and (m := re.match(r"d(\d+)", d.name))]
        if not tags:
            return None
        tag = max(tags)[1]
    metas = sorted((root / tag).glob("meta_*.json"))
    if not metas:
        return None
    try:
        return metas[-1], json.loads(metas[-1].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
