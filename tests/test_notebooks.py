"""oomguide.notebooks: a record of a notebook's outputs is used only while the modules it used are unchanged."""

from __future__ import annotations

import json

from oomguide import notebooks


def _record(tmp_path, modules: dict) -> object:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"modules": modules, "outputs": [[{"output_type": "stream", "text": "1"}]]}))
    return path


def test_a_current_record_is_used(tmp_path):
    files = [str(notebooks.PACKAGE / "memory" / "predict.py"), str(notebooks.PACKAGE / "figures.py")]
    path = _record(tmp_path, notebooks.module_digests(files))
    assert notebooks.load(path) == [[{"output_type": "stream", "text": "1"}]]
    assert notebooks.stale_modules(path) == []


def test_a_record_of_other_code_is_not(tmp_path):
    digests = notebooks.module_digests([str(notebooks.PACKAGE / "memory" / "predict.py")])
    digests["memory/predict.py"] = "0" * 64  # made when predict.py read differently
    path = _record(tmp_path, digests)
    assert notebooks.load(path) is None
    assert notebooks.stale_modules(path) == ["memory/predict.py"]
    assert notebooks.load(_record(tmp_path, {"memory/gone.py": "0" * 64})) is None  # a module removed since
    assert notebooks.load(_record(tmp_path, {})) is None  # no modules listed: cannot be checked
    (tmp_path / "bad.json").write_text("{not json")
    assert notebooks.load(tmp_path / "bad.json") is None and notebooks.load(tmp_path / "none.json") is None


def test_the_key_follows_the_code_and_the_kernel():
    a = notebooks.key(["x = 1"], "python3")
    assert a == notebooks.key(["x = 1"], "python3")
    assert a != notebooks.key(["x = 2"], "python3") and a != notebooks.key(["x = 1"], "other")


def test_every_notebook_page_is_found():
    langs = [p.parent.name for p in notebooks.notebook_paths()]
    assert langs[0] == "en" and sorted(langs) == ["de", "en", "fr", "ja", "zh"]
