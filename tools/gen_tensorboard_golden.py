#!/usr/bin/env python3
"""Writes tests/fixtures/tensorboard/: an event file that `headroom train --report_to tensorboard`
wrote, and what TensorBoard's own reader (the tensorboard package from PyPI, its EventAccumulator,
which the TensorBoard UI reads runs with) makes of it, so that tests/integrations/ checks headroom's
reader against TensorBoard's without needing Python:

  events.out.tfevents.golden   the event file of a fixed short run (4 steps, a log and an eval
                               every 2), as headroom wrote it
  metrics.jsonl                that run's metrics.jsonl
  tensorboard_read.json        {"tensorboard_version", "scalars": {tag: [[wall_time, step, value],
                               ...]}, "texts": {tag: [[wall_time, step, text], ...]}}: every
                               scalar and text event as TensorBoard read it

Before writing, it checks what HF's TensorBoardCallback promises: every number of every
metrics.jsonl entry is a scalar at the entry's step, equal to the value as a float32, under
transformers' tag (rewrite_logs: eval_x -> eval/x, else train/x; lr -> train/learning_rate, the
allocator's peaks under memory/), and nothing else is; and the arguments are the "args" text.

Usage: python tools/gen_tensorboard_golden.py [--headroom build/headroom]
           [--out-dir tests/fixtures/tensorboard]
Needs the tensorboard package (pip install tensorboard; 2.21.0 was used).
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile

import tensorboard
from tensorboard.backend.event_processing import event_accumulator


def tensorboard_tag(key):
    """transformers' rewrite_logs, with headroom's names for the keys HF spells otherwise."""
    if key == "step":
        return None
    if key.startswith("eval_"):
        return "eval/" + key[len("eval_"):]
    if key.startswith("peak_") or key.startswith("host_peak_"):
        return "memory/" + key
    if key == "lr":
        return "train/learning_rate"
    return "train/" + key


def float32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--headroom", default="build/headroom")
    parser.add_argument("--out-dir", default="tests/fixtures/tensorboard")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.txt")
        with open(data, "w") as f:
            for i in range(60):
                f.write(f"Line {i}: the quick brown fox jumps over the lazy dog, {i * 7 % 13} times.\n")
        out = os.path.join(tmp, "run")
        logs = os.path.join(tmp, "tb")
        subprocess.run(
            [args.headroom, "train", "--model", "gpt2-tiny", "--data", data, "--output_dir", out,
             "--max_steps", "4", "--logging_steps", "2", "--eval_strategy", "steps",
             "--eval_steps", "2", "--max_eval_samples", "2", "--max_seq_length", "32",
             "--per_device_train_batch_size", "2", "--save_strategy", "no",
             "--sample_max_new_tokens", "0", "--disable_tqdm", "--seed", "42",
             "--report_to", "tensorboard", "--logging_dir", logs],
            check=True, stdout=subprocess.DEVNULL)
        (name,) = os.listdir(logs)
        assert name.startswith("events.out.tfevents."), name
        events_path = os.path.join(logs, name)

        acc = event_accumulator.EventAccumulator(
            events_path, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
        acc.Reload()
        tags = acc.Tags()
        scalars = {tag: [[e.wall_time, e.step, e.value] for e in acc.Scalars(tag)]
                   for tag in sorted(tags["scalars"])}
        texts = {tag: [[e.wall_time, e.step, e.tensor_proto.string_val[0].decode()]
                       for e in acc.Tensors(tag)]
                 for tag in sorted(tags["tensors"])}

        with open(os.path.join(out, "metrics.jsonl")) as f:
            entries = [json.loads(line) for line in f]
        expected = {}
        for entry in entries:
            for key, value in entry.items():
                tag = tensorboard_tag(key)
                if tag is None or value is None or isinstance(value, bool):
                    continue
                expected.setdefault(tag, []).append([entry["step"], float32(value)])
        read = {tag: [[step, value] for _, step, value in events] for tag, events in scalars.items()}
        assert read == expected, f"TensorBoard read {read}\nmetrics.jsonl has {expected}"
        assert list(texts) == ["args/text_summary"], texts
        arguments = json.loads(texts["args/text_summary"][0][2])
        assert arguments["report_to"] == "tensorboard" and arguments["max_steps"] == 4, arguments

        os.makedirs(args.out_dir, exist_ok=True)
        shutil.copyfile(events_path, os.path.join(args.out_dir, "events.out.tfevents.golden"))
        shutil.copyfile(os.path.join(out, "metrics.jsonl"),
                        os.path.join(args.out_dir, "metrics.jsonl"))
        with open(os.path.join(args.out_dir, "tensorboard_read.json"), "w") as f:
            json.dump({"tensorboard_version": tensorboard.__version__, "scalars": scalars,
                       "texts": texts}, f, indent=1)
            f.write("\n")
        print(f"{len(scalars)} scalar tags, {sum(map(len, scalars.values()))} scalars, "
              f"all equal to metrics.jsonl; written to {args.out_dir}")


if __name__ == "__main__":
    main()
