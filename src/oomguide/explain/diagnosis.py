"""Why the memory ran out, and which sections of the guide fix it: the whole answer, as data.

What it does: from a message's figures (``formats``), the tensors it matched (``tensors``) and, with
a config, the model states and ``memory.predict``'s prediction of each phase, builds an
:class:`Explanation`: diagnosis codes, the sections to read, and, when the prediction says the
phase fits although the message says it did not, which of the message's figures explain the
difference. ``Explanation.to_json`` is the ``--json`` output.

Diagnosis, with T capacity, F free, P this process, A allocated, U reserved-but-unallocated,
R = A + U reserved, X the request (thresholds below, as constants):

- ``fragmentation``: U >= 1 % of T and F + U >= X: the memory was there, free or cached, but not in
  one piece. ``expandable_segments`` can join the two into one piece and do no more (the allocator
  maps free pages into a segment it grows: ``ExpandableSegment`` in PyTorch's
  c10/cuda/CUDACachingAllocator.cpp; the guide's estimate-loss-oom#expandable-segments), so the code
  and its section come only where F + U could have held X;
- ``expandable_segments_cannot_help``: U >= 10 % of T (large: the message's own hint suggests the
  setting) but F + U < X: even in one piece, free and cached memory could not have held the request;
- ``other_processes``: O = T - F - P (other processes) >= 5 % of T, or O >= 1 % of T and F + O >= X
  (closing them would have made room). Without P (formats before 2.1, or a container whose process
  list lacks this process) O is estimated as T - F - R less 1 GiB for this process's CUDA context;
- ``model_states_exceed_card`` (with a config): 16 bytes per parameter (float32 weights, gradients,
  AdamW's exp_avg and exp_avg_sq) exceed what PyTorch can use of the card (``units.usable_bytes``);
  ``model_states_with_copies_exceed_card``: they fit alone, not with autocast's 16-bit weight copies;
- ``too_little_memory``: F + U + O < X (nothing else would have made room), or no other code applies.
- ``allowed_limit``: the message says what this process was allowed ("11.44 GiB allowed;", a cap
  set with ``torch.cuda.set_per_process_memory_fraction``, as ``pytest examples --gpu-memory`` and
  readers who share a GPU set it) and the card had more free than the cap left (F >= L - R, with L
  allowed): the cap stopped the allocation, not the card. Then L is the card of the diagnosis: T = L,
  F = L - R and O = 0 (other processes left room: closing them would not have helped), and the
  prediction is for a card of L plus the CUDA context oomguide sets aside (``units.CONTEXT_BYTES``).

F + U is compared with X allowing for the rounding of the printed figures (``PRINTED_ROUNDING``):
within it the setting may help, and is advised.

The sections come in the order that fixes this message: what alone makes room for it first (a
smaller model where the model states do not fit, expandable segments where F + U >= X, closing other
processes where F + U + O >= X), then what makes the failing tensor smaller, then what helps only
in part (other processes where F + U + O < X).

It must never word anything for the reader (codes only; ``render`` words them), never touch a GPU,
and never import torch for a message alone: ``oomguide.memory`` is imported for a prediction only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import units
from .formats import NoRequest, OOMFigures, detect_context, parse_message
from .links import page_path, section_link, section_title
from .tensors import ACTIVATION_TENSORS, LOGITS_TENSORS, match_request

GiB, MiB = units.GiB, units.MiB
LARGE_CACHE_SHARE = 0.10  # U >= 10 % of the card: large, so say why expandable segments cannot help
PRINTED_ROUNDING = 4 * GiB // 200  # F, U (or R and A) and X printed to 0.01 GiB: each within 0.005 GiB
OTHER_PROCESSES_SHARE = 0.05  # O >= 5 % of the card: other processes matter
MIN_SHARE = 0.01  # below 1 % of the card, U or O is noise
OLD_FORMAT_CONTEXT_ALLOWANCE = 1 * GiB  # this process's own non-PyTorch memory, when the message does not say
STATE_BYTES_PER_PARAMETER = 16  # float32 weight + gradient + AdamW exp_avg + exp_avg_sq
CONFIG_KEYS = (
    "batch_size",
    "block_size",
    "dtype",
    "init_from",
    "n_layer",
    "n_head",
    "n_embd",
    "vocab_size",
    "eval_batch_size",
    "eval_block_size",
    "gradient_accumulation_steps",
)


def gpt_parameters(g) -> tuple[int, int]:
    """(parameters, those of the Linear layers) of nanoGPT's GPT of shape `g` (a ``GPTConfig``), counted
    from the shapes: oomguide.model.GPT, like nanoGPT's model.py (``GPT.__init__``, ``Block``, ``MLP``,
    ``CausalSelfAttention``, ``LayerNorm``), with ``lm_head`` tied to ``wte`` (one tensor, counted once).
    tests/test_explain.py checks the count against the model built on meta tensors."""
    V, T, C, L, b = g.vocab_size, g.block_size, g.n_embd, g.n_layer, int(g.bias)
    layer_norm = C + b * C  # weight, and bias when bias=True
    attention = (C * 3 * C + b * 3 * C) + (C * C + b * C)  # c_attn, c_proj
    mlp = (C * 4 * C + b * 4 * C) + (4 * C * C + b * C)  # c_fc, c_proj
    block = 2 * layer_norm + attention + mlp
    parameters = V * C + T * C + L * block + layer_norm  # wte (= lm_head), wpe, the blocks, ln_f
    linear = V * C + L * (attention + mlp)  # lm_head and each block's four Linears
    return parameters, linear


def model_states(config, card_bytes: int) -> dict:
    """Weights + gradients + AdamW state of the config's model against the card (counted from its shape)."""
    params, linear = gpt_parameters(config.gpt_config())
    copies = 0 if config.dtype == "float32" else 2 * linear  # autocast's cached 16-bit copies
    states = STATE_BYTES_PER_PARAMETER * params
    usable = units.usable_bytes(card_bytes)
    return {
        "parameters": params,
        "bytes_per_parameter": STATE_BYTES_PER_PARAMETER,
        "states_bytes": states,
        "autocast_copies_bytes": copies,
        "dtype": config.dtype,
        "card_bytes": card_bytes,
        "usable_bytes": usable,
        "context_bytes": units.CONTEXT_BYTES,
        "states_exceed_card": states > usable,
        "with_copies_exceed_card": states + copies > usable,
    }


def other_processes(figs: OOMFigures) -> int:
    """What other processes held: from the message, or estimated when it does not say (see above)."""
    if figs.other_processes is not None:
        return figs.other_processes
    return max(0, figs.outside_pytorch - OLD_FORMAT_CONTEXT_ALLOWANCE)


def capped(figs: OOMFigures) -> bool:
    """Whether the process's cap stopped the allocation ("X allowed;" with more free on the card)."""
    return figs.allowed is not None and figs.free >= max(0, figs.allowed - figs.reserved)


def limits(figs: OOMFigures) -> tuple[int, int, int]:
    """(T, F, O) the diagnosis compares with: the card, its free memory and other processes' share,
    or, for a capped process (``capped``), what it was allowed, what the cap left and nothing."""
    if capped(figs):
        return figs.allowed, max(0, figs.allowed - figs.reserved), 0
    return figs.capacity, figs.free, other_processes(figs)


def card_of(figs: OOMFigures) -> int:
    """The card a prediction for this message is made for: the one its cap emulates, else its own."""
    return figs.allowed + units.CONTEXT_BYTES if capped(figs) else figs.capacity


def diagnose(figs: OOMFigures, states: dict | None = None) -> list[str]:
    (T, F, other), X, U = limits(figs), figs.requested, figs.reserved_unallocated
    codes = ["allowed_limit"] if capped(figs) else []
    if states is not None:
        if states["states_exceed_card"]:
            codes.append("model_states_exceed_card")
        elif states["with_copies_exceed_card"]:
            codes.append("model_states_with_copies_exceed_card")
    in_one_piece = F + U + PRINTED_ROUNDING >= X  # all that expandable segments can make of the cache
    fragmentation = U >= MIN_SHARE * T and in_one_piece
    others = other >= OTHER_PROCESSES_SHARE * T or (other >= MIN_SHARE * T and F + other >= X)
    if F + U + other < X or not (fragmentation or others):
        codes.append("too_little_memory")
    if fragmentation:
        codes.append("fragmentation")
    elif U >= LARGE_CACHE_SHARE * T:
        codes.append("expandable_segments_cannot_help")
    if others:
        codes.append("other_processes")
    return codes


def disagreement(figs: OOMFigures, prediction: dict, context: str | None, card: int) -> dict | None:
    """When the message failed in a phase the prediction says fits: the figures that explain why.

    Each item is a code with its bytes: ``other_processes`` (memory the prediction counts as this
    process's), ``fragmentation`` (reserved but unallocated), ``allocated_beyond_prediction`` (the
    live tensors plus the request exceed the predicted peak: tensors the prediction does not know),
    ``different_card`` (the prediction is for another card than the message's).
    """
    phases = prediction["phases"]
    if context not in phases or not phases[context]["fits"]:
        return None
    peak = phases[context]["peak_bytes"]
    (T, _, others), U, A, X = limits(figs), figs.reserved_unallocated, figs.allocated, figs.requested
    items = []
    if card != card_of(figs):
        items.append({"code": "different_card", "bytes": card, "message_bytes": card_of(figs)})
    if others >= MIN_SHARE * T:
        room = units.usable_bytes(T) - others
        items.append(
            {"code": "other_processes", "bytes": others, "room_bytes": room, "explains": peak > room}
        )
    if U >= MIN_SHARE * T:
        items.append({"code": "fragmentation", "bytes": U})
    if A + X > peak:
        items.append({"code": "allocated_beyond_prediction", "bytes": A + X - peak, "message_bytes": A + X})
    return {"phase": context, "predicted_peak_bytes": peak, "figures": items}


# The moment of a run a traceback names -> the guide's section on it (run-moments.md)
MOMENT_SECTIONS = {
    "resume": ("run-moments", "resume"),
    "first_step": ("run-moments", "first-step"),
    "optimizer_step": ("run-moments", "first-step"),
    "generate": ("run-moments", "sample"),
}


def moment_of(prediction: dict | None, context: str | None) -> str | None:
    """The moment of the run the message comes from: the traceback's (``MOMENT_SECTIONS``), else the
    figures' where the prediction says it: a resumed run with its checkpoint on the card, or a first
    step that does not fit where the steps after it do not either (AdamW's state is made there)."""
    if context in MOMENT_SECTIONS:
        return context
    if prediction is None:
        return None
    checkpoint = prediction.get("checkpoint") or {}
    if checkpoint.get("on_card") and checkpoint.get("read_by") == "train.py":
        return "resume"
    first = prediction["phases"].get("first_step")
    if first is not None and not first["fits"] and first.get("failing_moment") == "optimizer_step":
        return "first_step"
    return None


def choose_sections(
    codes: list[str], matches: list[dict], context: str | None, moment: str | None = None
) -> list[tuple[str, str | None]]:
    """The sections to read, in the order that fixes this message (see the module's docstring); the
    moment of the run it comes from (resuming, the first step, sampling) first."""
    first: list[tuple[str, str | None]] = []  # each alone makes room for the request
    if moment is not None:
        first.append(MOMENT_SECTIONS[moment])
    last: list[tuple[str, str | None]] = []  # helps, not enough alone
    states_too_large = any(c.startswith("model_states") for c in codes)
    if states_too_large:
        first += [
            ("eval-oom-12gb", "smaller-n-embd"),
            ("where-the-memory-goes", None),
            ("multi-gpu", "gpt2-xl"),
        ]
    if "fragmentation" in codes:  # F + U >= X
        first.append(("estimate-loss-oom", "expandable-segments"))
    if "other_processes" in codes:  # with too_little_memory, F + U + O < X: closing them is not enough
        (last if "too_little_memory" in codes else first).append(("estimate-loss-oom", "hardware-setup"))
    fixes: list[tuple[str, str | None]] = []  # what makes the failing tensor smaller, by where it ran out
    tensors = {m["tensor"] for m in matches}
    if states_too_large:
        pass  # no batch size helps: the sections above are the fix
    elif context in ("first_step", "optimizer_step", "resume"):
        fixes = [("estimate-loss-oom", "root-causes"), ("where-the-memory-goes", None)]
    elif context == "estimate_loss":
        fixes = [
            ("estimate-loss-oom", "reduce-batch-size"),
            ("eval-oom-12gb", "eval-batch-size"),
            ("beyond", "chunked-loss"),
            ("beyond", "drop-stale-logits"),
        ]
    elif tensors & set(LOGITS_TENSORS):
        fixes = [("estimate-loss-oom", "reduce-batch-size"), ("beyond", "chunked-loss")]
    elif tensors & set(ACTIVATION_TENSORS):
        fixes = [("estimate-loss-oom", "reduce-batch-size"), ("eval-oom-12gb", "gradient-checkpointing")]
    elif "too_little_memory" in codes or not (first or last):
        fixes = [("estimate-loss-oom", "root-causes"), ("where-the-memory-goes", None)]
    return list(dict.fromkeys(first + fixes + last))


NO_REQUEST_SECTIONS = [("estimate-loss-oom", "hardware-setup"), ("where-the-memory-goes", None)]


@dataclass
class Explanation:
    figures: OOMFigures | NoRequest
    messages_found: int
    context: str | None
    matches: list[dict]
    matched_by: str  # "small", "config", "search", or "none" (a message without a request)
    diagnosis: list[str]
    sections: list[tuple[str, str | None]]
    card_bytes: int | None
    model_states: dict | None = None
    prediction: dict | None = None
    disagreement: dict | None = None
    config: dict | None = None
    warnings: list[str] = field(default_factory=list)
    moment: str | None = None  # the moment of the run: resume, first_step, optimizer_step, generate
    limit: dict | None = None  # a capped process (``capped``): {"allowed_bytes", "room_bytes"}

    @property
    def has_request(self) -> bool:
        return isinstance(self.figures, OOMFigures)

    def to_json(self, lang: str) -> dict:
        out = {
            "format": self.figures.format,
            "messages_found": self.messages_found,
            "context": self.context,
            "moment": self.moment,
            "figures": self.figures.to_json(),
            "printed": self.figures.printed,
            "matches": self.matches,
            "matched_by": self.matched_by,
            "diagnosis": self.diagnosis,
            "links": [section_link(p, a, lang) for p, a in self.sections],  # as the text prints them
            "titles": [section_title(p, a, lang) for p, a in self.sections],
            "card_bytes": self.card_bytes,
            "lang": lang,
            "warnings": self.warnings,
        }
        if self.limit is not None:
            out["limit"] = self.limit
        if self.config is not None:
            out["config"] = self.config
            out["model_states"] = self.model_states
        if self.prediction is not None:
            out["prediction"] = self.prediction
        if self.disagreement is not None:
            out["disagreement"] = self.disagreement
        out["link_paths"] = [page_path(p, a, lang) for p, a in self.sections]
        return out


def explain(
    text: str,
    config=None,
    *,
    gpu_memory: int | None = None,
    predict: bool = True,
    source: str = "the input",
    progress=None,
    judge=None,
) -> Explanation:
    """Read the OOM message in `text` and explain it (for a nanoGPT `config`, if given).

    `judge(card_bytes)`: the verdict (``oomguide.verdict``) of the reader's run on that card; by
    default the verdict of `config` as nanoGPT runs it."""
    figs, found = parse_message(text, source)
    context = detect_context(text)
    if isinstance(figs, NoRequest):
        card = gpu_memory or figs.capacity
        moment = context if context in MOMENT_SECTIONS else None
        sections = ([MOMENT_SECTIONS[moment]] if moment else []) + NO_REQUEST_SECTIONS
        return Explanation(figs, found, context, [], "none", ["no_request"], sections, card, moment=moment)
    matches, matched_by = match_request(figs, config, text)
    card = gpu_memory or card_of(figs)
    states = model_states(config, card) if config is not None else None
    codes = diagnose(figs, states)
    result = Explanation(
        figs,
        found,
        context,
        matches,
        matched_by,
        codes,
        choose_sections(codes, matches, context),
        card,
        model_states=states,
    )
    if capped(figs):
        result.limit = {"allowed_bytes": figs.allowed, "room_bytes": limits(figs)[1]}
    if config is not None:
        result.config = {k: config.values[k] for k in CONFIG_KEYS}
        result.config["sources"] = config.sources
        if predict:
            # the one verdict (oomguide.verdict), as `oomguide check` gives it for this config and card
            if judge is None:
                from .. import verdict

                _, judge = verdict.judge(verdict.Request(config=config, search=False))

            if progress:
                progress("train_step, estimate_loss")
            result.prediction = judge(card)
            phases = result.prediction["phases"]
            if "estimate_loss" not in phases and "estimate_loss_first" in phases:  # eval_only
                phases = {**phases, "estimate_loss": phases["estimate_loss_first"]}
            view = dict(result.prediction, phases=phases)
            result.disagreement = disagreement(figs, view, context, card)
    moment = moment_of(result.prediction, context)
    if moment is not None:
        result.moment = moment
        result.sections = choose_sections(codes, matches, context, moment)
    return result
