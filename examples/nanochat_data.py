"""The files nanochat reads from its base directory, written small and locally, where nanochat reads them.

nanochat downloads its data on demand into ``$NANOCHAT_BASE_DIR`` (``nanochat/common.py``,
``get_base_dir``); these machines cannot download, so the tests write the same files themselves,
in the same layout, and nanochat's own code reads them as it reads its downloads:

- ``base_data_climbmix/shard_NNNNN.parquet``: pretraining text, a ``text`` column in row groups;
  the last shard is the validation split (``nanochat/dataset.py``, ``list_parquet_files`` and
  ``parquets_iter_batched``). Here: sentences drawn from a small word list with a fixed seed.
- ``eval_bundle/``: what ``scripts/base_eval.py``'s ``evaluate_core`` reads after its download
  (``core.yaml``, ``eval_meta_data.csv``, ``eval_data/*.jsonl``). Here: three stand-in tasks of a few
  items, one of each type the CORE code evaluates (multiple choice, schema, language modelling),
  written for these tests — not the CORE benchmark's data, so the metric they give means nothing;
  they make the CORE evaluation run its code path (``nanochat/core_eval.py``) on the real model.
- ``task_data/<repo>/<subset>/<split>/``: what ``tasks/common.py``'s ``load_hub_dataset`` reads after
  its download (parquet shards and ``manifest.json``), for the SFT mixture of ``scripts/chat_sft.py``
  (SmolTalk, MMLU, GSM8K): a few rows each, in the columns those tasks read.

The tokenizer is not written here: ``scripts.tok_train`` trains it on the shards (rustbpe), as a
reader's run does (examples/nanochat_checkout.py).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "the a of and to in is it that was for on are with as his they be at one have this from "
    "memory card batch model layer token train step loss grows falls small large river stone light "
    "paper window garden city north south quiet bright early late runs holds keeps moves reads writes "
    "counts fits breaks opens closes water tree house road music number letter question answer"
).split()

SHARDS = 3  # two training shards and the validation shard
DOCS_PER_SHARD = 400
ROWS_PER_GROUP = 100


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))).capitalize() + "."


def document(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 12)))


def write_pretraining(base: Path, seed: int = 0) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = base / "base_data_climbmix"
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for i in range(SHARDS):
        table = pa.table({"text": [document(rng) for _ in range(DOCS_PER_SHARD)]})
        pq.write_table(table, data / f"shard_{i:05d}.parquet", row_group_size=ROWS_PER_GROUP)
    return data


# --- the CORE evaluation's files --------------------------------------------------------------

CORE_TASKS = [
    # label, icl_task_type, file, fewshot
    ("stand-in multiple choice", "multiple_choice", "mc.jsonl", 1),
    ("stand-in schema", "schema", "schema.jsonl", 0),
    ("stand-in language modeling", "language_modeling", "lm.jsonl", 0),
]


def write_eval_bundle(base: Path, items: int = 6, seed: int = 1) -> Path:
    bundle = base / "eval_bundle"
    (bundle / "eval_data").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = {
        "multiple_choice": lambda: {
            "query": sentence(rng),
            "choices": [sentence(rng) for _ in range(4)],
            "gold": rng.randrange(4),
        },
        "schema": lambda: {
            "context_options": [sentence(rng) for _ in range(2)],
            "continuation": sentence(rng),
            "gold": rng.randrange(2),
        },
        "language_modeling": lambda: {"context": sentence(rng), "continuation": sentence(rng)},
    }
    lines = ["icl_tasks:"]
    meta = [
        "Eval Task,Task Category,Task Type,#shots,#datapoints,Random baseline,Centered Metric?,Description"
    ]
    for label, kind, name, shots in CORE_TASKS:
        with open(bundle / "eval_data" / name, "w", encoding="utf-8") as f:
            for _ in range(items):
                f.write(json.dumps(rows[kind]()) + "\n")
        lines += [
            f"- label: {label}",
            f"  dataset_uri: {name}",
            f"  num_fewshot: [{shots}]",
            f"  icl_task_type: {kind}",
        ]
        baseline = {"multiple_choice": 25.0, "schema": 50.0, "language_modeling": 0.0}[kind]
        meta.append(f"{label},stand-in,{kind},{shots},{items},{baseline},,written by oomguide's tests")
    (bundle / "core.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (bundle / "eval_meta_data.csv").write_text("\n".join(meta) + "\n", encoding="utf-8")
    return bundle


# --- the SFT mixture's hub datasets -----------------------------------------------------------


def _smoltalk(rng):
    return {
        "messages": [
            {"role": "user", "content": sentence(rng)},
            {"role": "assistant", "content": " ".join(sentence(rng) for _ in range(2))},
        ]
    }


def _mmlu(rng):
    return {
        "question": sentence(rng),
        "choices": [sentence(rng) for _ in range(4)],
        "answer": rng.randrange(4),
        "subject": "miscellaneous",
    }


def _gsm8k(rng):
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return {
        "question": sentence(rng),
        "answer": f"{sentence(rng)} {a}*{b}=<<{a}*{b}={a * b}>>{a * b}.\n#### {a * b}",
    }


TASK_DATA = [
    # repo, subset, split, row maker, rows (chat_sft's validation mixture slices MMLU's test split to
    # 5,200 rows and GSM8K's to 420: `stop=` in scripts/chat_sft.py, so those splits need that many)
    ("HuggingFaceTB/smol-smoltalk", "default", "train", _smoltalk, 40),
    ("HuggingFaceTB/smol-smoltalk", "default", "test", _smoltalk, 40),
    ("cais/mmlu", "all", "auxiliary_train", _mmlu, 40),
    ("cais/mmlu", "all", "test", _mmlu, 5200),
    ("openai/gsm8k", "main", "train", _gsm8k, 40),
    ("openai/gsm8k", "main", "test", _gsm8k, 420),
]


def write_task_data(base: Path, seed: int = 2) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    root = base / "task_data"
    for repo, subset, split, make, rows in TASK_DATA:
        folder = root / repo.replace("/", "--") / subset / split
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([make(rng) for _ in range(rows)]), folder / "00000.parquet")
        (folder / "manifest.json").write_text(json.dumps(["00000.parquet"]), encoding="utf-8")
    return root


def write_all(base: Path) -> None:
    write_pretraining(base)
    write_eval_bundle(base)
    write_task_data(base)
