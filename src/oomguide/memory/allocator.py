"""PyTorch's CUDA caching allocator, replayed on a sequence of allocations and frees.

The allocated bytes of a phase say what the tensors need; the *reserved* bytes (whole segments that
the allocator got from ``cudaMalloc``) say whether the phase runs: a card runs out when a new segment
cannot be had, whatever is free inside the segments already held. This module replays the tracker's
allocation/free events through the rules of ``DeviceCachingAllocator`` in PyTorch's
``c10/cuda/CUDACachingAllocator.cpp`` (one device, one stream), under the settings that
``alloc_conf`` reads from ``PYTORCH_CUDA_ALLOC_CONF``. The rules, by name in that source:

- ``round_size``: requests are rounded up to 512 bytes (``kMinBlockSize``), or to a power-of-two
  division when ``roundup_power2_divisions`` asks for it;
- ``get_pool``: up to 1 MiB (``kSmallSize``) from the small pool, above it from the large pool;
- ``get_allocation_size``: a new segment is 2 MiB (``kSmallBuffer``) for small requests, 20 MiB
  (``kLargeBuffer``, ``large_segment_size_mb``) for requests under 10 MiB (``kMinLargeAlloc``), else
  the request rounded up to 2 MiB (``kRoundLarge``);
- ``get_free_block``: the smallest cached block that is large enough (best fit, lowest address on
  ties); a request under ``max_split_size`` never takes an oversize block, and an oversize request
  takes a block at most ``max_non_split_rounding_mb`` (20 MiB) larger than itself;
- ``should_split``: the rest of a block becomes a free block if it is at least 512 bytes (small pool,
  or expandable segments) or, in the large pool, more than 1 MiB and the request under
  ``max_split_size``; ``free_block``/``try_merge_blocks``: a freed block merges with free neighbours;
- ``malloc``: no cached block → ``alloc_block`` (cudaMalloc); if that fails,
  ``release_available_cached_blocks`` (oversize blocks, only with ``max_split_size_mb``) and retry,
  then ``release_cached_blocks`` (every cached segment with nothing allocated in it) and retry; then
  the OOM error, whose "Tried to allocate" is the segment size;
- ``expandable_segments:True``: one segment per pool whose mapped size grows by pages of 2 MiB
  (small) or 20 MiB (large) (``try_allocate_expandable_block``, ``map_block``), and on a failed
  allocation gives back the wholly free pages of every free block (``unmap_block``).

Not modelled: several streams, CUDA graphs' private pools, ``garbage_collection_threshold`` (it only
acts under a memory fraction), ``backend:cudaMallocAsync`` (a different allocator, modelled as the
native one), memory taken outside the allocator (cuBLAS/cuDNN workspaces come through it in recent
PyTorch, but the tracker does not see them).

Pure arithmetic: never imports torch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .alloc_conf import (  # noqa: F401 (the setting's parser and names, re-exported for callers)
    ENV_VARS,
    KNOWN_KEYS,
    LARGE_BUFFER,
    MIN_BLOCK_SIZE,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
    ROUNDUP_INTERVALS,
    SMALL_BUFFER,
    SMALL_SIZE,
    AllocConf,
    AllocConfError,
    MiB,
    _power_of_two,
    alloc_conf_from_env,
    parse_alloc_conf,
    with_expandable_segments,
)


# --- the allocator ---------------------------------------------------------------------------
class AllocatorOOM(Exception):
    """The allocation that the caching allocator could not serve (PyTorch's OutOfMemoryError)."""

    def __init__(self, request: int, alloc_size: int, allocated: int, reserved: int):
        self.request, self.alloc_size, self.allocated, self.reserved = (
            request,
            alloc_size,
            allocated,
            reserved,
        )
        super().__init__(
            f"Tried to allocate {alloc_size} bytes with {allocated} allocated and {reserved} reserved"
        )


@dataclass(eq=False, slots=True)
class _Segment:
    base: int
    size: int  # cudaMalloc'ed size, or the address space of an expandable segment
    page: int = 0  # expandable segments: the mapping granularity


@dataclass(eq=False, slots=True)
class Block:
    pool: _Pool
    segment: _Segment
    addr: int
    size: int
    allocated: bool = False
    mapped: bool = True
    prev: Block | None = None
    next: Block | None = None
    requested: int = 0

    @property
    def expandable(self) -> bool:
        return self.segment.page > 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


@dataclass(eq=False)
class _Pool:
    small: bool
    free: list = field(default_factory=list)  # sorted (size, addr) of cached blocks
    blocks: dict = field(default_factory=dict)  # (size, addr) -> Block
    unmapped: list = field(default_factory=list)  # expandable: unmapped blocks, by address

    def insert(self, b: Block) -> None:
        key = (b.size, b.addr)
        bisect.insort(self.free, key)
        self.blocks[key] = b

    def remove(self, b: Block) -> None:
        key = (b.size, b.addr)
        del self.free[bisect.bisect_left(self.free, key)]
        del self.blocks[key]

    def add_unmapped(self, b: Block) -> None:
        keys = [u.addr for u in self.unmapped]
        self.unmapped.insert(bisect.bisect_left(keys, b.addr), b)

    def drop_unmapped(self, b: Block) -> None:
        self.unmapped.remove(b)


class CachingAllocator:
    """One device's DeviceCachingAllocator, on one stream.

    `limit`: the bytes the allocator can reserve (the card's memory less the CUDA context), or None.
    `fraction`: the limit is ``set_per_process_memory_fraction``'s cap (checked before cudaMalloc
    against the whole new segment) rather than the card running out (an expandable segment then only
    fails when the pages it must map do not fit).
    """

    def __init__(self, conf: AllocConf | None = None, limit: int | None = None, fraction: bool = False):
        self.conf = conf or AllocConf()
        self.limit = limit
        self.fraction = fraction
        self.small, self.large = _Pool(True), _Pool(False)
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.num_alloc_retries = self.num_device_alloc = self.num_device_free = 0
        self._next_base = 1 << 40
        self._expandable: dict[bool, list[_Segment]] = {True: [], False: []}

    # sizes
    def round_size(self, size: int) -> int:
        """round_size: at least 512 bytes, a multiple of 512, or the next power-of-two division."""
        if size < MIN_BLOCK_SIZE:
            return MIN_BLOCK_SIZE
        divisions = self.conf.roundup_power2_divisions[
            min(max(size.bit_length() - 1 - 20, 0), ROUNDUP_INTERVALS - 1)
        ]
        if divisions > 1 and size > MIN_BLOCK_SIZE * divisions:
            return _roundup_power2_next_division(size, divisions)
        return -(-size // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE

    def allocation_size(self, size: int) -> int:
        """get_allocation_size: the segment cudaMalloc is asked for (the OOM's "Tried to allocate")."""
        if size <= SMALL_SIZE:
            return SMALL_BUFFER
        if size < MIN_LARGE_ALLOC:
            return self.conf.large_segment_size
        return -(-size // ROUND_LARGE) * ROUND_LARGE

    def reset_peak(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    # malloc / free
    def malloc(self, nbytes: int) -> Block:
        size = self.round_size(nbytes)
        pool = self.small if size <= SMALL_SIZE else self.large
        alloc_size = self.allocation_size(size)
        block = self._get_free_block(pool, size)
        if block is None:
            block = self._alloc_block(pool, size, alloc_size)
            if block is None and self._release_available_cached_blocks(pool, size):
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                self._release_cached_blocks()
                self.num_alloc_retries += 1
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                raise AllocatorOOM(nbytes, alloc_size, self.allocated, self.reserved)
        if self._should_split(block, size):
            rest = Block(
                pool, block.segment, block.addr + size, block.size - size, prev=None, next=block.next
            )
            if block.next:
                block.next.prev = rest
            rest.prev = block
            block.next = rest
            block.size = size
            pool.insert(rest)
        block.allocated = True
        block.requested = nbytes
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block) -> None:
        """free -> free_block: the block merges with its free neighbours and goes back to its pool."""
        assert block.allocated, "double free"
        block.allocated = False
        self.allocated -= block.size
        for other in (block.prev, block.next):
            self._try_merge(block, other)
        block.pool.insert(block)

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(): release_cached_blocks."""
        self._release_cached_blocks()

    # the rules
    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.small or self.conf.expandable_segments:
            return remaining >= MIN_BLOCK_SIZE
        return self._below_max_split(size) and remaining > SMALL_SIZE

    def _below_max_split(self, size: int) -> bool:
        return self.conf.max_split_size is None or size < self.conf.max_split_size

    def _get_free_block(self, pool: _Pool, size: int) -> Block | None:
        """get_free_block: best fit; oversize blocks only for oversize requests, within the rounding."""
        i = bisect.bisect_left(pool.free, (size, -1))
        if i == len(pool.free):
            return None
        block = pool.blocks[pool.free[i]]
        if block.expandable and self.conf.expandable_segments:
            # a block next to unmapped space counts as large as it can grow
            def grow(b):
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

            while i + 1 < len(pool.free):
                nxt = pool.blocks[pool.free[i + 1]]
                if not (block.expandable and grow(nxt) < grow(block)):
                    break
                i, block = i + 1, nxt
        max_split = self.conf.max_split_size
        if max_split is not None:
            if size < max_split and block.size >= max_split:
                return None
            if size >= max_split and block.size >= size + self.conf.non_split_rounding:
                return None
        pool.remove(block)
        return block

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int) -> Block | None:
        """alloc_block: a new segment from cudaMalloc (or more pages of the expandable segment)."""
        if self.fraction and self.limit is not None and self.reserved + alloc_size > self.limit:
            return None
        if self.conf.expandable_segments:
            return self._try_allocate_expandable_block(pool, size)
        if self.limit is not None and self.reserved + alloc_size > self.limit:
            return None  # cudaMalloc: out of memory
        segment = _Segment(self._take_addresses(alloc_size), alloc_size)
        self.reserved += alloc_size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.num_device_alloc += 1
        return Block(pool, segment, segment.base, alloc_size)

    def _take_addresses(self, size: int) -> int:
        base = self._next_base
        self._next_base += -(-size // LARGE_BUFFER) * LARGE_BUFFER + LARGE_BUFFER
        return base

    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
        """release_available_cached_blocks: with max_split_size, free oversize cached segments."""
        max_split = self.conf.max_split_size
        if max_split is None:
            return False
        key = max(size, max_split)
        i = bisect.bisect_left(pool.free, (key, -1))
        if i < len(pool.free):
            block = pool.blocks[pool.free[i]]
            if block.is_split() or block.expandable:
                return False
            self._release_block(block)
            return True
        released = 0
        for size_addr in reversed(list(pool.free)):
            block = pool.blocks[size_addr]
            if released >= key or block.size < max_split:
                break
            if block.is_split() or block.expandable:
                continue
            released += block.size
            self._release_block(block)
        return released >= key

    def _release_cached_blocks(self) -> None:
        """release_cached_blocks -> release_blocks: cudaFree every cached segment with nothing
        allocated in it (large pool, then small); unmap the free pages of expandable segments."""
        for pool in (self.large, self.small):
            for key in list(pool.free):
                block = pool.blocks.get(key)
                if block is None:
                    continue
                if block.expandable:
                    self._unmap_block(block)
                elif not block.is_split():
                    self._release_block(block)

    def _release_block(self, block: Block) -> None:
        block.pool.remove(block)
        self.reserved -= block.size
        self.num_device_free += 1

    def _try_merge(self, dst: Block, src: Block | None) -> None:
        """try_merge_blocks: absorb a free neighbour (same mapped state)."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        if src.mapped:
            src.pool.remove(src)
        else:
            src.pool.drop_unmapped(src)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next:
                dst.next.prev = dst
        dst.size += src.size

    # expandable segments
    def _find_expandable_block(self, pool: _Pool, size: int) -> Block:
        """find_expandable_block: the lowest address with enough free or unmapped room, else a new segment."""

        def room(b):
            total = 0
            while total < size and b is not None and not b.allocated:
                total += b.size
                b = b.next
            return total >= size

        for c in list(pool.unmapped):
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            if room(c):
                return c
        page = SMALL_BUFFER if pool.small else self.conf.large_segment_size
        space = 1 << 46  # address space: far more than any card
        segment = _Segment(self._take_addresses(space), space, page)
        candidate = Block(pool, segment, segment.base, space, mapped=False)
        pool.add_unmapped(candidate)
        return candidate

    def _map_block(self, block: Block, size: int) -> bool:
        """map_block: back the first `size` bytes of an unmapped block with whole pages."""
        seg = block.segment
        begin = (block.addr - seg.base) // seg.page
        end = -(-(block.addr + size - seg.base) // seg.page)
        mapped = (end - begin) * seg.page
        if not self.fraction and self.limit is not None and self.reserved + mapped > self.limit:
            return False  # cuMemCreate: out of memory
        block.pool.drop_unmapped(block)
        block.mapped = True
        if mapped < block.size:
            rest = Block(block.pool, seg, block.addr + mapped, block.size - mapped, mapped=False)
            rest.prev, rest.next = block, block.next
            if block.next:
                block.next.prev = rest
            block.next = rest
            block.pool.add_unmapped(rest)
            block.size = mapped
        self._try_merge(block, block.prev)
        self._try_merge(block, block.next)
        block.pool.insert(block)
        self.reserved += mapped
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.num_device_alloc += 1
        return True

    def _try_allocate_expandable_block(self, pool: _Pool, size: int) -> Block | None:
        candidate = self._find_expandable_block(pool, size)
        if not candidate.mapped and not self._map_block(candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:
            nxt = candidate.next
            if not self._map_block(nxt, min(size - candidate.size, nxt.size)):
                return None
            candidate = nxt  # it absorbed the free block before it
        pool.remove(candidate)
        return candidate

    def _unmap_block(self, block: Block) -> None:
        """unmap_block: give back the pages that lie wholly inside a free block of an expandable segment."""
        seg, pool = block.segment, block.pool
        begin = -(-(block.addr - seg.base) // seg.page)
        end = (block.addr + block.size - seg.base) // seg.page
        if begin >= end:
            return
        pool.remove(block)
        start, length = seg.base + begin * seg.page, (end - begin) * seg.page
        before, after = start - block.addr, block.addr + block.size - (start + length)
        if before > 0:
            head = Block(pool, seg, block.addr, before, prev=block.prev, next=block)
            if block.prev:
                block.prev.next = head
            block.prev = head
            pool.insert(head)
        if after > 0:
            tail = Block(pool, seg, start + length, after, prev=block, next=block.next)
            if block.next:
                block.next.prev = tail
            block.next = tail
            pool.insert(tail)
        block.addr, block.size, block.mapped = start, length, False
        self._try_merge(block, block.prev)
        self._try_merge(block, block.next)
        pool.add_unmapped(block)
        self.reserved -= length
        self.num_device_free += 1
        if block.prev is None and block.next is None:
            pool.drop_unmapped(block)  # release_expandable_segment: nothing left mapped


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    """roundup_power2_next_division: 1200 in 4 divisions of [1024, 2048) -> 1280."""
    if _power_of_two(size):
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


# --- replaying a phase -------------------------------------------------------------------------
ALLOC, FREE = "alloc", "free"


@dataclass
class Trace:
    """A tracked run: `pre` are tensors that existed before it (uid, nbytes, what), `events` the
    allocations and frees it made, in order: (ALLOC, uid, nbytes, what) or (FREE, uid, 0, None).
    `checks`: where (an index into `events`) the tracker saw a new storage of 0 bytes, which the
    allocator never sees but the tracker's peak does (``batches.trace_peak``).
    `sweeps`: where the tracker settled the frees of dead storages (index, how many frees, whether
    before a ``resize_`` that grows a storage), for ``tracker.as_judged``: those that freed something,
    and every one before such a resize."""

    pre: list = field(default_factory=list)
    events: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    sweeps: list = field(default_factory=list)


@dataclass
class Replay:
    """The allocator's view of the measured part of a replay."""

    allocated_peak: int
    reserved_peak: int
    fits: bool = True
    failing_request: int | None = None  # bytes the tensor needed
    failing_alloc_size: int | None = None  # the OOM message's "Tried to allocate"
    failing_what: object = None
    allocated_at_failure: int | None = None
    reserved_at_failure: int | None = None
    retries: int = 0


def replay(
    traces: list[Trace],
    conf: AllocConf | None = None,
    limit: int | None = None,
    *,
    measure_from: int = 0,
    fraction: bool = False,
) -> Replay:
    """Replay `traces` one after the other through a CachingAllocator; report the traces from
    `measure_from` on. The earlier ones are warm-up, replayed without `limit`; then the cache is
    emptied (segments that hold live tensors stay, with their free parts) and the limit set, as
    ``measure()`` does before the phase it measures.

    A trace's `pre` tensors are the ones an earlier trace left alive: each takes a live block of the
    same rounded size left by the earlier traces (first come, first served), or a new allocation. The
    first trace's `pre` tensors (weights, optimizer state) are allocated under `limit` already: a state
    that does not fit the card fails there.
    """
    allocator = CachingAllocator(conf, None, fraction)
    carried: list[Block] = []
    for k, trace in enumerate(traces):
        if k == measure_from:
            if k:
                allocator.empty_cache()
            allocator.limit = limit
            allocator.reset_peak()
        live: dict = {}
        if k == 0 and limit is not None:
            allocator.limit = limit  # the state itself (weights, AdamW's state) must fit the card
        try:
            for uid, nbytes, _what in trace.pre:
                size = allocator.round_size(nbytes)
                match = next(
                    (b for b in carried if b.allocated and allocator.round_size(b.requested) == size), None
                )
                if match is not None:
                    carried.remove(match)
                    live[uid] = match
                else:
                    try:
                        live[uid] = allocator.malloc(nbytes)
                    except AllocatorOOM as oom:
                        oom.what = f"{_what} (the state before the phase)"
                        raise
            if k < measure_from:
                allocator.limit = None  # the warm-up itself runs without the budget
            for kind, uid, nbytes, what in trace.events:
                if kind == ALLOC:
                    try:
                        live[uid] = allocator.malloc(nbytes)
                    except AllocatorOOM as oom:
                        oom.what = what
                        raise
                else:
                    block = live.pop(uid, None)
                    if block is not None:
                        allocator.free(block)
        except AllocatorOOM as oom:
            return Replay(
                allocated_peak=allocator.peak_allocated,
                reserved_peak=allocator.peak_reserved,
                fits=False,
                failing_request=oom.request,
                failing_alloc_size=oom.alloc_size,
                failing_what=getattr(oom, "what", None),
                allocated_at_failure=oom.allocated,
                reserved_at_failure=oom.reserved,
                retries=allocator.num_alloc_retries,
            )
        carried = [b for b in carried if b.allocated] + [b for b in live.values() if b.allocated]
    return Replay(allocator.peak_allocated, allocator.peak_reserved, retries=allocator.num_alloc_retries)
