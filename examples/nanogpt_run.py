"""Run nanoGPT's own train.py (or sample.py), with instrumentation around it and never inside it.

    python nanogpt_run.py RECORD.json train.py [config files and --key=value ...]
    python nanogpt_run.py RECORD.json sample.py [--key=value ...]
    python nanogpt_run.py --serve      # jobs from stdin, one JSON object a line; a forked child each

Run in a nanoGPT checkout (the working directory). Before train.py starts, the checkout's
``model.py`` is imported and its classes are wrapped: ``GPT.forward`` (shapes in and out, the loss,
whether train.py's module-level ``logits`` is still alive when an evaluation starts), ``Block.forward``
(how often Blocks run: twice per training forward when they are recomputed in backward) and
``lm_head`` (rows per call: a chunked loss never sees all B*T rows at once). train.py then runs
with ``runpy`` as ``__main__``, exactly as ``python train.py ...`` would run it, and the record is
written as JSON: the forwards, the warnings, train.py's final settings and, on CUDA, the peak of
``torch.cuda.max_memory_allocated`` up to the first training forward (the first evaluation) and
over the whole run. The moments around the loop are recorded too: each ``torch.load`` (its
``map_location``), each optimizer step (how many parameters had AdamW state and a gradient before
it, and state after it: the state appears in the first step), whether train.py's ``checkpoint`` and
``state_dict`` still hold the loaded checkpoint at the first forward, and each ``GPT.generate`` call
(its prompt length, ``max_new_tokens`` and output length). sample.py imports ``tiktoken`` at its
top but uses it only when the dataset has no ``meta.pkl``; the tests' data always has one, so where
tiktoken is not installed a module that fails when used stands in for it. On CUDA with ``OOMGUIDE_GPU_MEMORY=<bytes>`` in the environment, the allocator
is capped to that card first (``pytest examples --gpu-memory``), so a run that passes fits that card.

``--serve`` imports torch once and forks a fresh child per job (``{"cwd", "argv", "record",
"output"}``), so a test pays for train.py, not for ``import torch``; it answers each job with
``{"rc": N}`` on one line.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
import warnings

import torch


def _train_frame_globals():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_code.co_filename.endswith("train.py"):
            return frame.f_globals
        frame = frame.f_back
    return None


class PhaseLog:
    """The phases of train.py as ``oomguide check`` names them, from the forwards the run makes: an
    evaluation's first forward starts ``estimate_loss_first`` (then ``estimate_loss``), the first
    training forward after it ``first_step`` (then ``train_step``). ``peaks()`` gives (allocated,
    reserved) since the last call and resets them: the device's (``oomguide.memory.phase_peaks``) on
    CUDA, (None, None) on the CPU, where everything else here runs the same. What came before the
    first phase (building the model, loading a checkpoint) is ``rec["before_phases"]``."""

    def __init__(self, rec: dict, peaks):
        self.rec, self.peaks = rec, peaks
        rec["phases"], rec["before_phases"] = [], None
        self.current = None

    def _close(self) -> None:
        allocated, reserved = self.peaks()
        entry = {"allocated": allocated, "reserved": reserved}
        if self.current is None:
            self.rec["before_phases"] = entry
        else:
            self.current.update(entry)

    def enter(self, kind: str) -> None:
        """`kind`: "eval" or "step"; a new phase only where the kind changes."""
        names = [p["name"] for p in self.rec["phases"]]
        if self.current is not None and self.current["name"] in PHASE_KINDS[kind]:
            return
        self._close()
        first, later = PHASE_KINDS[kind]
        self.current = {"name": later if first in names else first, "allocated": None, "reserved": None}
        self.rec["phases"].append(self.current)

    def end(self, error: BaseException | None) -> None:
        """The run ended (`error`: what stopped it): the last phase's peaks, and the phase it failed in."""
        self._close()
        if isinstance(error, getattr(torch, "OutOfMemoryError", ())):
            self.rec["oom"] = {
                "phase": self.current["name"] if self.current else None,
                "message": str(error),
            }


PHASE_KINDS = {"eval": ("estimate_loss_first", "estimate_loss"), "step": ("first_step", "train_step")}


def no_peaks():
    return None, None


def instrument(rec: dict, phases: PhaseLog) -> None:
    import model as nanogpt_model  # the checkout's model.py, the module train.py imports next

    GPT, Block = nanogpt_model.GPT, nanogpt_model.Block
    plain_init, plain_forward, plain_block = GPT.__init__, GPT.forward, Block.forward
    state = {"evaluating": False, "cuda": torch.cuda.is_available()}
    compiling = torch.compiler.is_compiling

    def init(self, *args, **kwargs):
        plain_init(self, *args, **kwargs)
        rec["n_layer"] = len(self.transformer.h)

        def rows(module, inputs, output):
            if compiling():  # traced by torch.compile: counted only when it runs eagerly
                return
            x = inputs[0]
            rec["lm_head"].append(
                {"training": self.training, "grad": torch.is_grad_enabled(), "rows": x.numel() // x.size(-1)}
            )

        self.lm_head.register_forward_hook(rows)

    def forward(self, idx, targets=None, *args, **kwargs):
        if compiling():  # inside torch.compile's trace: the compiled module's forward records (below)
            return plain_forward(self, idx, targets, *args, **kwargs)
        return recorded(self, plain_forward, idx, targets, *args, **kwargs)

    def recorded(self, call, idx, targets=None, *args, **kwargs):
        evaluating = not self.training and not torch.is_grad_enabled() and targets is not None
        if evaluating or self.training:
            phases.enter("eval" if evaluating else "step")
        entry = {"training": self.training, "grad": torch.is_grad_enabled(), "shape": list(idx.shape)}
        if evaluating and not state["evaluating"]:  # the first forward of an evaluation
            g = _train_frame_globals()
            stale = None if g is None or "logits" not in g else g["logits"]
            entry["eval_start"] = True
            entry["stale_logits"] = list(stale.shape) if isinstance(stale, torch.Tensor) else stale
            if state["cuda"]:
                entry["allocated"] = torch.cuda.memory_allocated()
        if rec["checkpoint_refs"] is None:  # the first forward: what train.py still holds of the checkpoint
            g = _train_frame_globals()
            rec["checkpoint_refs"] = {
                name: g.get(name) is not None for name in ("checkpoint", "state_dict") if g and name in g
            }
        if self.training and state["cuda"] and not rec["peak_first_eval"]:
            rec["peak_first_eval"] = torch.cuda.max_memory_allocated()
        state["evaluating"] = evaluating
        logits, loss = call(self, idx, targets, *args, **kwargs)
        entry["logits"] = list(logits.shape) if isinstance(logits, torch.Tensor) else None
        entry["loss"] = float(loss.detach()) if isinstance(loss, torch.Tensor) else None
        rec["forwards"].append(entry)
        return logits, loss

    def block(self, x, *args, **kwargs):
        if compiling():
            return plain_block(self, x, *args, **kwargs)
        key = "training" if self.training else "eval"
        rec["block_calls"][key] += 1
        return plain_block(self, x, *args, **kwargs)

    def generate(self, idx, max_new_tokens, *args, **kwargs):
        out = plain_generate(self, idx, max_new_tokens, *args, **kwargs)
        rec["generate"].append(
            {"prompt": idx.size(1), "max_new_tokens": max_new_tokens, "length": out.size(1)}
        )
        return out

    def compile(model, *args, **kwargs):
        """train.py's ``torch.compile(model)``: compiled as train.py asks, the forwards recorded outside
        the compiled graph (Blocks and lm_head rows are then not counted: ``rec["compiled"]``)."""
        compiled = plain_compile(model, *args, **kwargs)
        rec["compiled"] = True
        inner = compiled.forward

        def compiled_forward(idx, targets=None, *a, **k):
            return recorded(compiled, lambda _self, *b, **c: inner(*b, **c), idx, targets, *a, **k)

        compiled.forward = compiled_forward
        return compiled

    plain_generate, plain_compile = GPT.generate, torch.compile
    GPT.__init__, GPT.forward, Block.forward, GPT.generate = init, forward, block, generate
    torch.compile = compile
    instrument_moments(rec)


def instrument_moments(rec: dict) -> None:
    """torch.load's map_location, AdamW's state around each step, the loaded checkpoint's references."""
    plain_load = torch.load

    def load(f, *args, **kwargs):
        where = kwargs.get("map_location", args[0] if args else None)
        rec["torch_load"].append({"file": os.path.basename(str(f)), "map_location": str(where)})
        return plain_load(f, *args, **kwargs)

    torch.load = load

    def moments(optimizer) -> dict:
        params = [p for g in optimizer.param_groups for p in g["params"]]
        return {
            "params": len(params),
            "with_state": sum(1 for p in params if optimizer.state.get(p)),
            "with_grad": sum(1 for p in params if p.grad is not None),
        }

    def before_step(optimizer, args, kwargs):
        rec["optimizer_steps"].append({"before": moments(optimizer)})

    def after_step(optimizer, args, kwargs):
        rec["optimizer_steps"][-1]["after"] = moments(optimizer)

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)


def stand_in_for_tiktoken() -> None:
    """sample.py imports tiktoken but uses it only without a meta.pkl (GPT-2's encoding, downloaded)."""
    try:
        import tiktoken  # noqa: F401
    except ModuleNotFoundError:
        import types

        module = types.ModuleType("tiktoken")

        def get_encoding(name):
            raise RuntimeError(f"tiktoken is not installed here: GPT-2's encoding {name!r} is unavailable")

        module.get_encoding = get_encoding
        sys.modules["tiktoken"] = module


def cap(rec: dict) -> None:
    """On CUDA, with OOMGUIDE_GPU_MEMORY=<bytes>: cap the caching allocator to that card's usable
    memory before train.py runs (oomguide.memory.limit_cuda_memory), so that a run that passes shows
    the settings fit that card. PYTORCH_CUDA_ALLOC_CONF is already in the environment: it still applies."""
    budget = os.environ.get("OOMGUIDE_GPU_MEMORY")
    if budget and torch.cuda.is_available():
        from oomguide.memory import limit_cuda_memory

        rec["gpu_memory"] = int(budget)
        rec["fraction"] = limit_cuda_memory(int(budget))


def device_peaks():
    """The device's phase peaks (``oomguide.memory.phase_peaks``), reset at once: the phases start now."""
    from oomguide.memory import phase_peaks

    phase_peaks()
    return phase_peaks


def plain_values(namespace: dict) -> dict:
    return {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_") and isinstance(v, (int, float, bool, str)) and not isinstance(v, type)
    }


def run(record_path: str, argv: list[str]) -> int:
    rec = {
        "argv": argv,
        "forwards": [],
        "lm_head": [],
        "block_calls": {"training": 0, "eval": 0},
        "warnings": [],
        "peak_first_eval": 0,
        "error": None,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "cuda_initialized_at_start": torch.cuda.is_initialized(),
        "gpu_memory": None,
        "torch_load": [],
        "optimizer_steps": [],
        "checkpoint_refs": None,
        "generate": [],
    }
    sys.argv = list(argv)
    sys.path.insert(0, os.getcwd())
    torch.set_num_threads(int(os.environ.get("OOMGUIDE_THREADS", "1")))
    rc, error = 0, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cap(rec)
            phases = PhaseLog(rec, device_peaks() if rec["gpu_memory"] is not None else no_peaks)
            instrument(rec, phases)
            stand_in_for_tiktoken()
            namespace = runpy.run_path(argv[0], run_name="__main__")
            rec["globals"] = plain_values(namespace)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # the record says what failed; the traceback goes to stderr
            traceback.print_exc()
            rec["error"] = f"{exc.__class__.__name__}: {exc}"
            rc, error = 1, exc
        if "phases" in rec:
            phases.end(error)
    rec["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rec["peak"] = torch.cuda.max_memory_allocated()
        rec["device"] = torch.cuda.get_device_name()
    with open(record_path, "w", encoding="utf-8") as f:
        json.dump(rec, f)
    return rc


def serve() -> None:
    # what train.py and AdamW import (torch._dynamo takes seconds), loaded once before forking
    import numpy  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.optim  # noqa: F401

    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                os.chdir(job["cwd"])
                os.environ.update(job.get("env", {}))
                fd = os.open(job["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                code = run(job["record"], job["argv"])
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                traceback.print_exc()
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        sys.exit(run(sys.argv[1], sys.argv[2:]))
