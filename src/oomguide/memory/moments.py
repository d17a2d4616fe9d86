"""The moments of a nanoGPT run besides a step and an evaluation: resuming, and sampling (sample.py).

``resume``: train.py with ``init_from='resume'`` (nanoGPT's train.py, its ``elif init_from ==
'resume'`` branch and the lines after it):

1. ``checkpoint = torch.load(ckpt_path, map_location=device)``: the saved model (``checkpoint['model']``,
   the weights as ``raw_model.state_dict()`` saved them, float32) and optimizer (``optimizer.state_dict()``:
   AdamW's ``exp_avg``, ``exp_avg_sq`` and ``step`` per parameter) come onto the card, in that order;
2. ``model = GPT(gptconf)`` and ``model.load_state_dict(state_dict)`` on the CPU, then ``model.to(device)``:
   the weights onto the card;
3. ``optimizer.load_state_dict(checkpoint['optimizer'])``: each state tensor goes through
   ``Tensor.to(dtype=param.dtype, device=param.device)`` (torch/optim/optimizer.py,
   ``Optimizer._process_value_according_to_param_policy``), which returns the same tensor when it is
   already there: on the card, the optimizer shares the checkpoint's state; from the CPU, it copies it;
4. ``checkpoint = None``: the dict goes, but train.py's global ``state_dict`` still holds the saved
   weights for the whole run (``predict`` keeps them alive in every later phase).

With ``map_location='cpu'`` (the guide's change, read by ``checkout``) steps 1 and 4 touch no card
memory, and step 3 copies the state onto it.

``sample``: nanoGPT's sample.py: the checkpoint as in step 1, which its global ``checkpoint`` keeps
for the whole script (or GPT-2's weights, built on the CPU), ``model.eval()``, ``model.to(device)``,
then, under ``torch.no_grad()`` and one autocast context (its weight casts cached until the end),
``num_samples`` calls of ``model.generate`` one after the other, batch 1: each new token forwards
the whole context, cropped at block_size (no KV cache), and keeps the logits of the last position
only. The longest forward is the last one (or any once the crop is reached); the samples run one
after the other and free their tensors, so ``num_samples`` changes the time, not the peak.

Never imports torch.cuda.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .. import loop


def checkpoint_of(model, config) -> tuple[dict, dict]:
    """(model state, optimizer state dict) as train.py's checkpoint holds them, made untracked on the
    current mode's tensors: a fused AdamW of the model after one step (its state exists)."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = loop.make_optimizer(model, config, "cuda")
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for p in params:
        p.grad = None
    return model.state_dict(), optimizer.state_dict()


def _copies(tree, made=None):
    """``torch.load``'s tensors: a new storage for each saved storage, in the order the pickle holds
    them; tensors that shared one when saved (the tied ``lm_head.weight`` and
    ``transformer.wte.weight`` of ``state_dict()``) share it again, as torch.save keeps them."""
    made = {} if made is None else made
    if isinstance(tree, torch.Tensor):
        key = tree.untyped_storage()._cdata
        if key not in made:
            made[key] = torch.empty_like(tree)
        return made[key]
    if isinstance(tree, dict):
        return {k: _copies(v, made) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_copies(v, made) for v in tree)
    return tree


def _to_device(model, tracker) -> list:
    """``model.to(device)``: each parameter and buffer gets a new storage on the card (Module._apply);
    a tied weight (``lm_head`` and ``wte``), met twice, is on the card the second time: ``to``
    returns it as it is."""
    moved: set = set()

    def to(t):
        if t.untyped_storage()._cdata in moved:
            return t
        out = torch.empty_like(t)
        moved.add(out.untyped_storage()._cdata)
        return out

    for module in model.modules():  # Module._apply's `param.data = fn(param)`, without its swap path
        for p in module._parameters.values():
            if p is not None:
                p.data = to(p)
        for name, b in module._buffers.items():
            if b is not None:
                module._buffers[name] = to(b)
    tensors = [*model.parameters(), *model.buffers()]
    tracker.weight_keys.update(t.untyped_storage()._cdata for t in tensors)
    tracker.grads_of = list(model.parameters())
    return tensors


def run_resume(model, config, tracker, on_card: bool):
    """train.py's resume, tracked (see the module's docstring). Returns the optimizer and the saved
    weights that train.py's ``state_dict`` keeps (on the card only when `on_card`)."""
    saved_model, saved_optimizer = checkpoint_of(model, config)
    with tracker:
        tracker.moment = "torch_load"
        if on_card:
            tracker.tag_new = "checkpoint"
            checkpoint = {"model": _copies(saved_model), "optimizer": _copies(saved_optimizer)}
        else:
            checkpoint = {"model": saved_model, "optimizer": saved_optimizer}  # in the CPU's memory
        del saved_model, saved_optimizer
        state_dict = checkpoint["model"]
        tracker.moment, tracker.tag_new = "model_to_device", "weights"
        _to_device(model, tracker)
        tracker.moment, tracker.tag_new = "optimizer_load_state_dict", "optimizer_state"
        optimizer = loop.make_optimizer(model, config, "cuda")
        saved = checkpoint["optimizer"]
        if not on_card:  # Tensor.to(device) from the CPU: a copy on the card, per state tensor
            saved = dict(
                saved, state={i: {k: v.clone() for k, v in s.items()} for i, s in saved["state"].items()}
            )
        optimizer.load_state_dict(saved)
        del saved
        tracker.moment, tracker.tag_new = None, None
        checkpoint = None  # noqa: F841 - train.py's `checkpoint = None # free up memory`
    return optimizer, (state_dict if on_card else None)


def load_dynamo() -> None:
    """The whole of ``torch._dynamo`` (``light_dynamo`` defers it): generate()'s ``x[:, [-1], :]``
    makes a constant index tensor, and fake tensors convert it through ``torch._dynamo.source``."""
    import torch._dynamo

    torch._dynamo.is_compiling  # noqa: B018 - an attribute beyond light_dynamo's: the real package


def generate_step(model, idx, temperature: float, top_k: int | None):
    """One iteration of nanoGPT's ``GPT.generate`` (model.py): crop, forward, last logits, top-k,
    softmax, sample, append. A reader's model.py runs its own ``generate``."""
    block = model.config.block_size
    idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
    logits, _ = model(idx_cond)
    logits = logits[:, -1, :] / temperature
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("Inf")
    probs = F.softmax(logits, dim=-1)
    idx_next = torch.multinomial(probs, num_samples=1)
    return torch.cat((idx, idx_next), dim=1)


def run_sample(model, sample, tracker, ctx, on_card: bool, own_generate: bool):
    """sample.py, tracked: the checkpoint (init_from='resume'), the weights, then generate()'s first
    forward (the prompt: autocast's weight casts made and cached) and its longest one (the last:
    the prompt and max_new_tokens - 1 new tokens, cropped at block_size); the iterations between are
    no larger and free everything but the sequence."""
    values = sample.values
    saved = checkpoint_of(model, sample.model) if values["init_from"] == "resume" else None
    model.eval()
    with tracker:
        checkpoint = None
        if saved is not None and on_card:
            tracker.moment, tracker.tag_new = "torch_load", "checkpoint"
            checkpoint = _copies({"model": saved[0], "optimizer": saved[1]})  # alive to the end
        del saved
        tracker.moment, tracker.tag_new = "model_to_device", "weights"
        _to_device(model, tracker)
        tracker.moment, tracker.tag_new = "generate", None
        tracker.grads_of = []
        first, last = sample.prompt_tokens, sample.prompt_tokens + values["max_new_tokens"] - 1
        with torch.no_grad(), ctx:
            for length in dict.fromkeys((first, last)):  # the sequence before the iteration
                idx = torch.zeros(1, length, dtype=torch.long)
                if own_generate:
                    y = model.generate(idx, 1, temperature=values["temperature"], top_k=values["top_k"])
                else:
                    y = generate_step(model, idx, values["temperature"], values["top_k"])
                del idx, y
        tracker.moment = None
        del checkpoint
