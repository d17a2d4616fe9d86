"""The caching-allocator model on hand-worked sequences; each test names the rule of PyTorch's
c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator) or c10/core/AllocatorConfig it checks."""

from __future__ import annotations

import pytest
import torch

from oomguide.memory.allocator import (
    ALLOC,
    FREE,
    AllocatorOOM,
    AllocConf,
    AllocConfError,
    CachingAllocator,
    Trace,
    _roundup_power2_next_division,
    alloc_conf_from_env,
    parse_alloc_conf,
    replay,
)

MiB = 1024**2
EXPANDABLE = parse_alloc_conf("expandable_segments:True")


def free_blocks(a: CachingAllocator, pool="large"):
    return sorted(size for size, _ in getattr(a, pool).free)


def test_round_size_512_bytes():
    # round_size: below kMinBlockSize (512) -> 512; else up to a multiple of 512
    a = CachingAllocator()
    assert [a.round_size(n) for n in (1, 512, 513, 1_000_000)] == [512, 512, 1024, 1_000_448]


def test_roundup_power2_divisions():
    # roundup_power2_next_division: the source's own example, 1200 in 4 divisions -> 1280
    assert _roundup_power2_next_division(1200, 4) == 1280
    assert _roundup_power2_next_division(4 * MiB, 4) == 4 * MiB  # powers of two stay
    # round_size uses it above 512 * divisions: 5 MiB + 1 in 4 divisions of [4, 8) MiB -> 6 MiB
    a = CachingAllocator(parse_alloc_conf("roundup_power2_divisions:4"))
    assert a.round_size(5 * MiB + 1) == 6 * MiB


def test_small_requests_share_a_2mib_segment():
    # get_pool: <= kSmallSize (1 MiB) -> small pool; get_allocation_size: kSmallBuffer (2 MiB);
    # should_split (small pool): the rest >= 512 bytes becomes a free block for the next request
    a = CachingAllocator()
    a.malloc(1000)
    a.malloc(1000)
    assert (a.reserved, a.allocated, a.num_device_alloc) == (2 * MiB, 2048, 1)
    assert free_blocks(a, "small") == [2 * MiB - 2048]


def test_medium_requests_share_a_20mib_segment():
    # get_allocation_size: 1 MiB < size < kMinLargeAlloc (10 MiB) -> kLargeBuffer (20 MiB);
    # should_split (large pool): remaining > kSmallSize -> split
    a = CachingAllocator()
    a.malloc(3 * MiB)
    a.malloc(5 * MiB)
    assert (a.reserved, a.allocated, a.num_device_alloc) == (20 * MiB, 8 * MiB, 1)
    assert free_blocks(a) == [12 * MiB]


def test_large_request_rounds_to_2mib_and_keeps_a_small_rest():
    # get_allocation_size: >= 10 MiB -> rounded up to kRoundLarge (2 MiB);
    # should_split (large pool): a rest of 1 MiB or less is not split off: the block stays whole
    a = CachingAllocator()
    a.malloc(11 * MiB + 1)
    assert a.reserved == 12 * MiB
    assert a.allocated == 12 * MiB  # memory_allocated counts the whole block
    assert free_blocks(a) == []


def test_best_fit_split_and_merge():
    # get_free_block: the smallest cached block large enough; should_split: 30 - 25 = 5 MiB > 1 MiB;
    # free_block/try_merge_blocks: freeing both halves merges them back into one 30 MiB block
    a = CachingAllocator()
    big = a.malloc(30 * MiB)
    a.free(big)
    x = a.malloc(25 * MiB)
    assert (a.reserved, free_blocks(a)) == (30 * MiB, [5 * MiB])
    a.free(x)
    assert free_blocks(a) == [30 * MiB]


def test_cudamalloc_failure_frees_cached_segments_and_retries():
    # malloc: alloc_block fails -> release_cached_blocks (cudaFree of every unsplit cached block) -> retry
    a = CachingAllocator(limit=100 * MiB)
    a.free(a.malloc(60 * MiB))  # a cached, wholly free 60 MiB segment
    a.malloc(70 * MiB)  # 60 + 70 > 100: release the 60, then cudaMalloc succeeds
    assert (a.reserved, a.num_alloc_retries, a.num_device_free) == (70 * MiB, 1, 1)


def test_fragmentation_oom_reports_the_segment_size():
    # a split segment with a live block cannot be released: "reserved but unallocated" memory;
    # the OOM message's "Tried to allocate" is get_allocation_size of the request
    a = CachingAllocator(limit=100 * MiB)
    a.free(a.malloc(60 * MiB))
    a.malloc(30 * MiB)  # splits the cached 60 MiB segment: 30 live + 30 free
    with pytest.raises(AllocatorOOM) as exc:
        a.malloc(50 * MiB + 3)
    oom = exc.value
    assert (oom.alloc_size, oom.allocated, oom.reserved) == (52 * MiB, 30 * MiB, 60 * MiB)


def test_max_split_size_keeps_oversize_blocks_whole():
    # get_free_block: a request under max_split_size never takes an oversize cached block;
    # an oversize request takes one only within max_non_split_rounding (default 20 MiB)
    conf = parse_alloc_conf("max_split_size_mb:40")
    a = CachingAllocator(conf)
    a.free(a.malloc(64 * MiB))
    a.malloc(30 * MiB)
    assert a.reserved == 94 * MiB  # a new 30 MiB segment; the 64 MiB block stays whole
    b = a.malloc(50 * MiB)  # 64 < 50 + 20: taken, not split
    assert (b.size, a.reserved) == (64 * MiB, 94 * MiB)
    a.free(b)
    a.malloc(44 * MiB - 512)  # 64 >= 44 + 20: refused, a new segment
    assert a.reserved == 94 * MiB + 44 * MiB


def test_release_available_cached_blocks_frees_oversize_first():
    # release_available_cached_blocks (only with max_split_size_mb): an oversize cached block at
    # least as large as the request is cudaFree'd before the full release_cached_blocks
    conf = parse_alloc_conf("max_split_size_mb:40")
    a = CachingAllocator(conf, limit=160 * MiB)
    a.free(a.malloc(100 * MiB))
    a.malloc(70 * MiB)  # 70 < 100 + 20 would fit the block, but 70 >= 40 and 100 >= 70 + 20: refused
    assert (a.reserved, a.num_alloc_retries) == (70 * MiB, 0)


def test_expandable_segment_grows_by_20mib_pages():
    # try_allocate_expandable_block/map_block: the large pool's segment maps 20 MiB pages as needed;
    # should_split with expandable segments: any rest >= 512 bytes is split off
    a = CachingAllocator(EXPANDABLE)
    a.malloc(30 * MiB)
    assert a.reserved == 40 * MiB
    a.malloc(5 * MiB)  # fits the mapped 10 MiB tail
    assert a.reserved == 40 * MiB


def test_expandable_segment_avoids_the_fragmentation_oom():
    # the fragmentation case above: the free tail grows by one page into unmapped space
    # (find_expandable_block takes the free block before the unmapped range)
    a = CachingAllocator(EXPANDABLE, limit=100 * MiB)
    a.free(a.malloc(60 * MiB))
    a.malloc(30 * MiB)
    a.malloc(50 * MiB)
    assert (a.reserved, a.allocated) == (80 * MiB, 80 * MiB)


def test_expandable_segment_unmaps_free_pages_on_failure():
    # release_cached_blocks -> unmap_block: whole free pages go back to CUDA, then the retry maps
    # new pages after the live block
    a = CachingAllocator(EXPANDABLE, limit=100 * MiB)
    first = a.malloc(60 * MiB)
    a.malloc(20 * MiB)
    a.free(first)
    a.malloc(70 * MiB)
    assert (a.reserved, a.num_alloc_retries, a.allocated) == (100 * MiB, 1, 90 * MiB)


def test_memory_fraction_checks_the_whole_segment_first():
    # alloc_block: under a memory fraction, total + alloc_size > allowed fails before any mapping,
    # although the free tail of the expandable segment would have needed one more page only
    capped = CachingAllocator(EXPANDABLE, limit=60 * MiB, fraction=True)
    capped.malloc(30 * MiB)  # 40 MiB mapped, 10 MiB free at the end
    with pytest.raises(AllocatorOOM):
        capped.malloc(24 * MiB)  # 40 + 24 > 60
    card = CachingAllocator(EXPANDABLE, limit=60 * MiB)  # a card of that size: cuMemCreate of one page
    card.malloc(30 * MiB)
    card.malloc(24 * MiB)
    assert card.reserved == 60 * MiB


def test_replay_carries_live_tensors_into_the_next_trace():
    # two traces: the second one's `pre` tensor takes the block the first left alive
    step = Trace(
        pre=[(1, 4 * MiB, "weights")],
        events=[(ALLOC, 2, 30 * MiB, "x"), (ALLOC, 3, 12 * MiB, "y"), (FREE, 2, 0, None)],
    )
    eval_ = Trace(pre=[(7, 4 * MiB, "weights"), (8, 12 * MiB, "logits")], events=[(ALLOC, 9, 30 * MiB, "z")])
    out = replay([step, eval_], measure_from=1)
    # warm-up: the weights split a 20 MiB segment, y (best fit) takes 12 of its free 16 MiB, x has its
    # own 30 MiB segment; empty_cache then frees x's segment, the 20 MiB one stays (weights and y live)
    assert out.allocated_peak == 4 * MiB + 12 * MiB + 30 * MiB
    assert out.reserved_peak == 20 * MiB + 30 * MiB
    capped = replay([step, eval_], limit=49 * MiB, measure_from=1)
    assert not capped.fits and capped.failing_what == "z" and capped.failing_alloc_size == 30 * MiB


# --- PYTORCH_CUDA_ALLOC_CONF ---------------------------------------------------------------------
def test_env_var_priority():
    # AcceleratorAllocatorConfig::instance: PYTORCH_CUDA_ALLOC_CONF, then PYTORCH_HIP_ALLOC_CONF, then PYTORCH_ALLOC_CONF
    env = {
        "PYTORCH_ALLOC_CONF": "max_split_size_mb:64",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    conf = alloc_conf_from_env(env)
    assert (
        conf.expandable_segments and conf.max_split_size is None and conf.source == "PYTORCH_CUDA_ALLOC_CONF"
    )
    assert alloc_conf_from_env({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}).max_split_size == 64 * MiB
    assert alloc_conf_from_env({}) == AllocConf()


def test_parse_values():
    conf = parse_alloc_conf(
        " expandable_segments : True , max_split_size_mb:128,garbage_collection_threshold:0.6,"
    )
    assert (
        conf.expandable_segments
        and conf.max_split_size == 128 * MiB
        and conf.garbage_collection_threshold == 0.6
    )
    table = parse_alloc_conf("roundup_power2_divisions:[256:8,512:2,>:1]").roundup_power2_divisions
    assert table[:8] == (8,) * 8 and table[8] == 8 and table[9] == 2 and table[10:] == (1,) * 6
    assert parse_alloc_conf("per_process_memory_fraction:0.5").per_process_memory_fraction == 0.5


BAD = [
    "expandable_segments:true",  # toBool: 'True' or 'False' only
    "max_split_size_mb:10",  # parseMaxSplitSize: must be >= 20
    "max_split_size_mb",  # no value
    "garbage_collection_threshold:1.5",  # (0.0, 1.0)
    "roundup_power2_divisions:3",  # a power of 2
    "max_split_size_mb:abc",
    "expandable_segments:True,,",
    "expandable_segments:True max_split_size_mb:64",
]
GOOD = [
    "expandable_segments:True",
    "expandable_segments:False",
    "max_split_size_mb:128",
    "garbage_collection_threshold:0.6,max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:8,512:2,>:1]",
    "backend:native",
    "release_lock_on_cudamalloc:True",
    "expandable_segments:True,",
]


@pytest.mark.parametrize("text", BAD)
def test_malformed_setting_is_one_line(text):
    with pytest.raises(AllocConfError) as exc:
        parse_alloc_conf(text)
    assert "\n" not in str(exc.value) and text in str(exc.value)


def test_unknown_option_names_close_matches():
    # CUDAAllocatorConfig::parseArgs: "Unrecognized key ... in Accelerator allocator config"
    with pytest.raises(AllocConfError, match="did you mean expandable_segments"):
        parse_alloc_conf("expandable_segment:True")


@pytest.mark.parametrize("text", GOOD + BAD)
def test_agrees_with_pytorchs_own_parser(text):
    """The installed PyTorch parses the same strings (its CPU build has the accelerator part only)."""
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        pytest.skip("this PyTorch has no _accelerator_setAllocatorSettings")
    try:
        setter(text)
        torch_ok = True
    except Exception:
        torch_ok = False
    finally:
        setter("")
    try:
        parse_alloc_conf(text)
        ours = True
    except AllocConfError:
        ours = False
    assert ours == torch_ok
