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

from . import units, versions

EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Input the CLI cannot work with; its message is the one line the user sees."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        self.exit(EXIT_BAD_INPUT, f"oomguide: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        # argparse reads "-3GiB" as an option (its _negative_number_matcher takes only "-3" or
        # "-.5", in ArgumentParser._parse_optional), so "--gpu-memory -3GiB" would end in "expected
        # one argument": an option that takes one value gets a dash-and-digit word as that value
        # (as --gpu-memory=-3GiB), and its type then says what is wrong with it. Subcommands pass
        # through here too (_SubParsersAction.__call__ calls subparser.parse_known_args).
        args = list(sys.argv[1:] if args is None else args)
        for i in range(len(args) - 2, -1, -1):
            action = self._option_string_actions.get(args[i])
            if action is not None and action.nargs is None and re.match(r"-\.?[0-9]", args[i + 1]):
                args[i : i + 2] = [f"{args[i]}={args[i + 1]}"]
        return super().parse_known_args(args, namespace)


def _card_option(read):
    """An argparse type from a library reader (a ValueError is argparse's one-line error)."""

    def convert(text: str):
        try:
            return read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _new_parser():
    parser = _Parser(prog="oomguide", description="CUDA out-of-memory in nanoGPT: predict it, explain it.")
    return parser, parser.add_subparsers(dest="command", required=True, parser_class=_Parser)


def build_parser() -> argparse.ArgumentParser:
    from . import memory  # check's phases (the engine: torch); explain alone needs it not (_explain_parser)
    from .memory import gpus

    parser, sub = _new_parser()

    check = sub.add_parser(
        "check",
        help="predict each phase's peak GPU memory for a nanoGPT config, no GPU needed",
        description="Predict the peak CUDA memory of nanoGPT's train step and estimate_loss for "
        "a config, whether each fits the card, and the largest batch_size that does.",
    )
    check.add_argument(
        "configs",
        nargs="*",
        metavar="CONFIG",
        help="nanoGPT config files (config/train_*.py), applied in order",
    )
    check.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, like train.py's --key=value (repeatable)",
    )
    check.add_argument(
        "--nanogpt",
        metavar="PATH",
        help="your nanoGPT checkout (default: the one the config or the working directory is in): its "
        "train.py and model.py decide what runs",
    )
    check.add_argument("--model", metavar="PATH", help="a nanoGPT model.py to run instead of the checkout's")
    check.add_argument(
        "--gpu-memory",
        type=_card_option(gpus.card_memory),
        default=memory.DEFAULT_GPU_MEMORY,
        metavar="SIZE",
        help="the card's total memory as PyTorch reports it (default 11.69GiB, a 12 GB card); "
        "units GiB, GB, MiB, MB",
    )
    check.add_argument(
        "--gpu",
        metavar="NAME",
        help='the card by name ("RTX 4070", "RTX 4060 Ti 8GB", T4, A100-40GB, ...): its memory and compute '
        "capability, which picks CUDA's attention kernel; overrides --gpu-memory",
    )
    check.add_argument(
        "--capability",
        type=_card_option(gpus.parse_capability),
        metavar="X.Y",
        help="the compute capability of a card given by --gpu-memory, e.g. 7.5 for a T4 or 6.0 for a P100 "
        "(it picks CUDA's attention kernel; default: 8.6 assumed, as the output says)",
    )
    check.add_argument(
        "--alloc-conf",
        metavar="SETTING",
        help="the caching allocator's setting, as PYTORCH_CUDA_ALLOC_CONF (default: that variable, "
        "as PyTorch reads it), e.g. expandable_segments:True",
    )
    check.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        metavar="N",
        help="processes (GPUs) that train together, as torchrun's --nproc_per_node; the figures are per rank",
    )
    check.add_argument(
        "--strategy",
        metavar="ddp|fsdp",
        help="how the processes share the work: ddp (nanoGPT's train.py, the default with N > 1) "
        "or fsdp (FSDP2's fully_shard on each Block and the model)",
    )
    check.add_argument(
        "--gradient-as-bucket-view",
        action="store_true",
        help="DDP built with gradient_as_bucket_view=True: gradients are views into its buckets",
    )
    check.add_argument(
        "--phase",
        choices=list(memory.CHECKS),
        action="append",
        help="only this phase (repeatable): the first estimate_loss() at iteration 0, a train step, "
        "or a later estimate_loss() during training",
    )
    check.add_argument("--no-search", action="store_true", help="skip the search for the largest batch_size")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    _add_explain(sub)
    return parser


def _add_explain(sub) -> None:
    from .explain import command as explain_command  # explain's arguments live with explain

    explain = sub.add_parser(
        "explain",
        help="explain a PyTorch OOM message (or a whole traceback)",
        description="Read a CUDA out-of-memory message and say which tensor it was, why it "
        "failed, and which section of the guide to read.",
    )
    explain_command.add_arguments(explain)


def _explain_parser() -> argparse.ArgumentParser:
    """The parser of ``oomguide explain`` alone: reading a message imports no torch, and check's
    arguments would (build_parser)."""
    parser, sub = _new_parser()
    _add_explain(sub)
    return parser


def _progress(phase: str):
    def report(done: int) -> None:
        bar = "#" * min(done, 20)
        print(
            f"\r  searching the largest batch_size for {phase}: [{bar:<20}] {done} predictions",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return report


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
    )


def run_check(args) -> int:
    from . import verdict

    quiet = args.json or not sys.stderr.isatty()
    run = verdict.prepare(request_of(args))
    progress = None if quiet else _progress
    out = verdict.verdict(run, progress=progress, prefetch=getattr(args, "program", False))
    if args.no_search:
        for entry in out["phases"].values():
            entry.pop("max_batch_size", None)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_check(out, run.config)
    return EXIT_FITS if out["fits"] else EXIT_DOES_NOT_FIT


def _print_check(out: dict, config) -> None:
    fmt = units.fmt_bytes
    print(
        f"card: {out['gpu']}, compute capability {out['compute_capability']}"
        + (" (assumed: --capability or --gpu sets it)" if out["compute_capability_assumed"] else "")
        + f": {fmt(out['gpu_memory_bytes'])} total, {fmt(out['usable_bytes'])} for PyTorch "
        f"({fmt(out['context_bytes'])} set aside for the CUDA context)"
        + (" per GPU" if out.get("world_size", 1) > 1 else "")
    )
    print(f"allocator: {out['alloc_conf']}")
    if out.get("world_size", 1) > 1:
        print(
            f"{out['world_size']} processes ({out['strategy']}), figures per rank: "
            f"gradient_accumulation_steps {config.gradient_accumulation_steps} -> "
            f"{out['gradient_accumulation_steps_per_rank']} per rank, {out['tokens_per_iter']:,} tokens per iteration"
            + (
                f"; DDP's gradient buckets {fmt(out['ddp_bucket_bytes'])}"
                + (" (the gradients are views into them)" if out["gradient_as_bucket_view"] else "")
                if out["strategy"] == "ddp"
                else ""
            )
        )
    shape = out["shape"]
    print(
        f"config: batch_size={config.batch_size} block_size={shape['block_size']} dtype={config.dtype} "
        f"n_layer={shape['n_layer']} n_head={shape['n_head']} n_embd={shape['n_embd']} "
        f"gradient_accumulation_steps={config.gradient_accumulation_steps} compile={config.compile}"
        + (f" eval_batch_size={config.eval_batch_size}" if config.eval_batch_size else "")
        + (f" init_from={config.init_from}" if config.init_from != "scratch" else "")
    )
    print(f"vocab_size={shape['vocab_size']}: {out['vocab_from']}")
    code = out["code"]
    changes = [
        what
        for what, present in (
            ("estimate_loss() in chunks of eval_batch_size", code["eval_batch_size"]),
            ("eval_block_size for evaluation", code["eval_block_size"]),
            ("the stale logits dropped before estimate_loss()", code["drops_stale_logits"]),
            ("checkpointed Blocks in model.py", code["model"] == "nanogpt+checkpointed_forward"),
        )
        if present
    ]
    model = "its own model.py, run as it is" if code["model"] == "own" else "nanoGPT's model.py"
    print(
        f"code: {code['where']}; {model}; the guide's code changes in it: "
        + (", ".join(changes) if changes else "none")
    )
    print(f"predicted with: {versions.line(out['torch_version'])}")
    for note in out["warnings"]:
        print(f"note: {note}")
    titles = {
        "estimate_loss_first": "first estimate_loss() (iteration 0: weights only, no optimizer state yet)",
        "train_step": "train step",
        "estimate_loss": "later estimate_loss() (AdamW state and the last training logits alive)",
    }
    if config.init_from == "resume":
        titles["estimate_loss_first"] = (
            "first estimate_loss() after resuming (AdamW state from the checkpoint)"
        )
    for name, r in out["phases"].items():
        verdict = "fits" if r["fits"] else "DOES NOT FIT"
        reserved = f", {fmt(r['reserved_bytes'])} reserved" if r.get("reserved_bytes") is not None else ""
        print(
            f"\n{titles[name]}: predicted peak {fmt(r['peak_bytes'])} allocated{reserved} -> {verdict} "
            f"(attention: {r.get('attention') or 'none'})"
        )
        print(f"  largest allocation: {fmt(r['largest_allocation_bytes'])} ({r['largest_allocation']})")
        if not r["fits"]:
            where = f" in forward {r['failing_forward']}" if r.get("failing_forward") else ""
            print(
                f"  would fail at: Tried to allocate {fmt(r['failing_allocation_bytes'])} "
                f"({r['failing_allocation']}{where}), with {fmt(r['allocated_at_failure_bytes'])} "
                "already allocated"
                + (
                    f" and {fmt(r['reserved_at_failure_bytes'])} reserved"
                    if r.get("reserved_at_failure_bytes") is not None
                    else ""
                )
            )
        parts = ", ".join(f"{k.replace('_', ' ')} {fmt(v)}" for k, v in r["breakdown"].items())
        print(f"  at the peak: {parts}")
        if r.get("max_batch_size_note"):
            print(f"  largest batch_size: {r['max_batch_size_note']}")
        elif "max_batch_size" in r:
            mbs = r["max_batch_size"]
            print(f"  largest batch_size that fits: {mbs}" if mbs else "  not even batch_size=1 fits")
    how = "torch.compile modelled by its fused loss and casts" if out["compiled"] else "the model run eagerly"
    if out.get("world_size", 1) > 1:  # one rank of several
        print(
            "\n(predicted per rank on fake tensors with CUDA's autocast and attention kernel; "
            f"{how}; a phase fits when its reserved memory does, the rank's phase replayed through the "
            "caching allocator from an empty cache; kernel workspaces are not modelled)"
        )
        return
    print(
        f"\n(predicted on fake tensors with CUDA's autocast, attention kernel and caching allocator; {how}; "
        "a phase fits when its reserved memory does; kernel workspaces are not modelled)"
    )


def main(argv=None) -> int:
    """The command line (`argv`: its arguments; None: the program's own, ``sys.argv``)."""
    rc = _main(argv)
    if argv is None:
        _flush_output()
    return rc


def _main(argv) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = _explain_parser() if words[:1] == ["explain"] else build_parser()
    args = parser.parse_args(argv)
    args.program = argv is None
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
        print(f"oomguide {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def _engine_errors() -> tuple[type[Exception], ...]:
    """The engine's bad-input error, where the engine was imported (only then can it have been raised):
    explain without a config never imports it, nor torch."""
    models = sys.modules.get("oomguide.memory.models")
    return (models.PredictionError,) if models else ()


def _flush_output() -> None:
    """Flush what the program printed; output piped into a reader that closed it (`head`) is dropped
    without a traceback when the interpreter flushes again at exit (the prefetching child, if any,
    is ended at exit: ``prefetch.stop``)."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
