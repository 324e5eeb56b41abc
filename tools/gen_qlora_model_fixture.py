"""Tiny 4-bit models saved by transformers + bitsandbytes (CPU), for headroom's loader: each of
tests/fixtures/models/{llama_tiny,gpt2_tiny} loaded with BitsAndBytesConfig(load_in_4bit=True,
nf4, double quantization, fp32 compute) and saved with save_pretrained into
tests/fixtures/models/<name>_4bit/ (config.json with its quantization_config, model.safetensors
with bitsandbytes' keys), plus reference.safetensors: input_ids [2, 7] and the logits of the
4-bit model: transformers' model in fp32 with every 4-bit weight dequantized by bitsandbytes'
generic code (backends/default/ops.py _dequantize_4bit_compute, blocks over the flattened
weight, as its CUDA kernels). Not bitsandbytes' own CPU forward: its AVX-512 dequantize kernel
(csrc/cpu_ops.cpp dequantizeBlockwise4bitCpu, 0.50) indexes absmax per row, n / blocksize
blocks a row, which is 0 for these 32-wide rows, so every row reads block 0's absmax and the
logits are wrong (max error 0.3 here); weights whose rows are a multiple of the blocksize are
unaffected.

  python3 tools/gen_qlora_model_fixture.py            write the fixtures
  python3 tools/gen_qlora_model_fixture.py --check DIR  load a 4-bit model headroom
      saved with transformers and print its logits' largest difference from the fixture's
      reference (DIR's config.json names the architecture)
"""
import json
import os
import sys

import bitsandbytes as bnb
import bitsandbytes.functional as F
import torch
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from transformers.pytorch_utils import Conv1D

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")


def bnb_config():
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.float32)


def input_ids():
    return torch.tensor([[1, 5, 17, 33, 60, 2, 95], [7, 7, 90, 3, 41, 12, 0]], dtype=torch.int64)


def flat_dequantize(param):
    state = param.quant_state
    absmax = state.absmax
    if state.nested:
        absmax = F.dequantize_blockwise(state.absmax, state.state2) + state.offset
    return _dequantize_4bit_compute(param.data.view(torch.uint8).reshape(-1), absmax.float(),
                                    state.code, state.blocksize, state.shape, torch.float32)


def logits_of(quantized, name):
    # The full-precision model with the 4-bit weights dequantized (see the docstring).
    full = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name), dtype=torch.float32)
    weights = full.state_dict()
    full_modules = dict(full.named_modules())
    count = 0
    for module_name, module in quantized.named_modules():
        if isinstance(module, bnb.nn.Linear4bit):
            w = flat_dequantize(module.weight)  # [out, in]
            if isinstance(full_modules[module_name], Conv1D):  # GPT-2 keeps [in, out]
                w = w.t()
            weights[module_name + ".weight"] = w.contiguous()
            count += 1
    full.load_state_dict(weights)
    full.eval()
    with torch.no_grad():
        return full(input_ids()).logits.float().contiguous(), count


def write(name):
    model = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name),
                                                 quantization_config=bnb_config(),
                                                 device_map="cpu", dtype=torch.float32)
    out = os.path.join(MODELS, name + "_4bit")
    model.save_pretrained(out)
    logits, count = logits_of(model, name)
    save_file({"input_ids": input_ids(), "logits": logits},
              os.path.join(out, "reference.safetensors"))
    print("wrote", out, sorted(os.listdir(out)), count, "4-bit layers")


def check(directory):
    with open(os.path.join(directory, "config.json")) as f:
        arch = json.load(f)["model_type"]
    name = {"llama": "llama_tiny", "gpt2": "gpt2_tiny"}[arch]
    model = AutoModelForCausalLM.from_pretrained(directory, device_map="cpu")
    reference = load_file(os.path.join(MODELS, name + "_4bit", "reference.safetensors"))
    logits, count = logits_of(model, name)
    diff = (logits - reference["logits"]).abs().max().item()
    print("transformers loaded", directory, "with", count, "4-bit layers; largest logit "
          "difference from", name + "_4bit:", diff)
    return diff


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(0 if check(sys.argv[2]) < 1e-4 else 1)
    for model_name in ("llama_tiny", "gpt2_tiny"):
        write(model_name)
