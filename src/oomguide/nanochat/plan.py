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
    assumptions: list = field(default_factory=list)
    environ: dict = field(default_factory=dict)


def vocab_size(checkout: Path) -> int:
    """The tokenizer's vocabulary: tok_train.py's --vocab-size default (what speedrun.sh trains)."""
    args = script_parser(checkout, "tok_train").parse_args([])
    return int(args.vocab_size)


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


def _accum(total: int, dbs: int, seq: int, world: int, script: str) -> int:
    per_step = dbs * seq * world
    if total % per_step:
        raise BadCommand(
            f"scripts.{script} would stop at its assert: total_batch_size ({total}) must be a multiple of "
            f"device_batch_size x max_seq_len x ranks ({dbs} x {seq} x {world} = {per_step})"
        )
    return total // per_step


def make_plan(code, checkout: Path, command: Command, args, from_base: str | None = None, environ=None) -> Plan:
    environ = dict(os.environ if environ is None else environ)
    environ.update(command.env)
    vocab = vocab_size(checkout)
    world = command.world_size
    if command.script == "base_train":
        return _base_train(code, checkout, command, args, vocab)
    config, meta, source = base_model(checkout, args, environ, from_base, vocab)
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
        accum = _accum(total, dbs, seq, world, "chat_sft")
        plan.device_batch_size, plan.grad_accum, plan.total_batch_size = dbs, accum, total
        plan.phases.append(PhaseSpec("train_step", "train", dbs, seq, compiled=True, grad_accum=accum))
        if args.eval_every > 0:
            plan.phases.append(PhaseSpec("val_bpb", "bpb", dbs, seq, compiled=True))
        plan.assumptions.append("ChatCORE evaluation (generative, on the uncompiled model) not modelled")
    elif command.script == "chat_rl":
        dbs = args.device_batch_size
        plan.device_batch_size = dbs
        length = RL_PROMPT + args.max_new_tokens
        plan.phases.append(PhaseSpec("rollout", "generate", dbs, prompt=RL_PROMPT, max_tokens=args.max_new_tokens, top_k=args.top_k, temperature=args.temperature))
        plan.phases.append(PhaseSpec("train_step", "train", dbs, length, grad_accum=max(1, args.num_samples // dbs)))
        plan.assumptions.append(f"chat_rl: a GSM8K prompt of {RL_PROMPT} tokens, every sample generated to --max-new-tokens")
    elif command.script in ("chat_cli", "chat_web"):
        max_tokens = 256  # chat_cli.py's generate_kwargs
        plan.phases.append(PhaseSpec("chat", "generate", 1, prompt=seq - max_tokens, max_tokens=max_tokens, top_k=args.top_k, temperature=args.temperature, optimizer_state=False, searched=False))
        plan.assumptions.append(f"chat: a conversation as long as the model's context ({seq - max_tokens} tokens before the reply of 256)")
    return plan


_CORE_ASSUMPTION = (
    f"CORE evaluation: {CORE_ROWS} rows (the most choices of a CORE task) of max_seq_len tokens each, "
    "an upper bound (the eval bundle is not read)"
)


def _base_train(code, checkout: Path, command: Command, args, vocab: int) -> Plan:
    config = base_config(checkout, args, vocab)
    world, dbs, seq = command.world_size, args.device_batch_size, args.max_seq_len
    total = total_batch(code, checkout, args, config, vocab)
    accum = _accum(total, dbs, seq, world, "base_train")
    plan = Plan("base_train", world, config, [], dbs, accum, total, f"--depth={args.depth}", fp8=args.fp8)
    plan.phases.append(PhaseSpec("train_step", "train", dbs, seq, compiled=True, grad_accum=accum))
    if args.eval_every > 0:
        plan.phases.append(PhaseSpec("val_bpb", "bpb", dbs, seq, compiled=True))
    if args.core_metric_every > 0:
        plan.phases.append(PhaseSpec("core", "core", CORE_ROWS, seq, searched=False))
        plan.assumptions.append(_CORE_ASSUMPTION)
    if args.sample_every > 0:
        plan.phases.append(PhaseSpec("sample", "generate", 1, prompt=SAMPLE_PROMPT, max_tokens=16, searched=False))
    if args.fp8:
        plan.assumptions.append("--fp8: the Linear layers modelled in the compute dtype (nanochat/fp8.py's Float8Linear not modelled)")
    return plan


def base_model(checkout: Path, args, environ: dict, from_base: str | None, vocab: int):
    """The base model a script loads: (GPTConfig fields, the checkpoint's metadata, where from)."""
    if from_base:
        command = parse_line(from_base)
        if command.script != "base_train":
            raise BadCommand(f"--from-base: {command.script} is not base_train")
        base_args = script_arguments(checkout, command)
        meta = {"max_seq_len": base_args.max_seq_len, "device_batch_size": base_args.device_batch_size}
        return base_config(checkout, base_args, vocab), meta, f"--from-base (--depth={base_args.depth})"
    base_dir = Path(environ.get("NANOCHAT_BASE_DIR") or Path.home() / ".cache" / "nanochat")
    found = _checkpoint_meta(base_dir / "base_checkpoints", getattr(args, "model_tag", None))
    if found is not None:
        path, meta = found
        config = dict(meta["model_config"])
        config.setdefault("window_pattern", "L")
        return config, meta, str(path)
    defaults = script_parser(checkout, "base_train").parse_args([])
    return base_config(checkout, defaults, vocab), {}, "base_train.py's defaults (no checkpoint found; --from-base names the run)"


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
