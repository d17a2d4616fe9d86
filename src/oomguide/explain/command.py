"""``oomguide explain`` on the command line: its arguments, its input, its output.

What it does: declares explain's arguments (cli.py builds the parser), reads the message from a
file or stdin, loads the config, and prints the explanation as text or JSON. Exit codes are
cli.py's: 0 explained, 2 bad input (one line naming the problem, raised as ExplainError).

It must never parse a message, diagnose or word an explanation itself: that is formats,
diagnosis and render.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..i18n import LANGS, N_, default_lang, gettext_for
from .diagnosis import explain
from .formats import ExplainError
from .render import render


def add_arguments(parser, lang: str = "en") -> None:
    """explain's arguments, their --help in `lang` (the card's options: ``cli.add_card_arguments``)."""
    _ = gettext_for(lang)
    parser.add_argument(
        "file",
        nargs="?",
        default="-",
        metavar="FILE",
        help=_("a file with the message or the whole traceback, or - for stdin (default)"),
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        dest="configs",
        metavar="CONFIG",
        help=_(
            "the nanoGPT config file of the run (repeatable, applied in order): names the tensor and "
            "predicts each phase"
        ),
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=_("override a setting, like train.py's --key=value (repeatable)"),
    )
    parser.add_argument(
        "--nanogpt",
        metavar="PATH",
        help=_(
            "your nanoGPT checkout (default: the one the config or the working directory is in): its "
            "train.py and model.py decide what the prediction runs"
        ),
    )
    parser.add_argument(
        "--lang",
        choices=LANGS,
        default=default_lang(),
        help=_(
            "language of the explanation, the links and error lines (default: from LC_ALL, "
            "LC_MESSAGES or LANG, else en)"
        ),
    )
    parser.add_argument(
        "--no-predict",
        action="store_true",
        help=_("with a config, skip the prediction of each phase (seconds; longer for big models)"),
    )
    parser.add_argument("--json", action="store_true", help=_("print one JSON object"))


PASTE = N_("oomguide explain: paste the message, then Ctrl-D")
PREDICTING = N_("oomguide explain: predicting each phase of the run …")


def read_input(path: str, lang: str = "en") -> tuple[str, str]:
    """(text, source name) of a file or stdin; one-line errors (worded in English: the CLI words
    them in the reader's language, ``oomguide.messages``)."""
    if path == "-":
        if sys.stdin is None:
            raise ExplainError("no input: give a file or pipe the message into stdin")
        if sys.stdin.isatty():
            print(gettext_for(lang)(PASTE), file=sys.stderr)
        return sys.stdin.read(), "stdin"
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ExplainError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise ExplainError(f"{path} is a directory, not a file") from None
    except OSError as exc:
        raise ExplainError(f"cannot read {path}: {exc.strerror or exc}") from None
    return data.decode("utf-8", errors="replace"), path


def run(args) -> int:
    text, source = read_input(args.file, args.lang)
    config, notes, judge = None, [], None
    if args.configs or args.set:
        from .. import verdict

        # the settings and the code as `oomguide check` reads them: one verdict for one config
        request = verdict.Request(
            configs=args.configs,
            overrides=args.set,
            nanogpt=args.nanogpt,
            gpu=args.gpu,
            capability=args.capability,
            search=False,
        )
        prepared, judge = verdict.judge(request)
        config, notes = prepared.config, prepared.notes

    def progress(_phases):
        if not args.json and sys.stderr.isatty():
            print(gettext_for(args.lang)(PREDICTING), file=sys.stderr, flush=True)

    gpu_memory = args.gpu_memory  # None: the card of the message
    if args.gpu or args.capability:  # the card as check resolves it: --gpu's memory wins
        from ..cli import resolve_card

        card = resolve_card(args)
        gpu_memory = card.total_memory if args.gpu else gpu_memory
    result = explain(
        text,
        config,
        gpu_memory=gpu_memory,
        predict=not args.no_predict,
        source=source,
        progress=progress,
        judge=judge,
    )
    result.warnings = notes
    if args.json:
        print(json.dumps(result.to_json(args.lang), indent=2, ensure_ascii=False))
    else:
        print(render(result, args.lang))
    return 0
