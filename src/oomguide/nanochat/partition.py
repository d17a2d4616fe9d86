"""What nanochat's compiled training step keeps for its backward: AOTAutograd's own partition.

``torch.compile(model)`` (base_train.py, chat_sft.py) runs the forward and the backward as two
graphs. Which activations live from the forward to the backward is decided by AOTAutograd's
min-cut partitioner (``min_cut_rematerialization_partition``, as Inductor calls it, with Inductor's
decompositions): it saves the outputs of the ops it will not recompute (matrix products,
attention, reductions) and recomputes cheap pointwise results in the backward instead of keeping
them. Eager autograd keeps every op's saved tensors, which for nanochat's Blocks (rms_norm, rotary,
QK norm, relu²) is a quarter to a third more than the compiled step measured on an H100.

Method, not a rule: ``saved_storages`` runs that partitioner itself on nanochat's own GPT, on fake
tensors of the phase's shapes (no values, no compilation: the forward graph's saved outputs are
read, then the graphs are run on fake tensors), and returns each storage the compiled forward
saves, in the order the forward creates them. ``CompiledSaved`` puts those storages in place of
eager autograd's saved tensors on the tracked eager run: a saved activation no longer keeps its
storage alive (it is freed when the forward drops it, as in the compiled forward), the partition's
storages are allocated when the forward ends and freed through the backward, from the last-created
on, in step with the backward's progress through eager's saved tensors (the compiled backward frees
each after its last use; the order is the modelled part). Weights, buffers and optimizer state
are kept as they are. Not modelled: Inductor's buffer reuse inside a graph, and its fusion of the
forward's transient buffers (the forward is not where the training step peaks).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache, partial
from pathlib import Path

import torch

_CACHE: dict = {}
CACHE_ENV = "OOMGUIDE_CACHE_DIR"  # where traced partitions are kept between runs; set empty: never
_RECENT = 8  # the partition's storages a backward kernel may read: the last-made ones


def saved_for_batch(model: torch.nn.Module, tokens, batch: int, key, stored=None) -> list[tuple]:
    """``saved_storages`` of ``model(x, y)`` with `batch` rows (``tokens(rows)`` makes x and y).

    Traced at 2 and 4 rows: when both partitions keep the same storages in the same order (the
    same ops, dtypes and tags, each storage's every dimension the same or twice as large), the
    partition is taken to be the same at every batch of 2 rows or more, each storage growing with
    the rows as it did from 2 to 4 (``tests/test_partition.py`` traces batches directly and
    compares); else, and at 1 row (where PyTorch may drop the batch's dimension), it is traced at
    `batch` itself. Two traces per model then serve a whole search over the device batch.
    `stored`: what makes the trace the same in another process (``stored_key``), to keep it on disk."""

    def traced(rows):
        return saved_storages(
            model, tokens(rows), key=(key, rows), stored=None if stored is None else [stored, rows]
        )

    if batch in (1, 2, 4):
        return traced(batch)
    scaled = _scaled(traced(2), traced(4), batch)
    return scaled if scaled is not None else traced(batch)


def _scaled(two: list, four: list, batch: int) -> list | None:
    """The storages at `batch` rows from those at 2 and 4, or None when the partitions differ."""
    if len(two) != len(four):
        return None
    out = []
    for (_n2, op2, shape2, dtype2, tag2), (_n4, op4, shape4, dtype4, tag4) in zip(two, four):
        if (op2, dtype2, tag2, len(shape2)) != (op4, dtype4, tag4, len(shape4)):
            return None
        if any(b not in (a, 2 * a) or (b == 2 * a and a % 2) for a, b in zip(shape2, shape4)):
            return None
        shape = tuple(a // 2 * batch if b == 2 * a else a for a, b in zip(shape2, shape4))
        size = dtype2.itemsize
        for d in shape:
            size *= d
        out.append((size, op2, shape, dtype2, tag2))
    return out


def saved_storages(model: torch.nn.Module, inputs: tuple, key=None, stored=None) -> list[tuple]:
    """(bytes, op, shape, dtype, tag) of each storage the compiled forward of ``model(*inputs)`` saves for
    its backward, in creation order: not the parameters', the buffers' or the inputs'. Runs under the
    caller's FakeTensorMode; `key` caches the answer in this process (same code, config and shapes: same
    partition), `stored` (JSON: the checkout's code, the model, the shapes) on disk (``_cache_file``)."""
    if key is not None and key in _CACHE:
        return _CACHE[key]
    found = _load(stored)
    if found is None:
        found = _trace(model, inputs)
        _store(stored, found)
    if key is not None:
        _CACHE[key] = found
    return found


def _trace(model: torch.nn.Module, inputs: tuple) -> list[tuple]:
    from functorch.compile import aot_function, min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    values = [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]
    graphs: dict = {}

    def forward_compiler(gm, _inputs):
        graphs["forward"] = gm
        return gm

    def whole(*args):
        state = dict(zip(names, args[: len(names)]))
        return torch.func.functional_call(model, state, args[len(names) :])

    traced = aot_function(
        whole,
        fw_compiler=forward_compiler,
        bw_compiler=lambda gm, _inputs: gm,
        partition_fn=partial(min_cut_rematerialization_partition, compiler="inductor"),
        decompositions=select_decomp_table(),
    )
    traced(*values, *inputs)
    return _storages(graphs["forward"])


def stored_key(checkout: Path, compute_dtype: torch.dtype, model: dict, seq_len: int) -> list:
    """What a trace depends on besides oomguide and PyTorch: the checkout's code, the model and the shapes."""
    return [_checkout_digest(str(checkout)), str(compute_dtype), model, seq_len]


@cache
def _checkout_digest(checkout: str) -> str:
    from .cases import checkout_digest

    return checkout_digest(Path(checkout))


@cache
def _own_digest() -> str:
    """oomguide's code and PyTorch's version, as the cached predictions are keyed (``reports._engine_digest``):
    a trace kept on disk is only read back by the same code."""
    from ..reports import _engine_digest

    return _engine_digest()


def _cache_file(stored) -> Path | None:
    """``$OOMGUIDE_CACHE_DIR`` (empty: no disk cache), else ``$XDG_CACHE_HOME/oomguide`` or
    ``~/.cache/oomguide``; one file per trace, named by its key's hash."""
    if stored is None:
        return None
    folder = os.environ.get(CACHE_ENV)
    if folder == "":
        return None
    root = Path(folder) if folder else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "oomguide"
    name = hashlib.sha256(json.dumps([_own_digest(), stored]).encode()).hexdigest()[:24]
    return root / "partitions" / f"{name}.json"


def _load(stored) -> list[tuple] | None:
    path = _cache_file(stored)
    try:
        rows = json.loads(path.read_text()) if path is not None and path.is_file() else None
    except (OSError, ValueError):
        return None  # unreadable: traced again
    if rows is None:
        return None
    return [(n, op, tuple(shape), getattr(torch, dtype), tag) for n, op, shape, dtype, tag in rows]


def _store(stored, found: list[tuple]) -> None:
    path = _cache_file(stored)
    if path is None:
        return
    rows = [[n, op, list(shape), str(dtype).removeprefix("torch."), tag] for n, op, shape, dtype, tag in found]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial_file = path.with_suffix(f".{os.getpid()}.tmp")
        partial_file.write_text(json.dumps(rows))
        os.replace(partial_file, path)  # whole or not at all, for processes reading it meanwhile
    except OSError:
        pass  # a read-only home: traced again next time


def _is_weight_copy(node) -> bool:
    """A cast of a graph input (nanochat's ``Linear``: the fp32 weight in the activations' dtype)."""
    name = str(getattr(node.target, "__name__", node.target))
    source = node.args[0] if node.args else None
    return ("convert_element_type" in name or "_to_copy" in name) and getattr(source, "op", None) == "placeholder"


def _storages(forward) -> list[tuple]:
    """The storages of the forward graph's saved outputs (every output after the model's own)."""
    nodes = list(forward.graph.nodes)
    given = {
        n.meta["val"].untyped_storage()._cdata
        for n in nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    }
    outputs = next(n for n in nodes if n.op == "output").args[0]
    made: dict[int, int] = {}  # storage -> the index of the node that made it (a view's base)
    for i, n in enumerate(nodes):
        value = n.meta.get("val") if n.op != "output" else None
        if isinstance(value, torch.Tensor):
            made.setdefault(value.untyped_storage()._cdata, i)
    found: dict[int, tuple] = {}
    for node in outputs[1:]:  # the loss first, then what the backward reads
        value = getattr(node, "meta", {}).get("val")
        if not isinstance(value, torch.Tensor):
            continue
        storage = value.untyped_storage()
        if storage._cdata in given or storage._cdata in found or not storage.nbytes():
            continue
        shape = tuple(value.shape) if value.numel() * value.element_size() == storage.nbytes() else (
            storage.nbytes() // value.element_size(),
        )
        op = str(getattr(node.target, "__name__", node.target)).split(".")[0]
        maker = nodes[made[storage._cdata]]
        tag = "weights" if _is_weight_copy(maker) else None  # None: as its shape says
        found[storage._cdata] = (made[storage._cdata], (storage.nbytes(), op, shape, value.dtype, tag))
    return [entry for _, entry in sorted(found.values(), key=lambda e: e[0])]


class CompiledSaved:
    """On the tracked eager run: eager autograd's saved activations replaced by the partition's.

    ``pack``/``unpack`` are ``torch.autograd.graph.saved_tensors_hooks``: a tensor whose storage the
    tracker keeps (weights, buffers, optimizer state) is saved as it is; any other is saved as its
    shape alone, and in the backward an untracked stand-in of that shape is handed to the op (the
    compiled backward reads the partition's storages or recomputes it in the same kernel).
    ``forward_done`` allocates the partition's storages; ``backward_done`` frees what is left."""

    def __init__(self, tracker, storages):
        self.tracker = tracker
        self.storages = storages
        self.total = sum(s[0] for s in storages)
        self.held: list = []
        self.released = 0
        self.dropped = 0  # bytes of eager's saved activations in this forward
        self.consumed = 0  # of those, read by the backward so far

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def pack(self, t):
        if not isinstance(t, torch.Tensor) or t.untyped_storage()._cdata in self.tracker.kept:
            return t
        nbytes = t.numel() * t.element_size()
        self.dropped += nbytes
        return (tuple(t.shape), tuple(t.stride()), t.dtype, nbytes)

    def unpack(self, saved):
        if isinstance(saved, torch.Tensor):
            return saved
        shape, stride, dtype, nbytes = saved
        stand_in = self.tracker.stand_in(lambda: torch.empty_strided(shape, stride, dtype=dtype))
        self.consumed += nbytes
        self._release(nbytes)
        return stand_in

    def forward_done(self, like: torch.Tensor) -> None:
        """The compiled forward's end: its saved storages exist, in the order it made them."""
        for _nbytes, op, shape, dtype, tag in self.storages:
            with self.tracker.named(op, tag):
                self.held.append(like.new_empty(shape, dtype=dtype))
        self.released = 0

    def _release(self, nbytes: int = 0) -> None:
        for i in range(len(self.held) - 1, max(len(self.held) - _RECENT, 0) - 1, -1):
            if self.held[i].untyped_storage().nbytes() == nbytes:
                # the partition's storage that stands for it, read for the last time: the compiled
                # backward writes its result into it (a donated buffer) or frees it first
                self.released += self.held.pop(i).untyped_storage().nbytes()
                break
        target = self.total * self.consumed / self.dropped if self.dropped else self.total
        while self.held and self.released + self.held[-1].untyped_storage().nbytes() <= target:
            self.released += self.held.pop().untyped_storage().nbytes()

    def backward_done(self) -> None:
        self.held.clear()
        self.dropped = self.consumed = self.released = 0
