"""The allocation tracker: live bytes of every storage the ops create, as CUDA's allocator books them.

A TorchDispatchMode that works on fake and real tensors alike; it sees each new storage and, through
weak references, when it dies. It records the peak, the breakdown at the peak, the largest allocation
and the first allocation over a budget. It never runs model code itself and never imports torch.cuda.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from .allocator import ALLOC, FREE, Trace
from .cuda_model import block_size
from .kernels import BLAS_OPS, blas_thread, cuda_op_name

CATEGORIES = ("weights", "gradients", "optimizer_state", "activations", "logits_and_loss")
KEPT = (
    "weights",
    "optimizer_state",
    "ddp_buckets",
    "workspaces",
)  # registered with these tags: alive throughout


@dataclass
class Allocation:
    nbytes: int
    op: str
    shape: tuple
    dtype: str
    moment: str | None = None  # the tracker's moment when it was made (forward_backward, optimizer_step...)

    def describe(self) -> str:
        return f"{self.op} -> {self.dtype}{list(self.shape)}"


@dataclass
class _Live:
    ref: StorageWeakRef
    nbytes: int
    tag: str
    uid: int = 0
    watch: object = None  # a weak reference to the storage whose callback notes its death


class AllocationTracker(TorchDispatchMode):
    """Live bytes of every storage the ops create, as the CUDA caching allocator would count them.

    ``rounding``: what an allocation of n bytes books (default: CUDA's 512-byte blocks; ``int`` for
    exact bytes, as the CPU allocator). ``budget``: the bytes the allocator may hold; the first allocation beyond it is recorded in
    ``failing`` (the "Tried to allocate" of the OOM message), and tracking goes on to the full peak.
    """

    def __init__(self, vocab_size: int | None = None, budget: int | None = None, rounding=block_size):
        super().__init__()
        self.rounding = rounding  # bytes booked for a storage of n bytes (CUDA's 512-byte blocks)
        self.vocab_size = vocab_size
        self.budget = budget
        self.live: dict[int, _Live] = {}  # storages that may die while tracking: swept
        self.kept: dict[int, _Live] = {}  # registered weights, optimizer state, buckets: never swept
        self.current = 0
        self.peak = 0
        self._peak_breakdown = dict.fromkeys(CATEGORIES, 0)  # the picture at the peak
        # bytes and number of the storages listed (live and kept), by tag: the picture costs no walk
        self._totals: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._grad_keys: list = []  # per grads_of: (weak reference to its last .grad, its storage key)
        self._plain_types: set = set()  # tensor types without a _local_tensor (not DTensor)
        self.largest: Allocation | None = None
        self.failing: Allocation | None = None
        self.allocated_at_failure = 0
        self.grads_of: list[torch.nn.Parameter] = []
        self.weight_keys: set[int] = set()
        self.tag_new = None  # overrides the tag of new storages (e.g. "optimizer_state")
        self.op_new = None  # overrides the op named for new storages (``named``)
        self._unseen: dict = {}  # storages of stand-ins (``stand_in``), never counted
        self.forwards = 0  # model forwards so far (counted by the caller); the failing one is recorded
        self.failing_forward = None
        # the moment of the run the code is in (set by the phase: "forward_backward", "optimizer_step",
        # "torch_load", ...), recorded with the peak and the failing allocation
        self.moment = None
        self.peak_moment = None
        self.failing_moment = None
        self._pending = False  # a peak whose picture is not taken yet
        # the allocator model's input (allocator.Trace): tensors alive before, then allocations and frees
        # in order; keeping that order means settling the frees before every allocation
        self.trace = Trace()
        self._uids = 0
        self._describe_next: Allocation | None = None
        # (key, uid) of the swept storages that died since the last sweep, noted by weakref callbacks
        # (a storage's Python object lives exactly as long as the storage): a sweep looks at those only
        self._died: list[tuple[int, int]] = []
        self._grown = False  # a resize_ grew a storage (``as_judged``)
        # while another tracker's code runs in the same run (``predict``: a later step's optimizer
        # step beside the first one's), this one sees nothing: its own run has no such code
        self.paused = False
        # cuBLAS's workspaces (``kernels.cublas_workspace_bytes``): bytes per thread, and the threads
        # that hold one ("forward", "backward"); 0: not modelled (``workspaces``)
        self.workspace = 0
        self._workspaces: dict[str, torch.Tensor] = {}

    def workspaces(self, nbytes: int, held=(), like: torch.Tensor | None = None) -> None:
        """Model cuBLAS's workspaces of `nbytes` per thread: those of the threads in `held` exist
        already (an earlier phase ran matrix products there), registered now like the weights
        (`like`: a tensor on the device); the others come with the first matrix product of their thread."""
        self.workspace = nbytes
        for thread in held:
            if thread not in self._workspaces and like is not None:
                self._workspaces[thread] = like.new_empty(nbytes, dtype=torch.uint8)
                self.register([self._workspaces[thread]], "workspaces")

    def stand_in(self, make):
        """``make()``'s tensor, whose storage is not the run's (the device never allocates it): not
        counted, nor are its views (autograd detaches what it hands to a backward)."""
        paused, self.paused = self.paused, True
        try:
            t = make()
        finally:
            self.paused = paused
        storage = t.untyped_storage()
        self._unseen = {k: r for k, r in self._unseen.items() if not r.expired()}
        self._unseen[storage._cdata] = StorageWeakRef(storage)
        return t

    @contextmanager
    def named(self, op: str, tag: str | None = None):
        """Storages made in this block are named as made by `op` (the graph op they stand for), and
        tagged `tag` (else as their shape says)."""
        before = self.op_new, self.tag_new
        self.op_new, self.tag_new = op, tag or self.tag_new
        try:
            yield
        finally:
            self.op_new, self.tag_new = before

    # storages that exist before tracking starts
    def register(self, tensors, tag: str) -> None:
        for t in _plain(tensors):
            before = self.current
            key = self._add(t, tag, kept=tag in KEPT, pre=True)
            added = self.current - before
            if self.budget is not None and self.failing is None and added > 0 and self.current > self.budget:
                # the state itself does not fit (weights, AdamW state): the failure is here, within
                # the budget, not at the next op with more than the budget "already allocated"
                dtype = str(t.dtype).replace("torch.", "")
                self.failing = Allocation(added, tag, tuple(t.shape), dtype)
                self.allocated_at_failure = before
                self.failing_moment = self.moment
            if tag == "weights" and key is not None:
                self.weight_keys.add(key)

    def _entry(self, key: int):
        return self.live.get(key) or self.kept.get(key)

    def _add(self, t: torch.Tensor, tag: str, kept: bool = False, pre: bool = False):
        storage = t.untyped_storage()
        ref = StorageWeakRef(storage)
        entry = self._entry(ref.cdata)
        if entry is not None:
            if not entry.ref.expired():
                return None
            self._drop(self.live if ref.cdata in self.live else self.kept, ref.cdata)  # address reused
        raw = storage.nbytes()
        nbytes = self.rounding(raw) if raw else 0
        self._uids += 1
        entry = _Live(ref, nbytes, tag, self._uids)
        if kept:
            self.kept[ref.cdata] = entry
        else:
            entry.watch = weakref.ref(storage, _Death(self._died, ref.cdata, self._uids))
            self.live[ref.cdata] = entry
        self.current += nbytes
        self._totals[tag] = self._totals.get(tag, 0) + nbytes
        self._counts[tag] = self._counts.get(tag, 0) + 1
        if raw:  # a CUDA storage of 0 bytes takes no block
            what, self._describe_next = self._describe_next, None
            if pre:
                self.trace.pre.append((self._uids, raw, tag))
            else:
                self.trace.events.append((ALLOC, self._uids, raw, what))
        elif not pre:
            self.trace.checks.append(len(self.trace.events))  # the tracker's peak is checked here too
        return ref.cdata

    def _drop(self, owner: dict, key: int) -> None:
        entry = owner.pop(key)
        self.current -= entry.nbytes
        self._totals[entry.tag] -= entry.nbytes
        self._counts[entry.tag] -= 1
        if entry.nbytes:
            self.trace.events.append((FREE, entry.uid, 0, None))

    def __enter__(self):
        # FSDP2 frees and re-allocates its gathered parameters with UntypedStorage.resize_, which no
        # dispatch mode sees: follow it while tracking, as torch's MemTracker does
        self._resize = torch.UntypedStorage.resize_
        tracker = self

        def resize_(storage, size):
            out = tracker._resize(storage, size)
            if not tracker.paused:
                tracker._resized(storage)
            return out

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._resize
        if self._pending:
            self._snapshot()
        self._sweep()  # what died after the last op is freed too (the next trace starts from here)
        return super().__exit__(*exc)

    def _resized(self, storage) -> None:
        entry = self._entry(storage._cdata)
        if entry is None or entry.ref.expired():
            return
        nbytes = self.rounding(storage.nbytes()) if storage.nbytes() else 0
        grown = nbytes - entry.nbytes
        if grown > 0:
            # settled before the new block, as in __torch_dispatch__: the trace's order of frees and
            # allocations is then the same at every batch size (``batches`` derives from it);
            # ``as_judged`` gives the order the verdict is judged on
            self._sweep(growth=True)
        if grown < 0 and self._pending:
            self._snapshot()
        if (
            grown > 0
            and self.budget is not None
            and self.failing is None
            and self.current + grown > self.budget
        ):
            self.failing = Allocation(grown, "resize_", (storage.nbytes(),), "bytes")
            self.allocated_at_failure = self.current
            self.failing_moment = self.moment
        if grown:  # the allocator sees a resize as a free and a new block
            if entry.nbytes:
                self.trace.events.append((FREE, entry.uid, 0, None))
            if nbytes:
                self.trace.events.append((ALLOC, entry.uid, storage.nbytes(), "resize_"))
        entry.nbytes = nbytes
        self._totals[entry.tag] += grown
        self.current += grown
        if self.current > self.peak:
            self._record_peak()

    def _sweep(self, growth: bool = False) -> None:
        """Free the swept storages that died since the last sweep, in the order they were allocated
        (`growth`: before a resize_ that grows a storage; noted in the trace's ``sweeps``)."""
        start = len(self.trace.events)
        if self._died:
            died, self._died[:] = sorted(self._died, key=lambda d: d[1]), []
            dead = [k for k, uid in died if (e := self.live.get(k)) is not None and e.uid == uid]
            if dead and self._pending:
                self._snapshot()  # the storages still listed were alive at the peak: take its picture now
            for k in dead:
                self._drop(self.live, k)
        freed = len(self.trace.events) - start
        self._grown = self._grown or growth
        if freed or self._grown:  # after a resize grew, every sweep: one may settle what it held back
            self.trace.sweeps.append((start, freed, growth))

    def _tag(self, func, t: torch.Tensor, args) -> str:
        if self.tag_new:
            return self.tag_new
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
            for source in _plain([args[0]]):
                if source.untyped_storage()._cdata in self.weight_keys:
                    return "weights"  # autocast's low-precision copy of a weight
        if (
            self.vocab_size
            and t.dim() >= 2
            and t.shape[-1] == self.vocab_size
            and t.shape[0] != self.vocab_size
        ):
            return "logits_and_loss"
        return "activations"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        for t in _plain(tree_flatten(out)[0]):
            storage = t.untyped_storage()
            entry = self._entry(storage._cdata)
            if entry is not None and not entry.ref.expired():
                continue  # a view, or an in-place result
            unseen = self._unseen.get(storage._cdata)
            if unseen is not None and not unseen.expired():
                continue  # a view of a stand-in
            nbytes = self.rounding(storage.nbytes())
            # frees happen between ops: settle them before the new block (the allocator replay needs
            # their order; the peak and the budget alone would need them only when it could cross either)
            self._sweep()
            # named as the op CUDA runs: a CPU kernel may stand for it (kernels.cuda_names)
            op = self.op_new or cuda_op_name(str(func.overloadpacket.__name__))
            alloc = Allocation(nbytes, op, tuple(t.shape), str(t.dtype).replace("torch.", ""), self.moment)
            if self.budget is not None and self.failing is None and self.current + nbytes > self.budget:
                self.failing = alloc
                self.allocated_at_failure = self.current
                self.failing_moment = self.moment
                in_forward = self.moment in (None, "forward_backward", "generate")
                self.failing_forward = (self.forwards or None) if in_forward else None
            self._describe_next = alloc
            self._add(t, self._tag(func, t, args))
            if self.largest is None or nbytes > self.largest.nbytes:
                self.largest = alloc
            if self.current > self.peak:
                self._record_peak()
        if self.workspace and func.overloadpacket.__name__ in BLAS_OPS:
            self._blas_workspace(func, args)
        return out

    def _blas_workspace(self, func, args) -> None:
        """The first matrix product of a thread: its cuBLAS handle's workspace, kept from then on."""
        thread = blas_thread()
        if thread in self._workspaces:
            return
        like = next(t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor))
        workspace = like.new_empty(self.workspace, dtype=torch.uint8)
        self._workspaces[thread] = workspace
        self._sweep()
        # named by the matrix product that takes it (an op the card runs), as its other allocations are
        op = cuda_op_name(str(func.overloadpacket.__name__))
        alloc = Allocation(self.workspace, op, (self.workspace,), "uint8", self.moment)
        if self.budget is not None and self.failing is None and self.current + self.workspace > self.budget:
            self.failing = alloc
            self.allocated_at_failure = self.current
            self.failing_moment = self.moment
        self._describe_next = alloc
        self._add(workspace, "workspaces", kept=True)
        if self.current > self.peak:
            self._record_peak()

    def _record_peak(self) -> None:
        """A new peak. Its picture (what was alive, which were gradients) is taken lazily: until the
        next sweep finds a dead storage, nothing has been freed since, so the state is still the peak's."""
        self.peak = self.current
        self.peak_moment = self.moment
        self._pending = True

    def _snapshot(self) -> None:
        """The breakdown now: bytes by tag, the storages that are some parameter's .grad as gradients."""
        self._pending = False
        keys = set()
        if len(self._grad_keys) != len(self.grads_of):
            self._grad_keys = [(None, 0)] * len(self.grads_of)
        for i, p in enumerate(self.grads_of):
            grad = p.grad
            if grad is None:
                continue
            if type(grad) not in self._plain_types:
                local = getattr(grad, "_local_tensor", None)  # FSDP2: the DTensor's shard
                if local is None:
                    self._plain_types.add(type(grad))
                else:
                    grad = local
            # the key of the same tensor as last time is known (weakly held: a gradient's life is its own)
            seen, key = self._grad_keys[i]
            if seen is None or seen() is not grad:
                key = grad.untyped_storage()._cdata
                self._grad_keys[i] = (weakref.ref(grad), key)
            keys.add(key)
        moved: dict[str, int] = {}  # bytes of gradients, by the tag they were listed with
        moved_count: dict[str, int] = {}
        for key in keys:
            entry = self._entry(key)
            if entry is not None:
                moved[entry.tag] = moved.get(entry.tag, 0) + entry.nbytes
                moved_count[entry.tag] = moved_count.get(entry.tag, 0) + 1
        # a strategy's own tags (ddp_buckets) follow the categories, where some storage keeps them
        extra = [t for t, n in self._counts.items() if t not in CATEGORIES and n > moved_count.get(t, 0)]
        if len(extra) > 1:  # their order is the order the storages were listed in: walk them
            self._peak_breakdown = self._walk(keys)
            return
        out = dict.fromkeys(CATEGORIES, 0)
        for tag in (*CATEGORIES, *extra):
            out[tag] = self._totals.get(tag, 0) - moved.get(tag, 0)
        out["gradients"] += sum(moved.values())
        self._peak_breakdown = out

    def _walk(self, grad_keys: set) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for d in (self.live, self.kept):
            for key, entry in d.items():
                name = "gradients" if key in grad_keys else entry.tag
                out[name] = out.get(name, 0) + entry.nbytes
        return out

    def breakdown(self) -> dict[str, int]:
        if self._pending:
            self._snapshot()
        return dict(self._peak_breakdown)


class _Death:
    """The callback of a storage's weak reference: notes (key, uid) when the storage dies.

    Holds no reference to the tracker or its entries, so that no reference cycle waits for the
    garbage collector (whose timing would otherwise move with the tracker's own objects)."""

    __slots__ = ("died", "key", "uid")

    def __init__(self, died: list, key: int, uid: int):
        self.died, self.key, self.uid = died, key, uid

    def __call__(self, _ref) -> None:
        self.died.append((self.key, self.uid))


def _plain(tensors):
    """The tensors that own storage: a DTensor (FSDP2's sharded parameter) stands for its local shard."""
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        if is_traceable_wrapper_subclass(t):
            names, _ = t.__tensor_flatten__()
            yield from _plain(getattr(t, n) for n in names)
        else:
            yield t


def as_judged(trace: Trace, budget: int | None, rounding=block_size) -> Trace:
    """`trace` in the order the verdict and the reserved figures are judged on: the frees settled
    before a ``resize_`` that grows a storage (FSDP2 gathering a Block's parameters) held back, as
    the tracker has always booked them, until the next op's allocation, unless that resize could
    make a new peak or cross `budget` (the tracker's ``budget``). Which ones are held back depends
    on the sizes, so the tracker records every free where it happens (the same order at every batch
    size: ``batches`` derives probes from it) and this gives the booked order back, exactly."""
    if not any(growth for _, _, growth in trace.sweeps):
        return trace  # no resize_ grew a storage: nothing was held back
    sweeps: dict[int, list] = {}
    for start, freed, growth in trace.sweeps:
        sweeps.setdefault(start, []).append((freed, growth))
    checks: dict[int, int] = {}
    for at in trace.checks:
        checks[at] = checks.get(at, 0) + 1
    events = trace.events
    booked, current, peak, failing = {}, 0, 0, False
    for uid, nbytes, _what in trace.pre:
        booked[uid] = rounding(nbytes)
        current += booked[uid]
        if budget is not None and booked[uid] and current > budget:
            failing = True
    out, held, new_checks = [], [], []
    held_bytes = 0

    def settle(frees):  # a sweep: what was held back and its own frees, in the order allocated
        nonlocal held, held_bytes
        out.extend(sorted(held + frees, key=lambda e: e[1]))
        held, held_bytes = [], 0

    def crosses(nbytes: int) -> bool:
        return budget is not None and not failing and current + nbytes > budget

    i = 0
    while i <= len(events):
        for _ in range(checks.pop(i, 0)):  # a storage of 0 bytes: an op's allocation, swept before
            settle([])
            new_checks.append(len(out))
            failing = failing or crosses(rounding(0))
            peak = max(peak, current)
        if i == len(events):
            break
        if i in sweeps:
            for freed, growth in sweeps.pop(i):
                frees = events[i : i + freed]
                if growth:
                    at = i + freed
                    kind, uid, nbytes, _what = events[at]
                    if kind != ALLOC:  # the storage's own free, then its new size
                        nbytes = events[at + 1][2]
                    lazy = current + held_bytes
                    grown = rounding(nbytes) - booked.get(uid, 0)
                    keep = not (
                        lazy + grown > peak or (budget is not None and not failing and lazy + grown > budget)
                    )
                for _kind, uid, _n, _what in frees:
                    size = booked.pop(uid, 0)
                    current -= size
                    if growth and keep:
                        held_bytes += size
                if growth and keep:
                    held = held + list(frees)
                else:
                    settle(list(frees))
                i += freed
            continue
        kind, uid, nbytes, what = events[i]
        if kind == ALLOC:
            if what != "resize_":
                settle([])  # an op's allocation: swept before
            size = rounding(nbytes)
            failing = failing or crosses(size)
            booked[uid] = size
            current += size
            peak = max(peak, current)
        else:
            current -= booked.pop(uid, 0)
        out.append(events[i])
        i += 1
    settle([])  # the tracker's exit sweeps last
    return Trace(pre=trace.pre, events=out, checks=new_checks)
