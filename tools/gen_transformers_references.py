#!/usr/bin/env python3
"""Writes tests/fixtures/models/{llama31_tiny,qwen2_tiny,qwen2_window_tiny,qwen3_tiny,mistral_tiny,
phi3_tiny,qwen2_yarn_tiny,phi3_longrope_tiny,gemma2_tiny,gemma3_tiny}/: tiny checkpoints of families made and saved by transformers itself (config.json, model.safetensors) and reference.safetensors in the
layout of tools/gen_model_reference.py's fixtures (input_ids, targets, logits, loss, grad.<name>
for every saved tensor), all computed by transformers' model (eager attention, fp32, one thread),
0.1 * randn added to every parameter after its init (biases included, so Qwen2's q / k / v biases
matter).

llama31_tiny: LlamaForCausalLM with rope_parameters of rope_type llama3, chosen so that all three
of llama3's bands occur (head_dim 16, theta 500000, original context 64: frequency 0 is kept,
frequency 1 is interpolated, the rest are divided by the factor), over 48 tokens, which reach
positions where the scaled angles differ from unscaled ones by whole radians. Its reference also
holds rope.inv_freq and rope.llama31_8b_inv_freq, the inverse frequencies of this model and of
Llama-3.1-8B.
qwen2_tiny: Qwen2ForCausalLM (q / k / v biases, none on o_proj or the MLP), GQA, rope_theta 1e6.
qwen3_tiny: Qwen3ForCausalLM (q_norm / k_norm over each head before RoPE, head_dim 16 apart from
hidden / heads = 8, no biases).
qwen2_window_tiny: qwen2_tiny's shapes with use_sliding_window, sliding_window 5 and
max_window_layers 1: layer 0 attends fully, layer 1 to the last 5 keys.
mistral_tiny: MistralForCausalLM (Llama's block without biases, GQA, rope_theta 1e6) with a
sliding_window of 7 keys, well inside the 48-token sequence.
phi3_tiny: Phi3ForCausalLM (fused qkv_proj with GQA, fused gate_up_proj, no biases) with a
sliding_window of 11 keys.
qwen2_yarn_tiny: qwen2_tiny's shapes with rope_parameters of rope_type yarn (factor 4, original
context 16, theta 10000): interpolated and extrapolated frequencies and an attention factor of
0.1 ln 4 + 1 on cos and sin.
phi3_longrope_tiny: Phi3ForCausalLM with longrope (original_max_position_embeddings 32, so the
48-token batch takes the long factors); its reference also holds short.input_ids and
short.logits, a forward over the first 32 tokens, which takes the short ones.
gemma2_tiny: Gemma2ForCausalLM (embeddings times sqrt(hidden), (1 + w) RMSNorms before and after
attention and MLP, GeGLU, tied head) with head_dim 16 apart from hidden / heads, GQA,
query_pre_attn_scalar 24, layer 0 sliding over 7 keys and layer 1 global, and both soft caps small
enough to bite: attention scores capped at 2 and logits at 3.
gemma3_tiny: Gemma3ForCausalLM (gemma3_text: q_norm / k_norm (1 + w) over head_dim before RoPE)
with three layers, sliding_window_pattern 2 (layers 0 and 2 slide over 5 keys, layer 1 is
global), global RoPE theta 1e6 with linear scaling x2 and local theta 1e4, no soft caps.
The sliding-window models are checked to differ from the same weights without the window, and
gemma2_tiny from the same weights with either soft cap lifted.

Usage: python3 tools/gen_transformers_references.py [--out tests/fixtures/models]
Needs torch, transformers (5.25 was used) and safetensors. The output is deterministic.
"""

import argparse
import os

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

SEED = 3131
QWEN2_SEED = 2525
QWEN3_SEED = 3535
QWEN2_WINDOW_SEED = 2727
MISTRAL_SEED = 4545
PHI3_SEED = 5353
QWEN2_YARN_SEED = 6363
PHI3_LONGROPE_SEED = 7373
GEMMA2_SEED = 6262
GEMMA3_SEED = 6363
BATCH, SEQ = 2, 48
PERTURB_STD = 0.1  # as gen_model_reference.py: activations of order one
# The shapes of the tiny GQA models below (qwen2_tiny's), for the configs that share them.
TINY_GQA = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                attn_implementation="eager")


def write_reference(out, model):
    """Runs one batch through `model` (perturbed, eval mode) and writes the checkpoint and its
    reference into `out`; returns the reference's tensors."""
    config = model.config
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
    print(f"{out}: loss {loss.item():.6f} (transformers {transformers.__version__})")
    return reference


def window_matters(model_class, config, model, reference):
    """Asserts that the same weights without the sliding window give other logits."""
    full = config.to_dict()
    full.update(sliding_window=None, use_sliding_window=False)
    full.pop("layer_types", None)
    other = model_class(type(config).from_dict(full, attn_implementation="eager")).float().eval()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        logits = other(input_ids=reference["input_ids"]).logits
    assert (logits - reference["logits"]).abs().max() > 1e-2, "the window changes nothing"


def field_matters(model_class, config, model, reference, **changes):
    """Asserts that the same weights with `changes` to the config give other logits."""
    other_config = type(config).from_dict({**config.to_dict(), **changes},
                                          attn_implementation="eager")
    other = model_class(other_config).float().eval()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        logits = other(input_ids=reference["input_ids"]).logits
    assert (logits - reference["logits"]).abs().max() > 1e-2, f"{changes} change nothing"


def perturbed(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(PERTURB_STD * torch.randn_like(p))
    return model.eval()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "models"))
    root = parser.parse_args().out
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
    model = perturbed(LlamaForCausalLM(config).float())
    inv = model.model.rotary_emb.inv_freq
    unscaled = 1.0 / (500000.0 ** (torch.arange(0, 16, 2).float() / 16))
    assert inv[0] == unscaled[0] and unscaled[1] / 8 < inv[1] < unscaled[1], inv
    assert torch.allclose(inv[2:], unscaled[2:] / 8), inv
    out = os.path.join(root, "llama31_tiny")
    reference = write_reference(out, model)
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

    torch.manual_seed(QWEN2_SEED)
    config = Qwen2Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        attn_implementation="eager")
    model = perturbed(Qwen2ForCausalLM(config).float())
    out = os.path.join(root, "qwen2_tiny")
    save_file(write_reference(out, model), os.path.join(out, "reference.safetensors"))

    torch.manual_seed(QWEN3_SEED)
    config = Qwen3Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        attn_implementation="eager")
    model = perturbed(Qwen3ForCausalLM(config).float())
    out = os.path.join(root, "qwen3_tiny")
    save_file(write_reference(out, model), os.path.join(out, "reference.safetensors"))

    torch.manual_seed(QWEN2_WINDOW_SEED)
    config = Qwen2Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        use_sliding_window=True, sliding_window=5, max_window_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        attn_implementation="eager")
    assert config.layer_types == ["full_attention", "sliding_attention"], config.layer_types
    model = perturbed(Qwen2ForCausalLM(config).float())
    out = os.path.join(root, "qwen2_window_tiny")
    reference = write_reference(out, model)
    window_matters(Qwen2ForCausalLM, config, model, reference)
    save_file(reference, os.path.join(out, "reference.safetensors"))

    torch.manual_seed(MISTRAL_SEED)
    config = MistralConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        sliding_window=7, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        attn_implementation="eager")
    model = perturbed(MistralForCausalLM(config).float())
    out = os.path.join(root, "mistral_tiny")
    reference = write_reference(out, model)
    window_matters(MistralForCausalLM, config, model, reference)
    save_file(reference, os.path.join(out, "reference.safetensors"))

    torch.manual_seed(PHI3_SEED)
    config = Phi3Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        original_max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=None, sliding_window=11,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attn_implementation="eager")
    model = perturbed(Phi3ForCausalLM(config).float())
    out = os.path.join(root, "phi3_tiny")
    reference = write_reference(out, model)
    window_matters(Phi3ForCausalLM, config, model, reference)
    save_file(reference, os.path.join(out, "reference.safetensors"))

    torch.manual_seed(QWEN2_YARN_SEED)
    config = Qwen2Config(**TINY_GQA, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                          "factor": 4.0, "original_max_position_embeddings": 16})
    model = perturbed(Qwen2ForCausalLM(config).float())
    assert abs(model.model.rotary_emb.attention_scaling - 1.1386294361) < 1e-9
    out = os.path.join(root, "qwen2_yarn_tiny")
    save_file(write_reference(out, model), os.path.join(out, "reference.safetensors"))

    torch.manual_seed(PHI3_LONGROPE_SEED)
    config = Phi3Config(**TINY_GQA, original_max_position_embeddings=32, rms_norm_eps=1e-5,
                        pad_token_id=None,
                        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                         "short_factor": [1.0, 1.25, 1.5, 2.0],
                                         "long_factor": [1.0, 3.0, 6.0, 12.0]})
    model = perturbed(Phi3ForCausalLM(config).float())
    out = os.path.join(root, "phi3_longrope_tiny")
    reference = write_reference(out, model)
    short_ids = reference["input_ids"][:, :32].contiguous()
    with torch.no_grad():
        reference["short.input_ids"] = short_ids
        reference["short.logits"] = model(input_ids=short_ids).logits.contiguous()
        # The short factors matter: the first 32 logits of the long forward differ.
        assert (reference["short.logits"] - reference["logits"][:, :32]).abs().max() > 1e-3
    save_file(reference, os.path.join(out, "reference.safetensors"))

    torch.manual_seed(GEMMA2_SEED)
    config = Gemma2Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=7,
        attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attn_implementation="eager")
    assert config.layer_types == ["sliding_attention", "full_attention"], config.layer_types
    assert config.tie_word_embeddings
    model = perturbed(Gemma2ForCausalLM(config).float())
    out = os.path.join(root, "gemma2_tiny")
    reference = write_reference(out, model)
    field_matters(Gemma2ForCausalLM, config, model, reference, sliding_window=4096,
                  layer_types=["full_attention"] * 2)
    field_matters(Gemma2ForCausalLM, config, model, reference, attn_logit_softcapping=None)
    field_matters(Gemma2ForCausalLM, config, model, reference, final_logit_softcapping=None)
    save_file(reference, os.path.join(out, "reference.safetensors"))

    torch.manual_seed(GEMMA3_SEED)
    config = Gemma3TextConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-6, query_pre_attn_scalar=16, sliding_window=5, sliding_window_pattern=2,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        attn_implementation="eager")
    assert config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"], \
        config.layer_types
    model = perturbed(Gemma3ForCausalLM(config).float())
    out = os.path.join(root, "gemma3_tiny")
    reference = write_reference(out, model)
    field_matters(Gemma3ForCausalLM, config, model, reference, sliding_window=4096,
                  layer_types=["full_attention"] * 3)
    save_file(reference, os.path.join(out, "reference.safetensors"))


if __name__ == "__main__":
    main()
