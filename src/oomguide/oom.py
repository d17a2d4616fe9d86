"""``oomguide explain``: read a PyTorch CUDA out-of-memory message and explain it.

The input is a message or a whole traceback, in either of PyTorch's formats (FACTS 21):

- before 2.1: ``Tried to allocate X (GPU 0; T total capacity; A already allocated; F free;
  R reserved in total by PyTorch)``;
- since 2.1: ``Tried to allocate X. GPU 0 has a total capacity of T of which F is free.
  [Process N has M memory in use.] Including non-PyTorch memory, this process has P memory in
  use. Of the allocated memory A is allocated by PyTorch, and U is reserved by PyTorch but
  unallocated.`` (some versions spell "capacty").

Sizes are printed by PyTorch's ``format_size`` (``format_size`` below), and "Tried to allocate"
is the request rounded up to the allocator's segment (``memory.segment_size``). A tensor
*matches* when its size, rounded the same way, prints exactly as the message's request.

Diagnosis, with T capacity, F free, P this process, A allocated, U reserved-but-unallocated,
R = A + U reserved, X the request (thresholds below, as constants):

- ``fragmentation``: U >= 1 % of T, and either F + U >= X (the memory was there, free or
  cached, but not in one piece) or U >= 10 % of T;
- ``other_processes``: O = T - F - P (other processes) >= 5 % of T, or O >= 1 % of T and
  F + O >= X (closing them would have made room). Without P (pre-2.1 format, or a container
  whose process list lacks this process) O is estimated as T - F - R less 1 GiB for this
  process's own CUDA context;
- ``model_states_exceed_card`` (with a config): 16 bytes per parameter (float32 weights,
  gradients, AdamW's exp_avg and exp_avg_sq) exceed what PyTorch can use of the card
  (``memory.usable_bytes``: the card less the CUDA context); ``model_states_with_copies_exceed_card``:
  they fit alone, but not with autocast's 16-bit copies of the Linear weights;
- ``too_little_memory``: F + U + O < X (nothing else would have made room), or no other code applies.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import figures, memory
from .config import load_config

LANGS = ("en", "ja", "zh", "de", "fr")
SITE_URL_ENV = "OOMGUIDE_SITE_URL"
DEFAULT_SITE_URL = "http://127.0.0.1:8000"  # what `mkdocs serve` uses

# Every page of the guide that explain links to, with the anchors its headings have in all five
# languages (docs/<lang>/<page>.md, `## Heading { #anchor }`). tests/test_explain.py checks them.
GUIDE_SECTIONS: dict[str, tuple[str, ...]] = {
    "estimate-loss-oom": (
        "problem-analysis",
        "root-causes",
        "memory-arithmetic",
        "recommended-fixes",
        "reduce-batch-size",
        "disable-compile",
        "shorter-block-size",
        "expandable-segments",
        "empty-cache",
        "eval-interval",
        "float16-gradscaler",
        "hardware-setup",
        "cpu-fallback",
        "expected-result",
    ),
    "eval-oom-12gb": (
        "root-cause",
        "what-really-happens",
        "quick-fixes",
        "eval-batch-size",
        "eval-block-size",
        "eval-iters",
        "smaller-n-embd",
        "gradient-checkpointing",
        "rtx-4070-combination",
        "allocator-setting",
    ),
    "beyond": ("chunked-loss", "drop-stale-logits", "four-gb-card", "time-cost"),
    "where-the-memory-goes": (),  # a notebook page: linked as a whole
}

GiB, MiB = memory.GiB, memory.MiB
FRAGMENTATION_SHARE = 0.10  # U >= 10 % of the card: fragmentation whatever the request
OTHER_PROCESSES_SHARE = 0.05  # O >= 5 % of the card: other processes matter
MIN_SHARE = 0.01  # below 1 % of the card, U or O is noise
OLD_FORMAT_CONTEXT_ALLOWANCE = 1 * GiB  # this process's own non-PyTorch memory, when the message does not say
SMALLEST_SEGMENTS = 20 * MiB  # requests up to this print a bucket (2 or 20 MiB), not a tensor's size
STATE_BYTES_PER_PARAMETER = 16  # float32 weight + gradient + AdamW exp_avg + exp_avg_sq

# the search without a config: GPT-2's vocabulary (padded as nanoGPT does, and as released)
SEARCH_VOCABS = (50304, 50257)
SEARCH_BLOCKS = (1024, 512, 2048, 256, 128, 64)  # most plausible first
SEARCH_MAX_BATCH = 512
SIXTEEN_BIT = "bfloat16/float16"


class ExplainError(ValueError):
    """Input explain cannot work with; the message is the one line the user sees."""


# --------------------------------------------------------------------------------------------
# sizes as PyTorch prints them
# --------------------------------------------------------------------------------------------
def format_size(nbytes: int) -> str:
    """PyTorch's ``format_size`` (c10 caching allocator): bytes up to 1 KiB, then KiB/MiB/GiB, 2 decimals."""
    if nbytes <= 1024:
        return f"{int(nbytes)} bytes"
    if nbytes <= MiB:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= GiB:
        return f"{nbytes / MiB:.2f} MiB"
    return f"{nbytes / GiB:.2f} GiB"


_UNIT = {"bytes": 1, "b": 1, "kib": 1024, "mib": MiB, "gib": GiB, "tib": 1024 * GiB}
_SIZE = r"(\d+(?:\.\d+)?\s*(?:bytes|[KMGT]iB))"


def _size(text: str) -> tuple[int, str]:
    """'6.14 GiB' -> (bytes, the canonical printed form)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bytes|[KMGT]iB)", text.strip(), re.I)
    if not m:
        raise ExplainError(f"cannot read size {text!r}")
    number, unit = m.group(1), m.group(2).lower()
    value = float(number)
    printed = f"{int(value)} bytes" if unit == "bytes" else f"{value:.2f} {m.group(2)}"
    return int(round(value * _UNIT[unit])), printed


def prints_as(nbytes: int, printed: str) -> bool:
    """Whether a tensor of `nbytes` is reported as "Tried to allocate `printed`" (segment or block)."""
    return (
        format_size(memory.segment_size(nbytes)) == printed
        or format_size(memory.block_size(nbytes)) == printed
    )


# --------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------
@dataclass
class OOMFigures:
    format: str  # "2.1+" or "pre-2.1"
    gpu: int | None
    requested: int
    capacity: int
    free: int
    allocated: int
    reserved: int  # by PyTorch in total (A + U)
    reserved_unallocated: int
    in_use: int | None = None  # this process, non-PyTorch memory included (2.1+ only)
    allowed: int | None = None  # set_per_process_memory_fraction
    private_pools: int | None = None
    processes: list[dict] = field(default_factory=list)  # "Process N has X memory in use"
    printed: dict[str, str] = field(default_factory=dict)

    @property
    def non_pytorch(self) -> int | None:
        """This process's memory outside PyTorch's allocator (CUDA context, libraries)."""
        return (
            None if self.in_use is None else max(0, self.in_use - self.allocated - self.reserved_unallocated)
        )

    @property
    def other_processes(self) -> int | None:
        return None if self.in_use is None else max(0, self.capacity - self.free - self.in_use)

    @property
    def outside_pytorch(self) -> int:
        """Card memory not reserved by PyTorch in this process: its CUDA context plus other processes."""
        return max(0, self.capacity - self.free - self.reserved)

    def to_json(self) -> dict:
        out = {
            "format": self.format,
            "gpu": self.gpu,
            "requested_bytes": self.requested,
            "capacity_bytes": self.capacity,
            "free_bytes": self.free,
            "in_use_bytes": self.in_use,
            "allocated_bytes": self.allocated,
            "reserved_unallocated_bytes": self.reserved_unallocated,
            "reserved_bytes": self.reserved,
            "non_pytorch_bytes": self.non_pytorch,
            "other_processes_bytes": self.other_processes,
            "outside_pytorch_bytes": self.outside_pytorch,
            "allowed_bytes": self.allowed,
            "private_pools_bytes": self.private_pools,
            "processes": self.processes,
        }
        return out


_REQUEST = re.compile(r"Tried to allocate " + _SIZE, re.I)
_NEW_CAPACITY = re.compile(
    r"GPU (\d+) has a total capac(?:i)?ty of " + _SIZE + r" of which " + _SIZE + r" is free", re.I
)
_THIS_PROCESS = re.compile(
    r"Including non-PyTorch memory, this process has " + _SIZE + r" memory in use", re.I
)
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use", re.I)
_ALLOWED = re.compile(_SIZE + r" allowed;", re.I)
_OF_ALLOCATED = re.compile(
    r"Of the allocated memory "
    + _SIZE
    + r" is allocated by PyTorch, (?:with "
    + _SIZE
    + r" allocated in private pools \(e\.g\., CUDA Graphs\), )?and "
    + _SIZE
    + r" is reserved by PyTorch but unallocated",
    re.I,
)
_OLD_GROUP = re.compile(r"\(GPU (\d+); ([^)]*)\)")
_OLD_ITEM = re.compile(
    _SIZE + r" (total capacity|already allocated|free|allowed|reserved in total by PyTorch|cached)", re.I
)


def _parse_one(window: str) -> OOMFigures:
    """The figures of one message (`window`: whitespace-normalised text from "Tried to allocate" on)."""
    req_bytes, req_text = _size(_REQUEST.match(window).group(1))
    printed = {"requested": req_text}

    def take(name, text):
        nbytes, shown = _size(text)
        printed[name] = shown
        return nbytes

    new = _NEW_CAPACITY.search(window)
    old = _OLD_GROUP.search(window[: 40 + len(req_text) + 400])
    if old and (not new or old.start() < new.start()):
        items = {m.group(2).lower(): m.group(1) for m in _OLD_ITEM.finditer(old.group(2))}
        reserved_key = "reserved in total by pytorch" if "reserved in total by pytorch" in items else "cached"
        missing = [k for k in ("total capacity", "already allocated", "free", reserved_key) if k not in items]
        if missing:
            raise ExplainError(
                f'found "Tried to allocate {req_text}" but not the card\'s figures '
                f"({', '.join(missing)}): paste the whole message"
            )
        capacity = take("capacity", items["total capacity"])
        free = take("free", items["free"])
        allocated = take("allocated", items["already allocated"])
        reserved = take("reserved", items[reserved_key])
        allowed = take("allowed", items["allowed"]) if "allowed" in items else None
        return OOMFigures(
            "pre-2.1",
            int(old.group(1)),
            req_bytes,
            capacity,
            free,
            allocated,
            reserved,
            max(0, reserved - allocated),
            allowed=allowed,
            printed=printed,
        )
    if not new:
        raise ExplainError(
            f'found "Tried to allocate {req_text}" but not the card\'s figures (total capacity, free): '
            "paste the whole message"
        )
    capacity = take("capacity", new.group(2))
    free = take("free", new.group(3))
    of_alloc = _OF_ALLOCATED.search(window)
    if not of_alloc:
        raise ExplainError(
            f'found "Tried to allocate {req_text}" but not "Of the allocated memory … is allocated by '
            'PyTorch, and … is reserved by PyTorch but unallocated": paste the whole message'
        )
    allocated = take("allocated", of_alloc.group(1))
    private = take("private_pools", of_alloc.group(2)) if of_alloc.group(2) else None
    unallocated = take("reserved_unallocated", of_alloc.group(3))
    this = _THIS_PROCESS.search(window)
    in_use = take("in_use", this.group(1)) if this else None
    allowed_m = _ALLOWED.search(window[: of_alloc.start()])
    allowed = take("allowed", allowed_m.group(1)) if allowed_m else None
    processes = []
    for m in _PROCESS.finditer(window[: of_alloc.start()]):
        nbytes, shown = _size(m.group(2))
        processes.append({"pid": int(m.group(1)), "bytes": nbytes, "printed": shown})
    reserved = allocated + unallocated  # 'allocated' includes the private pools' allocations
    figs = OOMFigures(
        "2.1+",
        int(new.group(1)),
        req_bytes,
        capacity,
        free,
        allocated,
        reserved,
        unallocated,
        in_use=in_use,
        allowed=allowed,
        private_pools=private,
        processes=processes,
        printed=printed,
    )
    return figs


def parse_message(text: str, source: str = "the input") -> tuple[OOMFigures, int]:
    """The figures of the last complete OOM message in `text`, and how many messages it holds."""
    if not text.strip():
        raise ExplainError(f"{source} is empty: paste the whole CUDA out-of-memory message or traceback")
    flat = re.sub(r"\s+", " ", text)
    starts = [m.start() for m in _REQUEST.finditer(flat)]
    if not starts:
        if re.search(r"MPS backend out of memory", flat, re.I):
            raise ExplainError(f"{source} holds an Apple MPS out-of-memory message; oomguide explains CUDA's")
        if re.search(r"out of memory", flat, re.I):
            raise ExplainError(
                f"{source} says 'out of memory' but has no 'Tried to allocate …': that is not the "
                "message of PyTorch's CUDA caching allocator, so there are no figures to read"
            )
        raise ExplainError(f"no CUDA out-of-memory message ('Tried to allocate …') in {source}")
    error = None
    for i in reversed(range(len(starts))):
        end = starts[i + 1] if i + 1 < len(starts) else len(flat)
        try:
            return _parse_one(flat[starts[i] : min(end, starts[i] + 4000)]), len(starts)
        except ExplainError as exc:
            error = error or exc
    raise error


def detect_context(text: str) -> str | None:
    """Where the traceback ran out: 'estimate_loss', 'generate', 'train_step' (backward) or None."""
    if re.search(r"\bin estimate_loss\b|\bestimate_loss\(", text):
        return "estimate_loss"
    if re.search(r"\bin generate\b|\.generate\(", text):
        return "generate"
    if re.search(r"\bbackward\b", text):
        return "train_step"
    return None


# --------------------------------------------------------------------------------------------
# which tensor
# --------------------------------------------------------------------------------------------
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, SIXTEEN_BIT: 2}
LOGITS_TENSORS = ("logits", "logits_float32")
ACTIVATION_TENSORS = ("residual", "hidden", "qkv", "mlp_hidden", "attention_scores")


def _tensor(name, shape, dtype, batch=None, block=None, vocab=None) -> dict:
    nbytes = ITEMSIZE[dtype]
    for d in shape:
        nbytes *= d
    return {
        "tensor": name,
        "shape": list(shape),
        "dtype": dtype,
        "bytes": nbytes,
        "batch_size": batch,
        "block_size": block,
        "vocab_size": vocab,
    }


def config_tensors(config) -> list[dict]:
    """The large tensors of a config's train step and estimate_loss (nanoGPT's GPT under CUDA autocast)."""
    g = config.gpt_config()
    V, C, H = g.vocab_size, g.n_embd, g.n_head
    dtype = config.dtype
    out = []
    shapes = [(config.batch_size, min(config.block_size, g.block_size))]
    eval_shape = (min(config.eval_batch, config.batch_size), min(config.eval_block, g.block_size))
    if eval_shape not in shapes:
        shapes.append(eval_shape)
    for B, T in shapes:
        out.append(_tensor("logits", (B * T, V), dtype, B, T, V))
        if dtype != "float32":
            out.append(
                _tensor("logits_float32", (B * T, V), "float32", B, T, V)
            )  # nll_loss's input (FACTS 12)
        out.append(_tensor("residual", (B, T, C), "float32", B, T, V))
        if dtype != "float32":
            out.append(_tensor("hidden", (B, T, C), dtype, B, T, V))
        out.append(_tensor("qkv", (B, T, 3 * C), dtype, B, T, V))
        out.append(_tensor("mlp_hidden", (B, T, 4 * C), dtype, B, T, V))
        out.append(_tensor("attention_scores", (B, H, T, T), dtype, B, T, V))
        if dtype != "float32":
            out.append(
                _tensor("attention_scores", (B, H, T, T), "float32", B, T, V)
            )  # softmax under autocast
    out.append(_tensor("embedding_weight", (V, C), "float32", vocab=V))
    if dtype != "float32":
        out.append(_tensor("embedding_weight_copy", (V, C), dtype, vocab=V))
    out.append(_tensor("mlp_weight", (4 * C, C), "float32"))
    out.append(_tensor("attn_weight", (3 * C, C), "float32"))
    seen, unique = set(), []
    for t in out:
        key = (t["tensor"], tuple(t["shape"]), t["dtype"])
        if key not in seen:
            seen.add(key)
            unique.append(t)
    return unique


def search_logits(printed: str, vocabs=SEARCH_VOCABS) -> list[dict]:
    """(B·T, V) buffers of GPT-2's vocabulary that print as `printed`, most plausible first."""
    out = []
    for vocab in vocabs:
        for dtype, name in ((SIXTEEN_BIT, "logits"), ("float32", "logits_float32")):
            for block in SEARCH_BLOCKS:
                for batch in range(1, SEARCH_MAX_BATCH + 1):
                    t = _tensor(name, (batch * block, vocab), dtype, batch, block, vocab)
                    if prints_as(t["bytes"], printed):
                        out.append(t)
    # vocab first (as given), then the block (1024 first), then 16-bit before float32
    out.sort(
        key=lambda t: (
            vocabs.index(t["vocab_size"]),
            SEARCH_BLOCKS.index(t["block_size"]),
            t["dtype"] != SIXTEEN_BIT,
        )
    )
    return out


def match_request(figs: OOMFigures, config=None) -> tuple[list[dict], str]:
    """Tensors whose size prints as the request, and how they were found: 'small', 'config' or 'search'."""
    printed = figs.printed["requested"]
    if figs.requested <= SMALLEST_SEGMENTS:
        return [], "small"
    if config is not None:
        found = [t for t in config_tensors(config) if prints_as(t["bytes"], printed)]
        if found:
            return found, "config"
        vocab = config.gpt_config().vocab_size
        return search_logits(printed, tuple(dict.fromkeys((vocab, *SEARCH_VOCABS)))), "search"
    return search_logits(printed), "search"


# --------------------------------------------------------------------------------------------
# model states, diagnosis, links
# --------------------------------------------------------------------------------------------
def model_states(config, card_bytes: int) -> dict:
    """Weights + gradients + AdamW state of the config's model against the card (counted on meta tensors)."""
    import torch

    from .model import GPT

    with torch.device("meta"):
        model = GPT(config.gpt_config())
    params = sum(p.numel() for p in model.parameters())
    linear = {
        id(p): p.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters()
    }
    copies = 0 if config.dtype == "float32" else 2 * sum(linear.values())  # autocast's cached 16-bit copies
    states = STATE_BYTES_PER_PARAMETER * params
    usable = memory.usable_bytes(card_bytes)
    return {
        "parameters": params,
        "bytes_per_parameter": STATE_BYTES_PER_PARAMETER,
        "states_bytes": states,
        "autocast_copies_bytes": copies,
        "dtype": config.dtype,
        "card_bytes": card_bytes,
        "usable_bytes": usable,
        "context_bytes": memory.CONTEXT_BYTES,
        "states_exceed_card": states > usable,
        "with_copies_exceed_card": states + copies > usable,
    }


def diagnose(figs: OOMFigures, states: dict | None = None) -> list[str]:
    T, F, X, U = figs.capacity, figs.free, figs.requested, figs.reserved_unallocated
    codes = []
    if states is not None:
        if states["states_exceed_card"]:
            codes.append("model_states_exceed_card")
        elif states["with_copies_exceed_card"]:
            codes.append("model_states_with_copies_exceed_card")
    fragmentation = U >= MIN_SHARE * T and (F + U >= X or U >= FRAGMENTATION_SHARE * T)
    other = figs.other_processes
    if other is None:
        other = max(0, figs.outside_pytorch - OLD_FORMAT_CONTEXT_ALLOWANCE)
    others = other >= OTHER_PROCESSES_SHARE * T or (other >= MIN_SHARE * T and F + other >= X)
    if F + U + other < X or not (fragmentation or others):
        codes.append("too_little_memory")
    if fragmentation:
        codes.append("fragmentation")
    if others:
        codes.append("other_processes")
    return codes


def site_url() -> str:
    return os.environ.get(SITE_URL_ENV, DEFAULT_SITE_URL).rstrip("/")


def guide_url(page: str, anchor: str | None, lang: str, base: str | None = None) -> str:
    """A section's URL: English at the site's root, other languages under /<lang>/ (mkdocs-static-i18n)."""
    if page not in GUIDE_SECTIONS or (anchor is not None and anchor not in GUIDE_SECTIONS[page]):
        raise KeyError(f"{page}#{anchor} is not a section of the guide")
    base = site_url() if base is None else base.rstrip("/")
    prefix = base if lang == "en" else f"{base}/{lang}"
    return f"{prefix}/{page}/" + (f"#{anchor}" if anchor else "")


def choose_sections(
    codes: list[str], matches: list[dict], context: str | None
) -> list[tuple[str, str | None]]:
    picks: list[tuple[str, str | None]] = []
    states_too_large = any(c.startswith("model_states") for c in codes)
    if states_too_large:
        picks += [("eval-oom-12gb", "smaller-n-embd"), ("where-the-memory-goes", None)]
    if "fragmentation" in codes:
        picks.append(("estimate-loss-oom", "expandable-segments"))
    if "other_processes" in codes:
        picks.append(("estimate-loss-oom", "hardware-setup"))
    fixes: list[
        tuple[str, str | None]
    ] = []  # what to make smaller, by where it ran out and what it asked for
    tensors = {m["tensor"] for m in matches}
    if states_too_large:
        pass  # no batch size helps: the sections above are the fix
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
    elif "too_little_memory" in codes or not picks:
        fixes = [("estimate-loss-oom", "root-causes"), ("where-the-memory-goes", None)]
    return list(dict.fromkeys(picks + fixes))


# --------------------------------------------------------------------------------------------
# the message catalogue
# --------------------------------------------------------------------------------------------
MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "title": "CUDA out of memory on GPU {gpu} (message format: PyTorch {format})",
        "several": "{n} OOM messages in the input; explaining the last one.",
        "context_estimate_loss": "The traceback passes through estimate_loss(): it ran out during "
        "evaluation.",
        "context_train_step": "The traceback passes through backward(): it ran out in a training step.",
        "context_generate": "The traceback passes through generate(): it ran out while generating.",
        "h_figures": "Figures read",
        "requested": "requested (Tried to allocate)",
        "capacity": "total capacity",
        "free": "free",
        "allowed": "allowed (memory fraction)",
        "in_use": "in use by this process",
        "allocated": "allocated by PyTorch",
        "reserved_unallocated": "reserved by PyTorch, unallocated",
        "reserved": "reserved by PyTorch in total",
        "non_pytorch": "non-PyTorch memory of this process (in use − allocated − unallocated)",
        "other_processes": "used by other processes (capacity − free − in use)",
        "outside_pytorch": "outside PyTorch's allocator (capacity − free − reserved)",
        "process": "process {pid}",
        "h_tensor": "Which tensor",
        "small_request": "{req} is one of the allocator's smallest segments (a tensor under 1 MiB asks for "
        "2 MiB, under 10 MiB for 20 MiB): it names no particular tensor. The card was already full when a "
        "small tensor was needed.",
        "is_size_of": "{req} is the size of:",
        "is_size_of_config": "In this config, {req} is the size of:",
        "config_match": "{desc}: shape {shape}, {dtype}, {nbytes} bytes → {req}",
        "config_no_match": "None of this config's tensors prints as {req}; at other batch and block sizes:",
        "search_group": "{desc}: batch {batch} × block {block} × vocab {vocab} × {itemsize} bytes ({dtype}) "
        "= {nbytes} bytes → {req}",
        "search_also": "same size: {pairs} (batch × block)",
        "search_vocab_too": "the same with vocab {vocab} (GPT-2 without padding), e.g. batch {batch} × "
        "block {block} = {nbytes} bytes",
        "no_match": "{req} is not the size of a GPT-2 logits buffer (vocab 50304 or 50257, block 64–2048, "
        "batch 1–512).",
        "hint_config": "Pass your config (--config FILE, --set key=value) to compare with your model's "
        "activations and weights and to predict each phase.",
        "h_prediction": "Prediction for this config on a {card} card ({usable} for PyTorch after the CUDA "
        "context)",
        "pred_fits": "{phase}: predicted peak {peak}, fits",
        "pred_no": "{phase}: predicted peak {peak}, does not fit; the first allocation that fails: "
        '"Tried to allocate {fail}" ({what})',
        "pred_same": "the same size as in this message",
        "pred_diff": "this message: {req}",
        "pred_all_fit": "Every phase fits this card in the prediction, yet the run ran out: something the "
        "prediction does not model holds memory (torch.compile, other tensors of your script, "
        "fragmentation, other processes), or the config differs from the run's.",
        "h_diagnosis": "Diagnosis",
        "too_little_memory": "Too little memory: PyTorch's live tensors take {allocated} of the {capacity} "
        "card, and the {req} request did not fit in what was left ({free} free, {unalloc} cached). Keep "
        "less memory alive at once: a smaller batch, a shorter block, or a loss computed in chunks.",
        "too_little_memory_short": "Too little memory: PyTorch's live tensors take {allocated} of the "
        "{capacity} card, and the {req} request did not fit in what was left ({free} free, {unalloc} "
        "cached).",
        "too_little_huge": "The request alone ({req}) is larger than the whole card ({capacity}): no "
        "allocator setting helps; this tensor has to get smaller.",
        "fragmentation": "Fragmentation: {unalloc} is reserved by PyTorch but unallocated, cached in pieces "
        "none of which could hold {req} (free plus cached: {sum}). Set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA is initialised; it reuses that memory "
        "but does not create any.",
        "other_processes_d": "Other processes hold {other} of this card (capacity − free − this process's "
        "{in_use}). Close them (nvidia-smi lists them) or run on a GPU of your own.",
        "other_processes_old": "{outside} of the card is not held by PyTorch in this process; apart from "
        "this process's CUDA context (a few hundred MiB) that is other processes. Close them (nvidia-smi "
        "lists them) or run on a GPU of your own.",
        "model_states_exceed_card": "Model states too large: {params} parameters × 16 bytes (float32 "
        "weights, gradients, AdamW's exp_avg and exp_avg_sq) = {states} ({states_gb}). The card has {card} ("
        "{card_gb}), of which PyTorch can use about {usable} after the CUDA context. This does not fit "
        "before any activation, so no batch size helps: train a smaller model (n_layer, n_embd) or use a "
        "card with more memory.",
        "model_states_with_copies_exceed_card": "Model states fill the card: {params} parameters × 16 bytes "
        "(float32 weights, gradients, AdamW's exp_avg and exp_avg_sq) = {states} ({states_gb}), which alone "
        "fits the {usable} PyTorch can use of this {card} card, with {margin} to spare. With autocast's "
        "{dtype} copies of the weights ({copies}, alive during forward and backward) it is {total}: more "
        "than the card before any activation. A smaller batch cannot help: train a smaller model (n_layer, "
        "n_embd) or use a card with more memory.",
        "model_states_info": "Model states: {params} parameters × 16 bytes = {states} ({states_gb}) on a "
        "{card} card.",
        "h_links": "Read next",
    },
    "ja": {
        "title": "GPU {gpu} で CUDA のメモリが不足しました（メッセージ形式: PyTorch {format}）",
        "several": "入力に OOM メッセージが {n} 件あります。最後のものを説明します。",
        "context_estimate_loss": "トレースバックが estimate_loss() を通っています。評価中にメモリが不足しま"
        "した。",
        "context_train_step": "トレースバックが backward() を通っています。学習ステップ中にメモリが不足しま"
        "した。",
        "context_generate": "トレースバックが generate() を通っています。生成中にメモリが不足しました。",
        "h_figures": "読み取った数値",
        "requested": "要求サイズ（Tried to allocate）",
        "capacity": "総容量",
        "free": "空き",
        "allowed": "上限（memory fraction）",
        "in_use": "このプロセスの使用量",
        "allocated": "PyTorch が割り当て済み",
        "reserved_unallocated": "PyTorch が予約済みで未割り当て",
        "reserved": "PyTorch の予約量（合計）",
        "non_pytorch": "このプロセスの PyTorch 以外のメモリ（使用量 − 割り当て済み − 未割り当て）",
        "other_processes": "他のプロセスの使用量（総容量 − 空き − このプロセスの使用量）",
        "outside_pytorch": "PyTorch のアロケータ外のメモリ（総容量 − 空き − 予約量）",
        "process": "プロセス {pid}",
        "h_tensor": "どのテンソルか",
        "small_request": "{req} はアロケータの最小セグメントです（1 MiB 未満のテンソルは 2 MiB、10 MiB 未満"
        "は 20 MiB を要求します）。特定のテンソルを指してはいません。小さなテンソルが必要になった時点で、カ"
        "ードはすでに満杯でした。",
        "is_size_of": "{req} は次のサイズです:",
        "is_size_of_config": "この設定では、{req} は次のサイズです:",
        "config_match": "{desc}: 形状 {shape}、{dtype}、{nbytes} バイト → {req}",
        "config_no_match": "この設定のテンソルに {req} と表示されるものはありません。別のバッチサイズ・ブロ"
        "ックサイズなら:",
        "search_group": "{desc}: バッチ {batch} × ブロック {block} × 語彙 {vocab} × {itemsize} バイト（"
        "{dtype}）= {nbytes} バイト → {req}",
        "search_also": "同じサイズになる組み合わせ: {pairs}（バッチ × ブロック）",
        "search_vocab_too": "語彙 {vocab}（パディングなしの GPT-2）でも同じ組み合わせです。例: バッチ "
        "{batch} × ブロック {block} = {nbytes} バイト",
        "no_match": "{req} は GPT-2 のロジットバッファ（語彙 50304 または 50257、ブロック 64–2048、バッチ 1–"
        "512）のサイズではありません。",
        "hint_config": "設定を渡すと（--config FILE、--set key=value）、モデルの活性化や重みとも照合し、各フ"
        "ェーズのメモリを予測します。",
        "h_prediction": "この設定の予測（{card} のカード、CUDA コンテキストを除いて PyTorch が使えるのは "
        "{usable}）",
        "pred_fits": "{phase}: 予測ピーク {peak}、収まります",
        "pred_no": "{phase}: 予測ピーク {peak}、収まりません。最初に失敗する割り当て: "
        '"Tried to allocate {fail}"（{what}）',
        "pred_same": "このメッセージと同じサイズです",
        "pred_diff": "このメッセージでは {req}",
        "pred_all_fit": "予測ではどのフェーズもこのカードに収まりますが、実際にはメモリが不足しました。予測"
        "がモデル化していないもの（torch.compile、スクリプトの他のテンソル、断片化、他のプロセス）がメモリを"
        "占めているか、設定が実行時のものと違います。",
        "h_diagnosis": "診断",
        "too_little_memory": "メモリ不足: PyTorch の生きているテンソルが {capacity} のカードのうち "
        "{allocated} を占め、{req} の要求は残り（空き {free}、キャッシュ {unalloc}）に収まりませんでした。同"
        "時に生きているメモリを減らしてください。バッチを小さく、ブロックを短く、あるいは損失をチャンクに分"
        "けて計算します。",
        "too_little_memory_short": "メモリ不足: PyTorch の生きているテンソルが {capacity} のカードのうち "
        "{allocated} を占め、{req} の要求は残り（空き {free}、キャッシュ {unalloc}）に収まりませんでした。",
        "too_little_huge": "要求だけで（{req}）カード全体（{capacity}）より大きいため、アロケータの設定では"
        "解決しません。このテンソル自体を小さくする必要があります。",
        "fragmentation": "断片化: {unalloc} が PyTorch に予約されたまま未割り当てです。キャッシュが細切れで"
        "、どの断片にも {req} が収まりませんでした（空きとキャッシュの合計: {sum}）。CUDA の初期化前に "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True を設定してください。このメモリを再利用できるように"
        "なりますが、メモリが増えるわけではありません。",
        "other_processes_d": "他のプロセスがこのカードの {other} を使っています（総容量 − 空き − このプロセ"
        "スの {in_use}）。それらを終了するか（nvidia-smi で一覧できます）、専用の GPU で実行してください。",
        "other_processes_old": "カードのうち {outside} は、このプロセスの PyTorch が保持していないメモリです"
        "。このプロセスの CUDA コンテキスト（数百 MiB）を除けば、他のプロセスが使っています。それらを終了す"
        "るか（nvidia-smi で一覧できます）、専用の GPU で実行してください。",
        "model_states_exceed_card": "モデル状態が大きすぎます: {params} パラメータ × 16 バイト（float32 の重"
        "み、勾配、AdamW の exp_avg と exp_avg_sq）= {states}（{states_gb}）。カードは {card}（{card_gb}）で"
        "、CUDA コンテキストを除くと PyTorch が使えるのは約 {usable} です。活性化を置く前から収まらないため"
        "、どのバッチサイズでも解決しません。小さいモデル（n_layer、n_embd）にするか、メモリの多いカードを使"
        "ってください。",
        "model_states_with_copies_exceed_card": "モデル状態でカードが埋まります: {params} パラメータ × 16 バ"
        "イト（float32 の重み、勾配、AdamW の exp_avg と exp_avg_sq）= {states}（{states_gb}）。これだけなら"
        "、この {card} のカードで PyTorch が使える {usable} に収まり、余裕は {margin} です。しかし autocast "
        "が forward と backward の間保持する重みの {dtype} コピー（{copies}）を加えると {total} になり、活性"
        "化の前にカードを超えます。バッチを小さくしても解決しません。小さいモデル（n_layer、n_embd）にするか"
        "、メモリの多いカードを使ってください。",
        "model_states_info": "モデル状態: {params} パラメータ × 16 バイト = {states}（{states_gb}）、カード"
        "は {card}。",
        "h_links": "次に読むページ",
    },
    "zh": {
        "title": "GPU {gpu} 上 CUDA 显存不足（消息格式：PyTorch {format}）",
        "several": "输入中有 {n} 条 OOM 消息，下面解释最后一条。",
        "context_estimate_loss": "回溯经过 estimate_loss()：显存在评估时耗尽。",
        "context_train_step": "回溯经过 backward()：显存在训练步中耗尽。",
        "context_generate": "回溯经过 generate()：显存在生成时耗尽。",
        "h_figures": "读取到的数值",
        "requested": "请求大小（Tried to allocate）",
        "capacity": "总容量",
        "free": "空闲",
        "allowed": "上限（memory fraction）",
        "in_use": "本进程占用",
        "allocated": "PyTorch 已分配",
        "reserved_unallocated": "PyTorch 已预留但未分配",
        "reserved": "PyTorch 预留总量",
        "non_pytorch": "本进程的非 PyTorch 显存（占用 − 已分配 − 未分配）",
        "other_processes": "其他进程占用（总容量 − 空闲 − 本进程占用）",
        "outside_pytorch": "不在 PyTorch 分配器中的显存（总容量 − 空闲 − 预留）",
        "process": "进程 {pid}",
        "h_tensor": "是哪个张量",
        "small_request": "{req} 是分配器最小的段（小于 1 MiB 的张量申请 2 MiB，小于 10 MiB 的申请 20 MiB），"
        "并不指向某个特定张量。需要一个小张量时，显卡已经满了。",
        "is_size_of": "{req} 是以下张量的大小：",
        "is_size_of_config": "在该配置中，{req} 是以下张量的大小：",
        "config_match": "{desc}：形状 {shape}，{dtype}，{nbytes} 字节 → {req}",
        "config_no_match": "该配置中没有显示为 {req} 的张量；换成其他批大小和块大小时：",
        "search_group": "{desc}：批大小 {batch} × 块大小 {block} × 词表 {vocab} × {itemsize} 字节（{dtype}）"
        "= {nbytes} 字节 → {req}",
        "search_also": "大小相同的组合：{pairs}（批大小 × 块大小）",
        "search_vocab_too": "词表为 {vocab}（未填充的 GPT-2）时组合相同，例如批大小 {batch} × 块大小 {block}"
        " = {nbytes} 字节",
        "no_match": "{req} 不是 GPT-2 logits 缓冲区的大小（词表 50304 或 50257，块大小 64–2048，批大小 1–512"
        "）。",
        "hint_config": "传入你的配置（--config FILE、--set key=value），即可与模型的激活和权重对照，并预测每"
        "个阶段的显存。",
        "h_prediction": "该配置的预测（{card} 的显卡，扣除 CUDA 上下文后 PyTorch 可用 {usable}）",
        "pred_fits": "{phase}：预测峰值 {peak}，放得下",
        "pred_no": '{phase}：预测峰值 {peak}，放不下；第一个失败的分配："Tried to allocate {fail}"（{what}）',
        "pred_same": "与本消息大小相同",
        "pred_diff": "本消息为 {req}",
        "pred_all_fit": "按预测，每个阶段都放得进这张显卡，但实际运行却显存不足：有预测未建模的东西占用了显"
        "存（torch.compile、脚本中的其他张量、碎片化、其他进程），或者配置与实际运行的不同。",
        "h_diagnosis": "诊断",
        "too_little_memory": "显存不足：PyTorch 存活的张量占用了 {capacity} 显卡中的 {allocated}，{req} 的请"
        "求放不进剩下的空间（空闲 {free}，缓存 {unalloc}）。请减少同时存活的显存：减小批大小、缩短块长度，或"
        "分块计算损失。",
        "too_little_memory_short": "显存不足：PyTorch 存活的张量占用了 {capacity} 显卡中的 {allocated}，"
        "{req} 的请求放不进剩下的空间（空闲 {free}，缓存 {unalloc}）。",
        "too_little_huge": "仅这一个请求（{req}）就比整张显卡（{capacity}）还大，调整分配器设置无济于事，必"
        "须让这个张量变小。",
        "fragmentation": "碎片化：有 {unalloc} 被 PyTorch 预留但未分配，缓存被切成碎块，没有一块能容纳 {req}"
        "（空闲加缓存共 {sum}）。请在 CUDA 初始化之前设置 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True；"
        "它能重新利用这部分显存，但不会凭空多出显存。",
        "other_processes_d": "其他进程占用了这张显卡的 {other}（总容量 − 空闲 − 本进程的 {in_use}）。请关闭"
        "它们（nvidia-smi 可列出），或在独占的 GPU 上运行。",
        "other_processes_old": "显卡上有 {outside} 不由本进程的 PyTorch 持有；除去本进程的 CUDA 上下文（几百"
        " MiB），其余由其他进程占用。请关闭它们（nvidia-smi 可列出），或在独占的 GPU 上运行。",
        "model_states_exceed_card": "模型状态过大：{params} 个参数 × 16 字节（float32 权重、梯度、AdamW 的 "
        "exp_avg 和 exp_avg_sq）= {states}（{states_gb}）。显卡为 {card}（{card_gb}），扣除 CUDA 上下文后 "
        "PyTorch 约可用 {usable}。还没放激活就已经放不下，任何批大小都无济于事；请换更小的模型（n_layer、n_e"
        "mbd）或显存更大的显卡。",
        "model_states_with_copies_exceed_card": "模型状态几乎占满显卡：{params} 个参数 × 16 字节（float32 权"
        "重、梯度、AdamW 的 exp_avg 和 exp_avg_sq）= {states}（{states_gb}），单独来看能放进这张 {card} 显卡"
        "上 PyTorch 可用的 {usable}，只剩 {margin}。但加上 autocast 在前向和反向期间保留的 {dtype} 权重副本"
        "（{copies}）就是 {total}，在放任何激活之前就超出了显卡。减小批大小无济于事；请换更小的模型（n_layer"
        "、n_embd）或显存更大的显卡。",
        "model_states_info": "模型状态：{params} 个参数 × 16 字节 = {states}（{states_gb}），显卡为 {card}。",
        "h_links": "接下来阅读",
    },
    "de": {
        "title": "CUDA-Speicher erschöpft auf GPU {gpu} (Meldungsformat: PyTorch {format})",
        "several": "Die Eingabe enthält {n} OOM-Meldungen; erklärt wird die letzte.",
        "context_estimate_loss": "Der Traceback führt durch estimate_loss(): Der Speicher ging bei der "
        "Evaluation aus.",
        "context_train_step": "Der Traceback führt durch backward(): Der Speicher ging in einem "
        "Trainingsschritt aus.",
        "context_generate": "Der Traceback führt durch generate(): Der Speicher ging beim Generieren aus.",
        "h_figures": "Gelesene Werte",
        "requested": "angefordert (Tried to allocate)",
        "capacity": "Gesamtkapazität",
        "free": "frei",
        "allowed": "erlaubt (memory fraction)",
        "in_use": "von diesem Prozess genutzt",
        "allocated": "von PyTorch belegt",
        "reserved_unallocated": "von PyTorch reserviert, nicht belegt",
        "reserved": "von PyTorch reserviert (gesamt)",
        "non_pytorch": "Nicht-PyTorch-Speicher dieses Prozesses (genutzt − belegt − reserviert, nicht "
        "belegt)",
        "other_processes": "von anderen Prozessen genutzt (Kapazität − frei − genutzt)",
        "outside_pytorch": "außerhalb von PyTorchs Allokator (Kapazität − frei − reserviert)",
        "process": "Prozess {pid}",
        "h_tensor": "Welcher Tensor",
        "small_request": "{req} ist eines der kleinsten Segmente des Allokators (ein Tensor unter 1 MiB "
        "fordert 2 MiB an, unter 10 MiB 20 MiB): Die Größe verweist auf keinen bestimmten Tensor. Die Karte "
        "war schon voll, als ein kleiner Tensor gebraucht wurde.",
        "is_size_of": "{req} ist die Größe von:",
        "is_size_of_config": "In dieser Konfiguration ist {req} die Größe von:",
        "config_match": "{desc}: Form {shape}, {dtype}, {nbytes} Bytes → {req}",
        "config_no_match": "Kein Tensor dieser Konfiguration erscheint als {req}; bei anderen Batch- und "
        "Blockgrößen:",
        "search_group": "{desc}: Batch {batch} × Block {block} × Vokabular {vocab} × {itemsize} Bytes ("
        "{dtype}) = {nbytes} Bytes → {req}",
        "search_also": "gleiche Größe: {pairs} (Batch × Block)",
        "search_vocab_too": "dasselbe mit Vokabular {vocab} (GPT-2 ohne Padding), etwa Batch {batch} × "
        "Block {block} = {nbytes} Bytes",
        "no_match": "{req} ist nicht die Größe eines GPT-2-Logits-Puffers (Vokabular 50304 oder 50257, "
        "Block 64–2048, Batch 1–512).",
        "hint_config": "Mit Ihrer Konfiguration (--config DATEI, --set key=value) vergleicht oomguide auch "
        "mit den Aktivierungen und Gewichten Ihres Modells und sagt den Speicher jeder Phase voraus.",
        "h_prediction": "Vorhersage für diese Konfiguration auf einer Karte mit {card} ({usable} für PyTorch "
        "nach dem CUDA-Kontext)",
        "pred_fits": "{phase}: vorhergesagte Spitze {peak}, passt",
        "pred_no": "{phase}: vorhergesagte Spitze {peak}, passt nicht; die erste Allokation, die scheitert: "
        '"Tried to allocate {fail}" ({what})',
        "pred_same": "dieselbe Größe wie in dieser Meldung",
        "pred_diff": "diese Meldung: {req}",
        "pred_all_fit": "Laut Vorhersage passt jede Phase auf diese Karte, trotzdem ging der Speicher aus: "
        "Etwas, das die Vorhersage nicht modelliert, belegt Speicher (torch.compile, andere Tensoren Ihres "
        "Skripts, Fragmentierung, andere Prozesse), oder die Konfiguration weicht von der des Laufs ab.",
        "h_diagnosis": "Diagnose",
        "too_little_memory": "Zu wenig Speicher: Die lebenden Tensoren von PyTorch belegen {allocated} der "
        "Karte ({capacity}), und die Anforderung von {req} passte nicht in den Rest ({free} frei, {unalloc} "
        "im Cache). Halten Sie weniger Speicher gleichzeitig am Leben: eine kleinere Batchgröße, ein "
        "kürzerer Block oder ein in Stücken berechneter Loss.",
        "too_little_memory_short": "Zu wenig Speicher: Die lebenden Tensoren von PyTorch belegen {allocated}"
        " der Karte ({capacity}), und die Anforderung von {req} passte nicht in den Rest ({free} frei, "
        "{unalloc} im Cache).",
        "too_little_huge": "Schon die Anforderung allein ({req}) ist größer als die ganze Karte ({capacity}"
        "): Keine Allokator-Einstellung hilft, dieser Tensor muss kleiner werden.",
        "fragmentation": "Fragmentierung: {unalloc} sind von PyTorch reserviert, aber nicht belegt – "
        "zwischengespeichert in Stücken, von denen keines {req} aufnehmen konnte (frei plus Cache: {sum}). "
        "Setzen Sie PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, bevor CUDA initialisiert wird; das "
        "macht diesen Speicher nutzbar, schafft aber keinen neuen.",
        "other_processes_d": "Andere Prozesse belegen {other} dieser Karte (Kapazität − frei − {in_use} "
        "dieses Prozesses). Beenden Sie sie (nvidia-smi listet sie auf) oder nutzen Sie eine eigene GPU.",
        "other_processes_old": "{outside} der Karte hält PyTorch in diesem Prozess nicht; abgesehen vom "
        "CUDA-Kontext dieses Prozesses (einige hundert MiB) sind das andere Prozesse. Beenden Sie sie "
        "(nvidia-smi listet sie auf) oder nutzen Sie eine eigene GPU.",
        "model_states_exceed_card": "Modellzustände zu groß: {params} Parameter × 16 Bytes "
        "(float32-Gewichte, Gradienten sowie exp_avg und exp_avg_sq von AdamW) = {states} ({states_gb}). "
        "Die Karte hat {card} ({card_gb}), davon kann PyTorch nach dem CUDA-Kontext etwa {usable} nutzen. "
        "Das passt schon ohne jede Aktivierung nicht, keine Batchgröße hilft: Trainieren Sie ein kleineres "
        "Modell (n_layer, n_embd) oder nehmen Sie eine Karte mit mehr Speicher.",
        "model_states_with_copies_exceed_card": "Die Modellzustände füllen die Karte: {params} Parameter × "
        "16 Bytes (float32-Gewichte, Gradienten sowie exp_avg und exp_avg_sq von AdamW) = {states} ("
        "{states_gb}); allein passt das in die {usable}, die PyTorch von dieser Karte ({card}) nutzen kann, "
        "mit {margin} Luft. Mit den {dtype}-Kopien der Gewichte, die autocast während Forward und Backward "
        "hält ({copies}), sind es {total}: mehr als die Karte, noch vor jeder Aktivierung. Eine kleinere "
        "Batchgröße hilft nicht; trainieren Sie ein kleineres Modell (n_layer, n_embd) oder nehmen Sie eine "
        "Karte mit mehr Speicher.",
        "model_states_info": "Modellzustände: {params} Parameter × 16 Bytes = {states} ({states_gb}) auf "
        "einer Karte mit {card}.",
        "h_links": "Weiterlesen",
    },
    "fr": {
        "title": "Mémoire CUDA épuisée sur le GPU {gpu} (format du message : PyTorch {format})",
        "several": "L'entrée contient {n} messages OOM ; voici l'explication du dernier.",
        "context_estimate_loss": "La trace passe par estimate_loss() : la mémoire a manqué pendant "
        "l'évaluation.",
        "context_train_step": "La trace passe par backward() : la mémoire a manqué pendant une étape "
        "d'entraînement.",
        "context_generate": "La trace passe par generate() : la mémoire a manqué pendant la génération.",
        "h_figures": "Valeurs lues",
        "requested": "demandé (Tried to allocate)",
        "capacity": "capacité totale",
        "free": "libre",
        "allowed": "autorisé (memory fraction)",
        "in_use": "utilisé par ce processus",
        "allocated": "alloué par PyTorch",
        "reserved_unallocated": "réservé par PyTorch mais non alloué",
        "reserved": "réservé par PyTorch (total)",
        "non_pytorch": "mémoire hors PyTorch de ce processus (utilisé − alloué − non alloué)",
        "other_processes": "utilisé par d'autres processus (capacité − libre − utilisé)",
        "outside_pytorch": "hors de l'allocateur de PyTorch (capacité − libre − réservé)",
        "process": "processus {pid}",
        "h_tensor": "Quel tenseur",
        "small_request": "{req} est l'un des plus petits segments de l'allocateur (un tenseur de moins de 1 "
        "MiB demande 2 MiB, de moins de 10 MiB, 20 MiB) : cette taille ne désigne aucun tenseur précis. La "
        "carte était déjà pleine quand un petit tenseur a été demandé.",
        "is_size_of": "{req} est la taille de :",
        "is_size_of_config": "Dans cette configuration, {req} est la taille de :",
        "config_match": "{desc} : forme {shape}, {dtype}, {nbytes} octets → {req}",
        "config_no_match": "Aucun tenseur de cette configuration n'apparaît comme {req} ; avec d'autres "
        "tailles de batch et de bloc :",
        "search_group": "{desc} : batch {batch} × bloc {block} × vocabulaire {vocab} × {itemsize} octets ("
        "{dtype}) = {nbytes} octets → {req}",
        "search_also": "même taille : {pairs} (batch × bloc)",
        "search_vocab_too": "de même avec le vocabulaire {vocab} (GPT-2 sans remplissage), par exemple "
        "batch {batch} × bloc {block} = {nbytes} octets",
        "no_match": "{req} n'est la taille d'aucun tampon de logits de GPT-2 (vocabulaire 50304 ou 50257, "
        "bloc 64–2048, batch 1–512).",
        "hint_config": "Donnez votre configuration (--config FICHIER, --set key=value) pour comparer aussi "
        "avec les activations et les poids de votre modèle et prédire chaque phase.",
        "h_prediction": "Prédiction pour cette configuration sur une carte de {card} ({usable} pour "
        "PyTorch, contexte CUDA déduit)",
        "pred_fits": "{phase} : pic prédit {peak}, tient",
        "pred_no": "{phase} : pic prédit {peak}, ne tient pas ; première allocation qui échoue : "
        '"Tried to allocate {fail}" ({what})',
        "pred_same": "même taille que dans ce message",
        "pred_diff": "ce message : {req}",
        "pred_all_fit": "D'après la prédiction, chaque phase tient sur cette carte, et pourtant la mémoire "
        "a manqué : quelque chose que la prédiction ne modélise pas occupe de la mémoire (torch.compile, "
        "d'autres tenseurs de votre script, la fragmentation, d'autres processus), ou la configuration "
        "diffère de celle de l'exécution.",
        "h_diagnosis": "Diagnostic",
        "too_little_memory": "Mémoire insuffisante : les tenseurs vivants de PyTorch occupent {allocated} "
        "de la carte de {capacity}, et la demande de {req} ne tenait pas dans le reste ({free} libres, "
        "{unalloc} en cache). Gardez moins de mémoire vivante à la fois : un batch plus petit, un bloc plus "
        "court ou une perte calculée par morceaux.",
        "too_little_memory_short": "Mémoire insuffisante : les tenseurs vivants de PyTorch occupent "
        "{allocated} de la carte de {capacity}, et la demande de {req} ne tenait pas dans le reste ({free} "
        "libres, {unalloc} en cache).",
        "too_little_huge": "La demande seule ({req}) dépasse la carte entière ({capacity}) : aucun réglage "
        "de l'allocateur n'y peut rien, ce tenseur doit devenir plus petit.",
        "fragmentation": "Fragmentation : {unalloc} sont réservés par PyTorch mais non alloués, en cache en "
        "morceaux dont aucun ne pouvait contenir {req} (libre plus cache : {sum}). Définissez "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avant l'initialisation de CUDA ; ce réglage "
        "réutilise cette mémoire mais n'en crée pas.",
        "other_processes_d": "D'autres processus occupent {other} de cette carte (capacité − libre − "
        "{in_use} de ce processus). Fermez-les (nvidia-smi les liste) ou utilisez un GPU qui vous est "
        "réservé.",
        "other_processes_old": "{outside} de la carte ne sont pas tenus par PyTorch dans ce processus ; "
        "hormis le contexte CUDA de ce processus (quelques centaines de MiB), ce sont d'autres processus. "
        "Fermez-les (nvidia-smi les liste) ou utilisez un GPU qui vous est réservé.",
        "model_states_exceed_card": "États du modèle trop gros : {params} paramètres × 16 octets (poids "
        "float32, gradients, exp_avg et exp_avg_sq d'AdamW) = {states} ({states_gb}). La carte a {card} ("
        "{card_gb}), dont PyTorch peut utiliser environ {usable} une fois le contexte CUDA déduit. Cela ne "
        "tient pas avant même la moindre activation : aucune taille de batch n'aide. Entraînez un modèle "
        "plus petit (n_layer, n_embd) ou prenez une carte avec plus de mémoire.",
        "model_states_with_copies_exceed_card": "Les états du modèle remplissent la carte : {params} "
        "paramètres × 16 octets (poids float32, gradients, exp_avg et exp_avg_sq d'AdamW) = {states} ("
        "{states_gb}) ; à eux seuls, ils tiennent dans les {usable} que PyTorch peut utiliser sur cette "
        "carte de {card}, avec {margin} de marge. Avec les copies {dtype} des poids qu'autocast garde "
        "pendant la passe avant et la rétropropagation ({copies}), on atteint {total} : plus que la carte, "
        "avant toute activation. Réduire le batch n'aide pas ; entraînez un modèle plus petit (n_layer, "
        "n_embd) ou prenez une carte avec plus de mémoire.",
        "model_states_info": "États du modèle : {params} paramètres × 16 octets = {states} ({states_gb}), "
        "pour une carte de {card}.",
        "h_links": "À lire ensuite",
    },
}

TENSOR_NAMES: dict[str, dict[str, str]] = {
    "en": {
        "logits": "the (B·T, V) logits",
        "logits_float32": "the float32 copy of the (B·T, V) log-probabilities that cross_entropy makes "
        "under autocast (nll_loss runs in float32)",
        "search_logits": "a (B·T, V) logits buffer",
        "search_logits_float32": "a float32 (B·T, V) buffer (the copy cross_entropy makes under autocast, "
        "or the logits of a float32 run)",
        "residual": "a (B, T, C) activation (residual stream, LayerNorm output)",
        "hidden": "a (B, T, C) activation (attention or MLP output)",
        "qkv": "the (B, T, 3C) q, k, v projection",
        "mlp_hidden": "the (B, T, 4C) MLP hidden activation (c_fc or GELU output)",
        "attention_scores": "the (B, n_head, T, T) attention matrix (only without flash attention: "
        "nanoGPT's manual attention path)",
        "embedding_weight": "the (V, C) token embedding / lm_head weight, its gradient or one of its AdamW "
        "states",
        "embedding_weight_copy": "autocast's copy of the (V, C) token embedding / lm_head weight",
        "mlp_weight": "a (4C, C) MLP weight (c_fc or c_proj), its gradient or an AdamW state",
        "attn_weight": "the (3C, C) c_attn weight, its gradient or an AdamW state",
    },
    "ja": {
        "logits": "(B·T, V) のロジット",
        "logits_float32": "autocast 下で cross_entropy が作る (B·T, V) 対数確率の float32 コピー（nll_loss "
        "は float32 で実行）",
        "search_logits": "(B·T, V) のロジットバッファ",
        "search_logits_float32": "float32 の (B·T, V) バッファ（autocast 下で cross_entropy が作るコピー、ま"
        "たは float32 学習のロジット）",
        "residual": "(B, T, C) の活性化（残差ストリーム、LayerNorm の出力）",
        "hidden": "(B, T, C) の活性化（アテンションまたは MLP の出力）",
        "qkv": "(B, T, 3C) の q, k, v 射影",
        "mlp_hidden": "(B, T, 4C) の MLP 中間活性化（c_fc または GELU の出力）",
        "attention_scores": "(B, n_head, T, T) のアテンション行列（flash attention を使わない nanoGPT の手動"
        "アテンション経路のみ）",
        "embedding_weight": "(V, C) のトークン埋め込み / lm_head の重み、その勾配、または AdamW の状態の一つ",
        "embedding_weight_copy": "(V, C) のトークン埋め込み / lm_head の重みを autocast がコピーしたもの",
        "mlp_weight": "(4C, C) の MLP の重み（c_fc または c_proj）、その勾配、または AdamW の状態",
        "attn_weight": "(3C, C) の c_attn の重み、その勾配、または AdamW の状態",
    },
    "zh": {
        "logits": "(B·T, V) logits",
        "logits_float32": "autocast 下 cross_entropy 生成的 (B·T, V) 对数概率的 float32 副本（nll_loss 以 "
        "float32 运行）",
        "search_logits": "(B·T, V) logits 缓冲区",
        "search_logits_float32": "float32 的 (B·T, V) 缓冲区（autocast 下 cross_entropy 生成的副本，或 "
        "float32 训练的 logits）",
        "residual": "(B, T, C) 激活（残差流、LayerNorm 输出）",
        "hidden": "(B, T, C) 激活（注意力或 MLP 的输出）",
        "qkv": "(B, T, 3C) q、k、v 投影",
        "mlp_hidden": "(B, T, 4C) MLP 中间激活（c_fc 或 GELU 的输出）",
        "attention_scores": "(B, n_head, T, T) 注意力矩阵（仅在不用 flash attention、走 nanoGPT 手写注意力路"
        "径时）",
        "embedding_weight": "(V, C) 词嵌入 / lm_head 权重、其梯度，或它的某个 AdamW 状态",
        "embedding_weight_copy": "autocast 生成的 (V, C) 词嵌入 / lm_head 权重副本",
        "mlp_weight": "(4C, C) MLP 权重（c_fc 或 c_proj）、其梯度或 AdamW 状态",
        "attn_weight": "(3C, C) c_attn 权重、其梯度或 AdamW 状态",
    },
    "de": {
        "logits": "die (B·T, V)-Logits",
        "logits_float32": "die float32-Kopie der (B·T, V)-Log-Wahrscheinlichkeiten, die cross_entropy unter "
        "autocast anlegt (nll_loss rechnet in float32)",
        "search_logits": "ein (B·T, V)-Logits-Puffer",
        "search_logits_float32": "ein (B·T, V)-Puffer in float32 (die Kopie, die cross_entropy unter "
        "autocast anlegt, oder die Logits eines float32-Laufs)",
        "residual": "eine (B, T, C)-Aktivierung (Residualstrom, Ausgabe von LayerNorm)",
        "hidden": "eine (B, T, C)-Aktivierung (Ausgabe von Attention oder MLP)",
        "qkv": "die (B, T, 3C)-Projektion auf q, k, v",
        "mlp_hidden": "die (B, T, 4C)-Zwischenaktivierung des MLP (Ausgabe von c_fc oder GELU)",
        "attention_scores": "die (B, n_head, T, T)-Attention-Matrix (nur ohne Flash Attention, auf nanoGPTs "
        "manuellem Attention-Pfad)",
        "embedding_weight": "das (V, C)-Gewicht von Token-Embedding / lm_head, sein Gradient oder einer "
        "seiner AdamW-Zustände",
        "embedding_weight_copy": "die Kopie des (V, C)-Gewichts von Token-Embedding / lm_head, die autocast "
        "anlegt",
        "mlp_weight": "ein (4C, C)-Gewicht des MLP (c_fc oder c_proj), sein Gradient oder ein AdamW-Zustand",
        "attn_weight": "das (3C, C)-Gewicht c_attn, sein Gradient oder ein AdamW-Zustand",
    },
    "fr": {
        "logits": "les logits (B·T, V)",
        "logits_float32": "la copie float32 des log-probabilités (B·T, V) que cross_entropy crée sous "
        "autocast (nll_loss calcule en float32)",
        "search_logits": "un tampon de logits (B·T, V)",
        "search_logits_float32": "un tampon (B·T, V) en float32 (la copie que crée cross_entropy sous "
        "autocast, ou les logits d'un entraînement en float32)",
        "residual": "une activation (B, T, C) (flux résiduel, sortie de LayerNorm)",
        "hidden": "une activation (B, T, C) (sortie de l'attention ou du MLP)",
        "qkv": "la projection q, k, v (B, T, 3C)",
        "mlp_hidden": "l'activation intermédiaire (B, T, 4C) du MLP (sortie de c_fc ou de GELU)",
        "attention_scores": "la matrice d'attention (B, n_head, T, T) (seulement sans flash attention, sur "
        "le chemin d'attention manuel de nanoGPT)",
        "embedding_weight": "le poids (V, C) de l'embedding des tokens / lm_head, son gradient ou l'un de "
        "ses états AdamW",
        "embedding_weight_copy": "la copie par autocast du poids (V, C) de l'embedding des tokens / lm_head",
        "mlp_weight": "un poids (4C, C) du MLP (c_fc ou c_proj), son gradient ou un état AdamW",
        "attn_weight": "le poids c_attn (3C, C), son gradient ou un état AdamW",
    },
}


# --------------------------------------------------------------------------------------------
# explain: the whole answer as one JSON-ready dict, then the text in a language
# --------------------------------------------------------------------------------------------
@dataclass
class Explanation:
    figures: OOMFigures
    messages_found: int
    context: str | None
    matches: list[dict]
    matched_by: str  # "small", "config" or "search"
    diagnosis: list[str]
    sections: list[tuple[str, str | None]]
    card_bytes: int
    model_states: dict | None = None
    prediction: dict | None = None
    config: dict | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self, lang: str) -> dict:
        out = {
            "format": self.figures.format,
            "messages_found": self.messages_found,
            "context": self.context,
            "figures": self.figures.to_json(),
            "printed": self.figures.printed,
            "matches": self.matches,
            "matched_by": self.matched_by,
            "diagnosis": self.diagnosis,
            "links": [guide_url(p, a, lang) for p, a in self.sections],
            "card_bytes": self.card_bytes,
            "lang": lang,
            "warnings": self.warnings,
        }
        if self.config is not None:
            out["config"] = self.config
            out["model_states"] = self.model_states
        if self.prediction is not None:
            out["prediction"] = self.prediction
        return out


def explain(
    text: str,
    config=None,
    *,
    gpu_memory: int | None = None,
    predict: bool = True,
    source: str = "the input",
    progress=None,
) -> Explanation:
    """Read the OOM message in `text` and explain it (for a nanoGPT `config`, if given)."""
    figs, found = parse_message(text, source)
    context = detect_context(text)
    matches, matched_by = match_request(figs, config)
    card = gpu_memory or figs.capacity
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
    if config is not None:
        result.config = {
            k: config.values[k]
            for k in (
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
        }
        result.config["sources"] = config.sources
        if predict:
            phases = {}
            for phase in memory.PHASES:
                if progress:
                    progress(phase)
                phases[phase] = memory.predict(config, phase, card).to_json()
            result.prediction = {
                "gpu_memory_bytes": card,
                "usable_bytes": memory.usable_bytes(card),
                "phases": phases,
            }
    return result


def _int(n: int, lang: str) -> str:
    return figures.format_figure(n, "int", lang)


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _search_lines(matches: list[dict], lang: str, req: str) -> list[str]:
    """One line per dtype and vocab: its most plausible (batch, block), then the others of the same size.

    A second vocab whose (batch, block) pairs are the same as the first's gets one short line.
    """
    msg, names = MESSAGES[lang], TENSOR_NAMES[lang]
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
            line = msg["search_vocab_too"].format(
                vocab=vocab,
                batch=first["batch_size"],
                block=first["block_size"],
                nbytes=_int(first["bytes"], lang),
            )
            lines.append("    " + line)
            continue
        shown.setdefault(dtype, pairs)
        key = "search_logits" if dtype == SIXTEEN_BIT else "search_logits_float32"
        line = msg["search_group"].format(
            desc=names[key],
            batch=first["batch_size"],
            block=first["block_size"],
            vocab=vocab,
            itemsize=ITEMSIZE[dtype],
            dtype=dtype,
            nbytes=_int(first["bytes"], lang),
            req=req,
        )
        lines.append("  - " + line)
        if len(items) > 1:
            others = ", ".join(f"{b} × {t}" for b, t in pairs[1:])
            lines.append("    " + msg["search_also"].format(pairs=others))
    return lines


def render(result: Explanation, lang: str = "en") -> str:
    msg, names = MESSAGES[lang], TENSOR_NAMES[lang]
    figs = result.figures
    fmt = format_size
    req = figs.printed["requested"]
    lines = [msg["title"].format(gpu=figs.gpu, format=figs.format)]
    if result.messages_found > 1:
        lines.append(msg["several"].format(n=result.messages_found))
    if result.context:
        lines.append(msg[f"context_{result.context}"])
    for note in result.warnings:
        lines.append(f"note: {note}")

    lines += ["", msg["h_figures"]]
    rows = [("requested", req), ("capacity", figs.printed["capacity"]), ("free", figs.printed["free"])]
    if figs.allowed is not None:
        rows.append(("allowed", figs.printed["allowed"]))
    if figs.in_use is not None:
        rows.append(("in_use", figs.printed["in_use"]))
    rows.append(("allocated", figs.printed["allocated"]))
    rows.append(("reserved_unallocated", fmt(figs.reserved_unallocated)))
    if figs.format == "pre-2.1":
        rows.append(("reserved", figs.printed["reserved"]))
    if figs.non_pytorch is not None:
        rows.append(("non_pytorch", fmt(figs.non_pytorch)))
    if figs.other_processes is not None:
        rows.append(("other_processes", fmt(figs.other_processes)))
    else:
        rows.append(("outside_pytorch", fmt(figs.outside_pytorch)))
    sep = (
        "：" if lang == "zh" else " : " if lang == "fr" else ": "
    )  # label separator, as each language writes it
    lines += [f"  {msg[key]}{sep}{value}" for key, value in rows]
    lines += [f"  {msg['process'].format(pid=p['pid'])}{sep}{p['printed']}" for p in figs.processes]

    lines += ["", msg["h_tensor"]]
    if result.matched_by == "small":
        lines.append("  " + msg["small_request"].format(req=req))
    elif result.matched_by == "config":
        lines.append("  " + msg["is_size_of_config"].format(req=req))
        for m in result.matches:
            shape = "(" + ", ".join(str(d) for d in m["shape"]) + ")"
            lines.append(
                "  - "
                + msg["config_match"].format(
                    desc=names[m["tensor"]],
                    shape=shape,
                    dtype=m["dtype"],
                    nbytes=_int(m["bytes"], lang),
                    req=req,
                )
            )
    else:
        if result.config is not None:
            lines.append("  " + msg["config_no_match"].format(req=req))
        if result.matches:
            if result.config is None:
                lines.append("  " + msg["is_size_of"].format(req=req))
            lines += _search_lines(result.matches, lang, req)
        else:
            lines.append("  " + msg["no_match"].format(req=req))
    if result.config is None:
        lines.append("  " + msg["hint_config"])

    if result.prediction is not None:
        p = result.prediction
        lines += [
            "",
            msg["h_prediction"].format(card=fmt(p["gpu_memory_bytes"]), usable=fmt(p["usable_bytes"])),
        ]
        for phase, r in p["phases"].items():
            if r["fits"]:
                lines.append("  " + msg["pred_fits"].format(phase=phase, peak=fmt(r["peak_bytes"])))
            else:
                fail = fmt(r["failing_allocation_bytes"])
                line = msg["pred_no"].format(
                    phase=phase, peak=fmt(r["peak_bytes"]), fail=fail, what=r["failing_allocation"]
                )
                same = msg["pred_same"] if fail == req else msg["pred_diff"].format(req=req)
                lines.append(f"  {line} — {same}")
        if all(r["fits"] for r in p["phases"].values()):
            lines.append("  " + msg["pred_all_fit"])

    lines += ["", msg["h_diagnosis"]]
    s = result.model_states
    values = dict(
        req=req,
        capacity=figs.printed["capacity"],
        free=figs.printed["free"],
        allocated=figs.printed["allocated"],
        unalloc=fmt(figs.reserved_unallocated),
        sum=fmt(figs.free + figs.reserved_unallocated),
        outside=fmt(figs.outside_pytorch),
        other=fmt(figs.other_processes or 0),
        in_use=figs.printed.get("in_use", "?"),
    )
    if s is not None:
        values.update(
            params=_int(s["parameters"], lang),
            states=fmt(s["states_bytes"]),
            states_gb=_gb(s["states_bytes"]),
            card=fmt(s["card_bytes"]),
            card_gb=_gb(s["card_bytes"]),
            usable=fmt(s["usable_bytes"]),
            margin=fmt(max(0, s["usable_bytes"] - s["states_bytes"])),
            dtype=s["dtype"],
            copies=fmt(s["autocast_copies_bytes"]),
            total=fmt(s["states_bytes"] + s["autocast_copies_bytes"]),
        )
    for code in result.diagnosis:
        if code == "other_processes":
            text = msg["other_processes_d" if figs.other_processes is not None else "other_processes_old"]
        elif code == "too_little_memory" and any(c.startswith("model_states") for c in result.diagnosis):
            text = msg["too_little_memory_short"]  # no batch-size advice: the model states are the problem
        else:
            text = msg[code]
        lines.append("  - " + text.format(**values))
        if code == "too_little_memory" and figs.requested > figs.capacity:
            lines.append("    " + msg["too_little_huge"].format(**values))
    if s is not None and not any(c.startswith("model_states") for c in result.diagnosis):
        lines.append("  - " + msg["model_states_info"].format(**values))

    lines += ["", msg["h_links"]]
    lines += [f"  {guide_url(p, a, lang)}" for p, a in result.sections]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------
def _size_arg(text: str) -> int:
    import argparse

    try:
        return memory.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser) -> None:
    parser.add_argument(
        "file",
        nargs="?",
        default="-",
        metavar="FILE",
        help="a file with the message or the whole traceback, or - for stdin (default)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        dest="configs",
        metavar="CONFIG",
        help="the nanoGPT config file of the run (repeatable, applied in order): names the tensor and "
        "predicts each phase",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, like train.py's --key=value (repeatable)",
    )
    parser.add_argument(
        "--gpu-memory",
        type=_size_arg,
        default=None,
        metavar="SIZE",
        help="the card to compare with and predict for (default: the total capacity in the message); "
        "units GiB, GB, MiB, MB",
    )
    parser.add_argument(
        "--lang", choices=LANGS, default="en", help="language of the explanation and the links"
    )
    parser.add_argument(
        "--no-predict",
        action="store_true",
        help="with a config, skip the prediction of each phase (seconds; longer for big models)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def read_input(path: str) -> tuple[str, str]:
    """(text, source name) of a file or stdin; one-line errors."""
    if path == "-":
        if sys.stdin is None:
            raise ExplainError("no input: give a file or pipe the message into stdin")
        if sys.stdin.isatty():
            print("oomguide explain: paste the message, then Ctrl-D", file=sys.stderr)
        return sys.stdin.read(), "stdin"
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ExplainError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise ExplainError(f"{path} is a directory, not a file") from None
    except OSError as exc:
        raise ExplainError(f"cannot read {path}: {exc.strerror or exc}") from None
    return data.decode("utf-8", errors="replace"), path


def run(args) -> int:
    text, source = read_input(args.file)
    config, notes = None, []
    if args.configs or args.set:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = load_config(args.configs, args.set)
        notes = [str(w.message) for w in caught]

    def progress(phase):
        if not args.json and sys.stderr.isatty():
            print(f"oomguide explain: predicting {phase} …", file=sys.stderr, flush=True)

    result = explain(
        text,
        config,
        gpu_memory=args.gpu_memory,
        predict=not args.no_predict,
        source=source,
        progress=progress,
    )
    result.warnings = notes
    if args.json:
        print(json.dumps(result.to_json(args.lang), indent=2, ensure_ascii=False))
    else:
        print(render(result, args.lang))
    return 0


__all__ = [
    "GUIDE_SECTIONS",
    "LANGS",
    "MESSAGES",
    "OOMFigures",
    "Explanation",
    "ExplainError",
    "add_arguments",
    "choose_sections",
    "config_tensors",
    "diagnose",
    "explain",
    "format_size",
    "guide_url",
    "parse_message",
    "render",
    "run",
    "search_logits",
]
