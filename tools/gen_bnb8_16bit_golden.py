"""Golden trajectories of bitsandbytes' own 8-bit optimizers on 16-bit parameters, run on the CPU:
bnb.optim.AdamW8bit and bnb.optim.Lion8bit (the optimizers HF builds for optim=adamw_8bit /
adamw_bnb_8bit and lion_8bit) over bf16 and f16 parameter pairs (and Lion8bit over an f32 pair),
one of 4396 elements (8-bit states, 18 blocks of 256, the last one short) and one of 600 (below
min_8bit_size: fp32 states), for 3 steps.
Writes tests/fixtures/optim/bnb8_16bit_golden.safetensors, read by
tests/optim/test_bnb8_16bit_golden.cpp:

  <case>.<param>.param.<k>    the parameter after step k (k = 0: the initial value), its dtype
  <case>.<param>.grad.<k>     the gradient of step k (k >= 1), the parameter's dtype
  <case>.<param>.state1.<k>   bitsandbytes' state1 after step k: u8 codes or f32
  <case>.<param>.state2.<k>   (AdamW only) state2
  <case>.<param>.absmax1.<k>  (8-bit only) absmax1, f32 per block of 256; absmax2 for AdamW
  metadata: <case>.optimizer (adamw | lion), <case>.lr / beta1 / beta2 / eps / weight_decay /
            steps, and bitsandbytes' and torch's versions

bitsandbytes >= 0.49 runs these optimizers on the CPU through backends/cpu/ops.py: it dequantizes
the states to fp32, updates with PyTorch ops in fp32 (decay first, one rounding of the parameter at
the end) and requantizes with its C++ quantize_cpu (a 65536-entry lookup table, not the GPU's
binary search). Those are not the GPU kernels' roundings, which headroom copies; the test states
the tolerances this needs and why.

Run from the repository root: /work/venv/bin/python tools/gen_bnb8_16bit_golden.py
"""
import os

import bitsandbytes as bnb
import torch
from safetensors.torch import save_file

STEPS = 3
SHAPES = {"big": (4396,), "small": (600,)}
CASES = {
    # bitsandbytes' AdamW8bit defaults but lr, with its default weight decay (1e-2).
    "adamw_bf16": ("adamw", torch.bfloat16, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                                 weight_decay=1e-2)),
    "adamw_f16": ("adamw", torch.float16, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                               weight_decay=1e-2)),
    # Lion8bit with an lr that moves parameters of ~0.05 by more than half an ulp of bf16, and a
    # weight decay on.
    "lion_bf16": ("lion", torch.bfloat16, dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)),
    "lion_f16": ("lion", torch.float16, dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)),
    # The same on f32 parameters, where no intermediate rounding separates the two.
    "lion_f32": ("lion", torch.float32, dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)),
}


def gradient(generator, shape, dtype):
    """Gradients whose scale differs from block to block, so that each block has its own absmax."""
    n = shape[0]
    scale = torch.exp(torch.randn((n + 255) // 256, generator=generator)).repeat_interleave(256)[:n]
    g = torch.randn(shape, generator=generator) * 0.01 * scale
    g[7] = 0.0  # an exact zero: Lion's sign is 0 at the first step
    return g.to(dtype)


def run_case(seed, name, kind, dtype, options, tensors, metadata):
    generator = torch.Generator().manual_seed(seed)
    params = {p: torch.nn.Parameter((torch.randn(shape, generator=generator) * 0.05).to(dtype))
              for p, shape in SHAPES.items()}
    if kind == "adamw":
        optimizer = bnb.optim.AdamW8bit(list(params.values()), **options)
    else:
        optimizer = bnb.optim.Lion8bit(list(params.values()), **options)
    for p, param in params.items():
        tensors[f"{name}.{p}.param.0"] = param.detach().clone()
    for k in range(1, STEPS + 1):
        for p, param in params.items():
            param.grad = gradient(generator, SHAPES[p], dtype)
            tensors[f"{name}.{p}.grad.{k}"] = param.grad.clone()
        optimizer.step()
        for p, param in params.items():
            tensors[f"{name}.{p}.param.{k}"] = param.detach().clone()
            state = optimizer.state[param]
            assert state["step"] == k
            for key in ("state1", "state2", "absmax1", "absmax2"):
                if key in state:
                    tensors[f"{name}.{p}.{key}.{k}"] = state[key].clone()
    metadata[f"{name}.optimizer"] = kind
    metadata[f"{name}.steps"] = str(STEPS)
    metadata[f"{name}.lr"] = repr(options["lr"])
    metadata[f"{name}.beta1"] = repr(options["betas"][0])
    metadata[f"{name}.beta2"] = repr(options["betas"][1])
    metadata[f"{name}.eps"] = repr(options.get("eps", 0.0))
    metadata[f"{name}.weight_decay"] = repr(options["weight_decay"])


def main():
    tensors, metadata = {}, {"bitsandbytes": bnb.__version__, "torch": torch.__version__}
    for seed, (name, (kind, dtype, options)) in enumerate(CASES.items()):
        run_case(21 + seed, name, kind, dtype, options, tensors, metadata)
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "optim",
                       "bnb8_16bit_golden.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, out, metadata=metadata)
    print(f"wrote {out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
