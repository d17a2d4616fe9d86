"""The library's English one-liners (errors, notes, descriptions) in the reader's language.

What it does: the library raises and describes in English (its ValueErrors, check's notes, the
card and the code a prediction ran with), and the ``--json`` output keeps that English. For the
text the reader sees, ``translate(text, lang)`` matches `text` against the message ids below: each
msgid is the library's own sentence with its variable parts written as ``{placeholders}``, and
is turned into a pattern (literal text matched exactly, a placeholder matching anything), so the
sentence and its pattern are one string and cannot disagree. A match gives the catalog's sentence
with the same values put back: paths, sizes as PyTorch prints them (``8.30 GiB``), config keys
and figures stay exactly as the library wrote them (a card's size in ``CARD_SIZES`` and the sizes
in ``COMPUTED_SIZES``, which the library computed, are written as the language writes numbers and
sizes). A placeholder named ``reason`` or ``code`` holds another of these messages and is translated in turn, one named ``reader`` one of
``READERS``; one named ``places`` (folders) or ``cards`` is listed with the language's separator; one named ``choices`` is a list of
names joined by ", " and " or ", joined again with the language's separator and word. Text that matches no msgid is
shown as it is, in English.

The msgids live in the catalogs of the ``check`` domain (locale/<lang>/LC_MESSAGES/check.po).
When a library message changes, change its msgid here too (tests/test_messages.py raises each
common error and checks that it is matched), then run ``python -m oomguide.i18n``.

It must never raise, compute, or decide anything: it only rewords a finished message.
"""

from __future__ import annotations

import functools
import re

from .i18n import N_, SOURCE_LANG, gettext_for

RECURSIVE = ("reason", "code", "vocab_source")
# TRANSLATORS: the code that reads a key only the guide's change adds ({reader} in a note below)
READERS: tuple[str, ...] = (
    N_("train.py's estimate_loss()"),
    N_("train.py's estimate_loss() and get_batch()"),
    N_("model.py's GPT.forward"),
)
# TRANSLATORS: what a setting's value must be ("dropout must be a number, got 'x'"; config.WANTS)
WANTS: tuple[str, ...] = (
    N_("an integer or None"),
    N_("True or False"),
    N_("an integer"),
    N_("a number"),
    N_("a string"),
)
# argparse's "invalid int value: 'abc'": the type's name, said as WANTS says it in the reader's language
INVALID_TYPE = N_("invalid {type} value: {value}")
ARGPARSE_TYPES = {"int": WANTS[2], "float": WANTS[3]}
# a card's size the library computed ("a 11.69 GiB card"): its number is written as the language writes numbers
CARD_SIZES = ("a {size} GiB card", "an {size} GiB card")
# TRANSLATORS: --gpu-memory's value (or a card's table size) below the CUDA context: {size} as the
# reader typed it, quoted ('1MiB'), or a size the library computed; {context}: a size the library computed
CARD_TOO_SMALL = N_(
    "a card of {size} leaves nothing for PyTorch once the {context} of the CUDA context are set "
    "aside: give the card's total memory as PyTorch reports it, e.g. 11.69GiB"
)
# sizes the library computed and wrote with units.fmt_bytes ("256.00 MiB"), by msgid and placeholder: written
# as the language writes sizes (figures.format_bytes); a size as the reader typed it ('1MiB') is left as it is
COMPUTED_SIZES = {CARD_TOO_SMALL: ("size", "context")}
TOTAL_BATCH_ASSERT = N_(
    "{script} would stop at its assert: total_batch_size ({total}) must be a multiple of device_batch_size "
    "× max_seq_len × ranks ({batch} × {seq} × {world} = {product})"
)
# counts the library wrote grouped in English ("1,048,576"), by msgid and placeholder: grouped as the
# language groups them (figures.format_count)
VOCABULARY = N_("vocabulary {vocab}: {vocab_source}")
COMPUTED_COUNTS = {TOTAL_BATCH_ASSERT: ("total", "product"), VOCABULARY: ("vocab",)}
_FMT_BYTES = re.compile(r"(\d+\.\d+) (GiB|MiB)")
# TRANSLATORS: between two card names the reader chooses from ("RTX 4060 Ti 8GB or RTX 4060 Ti 16GB")
OR = N_(" or ")

# TRANSLATORS: a value the reader gave ('RTX 3060', '12XB'), quoted in an error as the language quotes
# a word in a sentence (German „{value}“, French « {value} » with no-break spaces, Japanese 「{value}」)
QUOTED = N_("'{value}'")
# a value written as Python's repr() of a string: the reader's own words, quoted as the language quotes
# them; not after "=" (init_from='resume', device='cpu'), where the quotes are Python's
_REPR = re.compile(r"'[^'\n]*'")

# the card's figures a cut message lacks ("total capacity, free": PyTorch's words), listed as the language lists
CUT_FIGURES = N_('found "Tried to allocate {size}" but not the card\'s figures ({names}): paste the whole message')
UNKNOWN_SCRIPT = N_("{word}: not a nanochat script oomguide predicts (known: {names})")
LISTS = {CUT_FIGURES: ("names",), UNKNOWN_SCRIPT: ("names",)}

# TRANSLATORS: an option's value refused: argparse names the option, then the library's message
ARGUMENT = N_("argument {option}: {reason}")
# TRANSLATORS: a positional argument refused by argparse ({name}: its name, as CONFIG)
ARGUMENT_NAMED = N_("argument {name}: {reason}")
# TRANSLATORS: the command word refused by argparse ("oomguide chek": {reason} says which ones exist)
ARGUMENT_COMMAND = N_("argument command: {reason}")
# TRANSLATORS: the name argparse gives the command word (check or explain) in "the following
# arguments are required: command", for "oomguide" typed alone
NAMES = {"command": N_("command")}
# what a placeholder of this name can be (any other: any text)
SHAPES = {"key": r"\w+", "option": r"--[\w-]+"}

# Order matters where two could match the same text: the more specific first.
MESSAGES: tuple[str, ...] = (
    ARGUMENT,  # first: its {reason} is one of the others
    ARGUMENT_COMMAND,  # before the one below, which would also match it
    ARGUMENT_NAMED,
    # TRANSLATORS: argparse's own errors (Python's argparse.py, as Python 3.9 to 3.13 word them):
    # {value}, {choices}, {names}, {words}, {option}, {matches}, {type}: as argparse printed them.
    N_("invalid choice: {value} (choose from {choices})"),
    N_("the following arguments are required: {names}"),
    # TRANSLATORS: argparse's "unrecognized arguments" for train.py's --key=value spelling (cli._Parser):
    # {args} as typed, {settings} the same as check and explain take them ("--set batch_size=8")
    N_("unrecognized arguments: {args} (a setting is given as {settings})"),
    N_("unrecognized arguments: {words}"),  # after the one above, which it would also match
    N_("expected one argument"),
    INVALID_TYPE,
    N_("ambiguous option: {option} could match {matches}"),
    N_("ignored explicit argument {value}"),
    # TRANSLATORS: errors: check --nanochat, the checkout and the command line (nanochat/code.py,
    # nanochat/command.py, nanochat/plan.py). {word}, {path}, {script}, {option}, {value}: as the
    # reader typed them or as nanochat names them; {message}, {error}: English from argparse or Python.
    N_("--nanochat takes the nanochat command after --, not config files or --set"),
    N_("no command after --: give a nanochat command line, e.g. python -m scripts.base_train --depth=4"),
    N_("--nanochat {path}: no such directory"),
    N_("--nanochat {path}: not a nanochat checkout ({need} is missing)"),
    N_("--nanochat {path}: nanochat's code cannot be imported: {error}"),
    N_("--nanochat {path}: nanochat/gpt.py defines no {name}"),
    N_("NANOCHAT_DTYPE={value}: nanochat knows bfloat16, float16, float32"),
    N_(
        "{word}: not a command oomguide can read; give the line that runs a nanochat script "
        "(python -m scripts.X ... or torchrun ... -m scripts.X -- ...)"
    ),
    N_("cannot read the command line: {error}"),
    N_("{word}: not a memory-relevant script: it downloads data shards and puts nothing on the GPU"),
    N_(
        "{word}: not a memory-relevant script: it trains the tokenizer on the CPU and puts nothing on the GPU"
    ),
    N_(
        "{word}: not a memory-relevant script: it evaluates the tokenizer on the CPU and puts nothing on the GPU"
    ),
    UNKNOWN_SCRIPT,
    N_("python without a script: give python -m scripts.X ..."),
    N_("torchrun {option}={value}: give a number of processes (GPUs), e.g. 8"),
    N_("torchrun without a script: give torchrun ... -m scripts.X -- ..."),
    N_("{path}: no such script in the nanochat checkout"),
    N_("{path}: cannot be read as Python: {error}"),
    N_("{path}: an add_argument call oomguide cannot read without running the script (line {line})"),
    N_("{path}: no argparse options found"),
    N_("{script} would refuse the command line: {message}"),
    TOTAL_BATCH_ASSERT,
    N_(
        "{script} would stop at its assert: --num-samples ({total}) must be a multiple of --device-batch-size ({batch})"
    ),
    N_("--from-base: {script} is not base_train"),
    N_("scripts.base_train would stop: nanochat/fp8.py supports --fp8-recipe=tensorwise only, not {recipe}"),
    # TRANSLATORS: errors: the config files and overrides (config.py).
    # Each {placeholder} is the library's value (a path, a size as PyTorch prints it, a config
    # key, a figure), put back unchanged: keep them all.
    N_("config file not found: {path}"),
    N_("config path is a directory, not a file: {path}"),
    N_(
        "{path} is not a text config file (byte 0x{byte} at offset {offset} is not UTF-8): give a "
        "nanoGPT config, a .py file of assignments like config/train_gpt2.py"
    ),
    N_(
        "{path} is not a text config file (it holds NUL bytes): give a nanoGPT config, a .py file "
        "of assignments like config/train_gpt2.py"
    ),
    N_("cannot read config file {path}: {reason}"),
    N_("{where}: syntax error: {error}"),
    N_("dtype must be one of {choices}, got {value}"),
    N_("init_from must be 'scratch', 'resume' or one of {choices}, got {value}"),
    N_("block_size {block} is above the model's 1024 (init_from={init_from})"),
    N_("n_embd ({n_embd}) must be divisible by n_head ({n_head})"),
    N_("dropout must be in [0, 1), got {value}"),
    N_("cannot forward a sequence of length {length}: block_size is {block}"),
    # TRANSLATORS: errors: data/<dataset>/meta.pkl and out_dir/ckpt.pt, read as train.py reads them
    # (config.py). {reason} is another of these messages; {error}: Python's own English.
    N_("{path}: not plain data, oomguide will not unpickle it ({reason})"),
    N_("refuses to load {name}"),
    N_("refuses a persistent id"),
    N_("{path}: not a readable pickle ({error})"),
    N_("{path}: has no positive integer vocab_size (train.py reads meta['vocab_size'])"),
    N_("{path}: cannot read model_args from this checkpoint ({error})"),
    N_("{path}: model_args is not a dict"),
    N_(
        "gradient_accumulation_steps={gas} is not divisible by {n} processes (nanoGPT's train.py "
        "asserts that it is)"
    ),
    # TRANSLATORS: errors: the reader's own model.py (--model, or the checkout's), run on fake tensors
    # (memory/models.py, memory/predict.py). {error}: Python's own English; {phase}: a phase's code name.
    N_("model file not found: {path}"),
    N_("{path}: import failed: {error}"),
    N_("{path}: no GPT class (an nn.Module named GPT) in this file"),
    N_("{path}: no GPTConfig class in this file"),
    N_("{path}: GPT.forward must take (idx, targets), like nanoGPT's; it takes {params}"),
    N_("{path}: its GPTConfig has no grad_checkpoint field"),
    N_("{path}: building GPT failed: {error}"),
    N_("{path}: the model cannot run on fake tensors in {phase}: {error}"),
    N_("override {text} is not key=value"),
    N_("{key} must be a positive integer, got {value}"),
    N_("{where}: {key} must be {want}, got {value}"),
    N_(
        "{where}: cannot read {names} = {expr} without running it; write a literal value "
        "(it matters for memory)"
    ),
    # TRANSLATORS: errors: the card and the sizes (memory/gpus.py, units.py).
    # Each {placeholder} is the library's value (a path, a size as PyTorch prints it, a config
    # key, a figure), put back unchanged: keep them all.
    N_("unknown GPU {name}; closest: {cards} (or give its memory with --gpu-memory)"),
    N_("unknown GPU {name} (or give its memory with --gpu-memory)"),
    N_(
        "GPU {name} names cards of different memory: give one of {choices} with --gpu, or the "
        "card's memory with --gpu-memory"
    ),
    N_("--capability {given} contradicts --gpu {name}: the {card} has compute capability {capability}"),
    N_(
        "cannot read compute capability {text}: write major.minor as NVIDIA's CUDA GPUs table does, "
        "e.g. 8.6 (RTX 30 series), 7.5 (T4, RTX 20 series) or 6.0 (P100)"
    ),
    N_("cannot read size {text}: write a number and a unit, e.g. 11.69GiB, 12GB or 4096MiB"),
    N_("unknown size unit {unit} in {text} (use GiB, GB, MiB or MB)"),
    N_("size must be above zero, got {text}"),
    N_("a card's memory cannot be negative, got {text}: give its total, e.g. 11.69GiB"),
    CARD_TOO_SMALL,
    # TRANSLATORS: errors: the checkout and the processes (checkout.py, verdict.py).
    # Each {placeholder} is the library's value (a path, a size as PyTorch prints it, a config
    # key, a figure), put back unchanged: keep them all.
    N_("{folder} is not a nanoGPT checkout: it has no train.py"),
    N_("--nproc-per-node must be 1 or more, got {n}"),
    N_("--strategy {strategy} needs several processes: add --nproc-per-node N (N > 1)"),
    N_("--gradient-as-bucket-view is a DDP setting: use it with --strategy ddp"),
    N_("eval_block_size {eval_block} is longer than block_size {block}: the run stops there"),
    N_("--sample predicts sample.py, one process: leave out --nproc-per-node"),
    # TRANSLATORS: errors: sample.py's settings (sample_config.py), read for check --sample.
    # Each {placeholder} is the library's value: keep them all.
    N_("sample.py would stop on --{key}: 'Unknown config key' (not a global of sample.py)"),
    N_("init_from must be 'resume' or one of {choices} for sample.py, got {value}"),
    N_("device={device}: sample.py runs on the CPU there, not on a card"),
    N_("start={start}: no file {file} in {places}"),
    # TRANSLATORS: errors: explain's input (explain/command.py).
    # Each {placeholder} is the library's value (a path, a size as PyTorch prints it, a config
    # key, a figure), put back unchanged: keep them all.
    N_("no input: give a file or pipe the message into stdin"),
    N_("file not found: {path}"),
    N_("{path} is a directory, not a file"),
    N_("cannot read {path}: {reason}"),
    # TRANSLATORS: errors: a message explain cannot read (explain/formats.py), from stdin (the
    # command line), the pasted text (the site's paste box) or a file ({source}: its path).
    # 'Tried to allocate …', 'out of memory', 'CUDA out of memory' and "Of the allocated memory …"
    # are PyTorch's words, which the reader looks for in the log: keep them in English.
    N_("stdin is empty: paste the whole CUDA out-of-memory message or traceback"),
    N_("the pasted text is empty: paste the whole CUDA out-of-memory message or traceback"),
    N_("{source} is empty: paste the whole CUDA out-of-memory message or traceback"),
    N_("stdin holds an Apple MPS out-of-memory message; oomguide explains CUDA's"),
    N_("the pasted text holds an Apple MPS out-of-memory message; oomguide explains CUDA's"),
    N_("{source} holds an Apple MPS out-of-memory message; oomguide explains CUDA's"),
    N_(
        "stdin says 'out of memory' but holds no figures at all (no 'Tried to allocate …', no card "
        "sizes): paste the whole message, from 'CUDA out of memory' to its last line"
    ),
    N_(
        "the pasted text says 'out of memory' but holds no figures at all (no 'Tried to allocate …', "
        "no card sizes): paste the whole message, from 'CUDA out of memory' to its last line"
    ),
    N_(
        "{source} says 'out of memory' but holds no figures at all (no 'Tried to allocate …', no card "
        "sizes): paste the whole message, from 'CUDA out of memory' to its last line"
    ),
    N_("no CUDA out-of-memory message ('Tried to allocate …') in stdin"),
    N_("no CUDA out-of-memory message ('Tried to allocate …') in the pasted text"),
    N_("no CUDA out-of-memory message ('Tried to allocate …') in {source}"),
    CUT_FIGURES,
    N_(
        'found "Tried to allocate {size}" but not "Of the allocated memory … is allocated by PyTorch, '
        'and … is reserved by PyTorch but unallocated": paste the whole message'
    ),
    N_("cannot read size {text}"),
    # TRANSLATORS: what check says about the run: the card, the allocator, the vocab, the code.
    # Each {placeholder} is the library's value (a path, a size as PyTorch prints it, a config
    # key, a figure), put back unchanged: keep them all.
    N_("a {size} GiB card"),
    N_("an {size} GiB card"),
    N_("PyTorch's defaults (no PYTORCH_CUDA_ALLOC_CONF)"),
    N_("train.py's default 50304: no {meta} in {places}"),
    N_("train.py's default 50304 (GPT-2's 50257 padded)"),
    N_("GPT-2's 50257 (init_from={init_from})"),
    N_("the checkpoint {path} (model_args)"),
    N_("the config (no checkpoint found)"),
    N_("set explicitly (vocab_size)"),
    N_("nanoGPT as released (no checkout found: train.py and model.py assumed unchanged)"),
    N_("the nanoGPT checkout {folder}"),
    N_("nanoGPT with the guide's snippets {snippets}"),
    # TRANSLATORS: check's notes.
    # Each {placeholder} is the library's value (a path, a size as PyTorch prints it, a config
    # key, a figure), put back unchanged: keep them all.
    N_(
        "{key} = {value} is read only by {reader} as the guide changes it ({section}); {code} does "
        "not have that change, so nanoGPT ignores {key} (and train.py would stop on --{key}: "
        "'Unknown config key'): predicted without it"
    ),
    N_(
        "{key} = {value} is read only by {reader} as the guide changes it ({section}); {code} does "
        "not have that change, so nanoGPT ignores {key}: predicted without it"
    ),
    N_("train.py would stop on --{key}: 'Unknown config key' (not a global of its train.py)"),
    N_("eval_only=True: train.py stops after the first estimate_loss(); nothing else runs"),
    N_("not run by this config (eval_only): {phases}"),
    N_("not run by this config: {phases}"),
    N_(
        "several processes: each rank's resume is predicted as one GPU's (train.py loads the "
        "checkpoint before DDP wraps the model); the phases after it leave out the saved weights "
        "that train.py's state_dict keeps on each card"
    ),
    N_("{folder} has no model.py: predicted with nanoGPT's GPT"),
    N_(
        "init_from='resume' but no {path} found in {places}: the model's shape is taken from the "
        "config, as if the checkpoint had it"
    ),
    N_(
        "dataset={dataset} is set but no {path} was found (looked in {places}); predicting with "
        "GPT-2's vocab 50304, as train.py would. Run the dataset's prepare.py first, or run oomguide "
        "from your nanoGPT checkout"
    ),
    N_(
        "grad_checkpoint = True is not a field of {path}'s GPTConfig: its forward decides whether it "
        "checkpoints ({section}); predicted as it is"
    ),
    N_("{where}: {key} is not a nanoGPT train.py setting; oomguide ignores it"),
    N_("{where}: skipped (not a plain assignment): {line}"),
    N_("{where}: skipped {names} = {expr} (not a literal)"),
    N_("does not depend on batch_size: estimate_loss() forwards eval_batch_size = {n} sequences at a time"),
    N_("does not depend on batch_size: the checkpoint, the weights and AdamW's state only"),
    # TRANSLATORS: check --sample: the prompt's length, and the largest max_new_tokens
    N_("start={start}: 1 token"),
    N_("start: {n} tokens (GPT-2's encoding)"),
    N_("start: at most {n} tokens (one per byte; tiktoken not available to count them)"),
    N_(
        "every max_new_tokens fits: generate() crops the context at block_size ({block} tokens) "
        "from max_new_tokens = {n} on"
    ),
    # TRANSLATORS: check --nanochat: why nanochat computes in its dtype (nanochat/common.py decides)
    N_("the card's compute capability is 8.0 or newer (nanochat/common.py)"),
    N_("the card's compute capability is below 8.0 (nanochat/common.py)"),
    N_("NANOCHAT_DTYPE={value} in the environment"),
    # TRANSLATORS: check --nanochat: what the prediction assumes ("assumed: …" lines); {vocab_source}
    # is one of the two sentences after it
    VOCABULARY,
    N_("the tokenizer of --tokenizer (--vocab-size={n})"),
    N_("tok_train.py's --vocab-size default (the tokenizer speedrun.sh trains; --tokenizer names another)"),
    N_(
        "CORE evaluation: {rows} rows (the most choices of a CORE task) of max_seq_len tokens each, "
        "an upper bound (the eval bundle is not read)"
    ),
    N_(
        "chat evaluation: categorical prompts padded to the model's context ({seq} tokens, an upper bound), "
        "generative prompts of {prompt} tokens (the task data is not read)"
    ),
    N_("chat_rl: a GSM8K prompt of {n} tokens, every sample generated to --max-new-tokens"),
    N_("chat: a conversation as long as the model's context ({n} tokens before the reply of {reply})"),
    N_(
        "--fp8 on compute capability {capability}: base_train converts the Linear layers anyway, and "
        "torch._scaled_mm (8.9 or newer) would stop its first training step with a RuntimeError, not an "
        "out-of-memory error; predicted without fp8"
    ),
    N_("--fp8: this checkout has no nanochat/fp8.py; predicted without fp8"),
    N_(
        "--fp8: the training step with nanochat's Float8LinearConfig and convert_to_float8_training "
        "(base_train's filter: dimensions multiples of 16, at least 128), run on fake tensors; evaluation "
        "and sampling in the compute dtype (base_train's disable_fp8); each quantisation (nanochat/fp8.py's "
        "_to_fp8) as Inductor fuses it in the compiled model: the float8 tensor and its scale, no float32 copy"
    ),
    N_(
        "attention: FA3 (nanochat loads it with the kernels package on sm80-sm90 in bfloat16), modelled "
        "as its output and log-sum-exp"
    ),
    N_("attention: nanochat's SDPA fallback (no FA3 on this card or dtype)"),
    N_("SDPA fallback with sliding windows: an explicit mask per short-window layer, as nanochat builds it"),
    N_(
        "torch.compile (training model): modelled as eager with Inductor's fused loss, the logits' cast "
        "and softcap fused into it"
    ),
    N_(
        "torch.compile (training model): the backward keeps what AOTAutograd's min-cut partitioner keeps, "
        "traced on fake tensors as Inductor partitions the model; the logits' cast, softcap and loss are one fused kernel"
    ),
    N_("the compiled backward frees what it keeps from the last made to the first, at the backward's pace: a rule, not traced"),
    N_("MuonAdamW's compiled steps run eagerly: their temporaries are an upper bound"),
    N_("not installed, stood in for the import only (never used by the prediction): {modules}"),
)


@functools.cache
def _pattern(msgid: str) -> re.Pattern:
    """The msgid as a pattern: its text literally, each placeholder any text (a repeated one: the same)."""
    parts, seen = [], set()
    for literal, name in re.findall(r"([^{]*)(?:\{(\w+)\}|$)", msgid):
        parts.append(re.escape(literal))
        if name:
            shape = SHAPES.get(name, ".+?")
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>{shape})")
            seen.add(name)
    return re.compile("".join(parts), re.S)


def match(text: str) -> tuple[str, dict] | None:
    """The msgid `text` is an instance of, and its values; None when it is none of them."""
    for msgid in MESSAGES:
        found = _pattern(msgid).fullmatch(text)
        if found:
            return msgid, found.groupdict()
    return None


def translate(text: str, lang: str) -> str:
    """`text` (one of the library's messages) in `lang`, its values as they were; else `text`."""
    if lang == SOURCE_LANG:
        return text
    found = match(text)
    if found is None:
        return text
    msgid, values = found
    if msgid in (ARGUMENT, ARGUMENT_COMMAND, ARGUMENT_NAMED) and match(values["reason"]) is None:
        return text  # a wording no msgid knows: English, rather than half of it
    for name in RECURSIVE:
        if name in values:
            values[name] = translate(values[name], lang)
    _ = gettext_for(lang, "check")

    def requoted(value: str) -> str:  # 'RTX 3060' (Python's repr) quoted as the language quotes: „RTX 3060“
        return _(QUOTED).format(value=value[1:-1]) if _REPR.fullmatch(value) else value

    quoted = []
    for name, value in values.items():
        if isinstance(value, str) and _REPR.fullmatch(value) and f"={{{name}}}" not in msgid:
            values[name] = requoted(value)
            quoted.append(values[name])
    reader, choices = values.get("reader"), values.get("choices")
    if reader in READERS:
        values["reader"] = _(reader)
    if values.get("names"):  # what argparse says is missing: its name for the command word, translated
        values["names"] = ", ".join(_(NAMES[n]) if n in NAMES else n for n in values["names"].split(", "))
    want = values.get("want")
    if want in WANTS:  # what the value must be, in the language's words
        values["want"] = _(want)
    kind = values.get("type")
    if msgid == INVALID_TYPE and kind in ARGPARSE_TYPES:  # argparse's type name ("int"), in those words
        values["type"] = _(ARGPARSE_TYPES[kind])
    def listed(text: str) -> str:  # "a, b, c" joined as the language lists things, quoted as it quotes
        return _(", ").join(requoted(item) for item in text.split(", "))

    if choices is not None:  # "a, b or c"
        values["choices"] = _(OR).join(listed(part) for part in choices.split(OR))
    for name in ("places", "cards", *LISTS.get(msgid, ())):  # the folders looked in, the closest cards
        if values.get(name):
            values[name] = listed(values[name])
    if msgid in CARD_SIZES and re.fullmatch(r"\d+\.\d+", values["size"]):
        from .figures import format_figure

        values["size"] = format_figure(float(values["size"]), "float", lang)
    for name in COMPUTED_SIZES.get(msgid, ()):
        computed = _FMT_BYTES.fullmatch(values[name])
        if computed:
            from .figures import format_bytes

            unit = 1024**3 if computed[2] == "GiB" else 1024**2
            values[name] = format_bytes(float(computed[1]) * unit, lang)
    for name in COMPUTED_COUNTS.get(msgid, ()):
        if re.fullmatch(r"\d{1,3}(,\d{3})*|\d+", values[name]):
            from .figures import format_count

            values[name] = format_count(int(values[name].replace(",", "")), lang)
    text = _(msgid).format(**values)
    if lang in ("ja", "zh"):  # full-width quotation marks take no space beside them: GPU「RTX 3060」が
        for value in quoted:
            text = re.sub(rf" ?{re.escape(value)} ?", value, text)
    return text
