"""``oomguide check`` and ``oomguide explain``.

Exit codes: 0 every phase fits (check) / the message was explained (explain); 1 a phase does not
fit; 2 bad input (one line on stderr naming the problem, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
import unicodedata

from . import units
from .i18n import LANGS, N_, default_lang, gettext_for

EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Input the CLI cannot work with; its message is the one line the user sees."""


# TRANSLATORS: argparse's own words in --help (Python's argparse.py): the usage line's label, the
# titles of the two lists of arguments, and what -h does
USAGE = N_("usage: ")
POSITIONALS = N_("positional arguments")
OPTIONS = N_("options")
HELP = N_("show this help message and exit")
# TRANSLATORS: a title of --help's lists ("options:"), with the colon the language writes
HEADING = N_("{title}:")


_CLOSING = "，。、：；）」』！？・ー"
_OPENING = "（「『"


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, with its usage label in the parser's language."""

    lang = "en"

    def add_usage(self, usage, actions, groups, prefix=None):
        prefix = gettext_for(self.lang, "check")(USAGE) if prefix is None else prefix
        super().add_usage(usage, actions, groups, prefix)

    def _split_lines(self, text, width):
        """Help wrapped at spaces, never inside an option's name (argparse breaks --gpu-memory at its
        hyphen); Japanese and Chinese help wrapped by the columns a terminal gives each character (two for a
        wide one), between any two wide characters but never inside an identifier (--vocab-size,
        init_from), and never with a closing mark (，。：）) at the start of a line or an opening one (（「) at its end."""
        text = self._whitespace_matcher.sub(" ", text).strip()
        if not any(unicodedata.east_asian_width(c) in "WF" for c in text):  # at spaces only: --gpu-memory whole
            return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)
        lines, line = [], []  # the tokens of the line being filled
        for token in re.findall(r" |[^ \u1100-\uffdc]+|.", text):  # a space, an identifier, one wide character
            if token == " " and not line:
                continue
            if line and token != " " and _columns("".join(line) + token) > width:
                # a closing mark takes the token before it to the next line (and that one's, if it is a closing
                # mark too: "）、"), an opening mark goes with what it opens
                carried = []
                while len(line) > 1 and ((carried or [token])[0][0] in _CLOSING or line[-1] in _OPENING):
                    carried.insert(0, line.pop())
                lines.append("".join(line).rstrip())
                line = carried
            line.append(token)
        return [*lines, "".join(line).rstrip()] if line else lines

    def _fill_text(self, text, width, indent):
        """The description, wrapped as ``_split_lines`` wraps the options' help."""
        return "\n".join(indent + line for line in self._split_lines(text, width - len(indent)))


UNRECOGNIZED = "unrecognized arguments: "  # argparse's words (ArgumentParser.parse_args)


def _as_set(words: list[str]) -> list[str]:
    """train.py's ``--key=value`` (or ``--key value``) among words argparse did not recognise, as the
    ``--set key=value`` check and explain take: ``["batch_size=8"]``."""
    settings = []
    for i, word in enumerate(words):
        m = re.fullmatch(r"--([A-Za-z_]\w*)(?:=(.*))?", word)
        if not m or ("-" in m.group(1)):
            continue
        value = m.group(2)
        if value is None and i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
        if value is not None:
            settings.append(f"{m.group(1)}={value}")
    return settings


class _Parser(argparse.ArgumentParser):
    """argparse, speaking `lang` (--help and the error line); bad input ends in one line, exit 2."""

    def __init__(self, *args, lang: str | None = None, **kwargs):
        self.lang = lang or default_lang()
        _ = gettext_for(self.lang, "check")
        formatter = type("Formatter", (_Formatter,), {"lang": self.lang})
        kwargs.setdefault("allow_abbrev", False)  # "--gpu" is never "--gpu-memory" (nor any prefix another)
        super().__init__(*args, add_help=False, formatter_class=formatter, **kwargs)
        self._positionals.title = _(POSITIONALS)
        self._optionals.title = _(OPTIONS)
        self.add_argument("-h", "--help", action="help", default=argparse.SUPPRESS, help=_(HELP))

    def format_help(self):  # argparse writes "title:" itself: the language's colon instead
        _ = gettext_for(self.lang, "check")
        text = super().format_help()
        for group in self._action_groups:
            if group.title:
                text = text.replace(f"\n{group.title}:\n", f"\n{_(HEADING).format(title=group.title)}\n")
        return text


    def error(self, message):  # argparse's own errors: one line, exit 2
        from .check_render import usage_error_line

        if message.startswith(UNRECOGNIZED):
            settings = _as_set(message[len(UNRECOGNIZED) :].split(" "))
            if settings:  # train.py's spelling of a setting: name the one check and explain take
                message += f" (a setting is given as {' '.join('--set ' + s for s in settings)})"
                # (messages.py words the whole line in the reader's language)
        self.exit(EXIT_BAD_INPUT, usage_error_line(message, self.lang) + "\n")

    def parse_known_args(self, args=None, namespace=None):
        # argparse reads "-3GiB" as an option (its _negative_number_matcher takes only "-3" or
        # "-.5", in ArgumentParser._parse_optional), so "--gpu-memory -3GiB" would end in "expected
        # one argument": an option that takes one value gets a dash-and-digit word as that value
        # (as --gpu-memory=-3GiB), and its type then says what is wrong with it. Subcommands pass
        # through here too (_SubParsersAction.__call__ calls subparser.parse_known_args).
        args = list(sys.argv[1:] if args is None else args)
        self.lang = _lang_in(args) or self.lang  # for error(): the language the command line asks for
        for i in range(len(args) - 2, -1, -1):
            action = self._option_string_actions.get(args[i])
            if action is not None and action.nargs is None and re.match(r"-\.?[0-9]", args[i + 1]):
                args[i : i + 2] = [f"{args[i]}={args[i + 1]}"]
        return super().parse_known_args(args, namespace)


def _lang_in(words: list[str]) -> str | None:
    """The value of --lang in `words` (before argparse has read them), when it is one of LANGS; the
    last one given, as argparse keeps the last."""
    found = None
    for i, word in enumerate(words):
        value = word.partition("=")[2] if word.startswith("--lang=") else None
        if word == "--lang" and i + 1 < len(words):
            value = words[i + 1]
        if value in LANGS:
            found = value
    return found


def _command_in(words: list[str]) -> str | None:
    """The command word (check, explain) of a command line, after any --lang given before it."""
    i = 0
    while i < len(words) and (words[i] == "--lang" or words[i].startswith("--lang=")):
        i += 2 if words[i] == "--lang" else 1
    return words[i] if i < len(words) else None


def add_lang(parser, _) -> None:
    """--lang, for check: the language of the output and of the error lines."""
    parser.add_argument(
        "--lang",
        choices=LANGS,
        default=default_lang(),
        help=_(
            "language of the output and of error lines (default: from LC_ALL, LC_MESSAGES or LANG, else en)"
        ),
    )


def _card_option(read):
    """An argparse type from a library reader (a ValueError is argparse's one-line error)."""

    def convert(text: str):
        try:
            return read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def add_card_arguments(parser, gpu_memory_default, gpu_memory_help: str, lang: str) -> None:
    """--gpu-memory, --gpu and --capability: the card, for check and explain alike (one reader of each:
    ``units.card_memory``, ``memory.gpus``; explain imports the engine only when --capability is given);
    their --help in `lang`."""
    _ = gettext_for(lang, "check")

    def capability(text: str):
        from .memory import gpus

        return gpus.parse_capability(text)

    parser.add_argument(
        "--gpu-memory",
        type=_card_option(units.card_memory),
        default=gpu_memory_default,
        metavar="SIZE",
        help=_(gpu_memory_help),
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help=_(
            'the card by name ("RTX 4070", "RTX 4060 Ti 8GB", T4, A100-40GB, ...): its memory and compute '
            "capability, which picks CUDA's attention kernel; overrides --gpu-memory"
        ),
    )
    parser.add_argument(
        "--capability",
        type=_card_option(capability),
        metavar="X.Y",
        help=_(
            "the compute capability of a card given by --gpu-memory, e.g. 7.5 for a T4 or 6.0 for a P100 "
            "(it picks CUDA's attention kernel; default: 8.6 assumed, as the output says)"
        ),
    )


def resolve_card(args):
    """The card that --gpu, --gpu-memory and --capability name (``memory.gpus.resolve_card``)."""
    from .memory import gpus

    return gpus.resolve_card(args.gpu, args.gpu_memory, args.capability)


def _new_parser(lang: str):
    _ = gettext_for(lang, "check")
    parser = _Parser(
        prog="oomguide", lang=lang, description=_("CUDA out-of-memory in nanoGPT: predict it, explain it.")
    )
    add_lang(parser, _)  # "oomguide --lang ja --help", and before the command: _main reads it wherever it is
    return parser, parser.add_subparsers(dest="command", required=True, parser_class=_Parser)


def build_parser(lang: str | None = None) -> argparse.ArgumentParser:
    """Both commands' arguments, their --help in `lang` (default: the locale's language)."""
    from . import memory  # check's phases (the engine: torch); explain alone needs it not (_explain_parser)

    lang = lang or default_lang()
    _ = gettext_for(lang, "check")
    parser, sub = _new_parser(lang)

    check = sub.add_parser(
        "check",
        lang=lang,
        help=_("predict each phase's peak GPU memory for a nanoGPT config, no GPU needed"),
        description=_(
            "Predict the peak CUDA memory of nanoGPT's train step and estimate_loss for "
            "a config, whether each fits the card, and the largest batch_size that does."
        ),
    )
    check.add_argument(
        "configs",
        nargs="*",
        metavar="CONFIG",
        help=_("nanoGPT config files (config/train_*.py), applied in order"),
    )
    check.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=_("override a setting, like train.py's --key=value (repeatable)"),
    )
    check.add_argument(
        "--nanogpt",
        metavar="PATH",
        help=_(
            "your nanoGPT checkout (default: the one the config or the working directory is in): its "
            "train.py and model.py decide what runs"
        ),
    )
    check.add_argument(
        "--nanochat",
        metavar="PATH",
        help=_(
            "your nanochat checkout: predict the nanochat command line given after -- (a line of "
            "runs/speedrun.sh or runs/runcpu.sh) with nanochat's own model and optimizer code"
        ),
    )
    check.add_argument(
        "--from-base",
        metavar="LINE",
        help=_(
            "with --nanochat: the base_train command line whose checkpoint the script loads (default: "
            "the checkpoint's meta file in $NANOCHAT_BASE_DIR, else base_train's defaults)"
        ),
    )
    check.add_argument(
        "--tokenizer",
        metavar="LINE",
        help=_(
            "with --nanochat: the tok_train command line that trained the tokenizer, for its --vocab-size "
            "(default: tok_train.py's default)"
        ),
    )
    check.add_argument(
        "--model", metavar="PATH", help=_("a nanoGPT model.py to run instead of the checkout's")
    )
    add_card_arguments(
        check,
        memory.DEFAULT_GPU_MEMORY,
        N_(
            "the card's total memory as PyTorch reports it (default 11.69GiB, a 12 GB card); "
            "units GiB, GB, MiB, MB"
        ),
        lang,
    )
    check.add_argument(
        "--alloc-conf",
        metavar="SETTING",
        help=_(
            "the caching allocator's setting, as PYTORCH_CUDA_ALLOC_CONF (default: that variable, "
            "as PyTorch reads it), e.g. expandable_segments:True"
        ),
    )
    check.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        metavar="N",
        help=_(
            "processes (GPUs) that train together, as torchrun's --nproc_per_node; the figures are per rank"
        ),
    )
    check.add_argument(
        "--strategy",
        metavar="ddp|fsdp",
        help=_(
            "how the processes share the work: ddp (nanoGPT's train.py, the default with N > 1) "
            "or fsdp (FSDP2's fully_shard on each Block and the model)"
        ),
    )
    check.add_argument(
        "--gradient-as-bucket-view",
        action="store_true",
        help=_("DDP built with gradient_as_bucket_view=True: gradients are views into its buckets"),
    )
    check.add_argument(
        "--phase",
        choices=list(memory.CHECKS),
        action="append",
        help=_(
            "only this phase (repeatable): resuming from a checkpoint, the first estimate_loss() at "
            "iteration 0, the first step (AdamW's state created), a train step, a later estimate_loss(), "
            "or sample.py (with --sample)"
        ),
    )
    check.add_argument(
        "--sample",
        action="store_true",
        help=_(
            "predict sample.py instead of train.py: CONFIG files and --set take sample.py's keys "
            "(num_samples, max_new_tokens, start, init_from, out_dir, dtype, compile, ...)"
        ),
    )
    check.add_argument(
        "--no-search", action="store_true", help=_("skip the search for the largest batch_size")
    )
    check.add_argument("--json", action="store_true", help=_("print one JSON object"))
    add_lang(check, _)
    _add_explain(sub, lang)
    return parser


def _add_explain(sub, lang: str) -> None:
    from .explain import command as explain_command  # explain's arguments live with explain

    _ = gettext_for(lang, "check")
    explain = sub.add_parser(
        "explain",
        lang=lang,
        help=_("explain a PyTorch OOM message (or a whole traceback)"),
        description=_(
            "Read a CUDA out-of-memory message and say which tensor it was, why it "
            "failed, and which section of the guide to read."
        ),
    )
    explain_command.add_arguments(explain, lang)
    add_card_arguments(
        explain,
        None,
        N_(
            "the card to compare with and predict for (default: the total capacity in the message); "
            "units GiB, GB, MiB, MB"
        ),
        lang,
    )


def _explain_parser(lang: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``oomguide explain`` alone: reading a message imports no torch, and check's
    arguments would (build_parser)."""
    lang = lang or default_lang()
    parser, sub = _new_parser(lang)
    _add_explain(sub, lang)
    return parser


def _progress(lang: str, shown: list):
    """The batch search's progress line on stderr, one line per phase (`shown`: the phases shown, so
    that the caller ends the last line)."""
    from .check_render import progress_line

    def start(phase: str):
        if shown:
            print(file=sys.stderr)  # end the previous phase's line
        shown.append(phase)

        def report(done: int) -> None:
            print("\r  " + progress_line(phase, done, lang), end="", file=sys.stderr, flush=True)

        return report

    return start


def request_of(args):
    """check's arguments as the library's request (``verdict.Request``)."""
    from . import verdict

    return verdict.Request(
        configs=list(args.configs),
        overrides=list(args.set),
        nanogpt=args.nanogpt,
        model=args.model,
        gpu=args.gpu,
        gpu_memory=args.gpu_memory,
        capability=args.capability,
        alloc_conf=args.alloc_conf,
        nproc_per_node=args.nproc_per_node,
        strategy=args.strategy,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
        phases=args.phase,
        search=not args.no_search,
        sample=args.sample,
    )


def run_nanochat(args) -> int:
    from .nanochat import check, render

    if args.configs or args.set:
        raise BadInput("--nanochat takes the nanochat command after --, not config files or --set")
    if not args.nanochat_command:
        raise BadInput(
            "no command after --: give a nanochat command line, e.g. python -m scripts.base_train --depth=4"
        )
    quiet = args.json or not sys.stderr.isatty()
    shown: list = []
    progress = None if quiet else _progress(args.lang, shown)
    request = check.Request(
        args.nanochat,
        args.nanochat_command,
        gpu=args.gpu,
        gpu_memory=args.gpu_memory,
        capability=args.capability,
        alloc_conf=args.alloc_conf,
        search=not args.no_search,
        from_base=args.from_base,
        tokenizer=args.tokenizer,
    )
    out = check.verdict(request, progress=progress)
    if shown:
        print(file=sys.stderr)
    print(json.dumps(out, indent=2) if args.json else render.render(out, args.lang))
    return EXIT_FITS if out["fits"] else EXIT_DOES_NOT_FIT


def run_check(args) -> int:
    from . import verdict

    if args.nanochat:
        return run_nanochat(args)

    quiet = args.json or not sys.stderr.isatty()
    run = verdict.prepare(request_of(args))
    shown: list = []
    progress = None if quiet else _progress(args.lang, shown)
    out = verdict.verdict(run, progress=progress, prefetch=getattr(args, "program", False))
    if shown:
        print(file=sys.stderr)  # the last progress line ends before the answer
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_check(out, run.config, args.lang)
    return EXIT_FITS if out["fits"] else EXIT_DOES_NOT_FIT


def _print_check(out: dict, config, lang: str = "en") -> None:
    from .check_render import render

    print(render(out, config, lang))


def main(argv=None) -> int:
    """The command line (`argv`: its arguments; None: the program's own, ``sys.argv``)."""
    rc = _main(argv)
    if argv is None:
        _leave(rc)
    return rc


def _main(argv) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    word = _command_in(words)
    command = None
    if word == "check" and any(w == "--nanochat" or w.startswith("--nanochat=") for w in words) and "--" in words:
        # the nanochat command after the first --, with its own options and --, as the reader typed it
        at = words.index("--")
        words, command = words[:at], words[at + 1 :]
    given = _lang_in(words)
    lang = given or default_lang()  # --help and argparse's errors speak it too
    parser = _explain_parser(lang) if word == "explain" else build_parser(lang)
    args = parser.parse_args(words)
    # --lang before the command word: the command's own default (the locale's language) would hide it
    args.lang = given or args.lang
    args.nanochat_command = command
    args.program = argv is None
    if (
        args.program
        and not getattr(args, "nanochat", None)
        and (args.command == "check" or args.configs or args.set)
    ):
        # (nanochat's optim.py calls torch.compile at import: it needs all of TorchDynamo)
        # the program itself (not a call from Python) with a prediction ahead: TorchDynamo only if needed
        from .memory import light_dynamo

        light_dynamo.install()
    try:
        if args.command == "check":
            return run_check(args)
        from .explain import command as explain_command

        return explain_command.run(args)
    except BrokenPipeError:  # output piped into `head` and closed: nothing left to say
        # the interpreter flushes stdout on exit: point it at /dev/null so that the flush is silent
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FITS
    except (BadInput, ValueError, OSError, *_engine_errors()) as exc:
        # ConfigError, verdict.BadRequest and checkout.CheckoutError are ValueErrors
        from .check_render import error_line

        print(error_line(args.command, str(exc), args.lang), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def _engine_errors() -> tuple[type[Exception], ...]:
    """The engine's bad-input error, where the engine was imported (only then can it have been raised):
    explain without a config never imports it, nor torch."""
    models = sys.modules.get("oomguide.memory.models")
    return (models.PredictionError,) if models else ()


def _leave(rc: int) -> None:
    """End the program now, its output flushed: tearing down an interpreter that imported PyTorch
    takes most of a second, and nothing of this process outlives it (the prefetching child, if any,
    is ended first).
    Kept for speed (issue 23): interpreter teardown after PyTorch costs about 0.5 s (re-measured on
    the 124M check: 3.70 s of CPU with it, 4.21 s without, best of 3), and that check's goal
    (≤ 1.6x `import torch`) is not met without it; see memory/light_dynamo.py."""
    prefetch = sys.modules.get("oomguide.memory.prefetch")  # imported by check only: no child otherwise
    if prefetch:
        prefetch.stop()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
