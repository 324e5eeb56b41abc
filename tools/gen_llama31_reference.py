#!/usr/bin/env python3
"""Writes tests/fixtures/models/llama31_tiny/: a tiny Llama 3.1-style checkpoint made and saved by
transformers (config.json with rope_parameters of rope_type llama3, model.safetensors) and
reference.safetensors in the layout of tools/gen_model_reference.py's fixtures (input_ids,
targets, logits, loss, grad.<name> for every saved tensor; rope.inv_freq and
rope.llama31_8b_inv_freq, the inverse frequencies of this model and of Llama-3.1-8B), all computed
by transformers' LlamaForCausalLM (eager attention, fp32, one thread). The RoPE scaling is chosen so that all three
of llama3's bands occur (head_dim 16, theta 500000, original context 64: frequency 0 is kept,
frequency 1 is interpolated, the rest are divided by the factor), and the sequence (48 tokens)
reaches positions where the scaled angles differ from unscaled ones by whole radians.

Usage: python3 tools/gen_llama31_reference.py [--out tests/fixtures/models]
Needs torch, transformers (5.25 was used) and safetensors.
"""

import argparse
import os

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

SEED = 3131
BATCH, SEQ = 2, 48
PERTURB_STD = 0.1  # as gen_model_reference.py: activations of order one


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "models"))
    out = os.path.join(parser.parse_args().out, "llama31_tiny")
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64},
        attn_implementation="eager")
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(PERTURB_STD * torch.randn_like(p))
    model.eval()
    inv = model.model.rotary_emb.inv_freq
    unscaled = 1.0 / (500000.0 ** (torch.arange(0, 16, 2).float() / 16))
    assert inv[0] == unscaled[0] and unscaled[1] / 8 < inv[1] < unscaled[1], inv
    assert torch.allclose(inv[2:], unscaled[2:] / 8), inv

    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ))
    targets = torch.cat([ids[:, 1:], torch.full((BATCH, 1), -100)], dim=1)
    targets[0, 5] = targets[1, 20] = -100
    logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), targets.reshape(-1),
                           ignore_index=-100)
    loss.backward()

    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    saved = load_file(os.path.join(out, "model.safetensors"))
    params = dict(model.named_parameters())
    reference = {"input_ids": ids.contiguous(), "targets": targets.contiguous(),
                 "logits": logits.detach().contiguous(), "loss": loss.detach()}
    for name in sorted(saved):
        reference["grad." + name] = params[name].grad.contiguous()
    # The inverse frequencies themselves: this model's, and Llama-3.1-8B's (head_dim 128, its
    # rope_parameters) as transformers computes them at load.
    reference["rope.inv_freq"] = inv.contiguous()
    big = LlamaConfig(hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                       "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192})
    reference["rope.llama31_8b_inv_freq"] = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[
        "llama3"](big, "cpu")[0].contiguous()
    save_file(reference, os.path.join(out, "reference.safetensors"))
    print(f"wrote {out} with transformers {transformers.__version__}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
