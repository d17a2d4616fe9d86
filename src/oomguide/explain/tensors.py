"""Which tensor a "Tried to allocate" was: the large tensors of a nanoGPT config, or a search.

What it does: lists the large tensors of a config's train step and ``estimate_loss`` under CUDA
autocast (logits, the float32 copy ``nll_loss`` makes, activations, weights), and, without a
config, searches GPT-2-sized (B·T, V) logits buffers whose size prints as the request. A tensor
*matches* when its size, rounded as the caching allocator rounds it, prints exactly as the
message's request (``formats.prints_as``).

It must never read a message (that is ``formats``), never judge why memory ran out (``diagnosis``)
and never word anything: tensors are named by codes, which ``render`` words per language.
"""

from __future__ import annotations

import re

from ..i18n import N_
from .formats import OOMFigures, prints_as

MiB = 1024**2
SMALLEST_SEGMENTS = 20 * MiB  # requests up to this print a bucket (2 or 20 MiB), not a tensor's size

# the search without a config: GPT-2's vocabulary (padded as nanoGPT does, and as released)
SEARCH_VOCABS = (50304, 50257)
SEARCH_BLOCKS = (1024, 512, 2048, 256, 128, 64)  # most plausible first
SEARCH_MAX_BATCH = 512
SIXTEEN_BIT = "bfloat16/float16"

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, SIXTEEN_BIT: 2}
LOGITS_TENSORS = ("logits", "logits_float32")
ACTIVATION_TENSORS = ("residual", "hidden", "qkv", "mlp_hidden", "attention_scores")

# the English name of each tensor code (a msgid of the catalogs; render translates it)
TENSOR_NAMES = {
    "logits": N_("the (B·T, V) logits"),
    "logits_float32": N_(
        "the float32 copy of the (B·T, V) log-probabilities that cross_entropy makes under autocast "
        "(nll_loss runs in float32)"
    ),
    "search_logits": N_("a (B·T, V) logits buffer"),
    "search_logits_float32": N_(
        "a float32 (B·T, V) buffer (the copy cross_entropy makes under autocast, or the logits of a "
        "float32 run)"
    ),
    "residual": N_("a (B, T, C) activation (residual stream, LayerNorm output)"),
    "hidden": N_("a (B, T, C) activation (attention or MLP output)"),
    "qkv": N_("the (B, T, 3C) q, k, v projection"),
    "mlp_hidden": N_("the (B, T, 4C) MLP hidden activation (c_fc or GELU output)"),
    "attention_scores": N_(
        "the (B, n_head, T, T) attention matrix (only without flash attention: nanoGPT's manual "
        "attention path)"
    ),
    "nanochat_logits": N_(
        "nanochat's (B·T, V) logits from lm_head in the compute dtype, or their gradient (torch.compile's "
        "fused loss keeps both: nanochat/gpt.py, GPT.forward)"
    ),
    "nanochat_logits_float32": N_(
        "a float32 (B, T, V) tensor of nanochat's GPT.forward: logits.float() or the softcap's tanh "
        "(the uncompiled model: CORE evaluation, sampling)"
    ),
    "embedding_weight": N_(
        "the (V, C) token embedding / lm_head weight, its gradient or one of its AdamW states"
    ),
    "embedding_weight_copy": N_("autocast's copy of the (V, C) token embedding / lm_head weight"),
    "mlp_weight": N_("a (4C, C) MLP weight (c_fc or c_proj), its gradient or an AdamW state"),
    "attn_weight": N_("the (3C, C) c_attn weight, its gradient or an AdamW state"),
}


def _tensor(name, shape, dtype, batch=None, block=None, vocab=None) -> dict:
    nbytes = ITEMSIZE[dtype]
    for d in shape:
        nbytes *= d
    return {
        "tensor": name,
        "shape": list(shape),
        "dtype": dtype,
        "bytes": nbytes,
        "batch_size": batch,
        "block_size": block,
        "vocab_size": vocab,
    }


def config_tensors(config) -> list[dict]:
    """The large tensors of a config's train step and estimate_loss (nanoGPT's GPT under CUDA autocast)."""
    g = config.gpt_config()
    V, C, H = g.vocab_size, g.n_embd, g.n_head
    dtype = config.dtype
    out = []
    shapes = [(config.batch_size, min(config.block_size, g.block_size))]
    eval_shape = (min(config.eval_batch, config.batch_size), min(config.eval_block, g.block_size))
    if eval_shape not in shapes:
        shapes.append(eval_shape)
    for B, T in shapes:
        out.append(_tensor("logits", (B * T, V), dtype, B, T, V))
        if dtype != "float32":
            out.append(_tensor("logits_float32", (B * T, V), "float32", B, T, V))  # nll_loss's input
        out.append(_tensor("residual", (B, T, C), "float32", B, T, V))
        if dtype != "float32":
            out.append(_tensor("hidden", (B, T, C), dtype, B, T, V))
        out.append(_tensor("qkv", (B, T, 3 * C), dtype, B, T, V))
        out.append(_tensor("mlp_hidden", (B, T, 4 * C), dtype, B, T, V))
        out.append(_tensor("attention_scores", (B, H, T, T), dtype, B, T, V))
        if dtype != "float32":
            out.append(_tensor("attention_scores", (B, H, T, T), "float32", B, T, V))  # softmax, autocast
    out.append(_tensor("embedding_weight", (V, C), "float32", vocab=V))
    if dtype != "float32":
        out.append(_tensor("embedding_weight_copy", (V, C), dtype, vocab=V))
    out.append(_tensor("mlp_weight", (4 * C, C), "float32"))
    out.append(_tensor("attn_weight", (3 * C, C), "float32"))
    seen, unique = set(), []
    for t in out:
        key = (t["tensor"], tuple(t["shape"]), t["dtype"])
        if key not in seen:
            seen.add(key)
            unique.append(t)
    return unique


def search_logits(printed: str, vocabs=SEARCH_VOCABS) -> list[dict]:
    """(B·T, V) buffers of GPT-2's vocabulary that print as `printed`, most plausible first."""
    out = []
    for vocab in vocabs:
        for dtype, name in ((SIXTEEN_BIT, "logits"), ("float32", "logits_float32")):
            for block in SEARCH_BLOCKS:
                for batch in range(1, SEARCH_MAX_BATCH + 1):
                    t = _tensor(name, (batch * block, vocab), dtype, batch, block, vocab)
                    if prints_as(t["bytes"], printed):
                        out.append(t)
    # vocab first (as given), then the block (1024 first), then 16-bit before float32
    out.sort(
        key=lambda t: (
            vocabs.index(t["vocab_size"]),
            SEARCH_BLOCKS.index(t["block_size"]),
            t["dtype"] != SIXTEEN_BIT,
        )
    )
    return out


# nanochat: the tokenizer's vocabulary (scripts/tok_train.py's default; 65536 before it), its
# --max-seq-len (2048 by default, 512 in runs/runcpu.sh) and --device-batch-size (32 by default)
NANOCHAT_VOCABS = (32768, 65536)
NANOCHAT_SEQ = (2048, 1024, 512)
NANOCHAT_MAX_BATCH = 128
NANOCHAT_FRAMES = re.compile(r"scripts[/.](base_train|base_eval|chat_sft|chat_rl|chat_cli|chat_web)|nanochat/(gpt|engine|core_eval|loss_eval)\.py")
_INDUCTOR_BUFFER = re.compile(r"empty_strided_cuda\(\((\d+), (\d+)\),[^)]*\), torch\.(\w+)\)")


def is_nanochat(text: str) -> bool:
    """Whether a traceback ran in nanochat (its scripts or its model, engine or evaluation code)."""
    return bool(NANOCHAT_FRAMES.search(text))


def nanochat_logits(printed: str, text: str = "") -> list[dict]:
    """nanochat's (B·T, V) logits in the compute dtype and its float32 (B, T, V) tensors that print as
    `printed`; narrowed to the buffer an Inductor frame of the traceback allocates, when it names one."""
    out = []
    for vocab in NANOCHAT_VOCABS:
        for seq in NANOCHAT_SEQ:
            for batch in range(1, NANOCHAT_MAX_BATCH + 1):
                for t in (
                    _tensor("nanochat_logits", (batch * seq, vocab), "bfloat16", batch, seq, vocab),
                    _tensor("nanochat_logits_float32", (batch, seq, vocab), "float32", batch, seq, vocab),
                ):
                    if prints_as(t["bytes"], printed):
                        out.append(t)
    for rows, cols, dtype in _INDUCTOR_BUFFER.findall(text):
        named = [t for t in out if t["dtype"] == dtype and t["shape"] == [int(rows), int(cols)]]
        if named:
            out = named
            break
    out.sort(key=lambda t: (NANOCHAT_SEQ.index(t["block_size"]), t["dtype"] != "bfloat16", NANOCHAT_VOCABS.index(t["vocab_size"])))
    return out[:4]


def match_request(figs: OOMFigures, config=None, text: str = "") -> tuple[list[dict], str]:
    """Tensors whose size prints as the request, and how they were found: 'small', 'config',
    'nanochat' (a nanochat traceback: nanochat's logits) or 'search'."""
    printed = figs.printed["requested"]
    if figs.requested <= SMALLEST_SEGMENTS:
        return [], "small"
    if config is None and is_nanochat(text):
        found = nanochat_logits(printed, text)
        if found:
            return found, "nanochat"
    if config is not None:
        found = [t for t in config_tensors(config) if prints_as(t["bytes"], printed)]
        if found:
            return found, "config"
        vocab = config.gpt_config().vocab_size
        return search_logits(printed, tuple(dict.fromkeys((vocab, *SEARCH_VOCABS)))), "search"
    return search_logits(printed), "search"
