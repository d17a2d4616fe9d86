"""oomguide.notebooks: a record of a notebook's outputs is used only while the modules it used are
unchanged, and, where it computed with nanochat, while OOMGUIDE_NANOCHAT names the same nanochat code
(or names none: the record then stands for the checkout it was made with, as the nanochat page's figures do)."""

from __future__ import annotations

import json

from oomguide import notebooks


def _record(tmp_path, modules: dict, **more) -> object:
    path = tmp_path / "r.json"
    record = {"modules": modules, "outputs": [[{"output_type": "stream", "text": "1"}]], **more}
    path.write_text(json.dumps(record))
    return path


def test_a_current_record_is_used(tmp_path):
    files = [str(notebooks.PACKAGE / "memory" / "predict.py"), str(notebooks.PACKAGE / "figures.py")]
    path = _record(tmp_path, notebooks.module_digests(files))
    assert notebooks.load(path) == [[{"output_type": "stream", "text": "1"}]]
    assert notebooks.stale(path) == []


def test_a_record_of_other_code_is_not(tmp_path):
    digests = notebooks.module_digests([str(notebooks.PACKAGE / "memory" / "predict.py")])
    digests["memory/predict.py"] = "0" * 64  # made when predict.py read differently
    path = _record(tmp_path, digests)
    assert notebooks.load(path) is None
    assert notebooks.stale(path) == ["memory/predict.py"]
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


def _nanochat(tmp_path):
    """A stand-in nanochat checkout: the files whose content a record's nanochat code covers."""
    root = tmp_path / "nanochat"
    (root / "nanochat").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "nanochat" / "gpt.py").write_text("class GPT: ...\n")
    (root / "scripts" / "base_train.py").write_text("print('train')\n")
    return root


def test_a_record_made_with_nanochat_holds_while_its_code_does(tmp_path, monkeypatch):
    checkout = _nanochat(tmp_path)
    monkeypatch.setenv(notebooks.NANOCHAT, str(checkout))
    modules = notebooks.module_digests([str(notebooks.PACKAGE / "nanochat" / "check.py")])
    made_with = notebooks.nanochat_code()
    path = _record(tmp_path, modules, nanochat=made_with)
    assert made_with is not None and notebooks.load(path) is not None
    script = checkout / "scripts" / "base_train.py"
    script.write_text("print('train, changed')\n")  # nanochat's code changed since
    assert notebooks.load(path) is None
    assert notebooks.stale(path) == [f"the nanochat checkout that {notebooks.NANOCHAT} names"]
    script.write_text("print('train')\n")  # as it was: the record holds again, wherever the checkout is
    assert notebooks.load(path) is not None
    moved = checkout.rename(tmp_path / "elsewhere")
    monkeypatch.setenv(notebooks.NANOCHAT, str(moved))
    assert notebooks.load(path) is not None
    monkeypatch.delenv(notebooks.NANOCHAT)  # no checkout named: the page shows what the recorded one gave
    assert notebooks.load(path) is not None


def test_a_record_made_without_nanochat_holds_while_none_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(notebooks.NANOCHAT, raising=False)
    modules = notebooks.module_digests([str(notebooks.PACKAGE / "nanochat" / "check.py")])
    path = _record(tmp_path, modules, nanochat=None)  # printed how to name a checkout
    assert notebooks.load(path) is not None
    monkeypatch.setenv(notebooks.NANOCHAT, str(_nanochat(tmp_path)))  # now one is named: it would compute
    assert notebooks.load(path) is None
    # a record whose notebook imported oomguide.nanochat but that does not say which checkout it saw
    monkeypatch.delenv(notebooks.NANOCHAT)
    assert notebooks.load(_record(tmp_path, modules)) is None
    # a notebook that never imported oomguide.nanochat does not depend on the variable
    plain = notebooks.module_digests([str(notebooks.PACKAGE / "figures.py")])
    monkeypatch.setenv(notebooks.NANOCHAT, str(tmp_path / "nanochat"))
    assert notebooks.load(_record(tmp_path, plain)) is not None
