"""sample.py's settings: its config files and ``--key=value`` overrides, read as its configurator does.

nanoGPT's sample.py defines its own globals (``init_from='resume'``, ``out_dir``, ``start``,
``num_samples``, ``max_new_tokens``, ``temperature``, ``top_k``, ``seed``, ``device``, ``dtype``,
``compile``) and then executes configurator.py, like train.py: a config file is executed (any of its
assignments is set; those sample.py does not read, such as a training config's ``n_layer``, change
nothing), a ``--key=value`` must name one of sample.py's globals (else ``ValueError: Unknown config
key``) and keep its type. Read here without executing anything (``config.read_config_file``).

The model's shape is the checkpoint's ``model_args`` (``out_dir/ckpt.pt``, read as ``config`` reads it
for train.py) or GPT-2's for ``init_from='gpt2*'``; without a checkpoint, the same config files'
training settings stand for it, and the output says so. Never runs a prediction.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .config import DTYPES, ConfigError, TrainConfig, _set, load_config, parse_override, read_config_file
from .model import PRETRAINED_SHAPES

# sample.py's globals, with their defaults (assigned at its top; dtype: bfloat16 where the card has it,
# as config.NANOGPT_DEFAULTS assumes)
SAMPLE_DEFAULTS: dict[str, object] = {
    "init_from": "resume",
    "out_dir": "out",
    "start": "\n",
    "num_samples": 10,
    "max_new_tokens": 500,
    "temperature": 0.8,
    "top_k": 200,
    "seed": 1337,
    "device": "cuda",
    "dtype": "bfloat16",
    "compile": False,
}


@dataclass
class SampleConfig:
    """sample.py's settings, and the model it loads (``model``: the shape, as a TrainConfig)."""

    values: dict
    model: TrainConfig
    sources: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    prompt_tokens: int = 1
    prompt_from: str = ""

    def __getattr__(self, name):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def with_max_new_tokens(self, n: int) -> SampleConfig:
        return SampleConfig(
            dict(self.values, max_new_tokens=n),
            self.model,
            self.sources,
            self.notes,
            self.prompt_tokens,
            self.prompt_from,
        )

    @property
    def crop_reached_at(self) -> int:
        """The max_new_tokens from which generate()'s longest forward is block_size tokens."""
        return max(self.model.gpt_config().block_size - self.prompt_tokens + 1, 1)

    @property
    def longest_context(self) -> int:
        """The tokens of generate()'s longest forward: the prompt and every new token but the last,
        cropped at block_size (nanoGPT's model.py, GPT.generate: ``idx[:, -block_size:]``)."""
        block = self.model.gpt_config().block_size
        return min(self.prompt_tokens + self.values["max_new_tokens"] - 1, block)


def _prompt_tokens(start: str, cwd: Path, places) -> tuple[int, str]:
    """How many tokens sample.py's ``start`` encodes to, and how that was found (said in the output)."""
    text = start
    if start.startswith("FILE:"):
        found = [p / start[5:] for p in places if (p / start[5:]).is_file()]
        if not found:
            raise ConfigError(f"start={start!r}: no file {start[5:]} in {', '.join(map(str, places))}")
        text = found[0].read_text(encoding="utf-8")
    if len(text) <= 1:
        return max(len(text), 1), f"start={start!r}: 1 token"
    try:
        import tiktoken  # sample.py's encoder, where installed

        n = len(tiktoken.get_encoding("gpt2").encode(text, allowed_special={"<|endoftext|>"}))
        return n, f"start: {n} tokens (GPT-2's encoding)"
    except Exception:  # noqa: BLE001 - no tiktoken, or no network for its vocabulary
        n = len(text.encode("utf-8"))
        return n, f"start: at most {n} tokens (one per byte; tiktoken not available to count them)"


def load_sample_config(paths=(), overrides=(), cwd=None) -> SampleConfig:
    """sample.py's settings after the config files `paths` and the `overrides` (``key=value``)."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    values = dict(SAMPLE_DEFAULTS)
    notes: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path in paths:
            read_config_file(path, values, SAMPLE_DEFAULTS)
    # a config file's other assignments (a training config's n_layer) are executed and left unread
    notes += [str(w.message) for w in caught if "is not a nanoGPT train.py setting" not in str(w.message)]
    for item in overrides:
        key, value = parse_override(item)
        if key not in SAMPLE_DEFAULTS:
            raise ConfigError(
                f"sample.py would stop on --{key}: 'Unknown config key' (not a global of sample.py)"
            )
        _set(values, key, value, f"--{key}", SAMPLE_DEFAULTS)
    for key in ("num_samples", "max_new_tokens", "top_k"):
        if not isinstance(values[key], int) or isinstance(values[key], bool) or values[key] < 1:
            raise ConfigError(f"{key} must be a positive integer, got {values[key]!r}")
    if values["dtype"] not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {values['dtype']!r}")
    if values["init_from"] != "resume" and values["init_from"] not in PRETRAINED_SHAPES:
        raise ConfigError(
            f"init_from must be 'resume' or one of {', '.join(PRETRAINED_SHAPES)} for sample.py, "
            f"got {values['init_from']!r}"
        )
    if "cuda" not in str(values["device"]):
        raise ConfigError(f"device={values['device']!r}: sample.py runs on the CPU there, not on a card")
    # the model: the checkpoint's model_args, or GPT-2's shape (from_pretrained: block 1024, uncropped)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_config(
            paths,
            find_files=True,
            cwd=cwd,
            init_from=values["init_from"],
            out_dir=str(values["out_dir"]),
            dtype=values["dtype"],
            compile=values["compile"],
            dropout=0.0,
            **({"block_size": 1024} if values["init_from"] in PRETRAINED_SHAPES else {}),
        )
    notes += [str(w.message) for w in caught if "is not a nanoGPT train.py setting" not in str(w.message)]
    notes += list(model.notes)
    from .config import checkout_places

    tokens, prompt_from = _prompt_tokens(str(values["start"]), cwd, checkout_places(paths, cwd))
    return SampleConfig(values, model, [str(p) for p in paths], notes, tokens, prompt_from)
