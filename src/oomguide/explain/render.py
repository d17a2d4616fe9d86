"""An :class:`~oomguide.explain.diagnosis.Explanation` as text, in the reader's language.

What it does: lays the answer out (figures read, which tensor, the prediction, the diagnosis, what
to read next) with the sentences of ``words.TEXT`` translated through the catalogs
(``oomguide.i18n``). Sizes read from the message stay exactly as PyTorch printed them (the same in
every language, so that they can be found in the log; in quotation marks where the language writes
numbers otherwise, ``_quoted``); sizes and counts computed here (a prediction,
a sum, a tensor's bytes) are written as the language writes numbers, as the pages do (``_size``,
``figures.format_figure``).

It must never compute a figure or a diagnosis (everything comes from the Explanation) and never
hold a sentence of its own: a new sentence goes into ``words.py`` and the catalogs.
"""

from __future__ import annotations

import functools

from .. import figures
from ..check_render import phase_title
from ..i18n import gettext_for
from ..messages import translate
from .diagnosis import Explanation
from .formats import format_size
from .links import read_next
from .tensors import ITEMSIZE, SIXTEEN_BIT, TENSOR_NAMES
from .words import FORMAT_NAMES, TEXT


def _gb(n: int, lang: str) -> str:
    return figures.format_figure(n, "gb", lang)


def _size(n: int, lang: str) -> str:
    """A size computed here, in the unit PyTorch's ``format_size`` would pick, written as `lang` writes
    numbers (2.30 GiB, 2,30 GiB, 2,30 Gio); up to 1 KiB in bytes, as PyTorch prints them."""
    if n <= 1024:  # PyTorch's "0 bytes" in English; the language's own word elsewhere (0 Byte, 0 octet)
        return format_size(n) if lang == "en" else figures.format_figure(n, "bytes", lang)
    return figures.format_figure(n, "kib" if n <= 1024**2 else "mib" if n <= 1024**3 else "gib", lang)


def _quoted(figs, lang: str) -> dict[str, str]:
    """The sizes read from the message, each exactly as PyTorch printed it, marked as a quotation where
    the language writes numbers otherwise (de „6.14 GiB“, fr « 6.14 GiB »): so that a quoted size and a
    computed one (6,14 GiB) never read as one notation. English, Japanese and Chinese write them alike."""
    quote = gettext_for(lang)(TEXT["quoted"])
    return {key: quote.format(size=value) for key, value in figs.printed.items()}


def _card(nbytes: int, figs, quoted: dict[str, str], lang: str) -> str:
    """A card's total memory: as the message printed it when it is the message's own card (de „11.69 GiB“),
    else as the tool computed it (--gpu-memory's card, written as `lang` writes sizes)."""
    return quoted["capacity"] if nbytes == figs.capacity else _size(nbytes, lang)


def _allocated(figs, quoted: dict[str, str], lang: str) -> str:
    """PyTorch's allocated memory: as the message printed it; the short form prints only this process's
    memory in use, which counts as allocated (``formats.parse_short``), so it is quoted as printed too."""
    if "allocated" in quoted:
        return quoted["allocated"]
    if figs.format == "short" and "in_use" in quoted:
        return quoted["in_use"]
    return _size(figs.allocated, lang)


def _format_name(label: str, t) -> str:
    """The message format as the title names it: the PyTorch versions that print it, in the reader's words."""
    return t(FORMAT_NAMES[label]) if label in FORMAT_NAMES else label


def _unallocated(figs, lang: str) -> str:
    """The reserved-but-unallocated memory: as the message printed it where it prints it (2.1+, and
    1.0-1.3's "cached"), else computed (reserved − allocated in 1.4 to 2.0) and written as `lang` writes sizes."""
    return _quoted(figs, lang).get("reserved_unallocated") or _size(figs.reserved_unallocated, lang)


def _search_lines(matches: list[dict], lang: str, req: str) -> list[str]:
    """One line per dtype and vocab: its most plausible (batch, block), then the others of the same size.

    A second vocab whose (batch, block) pairs are the same as the first's gets one short line.
    """
    t = gettext_for(lang)
    groups: dict[tuple, list[dict]] = {}
    for m in matches:
        groups.setdefault((m["dtype"], m["vocab_size"]), []).append(m)
    groups = dict(sorted(groups.items(), key=lambda kv: kv[0][0] != SIXTEEN_BIT))  # stable: vocab order kept
    lines = []
    shown: dict[str, list] = {}  # dtype -> pairs of the first vocab shown
    for (dtype, vocab), items in groups.items():
        first = items[0]
        pairs = [(m["batch_size"], m["block_size"]) for m in items]
        if shown.get(dtype) == pairs:
            line = t(TEXT["search_vocab_too"]).format(
                vocab=figures.format_count(vocab, lang),
                batch=first["batch_size"],
                block=first["block_size"],
                nbytes=figures.format_count(first["bytes"], lang),
            )
            lines.append("    " + line)
            continue
        shown.setdefault(dtype, pairs)
        key = "search_logits" if dtype == SIXTEEN_BIT else "search_logits_float32"
        line = t(TEXT["search_group"]).format(
            desc=t(TENSOR_NAMES[key]),
            batch=first["batch_size"],
            block=first["block_size"],
            vocab=figures.format_count(vocab, lang),
            itemsize=ITEMSIZE[dtype],
            dtype=dtype,
            nbytes=figures.format_count(first["bytes"], lang),
            req=req,
        )
        lines.append("  - " + line)
        if len(items) > 1:
            others = t(TEXT["list_sep"]).join(f"{b} × {block}" for b, block in pairs[1:])
            lines.append("    " + t(TEXT["search_also"]).format(pairs=others))
    return lines


def _figure_rows(result: Explanation, lang: str) -> list[str]:
    t = gettext_for(lang)
    figs = result.figures
    fmt = functools.partial(_size, lang=lang)  # computed from the message's figures
    q = _quoted(figs, lang)  # read from it
    rows = [
        ("requested", q["requested"]),
        ("capacity", q["capacity"]),
        ("free", q["free"]),
    ]
    if figs.allowed is not None:
        rows.append(("allowed", q["allowed"]))
    if figs.in_use is not None:
        rows.append(("in_use", q["in_use"]))
    if figs.format != "short":  # the short form does not split this process's memory
        rows.append(("allocated", q["allocated"]))
    if figs.format not in ("short", "cudaMallocAsync"):  # neither says what is cached
        # printed by 2.1+ ("… is reserved by PyTorch but unallocated") and 1.0-1.3 ("cached"), else computed
        printed = "reserved_unallocated" in figs.printed
        rows.append(
            ("reserved_unallocated" if printed else "reserved_unallocated_computed", _unallocated(figs, lang))
        )
    if figs.format == "pre-2.1":
        rows.append(("reserved", q["reserved"]))
    if figs.format == "1.0-1.3":  # "cached" is the unallocated part: the total is A + cached
        rows.append(("reserved_computed", fmt(figs.reserved)))
    if figs.non_pytorch is not None and figs.format != "short":
        rows.append(("non_pytorch", fmt(figs.non_pytorch)))
    if figs.other_processes is not None:
        rows.append(("other_processes", fmt(figs.other_processes)))
    else:
        rows.append(("outside_pytorch", fmt(figs.outside_pytorch)))
    row = t(TEXT["label_value"])
    lines = [f"  {row.format(label=t(TEXT[key]), value=value)}" for key, value in rows]
    quote = t(TEXT["quoted"])
    lines += [
        f"  {row.format(label=t(TEXT['process']).format(pid=p['pid']), value=quote.format(size=p['printed']))}"
        for p in figs.processes
    ]
    return lines


def _tensor_lines(result: Explanation, lang: str) -> list[str]:
    t = gettext_for(lang)
    req = _quoted(result.figures, lang)["requested"]
    lines = []
    if result.matched_by == "small":
        lines.append("  " + t(TEXT["small_request"]).format(req=req))
    elif result.matched_by in ("config", "nanochat"):
        key = "is_size_of_nanochat" if result.matched_by == "nanochat" else "is_size_of_config"
        lines.append("  " + t(TEXT[key]).format(req=req))
        for m in result.matches:
            shape = "(" + ", ".join(str(d) for d in m["shape"]) + ")"
            if result.matched_by == "nanochat":
                line = t(TEXT["nanochat_match"]).format(
                    desc=t(TENSOR_NAMES[m["tensor"]]),
                    shape=shape,
                    dtype=m["dtype"],
                    batch=m["batch_size"],
                    seq=m["block_size"],
                    vocab=figures.format_count(m["vocab_size"], lang),
                )
                lines.append("  - " + line)
                continue
            line = t(TEXT["config_match"]).format(
                desc=t(TENSOR_NAMES[m["tensor"]]),
                shape=shape,
                dtype=m["dtype"],
                nbytes=figures.format_count(m["bytes"], lang),
                req=req,
            )
            lines.append("  - " + line)
    else:
        if result.config is not None:
            lines.append("  " + t(TEXT["config_no_match"]).format(req=req))
        if result.matches:
            if result.config is None:
                lines.append("  " + t(TEXT["is_size_of"]).format(req=req))
            lines += _search_lines(result.matches, lang, req)
        else:
            lines.append("  " + t(TEXT["no_match"]).format(req=req))
    if result.config is None and result.matched_by != "nanochat":
        lines.append("  " + t(TEXT["hint_config"]))
    elif result.matched_by == "nanochat":
        lines.append("  " + t(TEXT["hint_nanochat"]))
    return lines


def _prediction_lines(result: Explanation, lang: str) -> list[str]:
    t = gettext_for(lang)
    fmt = functools.partial(_size, lang=lang)
    q = _quoted(result.figures, lang)
    req = q["requested"]
    p = result.prediction
    card = _card(p["gpu_memory_bytes"], result.figures, q, lang)
    lines = ["", t(TEXT["h_prediction"]).format(card=card, usable=fmt(p["usable_bytes"]))]
    if "compiled" in p:  # the one verdict's dict (oomguide.verdict): say what it ran
        path = p["code"].get("path")
        key = f"pred_{'compiled' if p['compiled'] else 'eager'}_{'checkout' if path else 'released'}"
        lines.append("  " + t(TEXT[key]).format(path=path))
    resumed = (result.config or {}).get("init_from") == "resume"
    for name, r in p["phases"].items():
        phase = phase_title(name, lang, resumed)  # check's words for the phase, never its internal name
        if r["fits"]:
            lines.append("  " + t(TEXT["pred_fits"]).format(phase=phase, peak=fmt(r["peak_bytes"])))
        elif r.get("verdict") == "borderline" or r.get("failing_allocation_bytes") is None:
            lines.append("  " + t(TEXT["pred_borderline"]).format(phase=phase, peak=fmt(r["peak_bytes"])))
        else:
            fail = fmt(r["failing_allocation_bytes"])
            line = t(TEXT["pred_no"]).format(
                phase=phase, peak=fmt(r["peak_bytes"]), fail=fail, what=r["failing_allocation"]
            )
            same = (
                t(TEXT["pred_same"])
                # as the message would print it
                if format_size(r["failing_allocation_bytes"]) == result.figures.printed["requested"]
                else t(TEXT["pred_diff"]).format(req=req)
            )
            lines.append("  " + t(TEXT["pred_compared"]).format(verdict=line, comparison=same))
    if all(r["fits"] for r in p["phases"].values()):
        lines.append("  " + t(TEXT["pred_all_fit"]))
    return lines


def _diagnosis_lines(result: Explanation, lang: str) -> list[str]:
    t = gettext_for(lang)
    fmt = functools.partial(_size, lang=lang)
    figs = result.figures
    s = result.model_states
    q = _quoted(figs, lang)
    values = dict(
        req=q["requested"],
        capacity=q["capacity"],
        free=q["free"],
        allocated=_allocated(figs, q, lang),
        unalloc=_unallocated(figs, lang),
        sum=fmt(figs.free + figs.reserved_unallocated),
        outside=fmt(figs.outside_pytorch),
        other=fmt(figs.other_processes or 0),
        in_use=q.get("in_use", "?"),
    )
    if s is not None:
        values.update(
            params=figures.format_count(s["parameters"], lang),
            states=fmt(s["states_bytes"]),
            states_gb=_gb(s["states_bytes"], lang),
            card=_card(s["card_bytes"], figs, q, lang),
            card_gb=_gb(s["card_bytes"], lang),
            usable=fmt(s["usable_bytes"]),
            margin=fmt(max(0, s["usable_bytes"] - s["states_bytes"])),
            dtype=s["dtype"],
            copies=fmt(s["autocast_copies_bytes"]),
            total=fmt(s["states_bytes"] + s["autocast_copies_bytes"]),
        )
    if result.limit is not None:  # a capped process: the cap is the card of the diagnosis
        room = result.limit["room_bytes"]
        values.update(
            allowed=q.get("allowed", fmt(result.limit["allowed_bytes"])),
            reserved=fmt(figs.reserved),
            room=fmt(room),
            sum=fmt(room + figs.reserved_unallocated),
        )
    states_too_large = any(c.startswith("model_states") for c in result.diagnosis)
    lines = []
    for code in result.diagnosis:
        if code == "too_little_memory" and result.limit is not None and not states_too_large:
            key = "too_little_memory_allowed"
        elif code == "other_processes":
            key = "other_processes_d" if figs.other_processes is not None else "other_processes_old"
        elif code == "too_little_memory" and states_too_large:
            key = "too_little_memory_short"  # no batch-size advice: the model states are the problem
        else:
            key = code
        lines.append("  - " + t(TEXT[key]).format(**values))
        if code == "too_little_memory" and figs.requested > figs.capacity:
            lines.append("    " + t(TEXT["too_little_huge"]).format(**values))
    if s is not None and not states_too_large:
        lines.append("  - " + t(TEXT["model_states_info"]).format(**values))
    return lines


def _disagreement_lines(result: Explanation, lang: str) -> list[str]:
    t = gettext_for(lang)
    fmt = functools.partial(_size, lang=lang)
    d, figs = result.disagreement, result.figures
    q = _quoted(figs, lang)
    lines = ["", t(TEXT["h_disagreement"])]
    resumed = (result.config or {}).get("init_from") == "resume"
    phase = phase_title(d["phase"], lang, resumed)
    lines.append("  " + t(TEXT["dis_intro"]).format(phase=phase, peak=fmt(d["predicted_peak_bytes"])))
    for item in d["figures"]:
        code = item["code"]
        if code == "different_card":
            theirs = item["message_bytes"]
            capacity = _card(theirs, figs, q, lang)
            text = t(TEXT["dis_card"]).format(card=fmt(item["bytes"]), capacity=capacity)
        elif code == "other_processes":
            key = "dis_other_explains" if item["explains"] else "dis_other_partly"
            text = t(TEXT[key]).format(other=fmt(item["bytes"]), room=fmt(item["room_bytes"]))
        elif code == "fragmentation":
            unalloc = (
                _unallocated(figs, lang) if item["bytes"] == figs.reserved_unallocated else fmt(item["bytes"])
            )
            text = t(TEXT["dis_fragmentation"]).format(unalloc=unalloc)
        else:  # allocated_beyond_prediction
            text = t(TEXT["dis_allocated"]).format(
                allocated=_allocated(figs, q, lang),
                req=q["requested"],
                total=fmt(item["message_bytes"]),
                excess=fmt(item["bytes"]),
            )
        lines.append("  - " + text)
    if not d["figures"]:
        lines.append("  - " + t(TEXT["dis_none"]))
    return lines


def _link_lines(result: Explanation, lang: str) -> list[str]:
    """Each section as its title in `lang`, and below it the one place that opens it: its address on the
    published site, else the page's installed file at the heading's line."""
    t = gettext_for(lang)
    return ["", t(TEXT["h_links"]), *read_next(result.sections, lang)]


def _render_no_request(result: Explanation, lang: str) -> str:
    t = gettext_for(lang)
    figs = result.figures
    q = _quoted(figs, lang)
    lines = [t(TEXT["title_no_request"]).format(format=_format_name(figs.format, t))]
    if result.messages_found > 1:
        lines.append(t(TEXT["several"]).format(n=result.messages_found))
    if result.context:
        lines.append(t(TEXT[f"context_{result.context}"]))
    lines += ["", t(TEXT["h_diagnosis"])]
    if figs.format == "short":
        lines.append(
            "  "
            + t(TEXT["short_no_request"]).format(
                in_use=q["in_use"], capacity=q["capacity"], free=q["free"]
            )
        )
    lines.append("  " + t(TEXT["no_request"]))
    lines += ["", t(TEXT["h_checks"])]
    checks = ["check_nvidia_smi", "check_mem_get_info", "check_weights", "check_launch_blocking"]
    lines += ["  - " + t(TEXT[key]) for key in checks]
    lines += _link_lines(result, lang)
    return "\n".join(lines)


def render(result: Explanation, lang: str = "en") -> str:
    if not result.has_request:
        return _render_no_request(result, lang)
    t = gettext_for(lang)
    figs = result.figures
    title = TEXT["title"] if figs.gpu is not None else TEXT["title_any_gpu"]
    lines = [t(title).format(gpu=figs.gpu, format=_format_name(figs.format, t))]
    if result.messages_found > 1:
        lines.append(t(TEXT["several"]).format(n=result.messages_found))
    if result.context:
        lines.append(t(TEXT[f"context_{result.context}"]))
    if result.moment and result.moment != result.context:
        lines.append(t(TEXT[f"moment_{result.moment}"]))
    for note in result.warnings:
        lines.append(t(TEXT["note"]).format(note=translate(note, lang)))
    lines += ["", t(TEXT["h_figures"]), *_figure_rows(result, lang)]
    lines += ["", t(TEXT["h_tensor"]), *_tensor_lines(result, lang)]
    if result.prediction is not None:
        lines += _prediction_lines(result, lang)
    if result.disagreement is not None:
        lines += _disagreement_lines(result, lang)
    lines += ["", t(TEXT["h_diagnosis"]), *_diagnosis_lines(result, lang)]
    lines += _link_lines(result, lang)
    return "\n".join(lines)
