"""snippets/placement.toml read by oomguide.placement: placements into nanochat (its shell, its files) and
the nanoGPT files a code snippet may go into (train.py, model.py, sample.py)."""

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
    # the nanochat page's snippets go into nanochat, except its `oomguide check --nanochat` lines,
    # which are typed in a shell beside it
    assert nanochat and all(
        p.program == "nanochat" or (p.kind == "shell" and p.file == "oomguide") for p in nanochat.values()
    )
    assert any(p.program == "nanochat" for p in nanochat.values())
    assert all(p.program != "nanochat" for rel, p in places.items() if rel not in nanochat)


SAMPLE = """init_from = 'resume'
device = 'cuda'
if init_from == 'resume':
    ckpt_path = os.path.join(out_dir, 'ckpt.pt')
    checkpoint = torch.load(ckpt_path, map_location=device)
    gptconf = GPTConfig(**checkpoint['model_args'])
"""


def write(tmp_path, text: str):
    path = tmp_path / "placement.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_sample_py_is_a_file_snippets_go_into(tmp_path):
    places = placement.load(
        write(
            tmp_path,
            '["p/map.py"]\nfile = "sample.py"\n'
            'replace_line = "checkpoint = torch.load(ckpt_path, map_location=device)"\n',
        )
    )
    place = places["p/map.py"]
    assert place.is_code and place.file == "sample.py"
    out = placement.apply(place, "checkpoint = torch.load(ckpt_path, map_location='cpu')\n", SAMPLE)
    assert "    checkpoint = torch.load(ckpt_path, map_location='cpu')" in out.splitlines()
    assert "map_location=device" not in out
    assert "in `sample.py`, this replaces the line" in placement.describe(place, "en", places)


def test_a_file_nanogpt_does_not_have_is_refused(tmp_path):
    with pytest.raises(
        placement.PlacementError, match="file must be one of train.py, model.py, sample.py \\(nanoGPT\\)"
    ):
        placement.load(write(tmp_path, '["p/x.py"]\nfile = "bench.py"\nafter = "x = 1"\n'))


def test_a_sample_py_shell_line_is_a_shell_placement(tmp_path):
    places = placement.load(write(tmp_path, '["p/fewer.sh"]\nshell = "nanogpt"\n'))
    assert places["p/fewer.sh"].kind == "shell" and not places["p/fewer.sh"].is_code


def test_the_guide_places_code_into_sample_py():
    places = placement.load()
    assert any(p.is_code and p.file == "sample.py" for p in places.values())
    assert {p.file for p in places.values() if p.is_code and p.program == "nanogpt"} <= set(
        placement.NANOGPT_FILES
    )
