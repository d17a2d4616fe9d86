"""The one place that decides how an example runs: on CUDA for real, or on the CPU path.

- CUDA present: the phase runs for real on the GPU, its caching allocator capped to the
  ``--gpu-memory`` card (default 11.69 GiB, a 12 GB card; docs/en/verify.md#gpu-memory), and the
  measured peak is reported.
- No CUDA: the full-scale peak is predicted by running the same model code on fake tensors, and a
  real scaled-down train step and estimate_loss run on the CPU for the numerics.

The summary at the end of ``pytest examples`` says which of the two happened, per example. With
``--nanogpt`` on a GPU, each page's nanoGPT run is planned and judged by ``examples/gpu_run.py``
(everything before the device calls, which CI runs on the CPU with a stand-in device), and the
session ends by writing the report (``finish_report``, format ``oomguide-measurements/1``).
Without ``--nanogpt`` or ``--nanochat``, the tests that need the checkout skip; that is no failure,
and the summary says what was not checked and how to check it (``not_checked``).

Figures: exact with CI's torch on the CPU path; with another torch or on a GPU, within
``OTHER_TORCH_TOLERANCE``, the page's figure printed next to the reader's (``compare_figure``).

Figures: ``figure(key, value, unit)`` checks a value an example computed against
``examples/figures.json``, which the pages print through ``{{ key }}`` placeholders. A different
value fails the test; ``pytest examples --update-figures`` rewrites the store instead.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from oomguide import figures as figs
from oomguide import loop, memory
from oomguide.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "snippets"
_LINES: list[str] = []
_CHECKED: dict[str, set[str]] = {}
_UPDATES: dict[str, dict[str, dict]] = {}
_REPORT: list[str] = []  # the GPU report's line, last in the summary


def pytest_addoption(parser):
    group = parser.getgroup("oomguide")
    group.addoption(
        "--gpu-memory",
        default="11.69GiB",
        metavar="SIZE",
        help="the card to emulate: total memory as PyTorch reports it (default 11.69GiB, a 12 GB card)",
    )
    group.addoption(
        "--nanogpt",
        default=os.environ.get("OOMGUIDE_NANOGPT") or None,
        metavar="PATH",
        help="a nanoGPT checkout (or OOMGUIDE_NANOGPT=PATH): every snippet is applied to a copy of it, "
        "as its page places it, and its own train.py is run (never modified in place)",
    )
    group.addoption(
        "--nanochat",
        default=os.environ.get("OOMGUIDE_NANOCHAT") or None,
        metavar="PATH",
        help="a nanochat checkout (or OOMGUIDE_NANOCHAT=PATH): its own scripts run on a copy of it, tiny, on "
        "the CPU, with every nanochat snippet applied as its page places it (never modified in place)",
    )
    group.addoption(
        "--update-figures",
        action="store_true",
        help="write the figures the examples compute into examples/figures.json instead of checking them",
    )


def pytest_configure(config):
    """--nanogpt and --nanochat, checked; each option and its variable are one setting: the option
    (default: the variable) is put back into the variable, which the library's own readers of a
    checkout use (the accuracy page's nanochat cases, oomguide.nanochat.cases; the notebooks)."""
    path = config.getoption("--nanogpt", default=None)
    if path:
        from nanogpt_checkout import CheckoutError, check_checkout

        try:
            config._oomguide_nanogpt = check_checkout(path)
        except CheckoutError as err:
            raise pytest.UsageError(str(err)) from None
        os.environ["OOMGUIDE_NANOGPT"] = str(config._oomguide_nanogpt)
    path = config.getoption("--nanochat", default=None)
    if path:
        import nanochat_checkout

        try:
            config._oomguide_nanochat = nanochat_checkout.check_checkout(path)
        except nanochat_checkout.CheckoutError as err:
            raise pytest.UsageError(str(err)) from None
        os.environ["OOMGUIDE_NANOCHAT"] = str(config._oomguide_nanochat)


def report_header(budget: str, cuda: dict | None = None) -> str:
    """The first line of `pytest examples`: which path the examples take (docs/<lang>/verify.md shows
    both forms; examples/test_site_snippets.py checks that they are these). `cuda`: the card's
    ``device``, ``capability`` (major, minor), ``non_pytorch`` bytes and ``expandable`` (bool)."""
    if cuda is None:
        return (
            f"oomguide examples: CPU path (no CUDA): full-scale peaks predicted on fake tensors for a card "
            f"of {budget}, plus real scaled-down runs"
        )
    major, minor = cuda["capability"]
    return (
        f"oomguide examples: CUDA on {cuda['device']} (compute capability {major}.{minor}), "
        f"allocator capped to a card of {budget}; non-PyTorch memory now "
        f"{memory.fmt_bytes(cuda['non_pytorch'])}; expandable segments {'on' if cuda['expandable'] else 'off'}"
    )


def pytest_report_header(config):
    budget = config.getoption("--gpu-memory")
    if not memory.cuda_available():
        return report_header(budget)
    import os

    setting = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return report_header(
        budget,
        {
            "device": memory.cuda_device_name(),
            "capability": memory.cuda_capability(),
            "non_pytorch": memory.non_pytorch_bytes(),
            "expandable": "expandable_segments:True" in setting.replace(" ", ""),
        },
    )


def pytest_terminal_summary(terminalreporter):
    if _LINES:
        terminalreporter.section("oomguide: how each example ran")
        for line in _LINES:
            terminalreporter.write_line(line)
    if _UPDATES:
        store = figs.load()
        for page, entries in _UPDATES.items():
            store.setdefault(page, {}).update(entries)
        figs.save(store)
        terminalreporter.write_line(
            f"oomguide: wrote {sum(map(len, _UPDATES.values()))} figures to {figs.STORE}"
        )
    for line in [*_NOT_CHECKED, *_REPORT]:
        terminalreporter.write_line(line)


def page_of(module_name: str) -> str:
    """examples/test_estimate_loss_oom.py -> the page 'estimate-loss-oom'."""
    return module_name.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")


@pytest.fixture
def figure(request):
    """figure(key, value, unit, rel=0.0): the page's figure `key` must be `value` (within `rel`)."""
    # a module may compute another page's figures (test_nanochat_page.py: PAGE = "nanochat", since
    # test_nanochat.py runs nanochat's own scripts)
    page = getattr(request.module, "PAGE_FIGURES", None) or page_of(request.module.__name__)
    update = request.config.getoption("--update-figures")

    def check(key: str, value, unit: str, rel: float = 0.0, decimals: int | None = None):
        if unit not in figs.UNITS:
            raise ValueError(f"unknown unit {unit!r}")
        value = float(value) if isinstance(value, float) else int(value)
        _CHECKED.setdefault(page, set()).add(key)
        entry = {"value": value, "unit": unit}
        if decimals is not None:
            entry["decimals"] = decimals
        if rel:
            entry["rel"] = rel
        if update:
            _UPDATES.setdefault(page, {})[key] = entry
            return value
        stored = figs.load().get(page, {}).get(key)
        assert stored is not None, (
            f"figure {page}.{key} = {value} is not in {figs.STORE.name}: run pytest examples --update-figures"
        )
        assert stored["unit"] == unit, f"figure {page}.{key}: unit {unit} but the store says {stored['unit']}"
        ok, line = compare_figure(f"{page}.{key}", value, stored, unit, figures_exact())
        if line:
            _LINES.append(line)
        assert ok, line
        return value

    return check


CI_TORCH = next(
    (
        ln.split("==", 1)[1].strip()
        for ln in (ROOT / "constraints" / "ci.txt").read_text(encoding="utf-8").splitlines()
        if ln.startswith("torch==")
    ),
    None,
)  # the PyTorch the pages' figures are computed with (docs/en/verify.md#figures)
OTHER_TORCH_TOLERANCE = 0.02  # elsewhere: compiled evaluations differed by 0.3-1.5 % from 2.11 to 2.13


def figures_exact(torch_version: str | None = None, cuda: bool | None = None) -> bool:
    """Whether the figures are checked exactly here: with CI's torch (constraints/ci.txt), on the CPU
    path. On another torch, or on a GPU, within OTHER_TORCH_TOLERANCE."""
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    cuda = memory.cuda_available() if cuda is None else cuda
    return not cuda and torch_version.split("+", 1)[0] == CI_TORCH


def compare_figure(name: str, value, stored: dict, unit: str, exact: bool) -> tuple[bool, str | None]:
    """(whether `value` agrees with the page's figure `stored`, the line that says so where it is not
    to the byte). Exact (a figure's own ``rel`` aside) with CI's torch; within
    OTHER_TORCH_TOLERANCE elsewhere, the page's figure printed next to the reader's."""
    page_value = stored["value"]
    tolerance = stored.get("rel", 0.0) if exact else max(stored.get("rel", 0.0), OTHER_TORCH_TOLERANCE)
    ok = math.isclose(value, page_value, rel_tol=tolerance) if tolerance else value == page_value
    if value == page_value:
        return True, None
    mine, theirs = figs.format_figure(value, unit, "en"), figs.format_figure(page_value, unit, "en")
    off = abs(value - page_value) / abs(page_value) if page_value else math.inf
    if exact and ok:
        return True, None  # within the figure's own tolerance
    if exact:
        # the pages print the formatted value: it must read the same in every language
        return False, (
            f"figure {name}: the code computes {value} ({mine}), the pages print {page_value} ({theirs}); "
            "run pytest examples --update-figures"
        )
    where = "" if exact else f" (the pages' figures are computed with torch {CI_TORCH}, on the CPU)"
    verdict = "within" if ok else "beyond"
    return ok, (
        f"figure {name}: the page prints {theirs}, yours is {mine}, {off:.2%} apart: {verdict} "
        f"{tolerance:.0%}{where}"
    )


def snippet_path(relative: str) -> Path:
    path = SNIPPETS / relative
    assert path.is_file(), f"snippet {relative} is missing"
    return path


def import_snippet(relative: str):
    """Import a snippet module (a code change to nanoGPT) by its path under snippets/."""
    path = snippet_path(relative)
    name = "snippet_" + re.sub(r"\W", "_", relative.removesuffix(".py"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def snippet_config(*relatives: str, overrides=(), **changes):
    """A nanoGPT config made of snippet files applied in order (like config files), then overrides."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_config([snippet_path(r) for r in relatives], list(overrides), **changes)


# a model small enough to train for real on two CPU cores, same code paths
SCALED_DOWN = dict(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=512)


@dataclass
class Runner:
    """Runs a phase for an example: measured on CUDA, or predicted + scaled down on the CPU path.

    `device`: the GPU (``gpu_run.cuda_device()``), None on the CPU path; `measure`: the device call
    (``oomguide.memory.measure``). A test gives a stand-in device and measure, so that every line of
    the CUDA branch runs on the CPU but the measurement itself (examples/test_gpu_path.py)."""

    gpu_memory: int
    budget_text: str
    tmp: Path
    device: object = None
    measure: object = None

    @property
    def cuda(self) -> bool:
        return self.device is not None

    @property
    def mode(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def data_dir(self, vocab_size: int) -> Path:
        path = self.tmp / f"data-{vocab_size}"
        if not (path / "val.bin").exists():
            loop.write_dataset(path, vocab_size)
        return path

    def phase(
        self,
        config,
        phase: str,
        state: str = "training",
        label: str = "",
        *,
        source: memory.ModelSource | None = None,
        stale_logits: bool = True,
    ) -> memory.PhaseResult:
        """The peak of `phase` for `config` on this machine's path, logged in the summary.

        `source`: the GPT class to run (a snippet's change to nanoGPT's model); `stale_logits`: see
        ``memory.predict``.
        """
        extra = dict(state=state, source=source, stale_logits=stale_logits)
        fmt = memory.fmt_bytes
        if self.cuda:
            measure = self.measure or memory.measure
            try:
                result = measure(
                    config, phase, self.data_dir(config.gpt_config().vocab_size), self.gpu_memory, **extra
                )
            except memory.CardTooSmall as exc:
                _LINES.append(f"skipped on the GPU: {label or phase}: {exc}")
                pytest.skip(str(exc))
            # the same phase predicted with this card's kernels and allocator setting, compiled where the
            # config compiles (memory.measure compiles it then), next to the measurement
            guess = memory.predict(
                config,
                phase,
                self.gpu_memory,
                capability=tuple(self.device.capability),
                **({"compiled": True} if config.compile else {}),
                **extra,
            )
            how = (
                f"CUDA run on {self.device.name} under {self.budget_text}, "
                f"{'compiled' if config.compile else 'eager'}: measured "
                f"{fmt(result.peak_bytes)} allocated / {fmt(result.reserved_bytes)} reserved "
                f"(predicted {fmt(guess.peak_bytes)} / {fmt(guess.reserved_bytes)}, attention {result.attention})"
            )
        else:
            result = memory.predict(config, phase, self.gpu_memory, **extra)
            how = (
                f"CPU path: predicted full-scale peak for a card of {self.budget_text} "
                f"{fmt(result.peak_bytes)} allocated / {fmt(result.reserved_bytes)} reserved"
            )
        verdict = "fits" if result.fits else "does not fit"
        _LINES.append(f"{label or phase}: {how} ({phase}, batch_size={config.batch_size}) -> {verdict}")
        return result

    def scaled_down(self, config, steps: int = 2, label: str = "") -> dict:
        """A real train step and estimate_loss with `config`'s settings on a small model (CPU path).

        On CUDA the full-scale phase is the real run, so this runs the small model on the GPU too.
        """
        import torch

        small = config.replace(
            **{k: v for k, v in SCALED_DOWN.items()},
            batch_size=min(config.batch_size, 8),
            gradient_accumulation_steps=min(config.gradient_accumulation_steps, 4),
            init_from="scratch",
            eval_block_size=None,
            learning_rate=1e-3,
        )
        device = "cuda" if self.cuda else "cpu"
        torch.manual_seed(0)
        model = memory.ModelSource().build(small.gpt_config()).to(device)
        data = loop.BinData(self.data_dir(small.vocab_size), small.batch_size, small.block_size, device)
        ctx = loop.autocast_context(device, small.dtype)
        state = loop.TrainState(
            model, loop.make_optimizer(model, small, device), loop.make_scaler(small.dtype, device), ctx
        )
        losses = [
            loop.loss_value(
                loop.train_step(state, data.get_batch, small.gradient_accumulation_steps, small.grad_clip)
            )
            * small.gradient_accumulation_steps
            for _ in range(steps)
        ]
        if small.eval_batch_size:
            evals = loop.estimate_loss_batched(model, data.get_batch, 2, ctx, small.eval_batch_size)
        else:
            evals = loop.estimate_loss(model, data.get_batch, 2, ctx)
        assert all(math.isfinite(v) for v in [*losses, *evals.values()]), (losses, evals)
        _LINES.append(
            f"{label or 'scaled-down run'}: real {device} train step + estimate_loss on a "
            f"{small.n_layer}-layer model: train loss {losses[-1]:.3f}, val loss {evals['val']:.3f}"
        )
        return {"train_losses": losses, **evals}


@pytest.fixture(scope="session")
def runner(request, tmp_path_factory) -> Runner:
    from gpu_run import cuda_device

    text = request.config.getoption("--gpu-memory")
    return Runner(memory.parse_size(text), text, tmp_path_factory.mktemp("oomguide"), device=cuda_device())


NANOGPT_MISSING = (
    "needs a nanoGPT checkout: pytest examples --nanogpt PATH (or OOMGUIDE_NANOGPT=PATH); "
    "CI passes --nanogpt ../shared/nanoGPT"
)


@pytest.fixture(scope="session")
def nanogpt(request, tmp_path_factory):
    """The reader's nanoGPT (``--nanogpt PATH``): snippets applied to copies, train.py run for real.

    Tiny scale on the CPU, full scale on CUDA (see examples/nanogpt_checkout.py). Without a
    checkout the tests that need one skip, naming the option.
    """
    source = getattr(request.config, "_oomguide_nanogpt", None)
    if source is None:
        pytest.skip(NANOGPT_MISSING)
    from gpu_run import cuda_device
    from nanogpt_checkout import NanoGPT

    checkout = NanoGPT(
        source,
        tmp_path_factory.mktemp("nanogpt"),
        device=cuda_device(),
        gpu_memory=memory.parse_size(request.config.getoption("--gpu-memory")),
    )
    yield checkout
    checkout.close()
    from gpu_run import proof_lines

    done = [
        f.result() for f in checkout.runs.values() if f.done() and not f.cancelled() and f.exception() is None
    ]
    _LINES.extend(proof_lines(done, checkout.results))
    if checkout.results:  # on a GPU: the report, in the measurements format
        finish_report(checkout.device, checkout.results, Path(request.config.invocation_params.dir))


def finish_report(device, results, folder: Path) -> Path:
    """Write the GPU report into `folder` and say in the summary where it is and what to do with it."""
    from gpu_run import write_report

    path = write_report(folder, device, results)
    agree = sum(r.agrees for r in results)
    _REPORT.append(
        f"oomguide: report written to {path}: {len(results)} run{'s' * (len(results) != 1)} on {device.name}, {agree} as oomguide "
        f"check says. To add it to the project, copy it into examples/measurements/ "
        f"(docs/en/verify.md#report), where the accuracy page counts it."
    )
    return path


NANOCHAT_MISSING = (
    "needs a nanochat checkout: pytest examples --nanochat PATH (or OOMGUIDE_NANOCHAT=PATH); "
    "CI passes --nanochat ../shared/nanochat"
)


@pytest.fixture(scope="session")
def nanochat(request, tmp_path_factory):
    """The reader's nanochat (``--nanochat PATH``): its own scripts run on copies, tiny, on the CPU,
    with snippets applied as placed (examples/nanochat_checkout.py: ``nanochat.run(*snippets,
    command=..., extra=..., after=..., compiled=...)`` -> a ``Run``). Without a checkout the tests
    that need one skip, naming the option. The summary lists how long each script ran."""
    source = getattr(request.config, "_oomguide_nanochat", None)
    if source is None:
        pytest.skip(NANOCHAT_MISSING)
    from nanochat_checkout import NanoChat

    checkout = NanoChat(source, tmp_path_factory.mktemp("nanochat"))
    yield checkout
    checkout.close()
    for label, seconds in checkout.timings:
        _LINES.append(f"nanochat {label}: {seconds:.1f} s")


@pytest.fixture
def snippet():
    """snippet.path(rel), snippet.module(rel) (import a code change), snippet.config(*rels, overrides=...)."""
    return SimpleNamespace(path=snippet_path, module=import_snippet, config=snippet_config)


@pytest.fixture
def report():
    """report(line): add a line to the summary that ``pytest examples`` prints at the end."""
    return _LINES.append


MISSING_CHECKOUT = re.compile(r"\b(?:needs a|no) (nanoGPT|nanochat) checkout\b")
OPTION_OF = {"nanoGPT": "--nanogpt", "nanochat": "--nanochat"}
_SKIPPED_FOR: dict[str, list[str]] = {}  # "--nanogpt" -> node ids of the tests skipped for want of it


def missing_checkout(reason: str) -> str | None:
    """The option a test was skipped for want of ("--nanogpt", "--nanochat"), or None."""
    found = MISSING_CHECKOUT.search(reason)
    return OPTION_OF[found.group(1)] if found else None


def pytest_runtest_logreport(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        option = missing_checkout(str(report.longrepr[2]))
        if option:
            _SKIPPED_FOR.setdefault(option, []).append(report.nodeid)


def not_checked(skipped: dict, unchecked: list, pages_of: dict) -> tuple[list, list]:
    """(lines that say what was not checked and how to check it, the figures still missing): a figure
    of a page whose example skipped a test for want of a checkout was not computed for that reason,
    not missing; any other figure no example computed is. `pages_of`: node id -> the page its
    module computes figures for."""
    lines, excused = [], set()
    for option, nodes in sorted(skipped.items()):
        pages = sorted({pages_of.get(n) for n in nodes} - {None})
        mine = [f for f in unchecked if f.split(".", 1)[0] in pages]
        excused |= set(mine)
        lines.append(
            f"oomguide: not checked: {len(nodes)} test{'s' * (len(nodes) != 1)} need{'s' * (len(nodes) == 1)} "
            f"a {option[2:]} checkout"
            + (
                f", and {len(mine)} figure{'s' * (len(mine) != 1)} of {', '.join(pages)} come from them"
                if mine
                else ""
            )
            + f". To check them: pytest examples {option} PATH (or {ENV_OF[option]}=PATH)"
        )
    return lines, [f for f in unchecked if f not in excused]


ENV_OF = {"--nanogpt": "OOMGUIDE_NANOGPT", "--nanochat": "OOMGUIDE_NANOCHAT"}
_NOT_CHECKED: list[str] = []


def pytest_sessionfinish(session, exitstatus):
    """When the whole examples suite ran, every figure the pages print must have been computed, but for
    those of tests skipped for want of a checkout: the summary says what was not checked and how."""
    opts = session.config.option
    pages_of = {
        item.nodeid: getattr(item.module, "PAGE_FIGURES", None) or page_of(item.module.__name__)
        for item in session.items
        if getattr(item, "module", None) is not None
    }
    if exitstatus != 0 or opts.keyword or opts.markexpr or session.config.getoption("--update-figures"):
        _NOT_CHECKED.extend(not_checked(_SKIPPED_FOR, [], pages_of)[0])
        return
    ran_all = all(Path(a).resolve() in (ROOT, ROOT / "examples") for a in session.config.args)
    if not ran_all or not any(Path(str(i.fspath)).parent == ROOT / "examples" for i in session.items):
        _NOT_CHECKED.extend(not_checked(_SKIPPED_FOR, [], pages_of)[0])
        return
    unchecked = sorted(
        f"{page}.{key}"
        for page, entries in figs.load().items()
        for key in entries
        if key not in _CHECKED.get(page, set())
    )
    lines, missing = not_checked(_SKIPPED_FOR, unchecked, pages_of)
    _NOT_CHECKED.extend(lines)
    if missing:
        session.exitstatus = 1
        print(f"\noomguide: figures in {figs.STORE.name} that no example computed: {', '.join(missing)}")


def check_json(*argv: str) -> dict:
    """`oomguide check ... --json --no-search`, in this process, as a dict."""
    import contextlib
    import io
    import json as _json

    from oomguide.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["check", *argv, "--json", "--no-search"])
    assert rc in (0, 1), out.getvalue()
    return _json.loads(out.getvalue())


def check_says(*snippets: str, argv=()) -> dict:
    """What `oomguide check --json` says for a page's config: its config snippets (and the ones they
    need) as config files, in order, on the default card. A page prints these figures for that
    config, so the page and `check` cannot disagree (one verdict: oomguide.verdict). Code changes
    are not config files: figures that need one are checked in a nanoGPT checkout with the change
    (examples/test_nanogpt.py, check_on_nanogpt)."""
    from oomguide import placement

    places = placement.load()
    expanded = placement.expand(snippets, places)
    code = [rel for rel in expanded if places[rel].is_code]
    assert not code, f"{code}: code changes need a checkout, not `check` on config files alone"
    files = [str(SNIPPETS / rel) for rel in expanded if places[rel].kind == "config"]
    return check_json(*files, *argv)
