#!/usr/bin/env python3
"""Prints the "which model fits which VRAM" table of bench/results/*-plan-vram-table.md from
`headroom plan --json` searches, one per model (standard library only):

  for m in gpt2-xl llama-7b llama-3-8b llama-13b llama-70b; do
    build/headroom plan --model $m --max_seq_length 512 --per_device_train_batch_size 1 --bf16 \
        --gradient_checkpointing --gpu-memory 40GiB --json --max-results 1000 > /tmp/vram_$m.json
  done
  python3 tools/plan_vram_table.py /tmp/vram_{gpt2-xl,llama-7b,llama-3-8b,llama-13b,llama-70b}.json

A cell gives, of the searched configurations without offload whose required_bytes is within
the capacity, the one needing least; "no" when none is. A search at 40 GiB lists every
configuration that fits any smaller capacity too.
"""

import json
import sys

GIB = 2**30
CAPACITIES = (8, 16, 24, 40)
CATEGORIES = (("full", lambda a: a == "full"),
              ("LoRA r16", lambda a: a.startswith("lora")),
              ("QLoRA r16 (NF4)", lambda a: a.startswith("qlora")))
NAMES = {"gpt2-xl": "GPT-2 XL 1.56B", "llama-7b": "Llama-2 7B", "llama-3-8b": "Llama-3 8B",
         "llama-13b": "Llama-2 13B", "llama-70b": "Llama-2 70B",
         "llama-3.2-1b": "Llama-3.2 1B", "llama-3.2-3b": "Llama-3.2 3B",
         "llama-3.1-8b": "Llama-3.1 8B", "llama-3.3-70b": "Llama-3.3 70B",
         "qwen2.5-0.5b": "Qwen2.5 0.5B", "qwen2.5-1.5b": "Qwen2.5 1.5B", "qwen2.5-7b": "Qwen2.5 7B",
         "qwen2.5-14b": "Qwen2.5 14B", "qwen2.5-32b": "Qwen2.5 32B", "qwen2.5-72b": "Qwen2.5 72B",
         "qwen3-8b": "Qwen3 8B", "mistral-7b": "Mistral 7B", "phi-3-mini": "Phi-3 mini 3.8B",
         "gemma-2-2b": "Gemma-2 2B", "gemma-2-9b": "Gemma-2 9B", "gemma-2-27b": "Gemma-2 27B",
         "gemma-3-1b": "Gemma-3 1B", "gemma-3-4b": "Gemma-3 4B", "gemma-3-12b": "Gemma-3 12B"}


def cell(configurations, category, capacity):
    name, wanted = category
    fitting = [c for c in configurations if wanted(c["adapter"]) and not c["offload"]
               and c["required_bytes"] <= capacity * GIB]
    if not fitting:
        return "no"
    best = min(fitting, key=lambda c: c["required_bytes"])
    targets = "" if name == "full" else ", " + best["adapter"].split(" ", 2)[-1]
    return "%.1f GiB (%s, %s, ckpt %s%s)" % (best["required_bytes"] / GIB, best["precision"],
                                             best["optim"],
                                             best["gradient_checkpointing_policy"], targets)


def main(paths):
    plans = []
    for path in paths:
        with open(path) as f:
            plan = json.load(f)
        model = path.rsplit("vram_", 1)[-1].removesuffix(".json")
        plans.append((NAMES.get(model, model), plan["search"]["configurations"]))
    print("| VRAM | model | full fine-tuning | LoRA r16 | QLoRA r16 (NF4) |")
    print("|---|---|---|---|---|")
    for capacity in CAPACITIES:
        for name, configurations in plans:
            cells = [cell(configurations, c, capacity) for c in CATEGORIES]
            print(f"| {capacity} GiB | {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
