"""A phase of a nanochat script on fake tensors, with nanochat's own model, optimizer and KV cache.

What it does: ``run(setting, spec, batch, budget)`` builds nanochat's ``GPT`` as its scripts do
(``torch.device("meta")``, ``to_empty``, ``init_weights``: fp32 matrices, the embeddings cast to the
compute dtype), makes ``MuonAdamW``'s state as it is after a step (``setup_optimizer`` and one
untracked step; on several ranks over the fake process group, so that the state is sharded as
nanochat shards it), and runs the phase tracked by oomguide's ``AllocationTracker``:

- ``train``: the micro-steps of a training step (``loss = model(x, y)``, ``loss.backward()``; the
  second micro-step, with the first one's gradients alive, stands for every later one), then
  ``optimizer.step()`` and ``model.zero_grad(set_to_none=True)``, as base_train.py and chat_sft.py;
- ``bpb``: nanochat/loss_eval.py's ``evaluate_bpb`` forward (``model(x, y, loss_reduction='none')``
  under ``no_grad``); its data-dependent lines (``.any()``, ``.item()``) are not run (scalars);
- ``core``: nanochat/core_eval.py's ``forward_model`` (logits, cross_entropy per token, argmax);
- ``forward``: scripts/chat_eval.py's ``run_categorical_eval`` (a batch of prompts, its logits);
- ``generate``: nanochat/engine.py's ``Engine.generate``: a batch-1 prefill into its ``KVCache``,
  the cache for the samples, the prefill copied in, decode steps (the first two: every later one
  allocates the same), ``sample_next_token``. The cache's position is kept in Python (its int32
  tensor would need ``.item()`` on a fake tensor).

The model's own cast of each fp32 weight to the activations' dtype (``Linear.forward``) is an op
like any other: the tracker sees each copy (tagged weights) and autograd keeps it for backward.
The attention kernel: FA3 (nanochat/flash_attention.py loads it from the ``kernels`` package on
CUDA) stands as a kernel with FA3's memory (the output and a float32 log-sum-exp per row), else
nanochat's SDPA fallback runs under oomguide's ``CudaKernels``. ``compiled``: Inductor's fused
loss (``memory.compiled``), and in a training step what the backward keeps is AOTAutograd's own
partition of the model (``partition``); everything else eager. The optimizer's own ``torch.compile``'d steps
run eagerly (``torch.compiler.set_stance("force_eager")``). Never imports torch.cuda.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..memory import kernels as kernel_names
from ..memory.kernels import CudaKernels
from ..memory.models import no_init
from ..memory.tracker import AllocationTracker
from .compiled import CompiledHead
from .partition import CompiledSaved, saved_for_batch, stored_key

_FA3_NAMES = ("flash_attn_3_fwd", "flash_attn_3_bwd")


@dataclass(frozen=True)
class PhaseSpec:
    """What one phase runs (``plan`` makes these from the script's arguments)."""

    name: str
    kind: str  # train, bpb, core, forward, generate
    batch: int  # the rows of a forward (device batch size, samples, CORE's choices)
    seq_len: int = 0  # tokens per row (train, bpb, core)
    compiled: bool = False
    optimizer_state: bool = True  # MuonAdamW's state alive (after a step, or loaded)
    grad_accum: int = 1
    prompt: int = 0  # generate: prompt tokens
    max_tokens: int = 0  # generate: tokens to sample
    top_k: int | None = None
    temperature: float = 0.0
    searched: bool = True  # whether batch is the --device-batch-size (the batch search's subject)
    fp8: bool = False  # base_train's --fp8: its Linear layers converted to nanochat's Float8Linear


@dataclass(frozen=True)
class Setting:
    """The model and machine a script's phases share."""

    config: tuple  # GPTConfig's fields, (name, value) pairs
    world_size: int
    capability: tuple
    fa3: bool


def build_meta(code, config: dict):
    """nanochat's GPT on the meta device, as base_train.py's build_model_meta builds it."""
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        return code.gpt.GPT(code.gpt.GPTConfig(**config))


def materialise(model, fake: bool) -> None:
    """``model.to_empty(device)`` and ``model.init_weights()``, as base_train.py and the checkpoint
    loader do. On fake tensors, ``init_weights`` runs first, on the meta device (its casts of the
    embeddings to the compute dtype need no values, and FakeTensorMode cannot swap a fake
    parameter for its cast), then ``to_empty`` gives every tensor its fake storage."""
    with no_init():
        if fake:
            model.init_weights()
            for module in model.modules():  # to_empty, without swapping (refused for fake tensors)
                for name, p in module._parameters.items():
                    if p is not None:
                        module._parameters[name] = torch.nn.Parameter(
                            torch.empty_like(p, device="cpu"), requires_grad=p.requires_grad
                        )
                for name, b in module._buffers.items():
                    if b is not None:
                        module._buffers[name] = torch.empty_like(b, device="cpu")
        else:
            model.to_empty(device="cpu")
            model.init_weights()


def fp8_module_filter(module, fqn: str) -> bool:
    """base_train.py's fp8_module_filter: a Linear whose dimensions are multiples of 16 and at least 128
    (the rule, restated: the function is local to the script, which oomguide never runs)."""
    if not isinstance(module, torch.nn.Linear):
        return False
    if module.in_features % 16 or module.out_features % 16:
        return False
    return min(module.in_features, module.out_features) >= 128


def to_float8(code, model) -> None:
    """base_train.py's ``--fp8``: nanochat's own ``convert_to_float8_training`` (nanochat/fp8.py) with
    the script's filter; the training step's Linear layers then quantise to float8 and multiply with
    ``torch._scaled_mm``, which fake tensors run on the CPU as CUDA does on a card of capability 8.9+."""
    fp8 = code.fp8
    fp8.convert_to_float8_training(model, config=fp8.Float8LinearConfig.from_recipe_name("tensorwise"), module_filter_fn=fp8_module_filter)


@contextmanager
def _fused_quantisation(code):
    """Inductor's kernel for nanochat/fp8.py's ``_to_fp8`` in the compiled training model: the amax,
    the scaling, the clamp and the cast fuse into one pass that writes the float8 tensor and a float32
    scalar; the float32 copies that the eager function makes (``x.float()``, ``x_scaled``) never exist."""
    module, original = code.fp8, code.fp8._to_fp8

    @torch.no_grad()
    def fused(x, fp8_dtype):
        return x.to(fp8_dtype), x.new_ones((), dtype=torch.float32)

    module._to_fp8 = fused
    try:
        yield
    finally:
        module._to_fp8 = original


class _Seqlens:
    """KVCache.cache_seqlens as a Python position: ``[0].item()``, ``+=``, ``zero_``, ``fill_``."""

    def __init__(self):
        self.pos = 0

    def __getitem__(self, _i):
        return self

    def item(self):
        return self.pos

    def __iadd__(self, n):
        self.pos += int(n)
        return self

    def zero_(self):
        self.pos = 0

    def fill_(self, value):
        self.pos = int(value)


class _FA3(torch.autograd.Function):
    """FA3's flash_attn_func: output (B, T, H, D) and a float32 log-sum-exp, kept for backward with
    q, k, v; CPU flash attention computes it on the (B, H, T, D) views."""

    @staticmethod
    def forward(ctx, q, k, v):
        with _named():
            out, lse = kernel_names._CPU_FORWARD(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, True)
            out = out.transpose(1, 2).contiguous()
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        t = [x.transpose(1, 2) for x in (grad, q, k, v, out)]
        with _named():
            dq, dk, dv = kernel_names._CPU_BACKWARD(*t, lse, 0.0, True)
        return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


@contextmanager
def _named():
    outer = getattr(kernel_names._NAMES, "names", None)
    fwd, bwd = kernel_names._CPU_FORWARD.__name__, kernel_names._CPU_BACKWARD.__name__
    kernel_names._NAMES.names = {fwd: _FA3_NAMES[0], bwd: _FA3_NAMES[1]}
    try:
        yield
    finally:
        kernel_names._NAMES.names = outer


class _FA3Interface:
    """What nanochat calls on ``flash_attn_interface`` (flash_attn_func, flash_attn_with_kvcache)."""

    def __init__(self, used: set):
        self.used = used

    def flash_attn_func(self, q, k, v, causal=False, window_size=(-1, -1)):
        self.used.add("FA3")
        return _FA3.apply(q, k, v)

    def flash_attn_with_kvcache(self, q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, causal=False, window_size=(-1, -1)):
        self.used.add("FA3")
        pos, new = cache_seqlens[0].item(), q.size(1)
        if k is not None:
            k_cache[:, pos : pos + new] = k  # in place, as FA3 writes the cache
            v_cache[:, pos : pos + new] = v
        keys, values = k_cache[:, : pos + new], v_cache[:, : pos + new]
        with _named():
            out, _lse = kernel_names._CPU_FORWARD(
                q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), 0.0, False
            )
            return out.transpose(1, 2).contiguous()


@contextmanager
def _attention(code, fa3: bool, used: set):
    """nanochat's flash_attention module running FA3 (the stand-in) or its SDPA fallback."""
    module = code.flash_attention
    saved = module.USE_FA3, module._fa3
    module.USE_FA3, module._fa3 = (True, _FA3Interface(used)) if fa3 else (False, None)
    try:
        yield
    finally:
        module.USE_FA3, module._fa3 = saved


@contextmanager
def process_group(world_size: int):
    """The fake process group of `world_size` ranks (this process rank 0); none for one rank."""
    if dist.is_initialized() and (dist.get_backend() != "fake" or dist.get_world_size() != world_size):
        if dist.get_backend() != "fake":
            raise RuntimeError("a real process group is initialised: predict in a process of its own")
        dist.destroy_process_group()
    if world_size > 1 and not dist.is_initialized():
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    yield


def _eager_steps():
    stance = getattr(torch.compiler, "set_stance", None)
    return stance("force_eager") if stance else _nothing()


@contextmanager
def _nothing():
    yield


def run(code, setting: Setting, spec: PhaseSpec, batch: int, budget: int | None, *, fake: bool = True, seed: int = 0):
    """Run `spec` at `batch` rows tracked; returns the tracker (peak, breakdown, failing, trace)
    and the attention kernels used. `fake=False`: the same on real CPU tensors (the proof test)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    config = dict(setting.config)
    vocab = config["vocab_size"]
    tracker = AllocationTracker(vocab_size=vocab, budget=budget)
    kernels = CudaKernels(setting.capability)
    torch.manual_seed(seed)
    with ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(process_group(setting.world_size))
        with_optimizer = spec.kind == "train" or spec.optimizer_state
        key = (id(code), setting, spec.fp8, with_optimizer, spec.optimizer_state)
        built = _BUILT.get(key) if fake else None
        if built is None:
            built = _Built(FakeTensorMode(allow_non_fake_inputs=True) if fake else None, build_meta(code, config))
        if built.mode is not None:
            stack.enter_context(built.mode)
        stack.enter_context(kernels)
        stack.enter_context(_attention(code, setting.fa3, kernels.used))
        stack.enter_context(_eager_steps())
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))  # nanochat's print0
        if not built.ready:
            _prepare(code, built, spec, with_optimizer, fake)
            if fake:
                _BUILT[key] = built
        model, optimizer = built.model, built.optimizer
        if spec.fp8 and spec.compiled:
            stack.enter_context(_fused_quantisation(code))
        params = list(model.parameters())
        tracker.grads_of = params
        tracker.register(params, "weights")
        tracker.register(model.buffers(), "weights")
        if spec.optimizer_state:
            tracker.register([t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)], "optimizer_state")
        if spec.kind == "train":
            model.train()
        else:
            model.eval()
        saved = None
        if spec.compiled and spec.kind == "train" and not spec.fp8 and fake:
            def tokens(rows):
                return _tokens(rows, spec.seq_len, vocab), _tokens(rows, spec.seq_len, vocab)

            key = (id(code), setting, spec.seq_len)
            model_key = [list(map(list, setting.config)), setting.world_size, list(setting.capability), setting.fa3]
            stored = stored_key(code.path, code.compute_dtype, model_key, spec.seq_len)
            saved = CompiledSaved(tracker, saved_for_batch(model, tokens, batch, key, stored))
        if spec.compiled:
            stack.enter_context(CompiledHead({vocab, model.lm_head.weight.shape[0]}))
        if spec.kind == "train":
            _train(model, optimizer, spec, batch, vocab, tracker, saved)
        elif spec.kind in ("bpb", "core", "forward"):
            with torch.no_grad():
                _evaluate(model, spec, batch, vocab, tracker)
        elif spec.kind == "generate":
            with torch.inference_mode():
                _generate(code, model, spec, batch, vocab, tracker)
        else:
            raise ValueError(f"unknown phase kind {spec.kind!r}")
    return tracker, sorted(kernels.used)


@dataclass
class _Built:
    """nanochat's model (and optimizer, its state as after a step) as a run starts from it. On fake
    tensors it is built once per model, card and kind of run (fp8, optimizer) and reused by every
    later run, in its own FakeTensorMode: a run leaves it as it found it (gradients set to None, the
    optimizer's state updated in place), as base_train leaves its model between steps."""

    mode: object
    model: object
    optimizer: object = None
    ready: bool = False


_BUILT: dict = {}


def _prepare(code, built: _Built, spec: PhaseSpec, with_optimizer: bool, fake: bool) -> None:
    """Materialise the model as the scripts do, convert it for --fp8, make MuonAdamW's state as
    after a step (untracked: the state is there before the phase starts)."""
    model = built.model
    materialise(model, fake)
    if spec.fp8:
        to_float8(code, model)
    if with_optimizer:
        built.optimizer = model.setup_optimizer()
    if spec.optimizer_state:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        built.optimizer.step()
        model.zero_grad(set_to_none=True)
    built.ready = True


def _tokens(batch: int, seq: int, vocab: int):
    return torch.randint(0, vocab, (batch, seq))


def _train(model, optimizer, spec, batch, vocab, tracker, saved=None):
    """base_train.py's training step (its `for micro_step in range(grad_accum_steps)` and what follows).
    `saved` (compiled): what the backward reads is the compiled partition's (``partition``)."""
    x, y = _tokens(batch, spec.seq_len, vocab), _tokens(batch, spec.seq_len, vocab)
    tracker.register([x, y], "activations")
    micro_steps = min(spec.grad_accum, 2)
    original = optimizer.step

    def step(*a, **k):
        tracker.tag_new = "optimizer_state"
        try:
            return original(*a, **k)
        finally:
            tracker.tag_new = None

    with tracker:
        for _ in range(micro_steps):
            with saved.hooks() if saved else _nothing():
                loss = model(x, y)
            if saved:
                saved.forward_done(loss)
            train_loss = loss.detach()  # noqa: F841  (the script keeps it for logging)
            loss = loss / spec.grad_accum
            loss.backward()
            if saved:
                saved.backward_done()
            # the loader's next batch, fetched while the step runs
            x, y = _tokens(batch, spec.seq_len, vocab), _tokens(batch, spec.seq_len, vocab)
        step()
        model.zero_grad(set_to_none=True)


def _evaluate(model, spec, batch, vocab, tracker):
    if spec.kind == "bpb":
        x, y = _tokens(batch, spec.seq_len, vocab), _tokens(batch, spec.seq_len, vocab)
        token_bytes = torch.zeros(vocab, dtype=torch.int32)
        tracker.register([x, y, token_bytes], "activations")
        with tracker:
            loss2d = model(x, y, loss_reduction="none").view(-1)
            num_bytes = token_bytes[y.view(-1)]
            (loss2d * (num_bytes > 0)).sum()
            num_bytes.sum()
        return
    input_ids = _tokens(batch, spec.seq_len, vocab)
    tracker.register([input_ids], "activations")
    if spec.kind == "forward":
        with tracker:  # scripts/chat_eval.py, run_categorical_eval: the batch's logits, argmax of a few
            logits = model(input_ids)
            logits[0, -1, :4].argmax(dim=-1)
        return
    with tracker:  # nanochat/core_eval.py, forward_model
        outputs = model(input_ids)
        target_ids = torch.roll(input_ids, shifts=-1, dims=1)
        losses = torch.nn.functional.cross_entropy(
            outputs.view(batch * spec.seq_len, -1), target_ids.view(batch * spec.seq_len), reduction="none"
        ).view(batch, spec.seq_len)
        losses[:, -1] = float("nan")
        outputs.argmax(dim=-1)


def _cache(code, model, batch: int, seq_len: int):
    m = model.config
    cache = code.engine.KVCache(
        batch_size=batch,
        num_heads=m.n_kv_head,
        seq_len=seq_len,
        head_dim=m.n_embd // m.n_head,
        num_layers=m.n_layer,
        device="cpu",
        dtype=code.compute_dtype,
    )
    cache.cache_seqlens = _Seqlens()
    return cache


def _generate(code, model, spec, samples, vocab, tracker):
    """nanochat/engine.py's Engine.generate: prefill, the samples' cache, decode."""
    with tracker:
        prefill = _cache(code, model, 1, spec.prompt)
        logits = model.forward(_tokens(1, spec.prompt, vocab), kv_cache=prefill)
        logits = logits[:, -1, :].expand(samples, -1)
        decode = _cache(code, model, samples, spec.prompt + spec.max_tokens)
        decode.prefill(prefill)
        del prefill
        for _ in range(min(spec.max_tokens, 2)):
            code.engine.sample_next_token(logits, None, spec.temperature, spec.top_k)
            ids = _tokens(samples, 1, vocab)
            logits = model.forward(ids, kv_cache=decode)[:, -1, :]
