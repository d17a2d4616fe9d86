"""The CLI's language: --lang, its default from the environment's locale, and the library's messages.

The default is the locale as command-line tools read it for messages (LC_ALL, then LC_MESSAGES,
then LANG); English for C, POSIX and the languages oomguide has no catalog for. Every msgid of
``oomguide.messages`` matches the library's own sentence, so a reworded library message that the
catalog no longer matches (and would print in English) fails here.
"""

from __future__ import annotations

import re

import pytest

from oomguide import checkout, config, figures, i18n, messages, units, verdict
from oomguide.cli import main
from oomguide.memory import gpus


@pytest.mark.parametrize(
    ("env", "lang"),
    [
        ({"LANG": "ja_JP.UTF-8"}, "ja"),
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "de_DE"}, "de"),
        ({"LANG": "fr_FR.UTF-8@euro"}, "fr"),
        ({"LANG": "en_GB.UTF-8"}, "en"),
        ({"LANG": "C"}, "en"),
        ({"LANG": "POSIX"}, "en"),
        ({"LANG": "C.UTF-8"}, "en"),
        ({"LANG": "es_ES.UTF-8"}, "en"),
        ({}, "en"),
        ({"LC_ALL": "de_DE.UTF-8", "LC_MESSAGES": "fr_FR", "LANG": "ja_JP"}, "de"),
        ({"LC_MESSAGES": "fr_FR", "LANG": "ja_JP"}, "fr"),
        ({"LC_ALL": "", "LANG": "zh_CN"}, "zh"),  # an empty variable is not set
        ({"LC_ALL": "C", "LANG": "ja_JP.UTF-8"}, "en"),  # LC_ALL=C wins, as in every C program
    ],
)
def test_default_language_from_the_locale(env, lang):
    assert i18n.default_lang(env) == lang


def test_check_and_explain_default_to_the_locale(monkeypatch, capsys):
    monkeypatch.setenv("LANG", "ja_JP.UTF-8")
    assert main(["check", "no/such/config.py"]) == 2
    assert (
        capsys.readouterr().err == "oomguide check：エラー：設定ファイルが見つかりません：no/such/config.py\n"
    )
    monkeypatch.setenv("LC_ALL", "fr_FR.UTF-8")
    assert main(["explain", "no/such/message.txt"]) == 2
    assert (
        capsys.readouterr().err
        == "oomguide explain\u202f: erreur\u202f: fichier introuvable\u202f: no/such/message.txt\n"
    )
    assert main(["explain", "no/such/message.txt", "--lang", "en"]) == 2  # --lang wins over the locale
    assert capsys.readouterr().err == "oomguide explain: error: file not found: no/such/message.txt\n"


def _raised(func, *args) -> str:
    with pytest.raises(ValueError) as info:
        func(*args)
    return str(info.value)


def library_errors(tmp_path) -> list[str]:
    """The common one-line errors, raised by the library itself."""
    binary = tmp_path / "ckpt.py"
    binary.write_bytes(b"\x80\x03binary")
    nul = tmp_path / "nul.py"
    nul.write_text("batch_size = 1\x00", encoding="utf-8")
    return [
        _raised(config.load_config, [str(tmp_path / "missing.py")], []),
        _raised(config.load_config, [str(tmp_path)], []),
        _raised(config.load_config, [str(binary)], []),
        _raised(config.load_config, [str(nul)], []),
        _raised(config.load_config, [], ["batch_size"]),
        _raised(config.load_config, [], ["batch_size=0"]),
        _raised(config.load_config, [], ["dropout='x'"]),
        _raised(config.load_config, [], ["compile=3"]),
        _raised(config.load_config, [], ["eval_batch_size='x'"]),
        _raised(gpus.find_gpu, "RTX 4060 Ti"),
        _raised(gpus.find_gpu, "RTX 4090 Super Duper"),
        _raised(gpus.find_gpu, "zzzzzzzz"),
        _raised(gpus.parse_capability, "eight"),
        _raised(units.card_memory, "12"),
        _raised(units.card_memory, "12XB"),
        _raised(units.card_memory, "0GiB"),
        _raised(units.card_memory, "-3GiB"),
        _raised(units.card_memory, "100MiB"),
        _raised(checkout.read, tmp_path),
        _raised(verdict.prepare, verdict.Request(nproc_per_node=0)),
        _raised(verdict.prepare, verdict.Request(strategy="ddp")),
    ]


def test_common_errors_are_translated_with_their_figures(tmp_path):
    errors = library_errors(tmp_path)
    unmatched = [e for e in errors if messages.match(e) is None]
    assert not unmatched, f"library messages no msgid of oomguide.messages matches: {unmatched}"
    for text in errors:
        msgid, values = messages.match(text)
        for lang in i18n.LANGS[1:]:
            translated = messages.translate(text, lang)
            assert translated != text, f"{lang}: left in English: {text}"
            for name, value in values.items():  # paths, sizes, names: as the library wrote them
                value = as_written(msgid, name, value, lang)
                if value and " or " not in value:
                    assert value in translated, f"{lang}: {value!r} lost in {translated!r}"


def as_written(msgid: str, name: str, value: str, lang: str) -> str:
    """A message's value as `lang`'s sentence must hold it: as the library wrote it, except a size or a
    count the library computed (the language's numbers) and a list (the language's separator)."""
    if name in messages.COMPUTED_SIZES.get(msgid, ()) and value[:1] not in "'\"":
        return figures.format_bytes(units.parse_size(value), lang)
    if name in messages.COMPUTED_COUNTS.get(msgid, ()):
        return figures.format_count(int(value.replace(",", "")), lang)
    if name == "want" and value in messages.WANTS:
        return i18n.gettext_for(lang, "check")(value)
    if name == "type" and msgid == messages.INVALID_TYPE and value in messages.ARGPARSE_TYPES:
        return i18n.gettext_for(lang, "check")(messages.ARGPARSE_TYPES[value])
    _ = i18n.gettext_for(lang, "check")

    def listed(text: str) -> str:  # each item quoted as the language quotes the reader's words
        items = text.split(", ")
        return _(", ").join(_(messages.QUOTED).format(value=i[1:-1]) if re.fullmatch(r"'[^']*'", i) else i for i in items)

    if name in ("places", "cards", *messages.LISTS.get(msgid, ())):
        return listed(value)
    if name == "choices":
        return _(messages.OR).join(listed(part) for part in value.split(messages.OR))
    if re.fullmatch(r"'[^']*'", value) and f"={{{name}}}" not in msgid:  # the reader's words, quoted
        return i18n.gettext_for(lang, "check")(messages.QUOTED).format(value=value[1:-1])
    return value


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_a_size_the_tool_computed_is_written_in_the_readers_language(capsys, lang):
    """Issue 31: --gpu-memory 1MiB's error set the CUDA context's 256 MiB aside as "256.00 MiB" in
    every language; the size the reader typed stays as typed."""
    with pytest.raises(SystemExit):
        main(["check", "--gpu-memory", "1MiB", "--lang", lang])
    err = capsys.readouterr().err
    assert i18n.gettext_for(lang, "check")(messages.QUOTED).format(value="1MiB") in err and figures.format_bytes(units.CONTEXT_BYTES, lang) in err, err


def nanochat_errors(tmp_path) -> list[str]:
    """check --nanochat's one-line errors (the checkout, the command line, the script's own asserts),
    raised by the library on a stand-in checkout: no nanochat needed."""
    from oomguide.nanochat import code, command, plan

    fake = tmp_path / "nanochat-like"
    (fake / "nanochat").mkdir(parents=True)
    (fake / "scripts").mkdir()
    for name in ("gpt.py", "engine.py", "common.py", "flash_attention.py"):
        (fake / "nanochat" / name).write_text("x = 1\n")
    (fake / "nanochat" / "optim.py").write_text("import oomguide_no_such_module_here\n")
    (fake / "scripts" / "base_train.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--depth', type=int, default=20)\n"
    )
    (fake / "scripts" / "chat_sft.py").write_text("x = 1\n")
    (fake / "scripts" / "base_eval.py").write_text("parser.add_argument('--x', type=lambda s: s)\n")
    (fake / "scripts" / "chat_cli.py").write_text("def (\n")
    empty = tmp_path / "empty-gpt"
    for name in ("gpt.py", "optim.py", "engine.py", "common.py", "flash_attention.py"):
        (empty / "nanochat").mkdir(parents=True, exist_ok=True)
        (empty / "nanochat" / name).write_text("x = 1\n")
    (empty / "scripts").mkdir()
    return [
        _raised(command.parse_line, ""),
        _raised(command.parse_line, "bash runs/speedrun.sh"),
        _raised(command.parse_line, "python -m scripts.base_train 'unclosed"),
        _raised(command.parse_line, "python -m nanochat.dataset -n 170 &"),
        _raised(command.parse_line, "python -m scripts.tok_train --max-chars=2000000000"),
        _raised(command.parse_line, "python -m scripts.tok_eval"),
        _raised(command.parse_line, "python -m scripts.infer_bench"),
        _raised(command.parse_line, "python -u"),
        _raised(command.parse_line, "torchrun --nproc_per_node=x -m scripts.base_train"),
        _raised(command.parse_line, "torchrun --standalone"),
        _raised(code.check_checkout, tmp_path / "no-such-folder"),
        _raised(code.check_checkout, tmp_path / "empty-gpt" / "scripts"),
        _raised(code.load, fake, "bfloat16"),
        _raised(code.load, empty, "bfloat16"),
        _raised(code.compute_dtype_for, (8, 0), {"NANOCHAT_DTYPE": "int8"}),
        _raised(command.script_parser, fake, "chat_rl"),
        _raised(command.script_parser, fake, "chat_sft"),
        _raised(command.script_parser, fake, "base_eval"),
        _raised(command.script_parser, fake, "chat_cli"),
        _raised(command.script_arguments, fake, command.Command("base_train", 1, ["--depth=abc"])),
        _raised(plan._accum, plan.BatchRule("base_train", 1048576, 2048, 8), 19),
        _raised(plan._accum, plan.BatchRule("chat_rl", 16, repeat=2), 3),
        _raised(plan.base_model, None, fake, None, {}, "python -m scripts.base_eval", 32768),
    ]


def test_nanochat_errors_are_translated_with_their_values(tmp_path):
    errors = nanochat_errors(tmp_path)
    unmatched = [e for e in errors if messages.match(e) is None]
    assert not unmatched, f"nanochat messages no msgid of oomguide.messages matches: {unmatched}"
    for text in errors:
        msgid, values = messages.match(text)
        for lang in i18n.LANGS[1:]:
            translated = messages.translate(text, lang)
            assert translated != text, f"{lang}: left in English: {text}"
            for name, value in values.items():
                value = as_written(msgid, name, value, lang)
                assert value in translated, f"{lang}: {value!r} lost in {translated!r}"


@pytest.mark.parametrize("lang", ["ja", "fr"])
def test_nanochat_error_line_in_the_language_exit_2(capsys, lang):
    rc = main(
        [
            "check",
            "--lang",
            lang,
            "--nanochat",
            "/no/such/nanochat",
            "--",
            "python",
            "-m",
            "scripts.base_train",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "/no/such/nanochat" in err
    assert messages.translate("--nanochat /no/such/nanochat: no such directory", lang) in err


def test_english_is_the_library_text_and_unknown_text_stays():
    text = "something the catalog never heard of: 3.00 GiB"
    assert messages.translate(text, "ja") == text
    assert messages.translate("config file not found: a.py", "en") == "config file not found: a.py"


def test_every_reader_of_a_guide_key_is_translated():
    """A note names the code that reads a key only the guide's change adds (checkout.GUIDE_KEYS)."""
    assert {reader for reader, _, _ in checkout.GUIDE_KEYS.values()} <= set(messages.READERS)


def test_option_errors_and_argparses_own_wording_are_translated(capsys):
    with pytest.raises(SystemExit) as info:
        main(["check", "x.py", "--gpu-memory", "0GiB", "--lang", "ja"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err
        == "oomguide：エラー：引数 --gpu-memory：サイズは 0 より大きくなければなりません（指定値：「0GiB」）\n"
    )
    with pytest.raises(SystemExit):
        main(["check", "x.py", "--phase", "nope", "--lang=de"])
    err = capsys.readouterr().err  # argparse's own sentence, matched by its msgid (issue 31)
    assert err.startswith("oomguide: Fehler: Argument --phase: ungültige Auswahl: „nope“ (möglich: „resume“, "), err
    text = "argument --phase: a wording argparse may use one day"  # no msgid: English, not half of it
    assert messages.translate(text, "de") == text


@pytest.mark.parametrize(
    ("lang", "quoted"),
    [("en", "'RTX 4090 Super Duper'"), ("de", "„RTX 4090 Super Duper“"), ("fr", "«\u202fRTX 4090 Super Duper\u202f»"),
     ("ja", "GPU「RTX 4090 Super Duper」が"), ("zh", "GPU“RTX 4090 Super Duper”；")],
)
def test_the_readers_value_is_quoted_as_the_language_quotes_it(capsys, lang, quoted):
    """A reviewer's item (issue 31): error lines quoted the reader's value Python's way ('RTX 3060') in every
    language. They now take the language's quotation marks, with no space beside full-width ones; a value
    after "=" (init_from='resume') is Python's own spelling and keeps its quotes."""
    assert main(["check", "--gpu", "RTX 4090 Super Duper", "--lang", lang]) == 2
    assert quoted in capsys.readouterr().err
    code = messages.translate("block_size 2048 is above the model's 1024 (init_from='gpt2')", lang)
    assert "init_from='gpt2'" in code
