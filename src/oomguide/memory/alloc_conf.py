"""``PYTORCH_CUDA_ALLOC_CONF``, read as PyTorch reads it: ``c10/core/AllocatorConfig`` and
``c10/cuda/CUDAAllocatorConfig`` (keys, sizes in MB, booleans, ``roundup_power2_divisions`` as a
number or a table, the first of the three environment variables that is set).

A setting PyTorch would reject is an ``AllocConfError`` naming the key and the accepted values.
Pure parsing: never imports torch, never replays anything (that is ``allocator``).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, replace

# The allocator's sizes, by their names in CUDACachingAllocator.cpp (the settings' defaults and bounds)
MiB = 1024**2

MIN_BLOCK_SIZE = 512  # kMinBlockSize
SMALL_SIZE = 1 * MiB  # kSmallSize: the largest "small" request
SMALL_BUFFER = 2 * MiB  # kSmallBuffer: small requests are packed in 2 MiB segments
LARGE_BUFFER = 20 * MiB  # kLargeBuffer: requests of 1-10 MiB share 20 MiB segments
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB  # kRoundLarge: larger requests get their own segment, rounded to 2 MiB
ROUNDUP_INTERVALS = 16  # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB


ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # first set wins

_BOOL_KEYS = {
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
    "pinned_free_catch_all",
    "throw_on_cudamalloc_oom",
}
_SIZE_KEYS = {
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "large_segment_size_mb",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
}
_FLOAT_KEYS = {"garbage_collection_threshold", "per_process_memory_fraction"}
KNOWN_KEYS = sorted(_BOOL_KEYS | _SIZE_KEYS | _FLOAT_KEYS | {"roundup_power2_divisions", "backend"})


class AllocConfError(ValueError):
    """A PYTORCH_CUDA_ALLOC_CONF that PyTorch would refuse; the message is one line."""


@dataclass(frozen=True)
class AllocConf:
    """The caching allocator's settings that change memory (defaults: PyTorch's)."""

    expandable_segments: bool = False
    max_split_size: int | None = None  # bytes; None: no limit (SIZE_MAX)
    max_non_split_rounding: int | None = None  # bytes; None: the large segment size
    large_segment_size: int = LARGE_BUFFER
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    garbage_collection_threshold: float = 0.0
    per_process_memory_fraction: float | None = None
    backend: str = "native"
    text: str = ""  # the setting as written
    source: str = ""  # where it came from: an environment variable or --alloc-conf

    @property
    def non_split_rounding(self) -> int:
        return (
            self.max_non_split_rounding
            if self.max_non_split_rounding is not None
            else self.large_segment_size
        )

    def describe(self) -> str:
        if not self.text:
            return "PyTorch's defaults (no PYTORCH_CUDA_ALLOC_CONF)"
        return f"{self.source}={self.text}" if self.source else self.text


def _tokens(text: str) -> list[str]:
    """ConfigTokenizer: ',', ':', '[' and ']' are tokens of their own; whitespace is dropped."""
    out, buf = [], ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append(buf)
                buf = ""
            out.append(ch)
        elif not ch.isspace():
            buf += ch
    if buf:
        out.append(buf)
    return out


def parse_alloc_conf(text: str, source: str = "PYTORCH_CUDA_ALLOC_CONF") -> AllocConf:
    """Parse an allocator setting the way PyTorch does; raise AllocConfError (one line) where PyTorch
    raises. Keys of other allocators (pinned memory, locks) are checked and then ignored."""
    where = f"{source}={text!r}" if source else repr(text)
    tok = _tokens(text)
    values: dict = {}

    def fail(why: str):
        raise AllocConfError(f"{where}: {why}")

    def value_at(i: int, key: str) -> str:
        if i >= len(tok) or tok[i] in ",:[]":
            fail(f"{key} needs a value ({key}:VALUE)")
        return tok[i]

    def integer(word: str, key: str) -> int:
        if not word.isdigit():
            fail(f"{key} must be a whole number, got {word!r}")
        return int(word)

    i = 0
    while i < len(tok):
        key = tok[i]
        if key in ",:[]":
            fail(f"expected an option name at {key!r}")
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(key, KNOWN_KEYS, n=2)
            hint = f" (did you mean {' or '.join(close)}?)" if close else f" (known: {', '.join(KNOWN_KEYS)})"
            fail(f"unrecognized option {key!r}{hint}")
        if i + 1 >= len(tok) or tok[i + 1] != ":":
            fail(f"expected ':' after {key}")
        i += 2
        if key in _BOOL_KEYS:
            word = value_at(i, key)
            if word not in ("True", "False"):
                fail(f"{key} takes True or False (capitalised), got {word!r}")
            values[key] = word == "True"
        elif key in _SIZE_KEYS:
            values[key] = integer(value_at(i, key), key)
        elif key in _FLOAT_KEYS:
            word = value_at(i, key)
            try:
                values[key] = float(word)
            except ValueError:
                fail(f"{key} must be a number, got {word!r}")
        elif key == "backend":
            word = value_at(i, key)
            if word not in ("native", "cudaMallocAsync"):
                fail(f"unknown allocator backend {word!r} (native or cudaMallocAsync)")
            values[key] = word
        else:  # roundup_power2_divisions: N, or [boundary_mb:N, ..., >:N]
            if i < len(tok) and tok[i] == "[":
                pairs = []
                i += 1
                while i < len(tok) and tok[i] != "]":
                    bound = value_at(i, key)
                    if i + 1 >= len(tok) or tok[i + 1] != ":":
                        fail(f"{key}: expected ':' after {bound!r}")
                    pairs.append((bound, integer(value_at(i + 2, key), key)))
                    i += 3
                    if i < len(tok) and tok[i] == ",":
                        i += 1
                if i >= len(tok):
                    fail(f"{key}: missing ']'")
                values[key] = pairs
            else:
                values[key] = integer(value_at(i, key), key)
        if i + 1 < len(tok):
            if tok[i + 1] != ",":
                fail(f"expected ',' after {key}'s value")
            i += 1
        i += 1
    return _build_conf(values, text, source, fail)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _build_conf(values: dict, text: str, source: str, fail) -> AllocConf:
    large = LARGE_BUFFER
    if "large_segment_size_mb" in values:
        if values["large_segment_size_mb"] <= MIN_LARGE_ALLOC // MiB:
            fail(f"large_segment_size_mb must be > {MIN_LARGE_ALLOC // MiB}")
        large = values["large_segment_size_mb"] * MiB
    conf: dict = dict(large_segment_size=large, text=text, source=source)
    for key, attr in (
        ("max_split_size_mb", "max_split_size"),
        ("max_non_split_rounding_mb", "max_non_split_rounding"),
    ):
        if key in values:
            if values[key] < large // MiB:
                fail(f"{key} too small, must be >= {large // MiB}")
            conf[attr] = values[key] * MiB
    if "garbage_collection_threshold" in values:
        gc = values["garbage_collection_threshold"]
        if not 0.0 < gc < 1.0:
            fail("garbage_collection_threshold must be in (0.0, 1.0)")
        conf["garbage_collection_threshold"] = gc
    if "per_process_memory_fraction" in values:
        fraction = values["per_process_memory_fraction"]
        if not 0.0 <= fraction <= 1.0:
            fail("per_process_memory_fraction must be in [0.0, 1.0]")
        conf["per_process_memory_fraction"] = fraction
    if "pinned_num_register_threads" in values and not _power_of_two(values["pinned_num_register_threads"]):
        fail("pinned_num_register_threads must be a power of 2")
    if "expandable_segments" in values:
        conf["expandable_segments"] = values["expandable_segments"]
    if "backend" in values:
        conf["backend"] = values["backend"]
    if "roundup_power2_divisions" in values:
        conf["roundup_power2_divisions"] = _divisions(values["roundup_power2_divisions"], fail)
    return AllocConf(**conf)


def _divisions(value, fail) -> tuple[int, ...]:
    """roundup_power2_divisions: one number for every size, or [MB:N, ..., >:N] per power-of-two interval."""
    if isinstance(value, int):
        if not _power_of_two(value):
            fail("roundup_power2_divisions must be a power of 2")
        return (value,) * ROUNDUP_INTERVALS
    table = [0] * ROUNDUP_INTERVALS
    first, last = True, 0
    for bound, n in value:
        if n != 0 and not _power_of_two(n):
            fail("roundup_power2_divisions: the divisions must be a power of 2 or 0")
        if bound == ">":
            for j in range(last + 1, ROUNDUP_INTERVALS):
                table[j] = n
            continue
        if not bound.isdigit() or not _power_of_two(int(bound)):
            fail(f"roundup_power2_divisions: the interval {bound!r} must be a power of 2 (in MB)")
        index = min(int(bound).bit_length() - 1, ROUNDUP_INTERVALS - 1)
        if first:
            for j in range(index):
                table[j] = n
            first = False
        table[index] = n
        last = index
    return tuple(table)


def alloc_conf_from_env(environ=None) -> AllocConf:
    """The setting PyTorch reads at CUDA start-up: the first of PYTORCH_CUDA_ALLOC_CONF,
    PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF that is set (AcceleratorAllocatorConfig::instance)."""
    environ = os.environ if environ is None else environ
    for name in ENV_VARS:
        if name in environ:
            return parse_alloc_conf(environ[name], name)
    return AllocConf()


def with_expandable_segments(conf: AllocConf, on: bool = True) -> AllocConf:
    """The same settings with expandable segments switched on (or off)."""
    setting = f"expandable_segments:{on}"
    return replace(conf, expandable_segments=on, text=f"{conf.text},{setting}" if conf.text else setting)
