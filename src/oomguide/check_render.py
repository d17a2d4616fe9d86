"""``oomguide check``'s answer as text, in the reader's language; and the CLI's own sentences.

What it does: words the dict that ``verdict.verdict`` returns (the ``--json`` output) line by line,
with the sentences of ``TEXT`` translated through the ``check`` catalogs (``oomguide.i18n``) and
the library's own one-liners in it (the card, the code, the notes) through ``messages``. Sizes
stay as PyTorch prints them (``8.30 GiB``) in every language, so that the reader finds them in
their log; config keys, program names and PyTorch's op names stay as they are.

It must never compute a figure or decide a verdict (everything comes from the dict) and never hold
a translation: a new sentence goes into ``TEXT`` and the catalogs (``python -m oomguide.i18n``).
"""

from __future__ import annotations

import functools

from . import figures
from .i18n import N_, gettext_for
from .messages import translate

TEXT: dict[str, str] = {
    # the CLI's one-line error, and the batch search's progress on stderr
    "error": N_("oomguide {command}: error: {message}"),
    "usage_error": N_("oomguide: error: {message}"),
    "progress": N_("searching the largest batch_size for {phase}: [{bar}] predictions: {done}"),
    # the run: card, allocator, processes, settings, vocab, code, PyTorch
    # TRANSLATORS: sizes ({total}, {peak}, ...) are oomguide's own figures, already written as the
    # language writes sizes ("11,69 Gio"); keep config keys, op names and options.
    "card": N_(
        "card: {gpu}, compute capability {capability}: {total} total, {usable} for PyTorch "
        "({context} set aside for the CUDA context)"
    ),
    "card_assumed": N_(
        "card: {gpu}, compute capability {capability} (assumed: --capability or --gpu sets it): "
        "{total} total, {usable} for PyTorch ({context} set aside for the CUDA context)"
    ),
    "card_per_gpu": N_(
        "card: {gpu}, compute capability {capability}: {total} total, {usable} for PyTorch "
        "({context} set aside for the CUDA context) per GPU"
    ),
    "card_assumed_per_gpu": N_(
        "card: {gpu}, compute capability {capability} (assumed: --capability or --gpu sets it): "
        "{total} total, {usable} for PyTorch ({context} set aside for the CUDA context) per GPU"
    ),
    "allocator": N_("allocator: {setting}"),
    "processes": N_(
        "{n} processes ({strategy}), figures per rank: gradient_accumulation_steps {steps} -> "
        "{steps_per_rank} per rank, {tokens} tokens per iteration"
    ),
    "processes_ddp": N_(
        "{n} processes ({strategy}), figures per rank: gradient_accumulation_steps {steps} -> "
        "{steps_per_rank} per rank, {tokens} tokens per iteration; {buckets}"
    ),
    "ddp_buckets": N_("DDP's gradient buckets {size}"),
    "ddp_buckets_views": N_("DDP's gradient buckets {size} (the gradients are views into them)"),
    "config": N_("config: {settings}"),
    "vocab": N_("vocab_size={vocab}: {source}"),
    "code": N_("code: {where}; {model}; the guide's code changes in it: {changes}"),
    "code_none": N_("none"),
    "model_own": N_("its own model.py, run as it is"),
    "model_nanogpt": N_("nanoGPT's model.py"),
    "change_eval_batch_size": N_("estimate_loss() in chunks of eval_batch_size"),
    "change_eval_block_size": N_("eval_block_size for evaluation"),
    "change_stale_logits": N_("the stale logits dropped before estimate_loss()"),
    "change_checkpointed": N_("checkpointed Blocks in model.py"),
    # TRANSLATORS: a range of PyTorch releases ("2.5–2.15"): write it as the language writes a range
    "torch_range": N_("{low}–{high}"),
    "torch_verified": N_("predicted with: PyTorch {version} (oomguide is verified on {range})"),
    "torch_outside": N_(
        "predicted with: PyTorch {version}: OUTSIDE the range oomguide is verified on ({range}); "
        "the prediction follows this PyTorch's code but was never checked on it"
    ),
    "note": N_("note: {note}"),
    # TRANSLATORS: above the sections of the guide that the notes name, as explain's answer ends
    "read_next": N_("Read next"),
    # each phase
    "estimate_loss_first": N_("first estimate_loss() (iteration 0: weights only, no optimizer state yet)"),
    "estimate_loss_first_resume": N_(
        "first estimate_loss() after resuming (AdamW state from the checkpoint)"
    ),
    "resume": N_(
        "resuming (init_from='resume': the checkpoint loaded, the model and AdamW's state restored)"
    ),
    "first_step": N_("first train step (AdamW's state created in optimizer.step())"),
    "train_step": N_("train step"),
    "sample": N_("sample.py (generate(), batch 1, no KV cache)"),
    "estimate_loss": N_("later estimate_loss() (AdamW state and the last training logits alive)"),
    "phase_fits": N_("{phase}: predicted peak {peak} allocated -> fits (attention: {attention})"),
    "phase_fails": N_("{phase}: predicted peak {peak} allocated -> DOES NOT FIT (attention: {attention})"),
    "phase_fits_reserved": N_(
        "{phase}: predicted peak {peak} allocated, {reserved} reserved -> fits (attention: {attention})"
    ),
    "phase_fails_reserved": N_(
        "{phase}: predicted peak {peak} allocated, {reserved} reserved -> DOES NOT FIT "
        "(attention: {attention})"
    ),
    "phase_borderline_reserved": N_(
        "{phase}: predicted peak {peak} allocated, {reserved} reserved -> BORDERLINE "
        "(attention: {attention})"
    ),
    # TRANSLATORS: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True stays as it is (it is typed)
    "borderline": N_(
        "borderline: within the measured uncertainty of the predictions, {usable} is not enough "
        "to be sure: whether it runs depends on how the caching allocator's segments are split "
        "up by then"
    ),
    "borderline_expandable_fits": N_(
        "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the allocator grows one segment "
        "instead of splitting many): fits"
    ),
    "borderline_expandable_borderline": N_(
        "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: still borderline; a smaller "
        "batch_size is the sure fix"
    ),
    "borderline_expandable_fails": N_(
        "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: does not fit either"
    ),
    "replay_fails_at": N_(
        "the allocator's replay fails on a request for {size} ({op}), with {allocated} "
        "already allocated"
    ),
    "attention_none": N_("none"),
    "largest": N_("largest allocation: {size} ({op})"),
    "fail_at": N_("would fail on a request for {size} ({op}), with {allocated} already allocated"),
    "fail_at_reserved": N_(
        "would fail on a request for {size} ({op}), with {allocated} already allocated and "
        "{reserved} reserved"
    ),
    "fail_at_forward": N_(
        "would fail on a request for {size} ({op} in forward {forward}), with {allocated} "
        "already allocated"
    ),
    "fail_at_forward_reserved": N_(
        "would fail on a request for {size} ({op} in forward {forward}), with {allocated} "
        "already allocated and {reserved} reserved"
    ),
    "at_peak": N_("at the peak: {parts}"),
    "part": N_("{what} {size}"),
    "part_weights": N_("weights"),
    "part_gradients": N_("gradients"),
    "part_optimizer_state": N_("optimizer state"),
    "part_activations": N_("activations"),
    "part_logits_and_loss": N_("logits and loss"),
    "part_ddp_buckets": N_("ddp buckets"),
    "part_checkpoint": N_("checkpoint"),
    "part_workspaces": N_("cuBLAS workspaces"),
    # where in a phase the peak and the failure come
    "peak_moment": N_("the peak comes in {moment}"),
    "failing_moment": N_("it fails in {moment}"),
    "moment_forward_backward": N_("the forward and backward passes"),
    "moment_optimizer_step": N_("optimizer.step()"),
    "moment_torch_load": N_("torch.load() (the checkpoint onto the card)"),
    "moment_model_to_device": N_("model.to(device)"),
    "moment_optimizer_load_state_dict": N_("optimizer.load_state_dict()"),
    "moment_generate": N_("generate()"),
    # a resumed run's checkpoint, sample.py's settings and its search
    "checkpoint_train_card": N_(
        "checkpoint: train.py loads it onto the card (torch.load(ckpt_path, map_location=device)); "
        "AdamW's state is shared with it, and its saved weights stay there for the whole run "
        "(train.py's state_dict)"
    ),
    "checkpoint_sample_card": N_(
        "checkpoint: sample.py loads it onto the card (torch.load(ckpt_path, map_location=device)), "
        "AdamW's state with it, and keeps it for the whole run (its checkpoint variable)"
    ),
    "checkpoint_cpu": N_("checkpoint: {script} loads it to the CPU (map_location='cpu'): not on the card"),
    "config_sample": N_("sample.py: {settings}"),
    "max_new_tokens": N_(
        "largest max_new_tokens that fits: {n} (num_samples does not change the peak: the samples "
        "run one after the other)"
    ),
    "max_new_tokens_none": N_("not even max_new_tokens=1 fits"),
    "max_new_tokens_note": N_("largest max_new_tokens: {note}"),
    "max_batch_note": N_("largest batch_size: {note}"),
    "max_batch": N_("largest batch_size that fits: {n}"),
    "max_batch_none": N_("not even batch_size=1 fits"),
    "max_batch_expandable": N_(
        "largest batch_size that fits with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: {n}"
    ),
    # the closing line: how the figures were made
    "how_compiled": N_(
        "torch.compile modelled by rules, checked against compiled runs on a GPU: the fused loss and "
        "casts, and the zero gradient autograd gives the compiled graph's logits output"
    ),
    "how_eager": N_("the model run eagerly"),
    "footer": N_(
        "(predicted on fake tensors with CUDA's autocast, attention kernel and caching allocator; "
        "{how}; a phase fits when its reserved memory does with the margin of the measured "
        "uncertainty, and is borderline within it; cuBLAS's workspaces modelled, other kernels' not)"
    ),
    "footer_per_rank": N_(
        "(predicted per rank on fake tensors with CUDA's autocast and attention kernel; {how}; a "
        "phase fits when its reserved memory does, the rank's phase replayed through the caching "
        "allocator from an empty cache; kernel workspaces are not modelled)"
    ),
    # the list separator between the parts of a line
    "list_sep": N_(", "),
}


_UNDER = {"fits": "fits", "borderline": "borderline", "does_not_fit": "fails"}


def borderline_lines(r: dict, usable: int, say, fmt) -> list[str]:
    """What a borderline phase (``r``, a phase of the verdict's dict) adds: why, the verdict with
    expandable segments, and where the allocator's replay fails if it does (``say``: ``words(lang)``;
    ``fmt``: how the answer writes a size)."""
    lines = [say("borderline", usable=fmt(usable))]
    under = r.get("verdict_with_expandable_segments")
    if under:
        lines.append(say(f"borderline_expandable_{_UNDER[under]}"))
    if r.get("failing_allocation_bytes") is not None:
        lines.append(
            say(
                "replay_fails_at",
                size=fmt(r["failing_allocation_bytes"]),
                op=r["failing_allocation"],
                allocated=fmt(r["allocated_at_failure_bytes"]),
            )
        )
    return lines


def words(lang: str):
    """The ``check`` catalog's sentence for a key of TEXT: ``say("card", gpu=...)``."""
    t = gettext_for(lang, "check")

    def say(key: str, **values) -> str:
        return t(TEXT[key]).format(**values)

    return say


def error_line(command: str, message: str, lang: str) -> str:
    """The one line on stderr for bad input: the library's message in `lang` where it is known."""
    return words(lang)("error", command=command, message=translate(message, lang))


def usage_error_line(message: str, lang: str) -> str:
    """argparse's error line (an option's value refused: the library's message in `lang` where known;
    argparse's own wording, "the following arguments are required", stays English)."""
    return words(lang)("usage_error", message=translate(message, lang))


def phase_title(name: str, lang: str, resumed: bool = False) -> str:
    """A phase (a key of ``memory.CHECKS``) as check's answer and the pages name it, in `lang`: "first
    estimate_loss() (iteration 0: ...)", never the internal name; explain's prediction says the same."""
    key = "estimate_loss_first_resume" if name == "estimate_loss_first" and resumed else name
    return words(lang)(key) if key in TEXT else name


def progress_line(phase: str, done: int, lang: str) -> str:
    bar = "#" * min(done, 20)
    return words(lang)("progress", phase=phase, bar=f"{bar:<20}", done=done)


def render(out: dict, config, lang: str = "en") -> str:
    """check's answer (``verdict.verdict``'s dict, and the settings it ran with) as lines of text."""
    say = words(lang)
    sep = say("list_sep")
    fmt = functools.partial(figures.format_bytes, lang=lang)  # computed: the language's numbers
    several = out.get("world_size", 1) > 1
    lines = []
    key = ("card_assumed" if out["compute_capability_assumed"] else "card") + ("_per_gpu" if several else "")
    lines.append(
        say(
            key,
            gpu=translate(out["gpu"], lang),
            capability=out["compute_capability"],
            total=fmt(out["gpu_memory_bytes"]),
            usable=fmt(out["usable_bytes"]),
            context=fmt(out["context_bytes"]),
        )
    )
    lines.append(say("allocator", setting=translate(out["alloc_conf"], lang)))
    if several:
        counts = dict(
            n=out["world_size"],
            strategy=out["strategy"],
            steps=config.gradient_accumulation_steps,
            steps_per_rank=out["gradient_accumulation_steps_per_rank"],
            tokens=figures.format_count(out["tokens_per_iter"], lang),
        )
        if out["strategy"] == "ddp":
            buckets = "ddp_buckets_views" if out["gradient_as_bucket_view"] else "ddp_buckets"
            lines.append(
                say("processes_ddp", buckets=say(buckets, size=fmt(out["ddp_bucket_bytes"])), **counts)
            )
        else:
            lines.append(say("processes", **counts))
    shape = out["shape"]
    settings = (
        f"batch_size={config.batch_size} block_size={shape['block_size']} dtype={config.dtype} "
        f"n_layer={shape['n_layer']} n_head={shape['n_head']} n_embd={shape['n_embd']} "
        f"gradient_accumulation_steps={config.gradient_accumulation_steps} compile={config.compile}"
        + (f" eval_batch_size={config.eval_batch_size}" if config.eval_batch_size else "")
        + (f" init_from={config.init_from}" if config.init_from != "scratch" else "")
    )
    sample = out.get("sample")
    if sample is not None:
        settings = (
            f"init_from={sample['init_from']} num_samples={sample['num_samples']} "
            f"max_new_tokens={sample['max_new_tokens']} prompt_tokens={sample['prompt_tokens']} "
            f"longest_context={sample['longest_context']} block_size={shape['block_size']} "
            f"n_layer={shape['n_layer']} n_head={shape['n_head']} n_embd={shape['n_embd']} "
            f"dtype={sample['dtype']} compile={sample['compile']}"
        )
        lines.append(say("config_sample", settings=settings))
        lines.append(say("note", note=translate(sample["prompt_from"], lang)))
    else:
        lines.append(say("config", settings=settings))
    checkpoint = out.get("checkpoint")
    if checkpoint is not None:
        script = checkpoint["read_by"]
        if not checkpoint["on_card"]:
            lines.append(say("checkpoint_cpu", script=script))
        else:
            lines.append(say("checkpoint_sample_card" if script == "sample.py" else "checkpoint_train_card"))
    lines.append(say("vocab", vocab=shape["vocab_size"], source=translate(out["vocab_from"], lang)))
    code = out["code"]
    changes = [
        say(what)
        for what, present in (
            ("change_eval_batch_size", code["eval_batch_size"]),
            ("change_eval_block_size", code["eval_block_size"]),
            ("change_stale_logits", code["drops_stale_logits"]),
            ("change_checkpointed", code["model"] == "nanogpt+checkpointed_forward"),
        )
        if present
    ]
    lines.append(
        say(
            "code",
            where=translate(code["where"], lang),
            model=say("model_own" if code["model"] == "own" else "model_nanogpt"),
            changes=sep.join(changes) if changes else say("code_none"),
        )
    )
    low, high = out["torch_verified_range"].split("-")  # --json's "2.5-2.15"
    lines.append(
        say(
            "torch_verified" if out["torch_verified"] else "torch_outside",
            version=out["torch_version"],
            range=say("torch_range", low=low, high=high),
        )
    )
    lines += [say("note", note=translate(note, lang)) for note in out["warnings"]]
    for name, r in out["phases"].items():
        reserved = r.get("reserved_bytes")
        borderline = r.get("verdict") == "borderline"
        key = ("phase_fits" if r["fits"] else "phase_fails") + ("_reserved" if reserved is not None else "")
        if borderline and reserved is not None:
            key = "phase_borderline_reserved"
        lines.append("")
        lines.append(
            say(
                key,
                phase=phase_title(name, lang, resumed=config.init_from == "resume"),
                peak=fmt(r["peak_bytes"]),
                reserved=fmt(reserved) if reserved is not None else "",
                attention=r.get("attention") or say("attention_none"),
            )
        )
        lines.append(
            "  " + say("largest", size=fmt(r["largest_allocation_bytes"]), op=r["largest_allocation"])
        )
        if borderline:
            lines += ["  " + line for line in borderline_lines(r, out["usable_bytes"], say, fmt)]
        elif not r["fits"] and r.get("failing_allocation_bytes") is not None:
            at_reserved = r.get("reserved_at_failure_bytes")
            key = "fail_at" + ("_forward" if r.get("failing_forward") else "")
            key += "_reserved" if at_reserved is not None else ""
            lines.append(
                "  "
                + say(
                    key,
                    size=fmt(r["failing_allocation_bytes"]),
                    op=r["failing_allocation"],
                    forward=r.get("failing_forward"),
                    allocated=fmt(r["allocated_at_failure_bytes"]),
                    reserved=fmt(at_reserved) if at_reserved is not None else "",
                )
            )
        moments = (
            (("peak_moment", r.get("peak_moment")), ("failing_moment", r.get("failing_moment")))
            if name in ("resume", "first_step", "sample")
            else ()
        )
        for key, moment in moments:
            if moment:
                lines.append("  " + say(key, moment=say(f"moment_{moment}")))
        parts = sep.join(
            say("part", what=say(f"part_{k}") if f"part_{k}" in TEXT else k.replace("_", " "), size=fmt(v))
            for k, v in r["breakdown"].items()
        )
        lines.append("  " + say("at_peak", parts=parts))
        if r.get("searched") == "max_new_tokens":
            if r.get("max_batch_size_note"):
                note = translate(r["max_batch_size_note"], lang)
                lines.append("  " + say("max_new_tokens_note", note=note))
            elif "max_batch_size" in r:
                mnt = r["max_batch_size"]
                lines.append("  " + (say("max_new_tokens", n=mnt) if mnt else say("max_new_tokens_none")))
        elif r.get("max_batch_size_note"):
            lines.append("  " + say("max_batch_note", note=translate(r["max_batch_size_note"], lang)))
        elif "max_batch_size" in r:
            mbs = r["max_batch_size"]
            lines.append("  " + (say("max_batch", n=mbs) if mbs else say("max_batch_none")))
            if r.get("max_batch_size_expandable_segments") is not None:
                lines.append("  " + say("max_batch_expandable", n=r["max_batch_size_expandable_segments"]))
    how = say("how_compiled" if out["compiled"] else "how_eager")
    lines.append("")
    lines.append(say("footer_per_rank" if several else "footer", how=how))
    from .explain import links  # (explain's render imports this module)

    sections = links.sections_named(out["warnings"])
    if sections:  # the sections the notes name (page.md#anchor), as explain's "Read next" gives them
        lines += ["", say("read_next"), *links.read_next(sections, lang)]
    return "\n".join(lines)
