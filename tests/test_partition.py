"""nanochat's compiled training step: what its backward keeps (``nanochat.partition``).

The partition is AOTAutograd's own (min-cut, with Inductor's decompositions), traced on fake tensors.
These tests hold its two modelled parts to a direct trace: the saved set at a batch scaled from the
traces at 1 and 2 rows is the one traced at that batch, and the tracked run keeps the partition's
storages in place of eager autograd's saved tensors (the training step's peak falls by the difference).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

NANOCHAT = os.environ.get("OOMGUIDE_NANOCHAT")
pytestmark = pytest.mark.skipif(
    not (NANOCHAT and (Path(NANOCHAT) / "nanochat" / "gpt.py").is_file()),
    reason="set OOMGUIDE_NANOCHAT to the nanochat checkout",
)
CONFIG = dict(sequence_len=256, vocab_size=32768, n_layer=4, n_head=2, n_kv_head=2, n_embd=256, window_pattern="L")


@pytest.fixture(scope="module")
def fake_model():
    from oomguide.nanochat import code as nanochat_code
    from oomguide.nanochat.phases import build_meta, materialise

    code = nanochat_code.load(Path(NANOCHAT), "bfloat16")
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    model = build_meta(code, CONFIG)  # on the meta device, then fake storage: as phases.run does
    with mode, contextlib.redirect_stdout(io.StringIO()):
        materialise(model, fake=True)
    return mode, model


def tokens(rows):
    return torch.randint(0, CONFIG["vocab_size"], (rows, CONFIG["sequence_len"])), torch.randint(
        0, CONFIG["vocab_size"], (rows, CONFIG["sequence_len"])
    )


@pytest.mark.parametrize("batch", [3, 8])
def test_a_batch_scaled_from_two_and_four_rows_is_the_batch_traced(fake_model, batch):
    from oomguide.nanochat import partition

    mode, model = fake_model
    with mode:
        scaled = partition.saved_for_batch(model, tokens, batch, key=("test", "scaled"))
        traced = partition.saved_storages(model, tokens(batch))
        two = partition.saved_for_batch(model, tokens, 2, key=("test", "scaled"))
    assert scaled == traced
    # the Blocks' activations are kept at the batch's size; the weights' copies do not grow
    grown = [(a, b) for a, b in zip(two, scaled) if a[0] != b[0]]
    assert grown and all(b[0] * 2 == a[0] * batch for a, b in grown)
    assert all(a == b for a, b in zip(two, scaled) if a[4] == "weights")


def test_a_partition_keeps_less_than_eager_autograd_and_names_its_ops(fake_model):
    """Eager autograd keeps each op's saved tensors; the partition recomputes the pointwise ones
    (rms_norm's output from its input and rsqrt, relu² from relu's): fewer bytes, the logits included."""
    from oomguide.nanochat import partition

    mode, model = fake_model
    with mode:
        x, y = tokens(2)
        saved = partition.saved_storages(model, (x, y))
        eager: dict = {}

        def pack(t):
            eager.setdefault(t.untyped_storage()._cdata, t.untyped_storage().nbytes())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x, y)
    params = {p.untyped_storage()._cdata for p in [*model.parameters(), *model.buffers()]}
    eager_bytes = sum(n for k, n in eager.items() if k not in params)
    assert sum(n for n, *_ in saved) < eager_bytes
    ops = {op for _n, op, *_ in saved}
    assert "mm" in ops and "rsqrt" in ops
    logits = [s for s in saved if s[2] == (2 * CONFIG["sequence_len"], CONFIG["vocab_size"])]
    assert logits and logits[0][1] == "mm" and logits[0][3] == torch.bfloat16
    assert any(tag == "weights" for *_, tag in saved), "the weights' bfloat16 copies are kept, tagged weights"


def test_scaling_refuses_partitions_that_differ():
    from oomguide.nanochat.partition import _scaled

    two = [(2048, "mm", (2, 256, 2), torch.bfloat16, None), (32, "t", (4, 4), torch.bfloat16, "weights")]
    four = [(4096, "mm", (4, 256, 2), torch.bfloat16, None), (32, "t", (4, 4), torch.bfloat16, "weights")]
    assert _scaled(two, four, 5) == [(5120, "mm", (5, 256, 2), torch.bfloat16, None), (32, "t", (4, 4), torch.bfloat16, "weights")]
    assert _scaled(two, [(6144, "mm", (6, 256, 2), torch.bfloat16, None), four[1]], 5) is None
    assert _scaled(two, [(4096, "cat", (4, 256, 2), torch.bfloat16, None), four[1]], 5) is None
    assert _scaled(two, four[:1], 5) is None


def test_a_trace_kept_on_disk_is_read_back_by_another_process_alike(fake_model, tmp_path, monkeypatch):
    """``check --nanochat`` traces each model twice (8 to 20 s each): the traces are kept in the cache
    folder, keyed by the checkout's code, the model, the shapes, oomguide's code and PyTorch's version.
    A later run reads the same storages back; another key, or an empty OOMGUIDE_CACHE_DIR, traces."""
    from oomguide.nanochat import partition

    monkeypatch.setenv(partition.CACHE_ENV, str(tmp_path))
    mode, model = fake_model
    stored = partition.stored_key(Path(NANOCHAT), torch.bfloat16, sorted(CONFIG.items()), CONFIG["sequence_len"])
    with mode:
        first = partition.saved_storages(model, tokens(2), stored=[stored, 2])
        files = list((tmp_path / "partitions").glob("*.json"))
        assert len(files) == 1
        traced = []
        monkeypatch.setattr(partition, "_trace", lambda *a: traced.append(a) or [])
        assert partition.saved_storages(model, tokens(2), stored=[stored, 2]) == first  # as another process would
        assert not traced
        assert partition.saved_storages(model, tokens(2), stored=[stored, 3]) == [] and len(traced) == 1
        monkeypatch.setenv(partition.CACHE_ENV, "")
        assert partition.saved_storages(model, tokens(2), stored=[stored, 2]) == [] and len(traced) == 2
    files[0].write_text("{not json")
    monkeypatch.setenv(partition.CACHE_ENV, str(tmp_path))
    assert partition._load([stored, 2]) is None  # a broken file is traced again, never an error
