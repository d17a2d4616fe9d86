"""``oomguide check --nanochat``'s answer as text in the reader's language (catalog domain ``check``).

Words the dict of ``check.verdict`` line by line; sizes as PyTorch prints them in every language;
arguments, phase names and op names as they are. Never computes a figure or decides a verdict.
"""

from __future__ import annotations

import functools

from .. import figures
from ..i18n import N_, gettext_for
from ..messages import translate
from .plan import DEFAULTS

TEXT = {
    "run": N_("nanochat: {script}, processes: {n}, figures per rank; model {shape} from {source}"),
    "run_defaults": N_(
        "nanochat: {script}, processes: {n}, figures per rank; model {shape} from base_train.py's defaults "
        "(no checkpoint found; --from-base names the run)"
    ),
    "batch": N_(
        "--device-batch-size {dbs}, total batch of {total} tokens -> gradient accumulation steps per rank: {steps}"
    ),
    "batch_rl": N_(
        "--device-batch-size {dbs}, {samples} samples per example, {examples} examples per rank -> "
        "gradient accumulation steps per rank: {steps}"
    ),
    "dtype": N_("compute dtype: {dtype} ({why})"),
    "card": N_("card: {gpu}, compute capability {capability}: {total} total, {usable} for PyTorch"),
    "assumed": N_("assumed: {what}"),
    "phase_fits": N_("{phase}: predicted peak {peak} allocated, {reserved} reserved -> fits (attention: {attention})"),
    "phase_fails": N_(
        "{phase}: predicted peak {peak} allocated, {reserved} reserved -> DOES NOT FIT (attention: {attention})"
    ),
    "phase_borderline": N_(
        "{phase}: predicted peak {peak} allocated, {reserved} reserved -> BORDERLINE (attention: {attention})"
    ),
    "fail_at": N_("would fail on a request for {size} ({op}), with {allocated} already allocated"),
    "max_batch": N_("largest --device-batch-size that fits: {n}"),
    "max_batch_accum": N_(
        "largest --device-batch-size that fits and that the script accepts: {n} (gradient accumulation steps "
        "per rank: {steps})"
    ),
    "accepted": N_("the script accepts --device-batch-size {values} (its assert on the total batch)"),
    "accepted_rl": N_("the script accepts --device-batch-size {values} (its assert on the samples per example)"),
    "max_batch_none": N_("not even --device-batch-size=1 fits"),
    "footer": N_(
        "(predicted with nanochat's own model and optimizer code on fake tensors; a phase fits when its "
        "reserved memory does with the margin of the measured uncertainty, and is borderline within it; "
        "kernel workspaces are not modelled)"
    ),
}


def render(out: dict, lang: str = "en") -> str:
    from ..check_render import TEXT as CHECK_TEXT
    from ..check_render import borderline_lines, words

    t = gettext_for(lang, "check")

    def say(key, **values):
        return t(TEXT[key]).format(**values)

    common = words(lang)
    fmt = functools.partial(figures.format_bytes, lang=lang)  # computed: the language's numbers
    shape = out["shape"]
    lines = [
        say(
            "run_defaults" if out["model_from"] == DEFAULTS else "run",
            script=out["script"],
            n=out["world_size"],
            shape=f"n_layer={shape['n_layer']} n_embd={shape['n_embd']} n_head={shape['n_head']} "
            f"sequence_len={shape['sequence_len']} vocab_size={shape['vocab_size']}",
            source=out["model_from"],
        )
    ]
    rl = out["samples_per_example"] is not None  # chat_rl: no total batch of tokens
    if rl:
        lines.append(
            say(
                "batch_rl",
                dbs=out["device_batch_size"],
                samples=out["samples_per_example"],
                examples=out["examples_per_rank"],
                steps=out["gradient_accumulation_steps"],
            )
        )
    elif out["gradient_accumulation_steps"] is not None:
        lines.append(
            say(
                "batch",
                dbs=out["device_batch_size"],
                total=figures.format_count(out["total_batch_size"], lang),
                steps=out["gradient_accumulation_steps"],
            )
        )
    if out.get("accepted_device_batch_sizes"):
        values = common("list_sep").join(map(str, out["accepted_device_batch_sizes"]))
        lines.append(say("accepted_rl" if rl else "accepted", values=values))
    lines.append(say("dtype", dtype=out["compute_dtype"], why=translate(out["compute_dtype_from"], lang)))
    lines.append(
        say(
            "card",
            gpu=translate(out["gpu"], lang),
            capability=out["compute_capability"],
            total=fmt(out["gpu_memory_bytes"]),
            usable=fmt(out["usable_bytes"]),
        )
    )
    lines.append(common("allocator", setting=translate(out["alloc_conf"], lang)))
    lines += [say("assumed", what=translate(a, lang)) for a in out["assumptions"]]
    for name, r in out["phases"].items():
        lines.append("")
        borderline = r.get("verdict") == "borderline"
        key = "phase_borderline" if borderline else "phase_fits" if r["fits"] else "phase_fails"
        lines.append(
            say(
                key,
                phase=name,
                peak=fmt(r["peak_bytes"]),
                reserved=fmt(r["reserved_bytes"]),
                attention=r.get("attention") or common("attention_none"),
            )
        )
        lines.append("  " + common("largest", size=fmt(r["largest_allocation_bytes"]), op=r["largest_allocation"]))
        if borderline:
            lines += ["  " + line for line in borderline_lines(r, out["usable_bytes"], common, fmt)]
        elif not r["fits"] and r.get("failing_allocation_bytes") is not None:
            lines.append(
                "  "
                + say(
                    "fail_at",
                    size=fmt(r["failing_allocation_bytes"]),
                    op=r["failing_allocation"],
                    allocated=fmt(r["allocated_at_failure_bytes"] or 0),
                )
            )
        sep = common("list_sep")
        parts = sep.join(
            common("part", what=common(f"part_{k}") if f"part_{k}" in CHECK_TEXT else k, size=fmt(v))
            for k, v in r["breakdown"].items()
        )
        lines.append("  " + common("at_peak", parts=parts))
        if "max_batch_size" in r:
            n = r["max_batch_size"]
            steps = r.get("gradient_accumulation_steps")
            if not n:
                lines.append("  " + say("max_batch_none"))
            elif steps:
                lines.append("  " + say("max_batch_accum", n=n, steps=steps))
            else:
                lines.append("  " + say("max_batch", n=n))
    lines.append("")
    lines.append(say("footer"))
    return "\n".join(lines)
