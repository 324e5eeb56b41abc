#!/usr/bin/env python3
"""Golden packings for data/sequence_packing.h, made by TRL itself: pack_dataset's "bfd" and
"wrapped" strategies (trl/data_utils.py) on datasets.Dataset, and DataCollatorForLanguageModeling
with padding_free=True on the packed rows. Writes tests/fixtures/data/trl_packing.json.

    /work/venv/bin/pip install trl==1.16.0
    /work/venv/bin/python tools/gen_trl_packing_golden.py
"""
import json
import os
import random

import datasets
import trl
from trl import pack_dataset
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "data", "trl_packing.json")


def examples(seed, count, longest):
    rng = random.Random(seed)
    out = []
    for i in range(count):
        # Empty examples, ties in length, and examples longer than seq_length all occur.
        n = rng.choice([0, rng.randint(1, longest), rng.randint(1, 4), 3])
        out.append([rng.randint(1, 999) for _ in range(n)])
    return out


def case(name, data, seq_length, strategy, map_batch_size, collate_rows):
    ds = datasets.Dataset.from_dict({"input_ids": data})
    packed = pack_dataset(ds, seq_length, strategy, map_kwargs={"batch_size": map_batch_size})
    rows = [list(map(int, r)) for r in packed["input_ids"]]
    seq_lengths = ([list(map(int, r)) for r in packed["seq_lengths"]]
                   if "seq_lengths" in packed.column_names else None)
    # The padding-free collation of the first `collate_rows` rows, as SFTTrainer batches them.
    collator = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
    batch_examples = [{"input_ids": rows[i]} | ({"seq_lengths": seq_lengths[i]} if seq_lengths else {})
                      for i in range(min(collate_rows, len(rows)))]
    batch = collator(batch_examples)
    return {
        "name": name,
        "strategy": strategy,
        "seq_length": seq_length,
        "map_batch_size": map_batch_size,
        "examples": data,
        "rows": rows,
        "seq_lengths": seq_lengths,
        "collated": {
            "rows": len(batch_examples),
            "input_ids": batch["input_ids"][0].tolist(),
            "labels": batch["labels"][0].tolist(),
            "position_ids": batch["position_ids"][0].tolist(),
            "cu_seq_lens": batch["cu_seq_lens_q"].tolist(),
        },
    }


def main():
    cases = [
        # pack_dataset's docstring example.
        case("docstring", [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]], 4, "bfd", 1000, 3),
        case("docstring_wrapped", [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]], 4, "wrapped", 1000,
             2),
        case("bfd_random", examples(1, 60, 40), 32, "bfd", 1000, 4),
        # Packing runs per map batch: rows never mix examples of two batches.
        case("bfd_map_batches", examples(2, 50, 20), 16, "bfd", 7, 3),
        case("bfd_ties", [[i] * n for i, n in enumerate([3, 5, 3, 2, 5, 1, 3, 2, 4, 4, 1], 1)], 8,
             "bfd", 1000, 5),
        case("wrapped_random", examples(3, 40, 30), 24, "wrapped", 1000, 3),
        case("wrapped_map_batches", examples(4, 30, 30), 10, "wrapped", 8, 2),
    ]
    doc = {"trl": trl.__version__, "datasets": datasets.__version__, "cases": cases}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
