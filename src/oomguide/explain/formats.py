"""The out-of-memory messages PyTorch prints, one parser per format, and the sizes in them.

What it does: finds the last CUDA out-of-memory message in a text (the message alone or a whole
traceback, lines wrapped or not), tells its format, and returns its figures in bytes
(:class:`OOMFigures`), or, for a message that asks for no size, a :class:`NoRequest`. Sizes are
read as PyTorch's ``format_size`` prints them (two decimals, binary units).

The formats, newest first (``FORMATS``; each parser names the PyTorch versions that print it):

- ``2.1+``: ``Tried to allocate X. GPU 0 has a total capacity of T of which F is free. [Process N
  has M memory in use.] Including non-PyTorch memory, this process has P memory in use. Of the
  allocated memory A is allocated by PyTorch, and U is reserved by PyTorch but unallocated.``
  (PyTorch 2.1 and later; some versions spell "capacty"; c10/cuda/CUDACachingAllocator.cpp).
- ``pre-2.1``: ``Tried to allocate X (GPU 0; T total capacity; A already allocated; F free;
  R reserved in total by PyTorch)``, R = A + U (PyTorch 1.4 to 2.0).
- ``1.0-1.3``: ``Tried to allocate X (GPU 0; T total capacity; A already allocated; F free;
  C cached)``: C is reserved but unallocated, not reserved in total (PyTorch 1.0 to 1.3; its
  CUDACachingAllocator.cpp's ``THCCachingAllocator::malloc`` prints amount_cached - amount_allocated).
- ``cudaMallocAsync``: ``Allocation on device 0 would exceed allowed memory. (out of memory)
  Currently allocated : A Requested : X Device limit : T Free (according to CUDA): F PyTorch limit
  (set by user-supplied memory fraction) : L`` (PyTorch 2.0 and later, with
  ``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``; c10/cuda/CUDAMallocAsyncAllocator.cpp).
- ``short``: ``GPU has X total, Y free, Z in use by this process`` (the wording issue 10
  quotes from a report; not found in PyTorch's c10 allocators, so no version is claimed). With a
  "Tried to allocate" before it, it is read like the others; without one it is a :class:`NoRequest`.
- ``CUDA error``: ``CUDA error: out of memory`` (any version; ``cuda runtime error (2) : out of
  memory`` before 1.0): raised outside the caching allocator (context creation, ``model.to(device)``
  while another process holds the card, a library's own cudaMalloc). No figures: a :class:`NoRequest`.

It must never diagnose, match tensors or word anything for the reader (its only sentences are the
one-line :class:`ExplainError` s of unreadable input), and never run a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..units import GiB, MiB, block_size, segment_size


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
SIZE = r"(\d+(?:\.\d+)?\s*(?:bytes|[KMGT]iB))"


def read_size(text: str) -> tuple[int, str]:
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
    return format_size(segment_size(nbytes)) == printed or format_size(block_size(nbytes)) == printed


# --------------------------------------------------------------------------------------------
# what a message says
# --------------------------------------------------------------------------------------------
@dataclass
class OOMFigures:
    format: str  # a label of FORMATS: "2.1+", "pre-2.1", "1.0-1.3", "cudaMallocAsync", "short"
    gpu: int | None
    requested: int
    capacity: int
    free: int
    allocated: int
    reserved: int  # by PyTorch in total (A + U)
    reserved_unallocated: int
    in_use: int | None = None  # this process, non-PyTorch memory included (2.1+, short)
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
        return {
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


@dataclass
class NoRequest:
    """A CUDA out-of-memory message that asks for no size: nothing to match, a cause to check."""

    format: str  # "CUDA error" (CUDA error: out of memory) or "short" (figures, no request)
    gpu: int | None = None
    capacity: int | None = None
    free: int | None = None
    in_use: int | None = None
    printed: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "format": self.format,
            "gpu": self.gpu,
            "requested_bytes": None,
            "capacity_bytes": self.capacity,
            "free_bytes": self.free,
            "in_use_bytes": self.in_use,
        }


# --------------------------------------------------------------------------------------------
# the parsers, one per format
# --------------------------------------------------------------------------------------------
REQUEST = re.compile(r"Tried to allocate " + SIZE, re.I)
_NEW_CAPACITY = re.compile(
    r"GPU (\d+) has a total capac(?:i)?ty of " + SIZE + r" of which " + SIZE + r" is free", re.I
)
_THIS_PROCESS = re.compile(
    r"Including non-PyTorch memory, this process has " + SIZE + r" memory in use", re.I
)
_PROCESS = re.compile(r"Process (\d+) has " + SIZE + r" memory in use", re.I)
_ALLOWED = re.compile(SIZE + r" allowed;", re.I)
_OF_ALLOCATED = re.compile(
    r"Of the allocated memory "
    + SIZE
    + r" is allocated by PyTorch, (?:with "
    + SIZE
    + r" allocated in private pools \(e\.g\., CUDA Graphs\), )?and "
    + SIZE
    + r" is reserved by PyTorch but unallocated",
    re.I,
)
_OLD_GROUP = re.compile(r"\(GPU (\d+); ([^)]*)\)")
_OLD_ITEM = re.compile(
    SIZE + r" (total capacity|already allocated|free|allowed|reserved in total by PyTorch|cached)", re.I
)
SHORT = re.compile(
    r"GPU (?:(\d+) )?has " + SIZE + r" total, " + SIZE + r" free, " + SIZE + r" in use by this process",
    re.I,
)
ASYNC = re.compile(
    r"Allocation on device (\d+) would exceed allowed memory\. \(out of memory\)"
    r" Currently allocated\s*: "
    + SIZE
    + r" Requested\s*: "
    + SIZE
    + r" Device limit\s*: "
    + SIZE
    + r" Free \(according to CUDA\)\s*: "
    + SIZE
    + r"(?: PyTorch limit \(set by user-supplied memory fraction\)\s*: "
    + SIZE
    + r")?",
    re.I,
)
NO_REQUEST = re.compile(r"CUDA error: out of memory|cuda runtime error \(2\) : out of memory", re.I)


class _Reader:
    """Collects sizes in bytes and as printed."""

    def __init__(self, printed: dict[str, str]):
        self.printed = printed

    def __call__(self, name: str, text: str) -> int:
        nbytes, shown = read_size(text)
        self.printed[name] = shown
        return nbytes


def _missing(req_text: str, names: str) -> ExplainError:
    """The request is there, the card's figures `names` are not (the message was cut)."""
    return ExplainError(
        f'found "Tried to allocate {req_text}" but not the card\'s figures ({names}): paste the whole message'
    )


def parse_2_1(window: str, req: int, take: _Reader) -> OOMFigures | None:
    """PyTorch 2.1 and later (c10/cuda/CUDACachingAllocator.cpp, ``DeviceCachingAllocator::malloc``)."""
    new = _NEW_CAPACITY.search(window)
    if not new:
        return None
    req_text = take.printed["requested"]
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
        nbytes, shown = read_size(m.group(2))
        processes.append({"pid": int(m.group(1)), "bytes": nbytes, "printed": shown})
    return OOMFigures(
        "2.1+",
        int(new.group(1)),
        req,
        capacity,
        free,
        allocated,
        allocated + unallocated,  # 'allocated' includes the private pools' allocations
        unallocated,
        in_use=in_use,
        allowed=allowed,
        private_pools=private,
        processes=processes,
        printed=take.printed,
    )


def _parse_group(window: str, req: int, take: _Reader, cached: bool) -> OOMFigures | None:
    req_text = take.printed["requested"]
    old = _OLD_GROUP.search(window[: 40 + len(req_text) + 400])
    if not old:
        return None
    items = {m.group(2).lower(): m.group(1) for m in _OLD_ITEM.finditer(old.group(2))}
    if ("cached" in items) != cached:
        return None
    last = "cached" if cached else "reserved in total by pytorch"
    missing = [k for k in ("total capacity", "already allocated", "free", last) if k not in items]
    if missing:
        raise _missing(req_text, ", ".join(missing))
    capacity = take("capacity", items["total capacity"])
    free = take("free", items["free"])
    allocated = take("allocated", items["already allocated"])
    allowed = take("allowed", items["allowed"]) if "allowed" in items else None
    if cached:  # "cached" is reserved but unallocated: amount_cached - amount_allocated in PyTorch 1.x
        unallocated = take("reserved_unallocated", items["cached"])
        reserved = allocated + unallocated
    else:
        reserved = take("reserved", items[last])
        unallocated = max(0, reserved - allocated)
    return OOMFigures(
        "1.0-1.3" if cached else "pre-2.1",
        int(old.group(1)),
        req,
        capacity,
        free,
        allocated,
        reserved,
        unallocated,
        allowed=allowed,
        printed=take.printed,
    )


def parse_1_4(window: str, req: int, take: _Reader) -> OOMFigures | None:
    """PyTorch 1.4 to 2.0: "... F free; R reserved in total by PyTorch)"."""
    return _parse_group(window, req, take, cached=False)


def parse_1_0(window: str, req: int, take: _Reader) -> OOMFigures | None:
    """PyTorch 1.0 to 1.3: "... F free; C cached)", C reserved but unallocated (THCCachingAllocator)."""
    return _parse_group(window, req, take, cached=True)


def parse_short(window: str, req: int, take: _Reader) -> OOMFigures | None:
    """ "GPU has X total, Y free, Z in use by this process" after a request (versions: see the module)."""
    m = SHORT.search(window[:400])
    if not m:
        return None
    capacity = take("capacity", m.group(2))
    free = take("free", m.group(3))
    in_use = take("in_use", m.group(4))
    # the message does not split this process's memory: count it all as PyTorch's live tensors
    return OOMFigures(
        "short",
        int(m.group(1)) if m.group(1) else None,
        req,
        capacity,
        free,
        in_use,
        in_use,
        0,
        in_use=in_use,
        printed=take.printed,
    )


# (label, versions, parser) for messages with "Tried to allocate", tried in this order
FORMATS: list[tuple[str, str, Callable]] = [
    ("2.1+", "2.1 and later", parse_2_1),
    ("pre-2.1", "1.4 to 2.0", parse_1_4),
    ("1.0-1.3", "1.0 to 1.3", parse_1_0),
    ("short", "not found in PyTorch's sources", parse_short),
]


def _parse_request(window: str) -> OOMFigures:
    """The figures of one message (`window`: whitespace-normalised text from "Tried to allocate" on)."""
    req, req_text = read_size(REQUEST.match(window).group(1))
    take = _Reader({"requested": req_text})
    new = _NEW_CAPACITY.search(window)
    old = _OLD_GROUP.search(window[: 40 + len(req_text) + 400])
    parsers = [p for _, _, p in FORMATS]
    if old and (not new or old.start() < new.start()):  # the parenthesised group comes first
        parsers = [parse_1_4, parse_1_0, parse_2_1, parse_short]
    for parser in parsers:
        figs = parser(window, req, take)
        if figs is not None:
            return figs
    raise _missing(req_text, "total capacity, free")


def parse_async(match: re.Match) -> OOMFigures:
    """PyTorch 2.0 and later with backend:cudaMallocAsync (c10/cuda/CUDAMallocAsyncAllocator.cpp)."""
    take = _Reader({})
    allocated = take("allocated", match.group(2))
    req = take("requested", match.group(3))
    capacity = take("capacity", match.group(4))
    free = take("free", match.group(5))
    limit = read_size(match.group(6))[0] if match.group(6) else None
    allowed = take("allowed", match.group(6)) if limit is not None and limit < capacity else None
    # the pool's cached memory is not in the message: nothing counted as reserved but unallocated
    return OOMFigures(
        "cudaMallocAsync", int(match.group(1)), req, capacity, free, allocated, allocated, 0,
        allowed=allowed, printed=take.printed,
    )  # fmt: skip


def parse_message(text: str, source: str = "the input") -> tuple[OOMFigures | NoRequest, int]:
    """The figures of the last complete OOM message in `text`, and how many messages it holds."""
    if not text.strip():
        raise ExplainError(f"{source} is empty: paste the whole CUDA out-of-memory message or traceback")
    flat = re.sub(r"\s+", " ", text)
    found: list[tuple[int, str, re.Match]] = [(m.start(), "request", m) for m in REQUEST.finditer(flat)]
    found += [(m.start(), "async", m) for m in ASYNC.finditer(flat)]
    requests = len(found)
    if requests:
        error = None
        for start, kind, match in sorted(found, key=lambda f: f[0], reverse=True):
            if kind == "async":
                return parse_async(match), requests
            later = [s for s, _, _ in found if s > start]
            end = min(later) if later else len(flat)
            try:
                return _parse_request(flat[start : min(end, start + 4000)]), requests
            except ExplainError as exc:
                error = error or exc
        raise error
    short = list(SHORT.finditer(flat))
    if short:
        m = short[-1]
        take = _Reader({})
        return NoRequest(
            "short",
            int(m.group(1)) if m.group(1) else None,
            take("capacity", m.group(2)),
            take("free", m.group(3)),
            take("in_use", m.group(4)),
            printed=take.printed,
        ), len(short)
    errors = NO_REQUEST.findall(flat)
    if errors:
        return NoRequest("CUDA error"), len(errors)
    if re.search(r"MPS backend out of memory", flat, re.I):
        raise ExplainError(f"{source} holds an Apple MPS out-of-memory message; oomguide explains CUDA's")
    if re.search(r"out of memory", flat, re.I):
        raise ExplainError(
            f"{source} says 'out of memory' but holds no figures at all (no 'Tried to allocate …', no "
            "card sizes): paste the whole message, from 'CUDA out of memory' to its last line"
        )
    raise ExplainError(f"no CUDA out-of-memory message ('Tried to allocate …') in {source}")


def detect_context(text: str) -> str | None:
    """Where the traceback ran out: 'estimate_loss'; 'resume' (train.py loading its checkpoint:
    ``torch.load``, ``_cuda_deserialize``, ``load_state_dict``); 'generate' (sample.py, ``generate``,
    its checkpoint loaded too); 'first_step' (AdamW creating its state: ``_init_group``);
    'optimizer_step' (the optimizer's ``step``, ``_multi_tensor_adamw``, ``_fused_adamw``);
    'train_step' (backward); 'to_device'."""
    if re.search(r"\bin estimate_loss\b|\bestimate_loss\(", text):
        return "estimate_loss"
    sample = re.search(r"\bsample\.py\b", text) is not None
    loading = r"torch\.load\(|\b_cuda_deserialize\b|\bdefault_restore_location\b|\bload_state_dict\b"
    if re.search(loading, text):
        return "generate" if sample else "resume"
    if sample or re.search(r"\bin generate\b|\.generate\(", text):
        return "generate"
    if re.search(r"\b_init_group\b", text):
        return "first_step"
    if re.search(
        r"\b_multi_tensor_adamw?\b|\b_fused_adamw?\b|\b_single_tensor_adamw?\b|\boptimizer\.step\(|"
        r"\bscaler\.step\(",
        text,
    ):
        return "optimizer_step"
    if re.search(r"\bbackward\b", text):
        return "train_step"
    if re.search(r"\.to\(device\)|\.to\(['\"]cuda|\.cuda\(\)", text):
        return "to_device"
    return None
