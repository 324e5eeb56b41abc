#!/usr/bin/env python3
"""Writes tests/fixtures/peft/: LoRA adapters made by the real peft + transformers, with the
outputs headroom must reproduce, so that the C++ tests check headroom's LoRA without Python.

  gpt2_tiny_lora/   on tests/fixtures/models/gpt2_tiny (Conv1D weights, fan_in_fan_out): r 4,
                    alpha 8, targets c_attn and c_proj (attention and MLP), bias "all".
  llama_tiny_lora/  on tests/fixtures/models/llama_tiny: r 4, alpha 16, rsLoRA, "all-linear",
                    modules_to_save ["lm_head"].
  gpt2_tiny_lora_head/   on gpt2_tiny: r 4, alpha 8, targets c_attn and lm_head (the output
                    projection tied to wte; PEFT also saves its base weight,
                    lm_head.base_layer.weight, as save_embedding_layers "auto" does).
  llama_tiny_lora_head/  on llama_tiny (untied lm_head): r 4, alpha 8, targets q_proj, lm_head.
  llama_bytes/      a byte-vocabulary Llama made and saved by transformers (config.json,
                    model.safetensors), and eval.txt, for `headroom eval`.
  llama_bytes_lora/ a PEFT adapter on it (q_proj, v_proj; r 8, alpha 16).

Each adapter directory holds what PeftModel.save_pretrained wrote (adapter_config.json,
adapter_model.safetensors; its README.md removed) and reference.safetensors:
  tiny models: input_ids I64 [2, 16] and targets I64 [2, 16] (those of the base's
  reference.safetensors), logits F32 [2, 16, vocab], loss F32 [] (mean cross-entropy over targets
  != -100), grad.<adapter key> F32 for every tensor of adapter_model.safetensors.
  llama_bytes_lora: eval_loss F32 [] (mean cross-entropy of eval.txt's bytes cut into consecutive
  windows of 17, the tail dropped: `headroom eval --max_seq_length 16`), eval_tokens I64 [].
Every B starts as N(0, 0.05) (PEFT's default would make it zero and the adapter invisible), and
the lm_head copy of modules_to_save gets N(0, 0.02) added, so that each part shows in the outputs.
Deterministic (fixed seeds, one thread).

A second mode checks the other direction, an adapter trained and saved by headroom:
  tools/gen_lora_golden.py --check-headroom-adapter DIR [--base tests/fixtures/peft/llama_bytes]
      [--data tests/fixtures/peft/llama_bytes/eval.txt] [--headroom build/headroom]
loads DIR with PeftModel.from_pretrained onto the base, computes the eval loss as above, runs
`headroom eval --model BASE --adapter DIR --json` and fails unless the two agree to 1e-5.

Usage: python3 tools/gen_lora_golden.py [--out tests/fixtures/peft]
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Relative to ROOT (the script runs there), so that base_model_name_or_path in the committed
# adapter_config.json files names no machine's directory.
MODELS = os.path.join("tests", "fixtures", "models")
EVAL_WINDOW = 17  # max_seq_length 16 + 1
EVAL_TEXT = (
    "LoRA freezes the pretrained weights and trains a low-rank update beside each projection.\n"
    "Only the adapters get gradients and optimizer state, so a large model fits on a small GPU.\n"
    "The adapter files are small: two thin matrices per wrapped layer, saved by PEFT.\n"
)

TINY_CASES = {
    "gpt2_tiny_lora": dict(
        base="gpt2_tiny", seed=11,
        config=dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], lora_dropout=0.0,
                    fan_in_fan_out=True, bias="all")),
    "llama_tiny_lora": dict(
        base="llama_tiny", seed=12,
        config=dict(r=4, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0,
                    use_rslora=True, modules_to_save=["lm_head"])),
    "gpt2_tiny_lora_head": dict(
        base="gpt2_tiny", seed=13,
        config=dict(r=4, lora_alpha=8, target_modules=["c_attn", "lm_head"], lora_dropout=0.0,
                    fan_in_fan_out=True)),
    "llama_tiny_lora_head": dict(
        base="llama_tiny", seed=14,
        config=dict(r=4, lora_alpha=8, target_modules=["q_proj", "lm_head"], lora_dropout=0.0)),
}


def file_key(param_name):
    """The adapter_model.safetensors key of a PeftModel parameter (adapter name removed)."""
    return param_name.replace("modules_to_save.default.", "").replace(".default.", ".")


def make_peft(base_dir, seed, config):
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", **config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
            elif "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.02)
    return model


def save_adapter(model, out):
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    readme = os.path.join(out, "README.md")
    if os.path.exists(readme):
        os.remove(readme)


def windows_loss(model, data):
    ids = torch.tensor(list(data), dtype=torch.long)
    n = len(ids) // EVAL_WINDOW
    windows = ids[: n * EVAL_WINDOW].view(n, EVAL_WINDOW)
    with torch.no_grad():
        logits = model(input_ids=windows[:, :-1]).logits.double()
    loss = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="sum")
    tokens = windows[:, 1:].numel()
    return loss.item() / tokens, tokens


def write_tiny_cases(out_root):
    for name, case in TINY_CASES.items():
        base_dir = os.path.join(MODELS, case["base"])
        model = make_peft(base_dir, case["seed"], case["config"])
        model.eval()
        ref = load_file(os.path.join(base_dir, "reference.safetensors"))
        ids, targets = ref["input_ids"], ref["targets"]
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        loss.backward()
        out = os.path.join(out_root, name)
        save_adapter(model, out)
        saved = load_file(os.path.join(out, "adapter_model.safetensors"))
        tensors = {"input_ids": ids, "targets": targets, "logits": logits.detach().contiguous(),
                   "loss": loss.detach()}
        for pname, p in model.named_parameters():
            if p.requires_grad:
                key = file_key(pname)
                assert key in saved, (key, sorted(saved))
                assert torch.equal(saved[key], p.detach()), key
                tensors["grad." + key] = p.grad.detach().contiguous()
        # Besides the trainable tensors, PEFT saves the base weight of a wrapped output layer.
        extra = [k for k in saved if "grad." + k not in tensors]
        assert all(k.endswith("lm_head.base_layer.weight") for k in extra), extra
        assert len(tensors) - 4 + len(extra) == len(saved), (len(tensors), len(saved))
        save_file(tensors, os.path.join(out, "reference.safetensors"))
        print(f"{name}: loss {loss.item():.6f}, {len(saved)} adapter tensors")


def write_bytes_case(out_root):
    base_dir = os.path.join(out_root, "llama_bytes")
    shutil.rmtree(base_dir, ignore_errors=True)
    torch.manual_seed(21)
    config = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(base_dir)
    with open(os.path.join(base_dir, "eval.txt"), "w") as f:
        f.write(EVAL_TEXT)
    peft_model = make_peft(base_dir, 22, dict(r=8, lora_alpha=16,
                                              target_modules=["q_proj", "v_proj"]))
    peft_model.eval()
    out = os.path.join(out_root, "llama_bytes_lora")
    save_adapter(peft_model, out)
    loss, tokens = windows_loss(peft_model, EVAL_TEXT.encode())
    save_file({"eval_loss": torch.tensor(loss, dtype=torch.float32),
               "eval_tokens": torch.tensor(tokens, dtype=torch.int64)},
              os.path.join(out, "reference.safetensors"))
    print(f"llama_bytes_lora: eval loss {loss:.6f} over {tokens} tokens")


def check_headroom_adapter(adapter, base, data, headroom):
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    with open(data, "rb") as f:
        peft_loss, tokens = windows_loss(model, f.read())
    run = subprocess.run([headroom, "eval", "--model", base, "--adapter", adapter, "--data", data,
                          "--max_seq_length", str(EVAL_WINDOW - 1), "--device", "cpu", "--json"],
                         check=True, capture_output=True, text=True)
    ours = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"PEFT loss {peft_loss:.7f} over {tokens} tokens; headroom eval loss "
          f"{ours['loss']:.7f} over {ours['tokens']} tokens")
    if ours["tokens"] != tokens or abs(ours["loss"] - peft_loss) > 1e-5 * max(1.0, peft_loss):
        sys.exit("MISMATCH: the adapter headroom saved does not give headroom's loss in PEFT")
    print("OK: PEFT reproduces headroom's loss with headroom's adapter")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join("tests", "fixtures", "peft"))
    parser.add_argument("--check-headroom-adapter")
    parser.add_argument("--base", default=os.path.join("tests", "fixtures", "peft", "llama_bytes"))
    parser.add_argument("--data")
    parser.add_argument("--headroom", default=os.path.join("build", "headroom"))
    args = parser.parse_args()
    os.chdir(ROOT)
    torch.set_num_threads(1)
    if args.check_headroom_adapter:
        data = args.data or os.path.join(args.base, "eval.txt")
        check_headroom_adapter(args.check_headroom_adapter, args.base, data, args.headroom)
        return
    os.makedirs(args.out, exist_ok=True)
    write_tiny_cases(args.out)
    write_bytes_case(args.out)


if __name__ == "__main__":
    main()
