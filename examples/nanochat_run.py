"""Run one of nanochat's own scripts, with instrumentation around it and never inside it.

    python nanochat_run.py RECORD.json scripts.base_train [--flag=value ...]

Run in a nanochat checkout (the working directory), as ``python -m scripts.base_train ...`` would
run there: the checkout goes first on ``sys.path`` and the script runs with ``runpy`` as
``__main__``. Before it starts, the checkout's ``nanochat/gpt.py`` is imported and its classes are
wrapped: ``GPT.forward`` records the shape of each call's tokens, whether targets were given, whether
the model was in training mode with gradients on, and whether a KV cache was passed (sampling and
chat: ``nanochat/engine.py``); ``Block.forward`` counts how often Blocks run (twice per training
forward when they are recomputed in backward); ``KVCache.__init__`` records each cache's shape; the model's per-layer attention windows are
recorded at its first forward.
The record is written as JSON when the script ends, however it ends.

Wrapping methods from outside would be traced by ``torch.compile``, so the examples run this
runner with ``TORCHDYNAMO_DISABLE=1`` (examples/nanochat_checkout.py says when, and the one run
that compiles as nanochat does is run as plain ``python -m``).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback


def instrument(rec: dict) -> None:
    import torch
    from nanochat import engine, gpt  # the checkout's modules, which the script imports next

    GPT, Block, KVCache = gpt.GPT, gpt.Block, engine.KVCache
    plain_forward, plain_block, plain_cache = GPT.forward, Block.forward, KVCache.__init__

    def forward(self, idx, targets=None, kv_cache=None, *args, **kwargs):
        rec.setdefault("window_sizes", [list(w) for w in self.window_sizes])
        rec["forwards"].append(
            {
                "shape": list(idx.shape),
                "targets": targets is not None,
                "training": self.training,
                "grad": torch.is_grad_enabled(),
                "kv_cache": kv_cache is not None,
                "n_layer": len(self.transformer.h),
            }
        )
        return plain_forward(self, idx, targets, kv_cache, *args, **kwargs)

    def block(self, *args, **kwargs):
        key = "training" if self.training and torch.is_grad_enabled() else "other"
        rec["block_calls"][key] += 1
        return plain_block(self, *args, **kwargs)

    def cache(self, batch_size, num_heads, seq_len, head_dim, num_layers, *args, **kwargs):
        rec["kv_caches"].append(
            {
                "batch_size": batch_size,
                "num_heads": num_heads,
                "seq_len": seq_len,
                "head_dim": head_dim,
                "num_layers": num_layers,
            }
        )
        return plain_cache(self, batch_size, num_heads, seq_len, head_dim, num_layers, *args, **kwargs)

    GPT.forward, Block.forward, KVCache.__init__ = forward, block, cache


def main(argv: list[str]) -> int:
    record_path, module, *args = argv
    rec = {
        "module": module,
        "argv": args,
        "forwards": [],
        "block_calls": {"training": 0, "other": 0},
        "kv_caches": [],
        "error": None,
    }
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [os.getcwd(), *(p for p in sys.path if os.path.abspath(p or ".") != here)]
    rc = 0
    try:
        instrument(rec)
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if rc:
            rec["error"] = f"SystemExit({exc.code!r})"
    except BaseException as exc:  # the script's own failure, recorded and re-raised as an exit code
        traceback.print_exc()
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rc = 1
    finally:
        with open(record_path, "w") as f:
            json.dump(rec, f)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
