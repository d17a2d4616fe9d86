"""Placements into nanochat (snippets/placement.toml, src/oomguide/placement.py): its shell, its files."""

from __future__ import annotations

import pytest

from oomguide import placement

GPT_PY = """import torch
import torch.nn as nn


class GPT(nn.Module):
    def forward(self, idx, targets=None, kv_cache=None):
        x = self.transformer.wte(idx)
        for i, block in enumerate(self.transformer.h):
            x = block(x, ve, cos_sin, self.window_sizes[i], kv_cache)
        return x
"""


def test_nanochat_shell_and_files_are_nanochats():
    shell = placement._entry("nanochat/a.sh", {"shell": "nanochat"})
    assert (shell.kind, shell.program) == ("shell", "nanochat")
    code = placement._entry("nanochat/b.py", {"file": "nanochat/gpt.py", "after": "import torch"})
    assert code.is_code and code.program == "nanochat"
    assert placement._entry("x/c.py", {"file": "model.py", "replace": "GPT.forward"}).program == "nanogpt"
    assert placement._entry("x/d.py", {"config": "config/train_mine.py"}).program == "nanogpt"
    assert placement._entry("x/e.sh", {"shell": "oomguide"}).program == "oomguide"


def test_unknown_shell_is_refused_with_the_choices():
    with pytest.raises(placement.PlacementError, match="'nanogpt', 'nanochat', 'oomguide'"):
        placement._entry("x/a.sh", {"shell": "nanochad"})


def test_code_goes_into_a_nanochat_file_at_its_line():
    loop_line = "x = block(x, ve, cos_sin, self.window_sizes[i], kv_cache)"
    swap = placement.Placement("nanochat/c.py", "replace_line", "nanochat/gpt.py", loop_line)
    text = "if self.training:\n    x = checkpointed(x)\nelse:\n    x = block(x)\n"
    out = placement.apply(swap, text, GPT_PY)
    assert "            if self.training:\n                x = checkpointed(x)\n" in out
    assert loop_line not in out
    after = placement.Placement("nanochat/i.py", "after", "nanochat/gpt.py", "import torch")
    assert placement.apply(after, "import torch.utils.checkpoint\n", GPT_PY).startswith(
        "import torch\nimport torch.utils.checkpoint\nimport torch.nn as nn\n"
    )


def test_where_a_nanochat_shell_line_goes_in_every_language():
    place = placement._entry("nanochat/a.sh", {"shell": "nanochat"})
    lines = {lang: placement.describe(place, lang) for lang in ("en", "ja", "zh", "de", "fr")}
    assert lines["en"] == "**Where this goes**: a shell, in your nanochat checkout."
    assert all("nanochat" in line and "nanoGPT" not in line for line in lines.values()), lines


def test_the_tables_nanochat_snippets_are_placed_in_nanochat():
    places = placement.load()
    nanochat = {rel: p for rel, p in places.items() if rel.startswith("nanochat/")}
    assert nanochat and all(p.program == "nanochat" for p in nanochat.values())
    assert all(p.program != "nanochat" for rel, p in places.items() if rel not in nanochat)
