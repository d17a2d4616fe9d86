"""The batch-size search's second runs, made by a second process while the first runs the phases.

``oomguide check`` predicts each phase at the config's batch size, then searches the largest batch
size that fits; the search derives its probes from two real runs (``batches``), the config's and the
next batch size's. Those second runs do not depend on the first ones, so on a machine with two
cores a forked child makes them meanwhile, one after the other in the order the phases come, and
sends each one's traces back as soon as it has them (a thread writes them, so that the runs go on
while the parent is busy); the search files them (``collect``) instead of running them. The result is the same either way: the child runs the same code on the same inputs,
and ``batches`` checks its traces against the parent's run like any other.

Only for the program ``oomguide check`` on Linux (``fork`` without ``exec`` after importing PyTorch
and before any tensor operation); anything that goes wrong in the child only means the parent makes
the run itself. ``OOMGUIDE_PREFETCH=0`` turns it off. Never imports torch.cuda.

Kept for speed (issue 23: a speed-up stays only where a goal needs it): the FSDP2 check of gpt2-xl
on 8 ranks (goal ≤ 15 s) is 20.4 s with it and 23.1 s without on a busy 2-core machine (best of 3,
where the child finds no free core); on an idle second core its runs take no wall time at all.
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import sys

_CHILD: dict = {}  # pid, fd: the running child and the read end of its pipe
_FILED: set = set()  # (family, batch) the child sent, already filed


def available() -> bool:
    """Whether a child can help: Linux, two cores or more for this process, not turned off."""
    if os.environ.get("OOMGUIDE_PREFETCH", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return False


def start(calls: list) -> bool:
    """Fork a child that makes `calls` (predictions at the second batch size: ``search.second_runs``)
    in order, and sends the runs each one files (``batches``)."""
    if _CHILD or not calls or not available():
        return False
    _preload()
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read)
        _child(calls, write)
    os.close(write)
    _CHILD.update(pid=pid, fd=read)
    atexit.register(stop)
    return True


def _preload() -> None:
    """Import before the fork what a fake tensor's first operations import (sympy with PyTorch's
    symbolic shapes, DTensor): the parent needs them anyway, and the child then starts without."""
    import importlib

    for name in ("torch.fx.experimental.symbolic_shapes", "torch.distributed.tensor"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (only a head start)
            pass


def _child(calls: list, fd: int) -> None:
    import queue
    import threading

    code = 1
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        from . import batches

        batches.filed = []
        # a thread writes while the runs go on: the parent reads a run only when its search wants it
        outbox: queue.Queue = queue.Queue()
        writer = threading.Thread(target=_send_all, args=(outbox, fd), daemon=True)
        writer.start()
        for call in calls:
            done = len(batches.filed)
            call()
            for family, batch in batches.filed[done:]:
                run = batches.family(family).runs[batch]
                data = pickle.dumps((family, batch, run.traces, run.peak), protocol=pickle.HIGHEST_PROTOCOL)
                outbox.put(struct.pack("<Q", len(data)) + data)
        outbox.put(None)
        writer.join()
        code = 0
    except BaseException:  # noqa: BLE001 (the parent makes the runs itself)
        pass
    finally:
        os._exit(code)


def _send_all(outbox, fd: int) -> None:
    while (data := outbox.get()) is not None:
        _write(fd, data)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def collect(family: str, batch: int, remember) -> bool:
    """Wait for the child's runs until the run of `family` at `batch` is among them; each one read is
    filed with `remember(family, batch, traces, peak)`. False if the child does not send it."""
    if (family, batch) in _FILED:
        return True
    while _CHILD:
        head = _read(_CHILD["fd"], 8)
        data = None if head is None else _read(_CHILD["fd"], struct.unpack("<Q", head)[0])
        if data is None:
            stop()
            break
        got_family, got_batch, traces, peak = pickle.loads(data)
        remember(got_family, got_batch, traces, peak)
        _FILED.add((got_family, got_batch))
        if (got_family, got_batch) == (family, batch):
            return True
    return False


def stop() -> None:
    """End the child (if it still runs) and close its pipe."""
    if not _CHILD:
        return
    pid, fd = _CHILD.pop("pid"), _CHILD.pop("fd")
    os.close(fd)
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except OSError:
        pass
