#!/usr/bin/env python3
"""Writes tests/fixtures/models/rope_scaling_reference.json: the RoPE inverse frequencies and the
attention factor transformers computes for yarn and longrope configurations, read from config.json
fields as each family writes them (transformers 4.x's top-level rope_theta + rope_scaling with
"type", transformers 5's rope_parameters, Phi-3's legacy "su" / "yarn" names and its top-level
original_max_position_embeddings), so that headroom's parse of the same config.json and its
shared frequency function (backend/rope_parameters.h) are checked against them.

Each case: "config" (the config.json, without weights), "inv_freq" (the frequencies of a forward
within the pretraining context), "long_inv_freq" (longrope: those of a forward past it) and
"attention_factor" (what multiplies cos and sin), taken from the model's own rotary module
(LlamaRotaryEmbedding, Qwen2RotaryEmbedding, Phi3RotaryEmbedding) after a forward over positions
0..L0-1 and then 0..L0 (longrope chooses its factors per forward). Floats are written as the
float32 values themselves (exact as JSON doubles).

Usage: python3 tools/gen_rope_scaling_golden.py (from the repository root; torch and
transformers 5.25 were used).
"""
import json
import os
import random

import torch
import transformers
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

OUT = "tests/fixtures/models/rope_scaling_reference.json"
ROTARY = {"llama": LlamaRotaryEmbedding, "qwen2": Qwen2RotaryEmbedding,
          "phi3": Phi3RotaryEmbedding}


def factors(count, seed, low, high):
    rng = random.Random(seed)
    return [round(rng.uniform(low, high), 6) for _ in range(count)]


def base(model_type, hidden, heads, max_pos, **fields):
    config = {"model_type": model_type, "vocab_size": 96, "hidden_size": hidden,
              "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": heads,
              "num_key_value_heads": heads, "max_position_embeddings": max_pos}
    config.update(fields)
    return config


CASES = [
    # Qwen2.5's long-context recipe, as its model card writes it (transformers 4.x fields).
    ("qwen25_yarn_t4", base("qwen2", 3584, 28, 131072, rope_theta=1000000.0,
                            rope_scaling={"type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 32768})),
    # transformers 5's rope_parameters, defaults for everything but factor.
    ("llama_yarn_t5", base("llama", 64, 2, 8192, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 2048})),
    # No truncation, other betas, mscale and mscale_all_dim (DeepSeek-style attention factor).
    ("llama_yarn_mscale", base("llama", 128, 2, 16384, rope_parameters={
        "rope_type": "yarn", "rope_theta": 50000.0, "factor": 8.0, "beta_fast": 16,
        "beta_slow": 2, "mscale": 1.0, "mscale_all_dim": 0.8, "truncate": False,
        "original_max_position_embeddings": 2048})),
    # factor null (max_position_embeddings / L0) with a given attention factor, head_dim apart.
    ("llama_yarn_factor_null", base("llama", 64, 4, 4096, head_dim=32, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": None, "attention_factor": 1.25,
        "original_max_position_embeddings": 1024})),
    # A small context, where the whole ramp lies inside the head (low < high < D / 2).
    ("llama_yarn_small", base("llama", 32, 2, 256, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 64})),
    # Phi-3-mini-128k's shape (head_dim 96, 4096 -> 131072) with its 4.x fields.
    ("phi3_longrope_t4", base("phi3", 3072, 32, 131072, rope_theta=10000.0,
                              original_max_position_embeddings=4096,
                              rope_scaling={"type": "longrope",
                                            "short_factor": factors(48, 1, 1.0, 1.1),
                                            "long_factor": factors(48, 2, 1.0, 60.0)})),
    # Phi-3's legacy name "su" (Phi-3-mini-128k's first release) and a small context.
    ("phi3_su", base("phi3", 32, 4, 256, rope_theta=10000.0, original_max_position_embeddings=64,
                     rope_scaling={"type": "su", "short_factor": [1.0, 1.05, 1.1, 1.2],
                                   "long_factor": [1.0, 2.0, 4.5, 9.0]})),
    # longrope elsewhere: transformers 5's rope_parameters with a factor and its own L0.
    ("llama_longrope_t5", base("llama", 32, 2, 512, rope_parameters={
        "rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 128,
        "short_factor": [1.0, 1.01, 1.02, 1.5, 1.7, 2.0, 2.5, 3.0],
        "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 7.0, 8.0]})),
]


def frequencies(config_json):
    fields = {k: v for k, v in config_json.items() if k != "model_type"}
    config = AutoConfig.for_model(config_json["model_type"], **fields)
    rotary = ROTARY[config_json["model_type"]](config)
    l0 = config.rope_parameters.get("original_max_position_embeddings",
                                    config.max_position_embeddings)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    x = torch.zeros(1, 1, head_dim)
    rotary(x, torch.arange(l0).unsqueeze(0))
    out = {"inv_freq": rotary.inv_freq.tolist(),
           "attention_factor": float(rotary.attention_scaling)}
    if config.rope_parameters["rope_type"] == "longrope":
        rotary(x, torch.arange(l0 + 1).unsqueeze(0))
        out["long_inv_freq"] = rotary.inv_freq.tolist()
        assert out["long_inv_freq"] != out["inv_freq"]
    return out


def main():
    cases = {}
    for name, config_json in CASES:
        cases[name] = {"config": config_json, **frequencies(config_json)}
        print(name, cases[name]["attention_factor"], cases[name]["inv_freq"][:3])
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
