"""snippets/placement.toml read by oomguide.placement: the files a code snippet may go into."""

from __future__ import annotations

import pytest

from oomguide import placement

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
    with pytest.raises(placement.PlacementError, match="file must be one of train.py, model.py, sample.py"):
        placement.load(write(tmp_path, '["p/x.py"]\nfile = "bench.py"\nafter = "x = 1"\n'))


def test_a_sample_py_shell_line_is_a_shell_placement(tmp_path):
    places = placement.load(write(tmp_path, '["p/fewer.sh"]\nshell = "nanogpt"\n'))
    assert places["p/fewer.sh"].kind == "shell" and not places["p/fewer.sh"].is_code


def test_the_guide_places_code_into_sample_py():
    places = placement.load()
    assert any(p.is_code and p.file == "sample.py" for p in places.values())
    assert {p.file for p in places.values() if p.is_code} <= set(placement.FILES)
