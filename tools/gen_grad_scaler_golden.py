#!/usr/bin/python3
"""Writes tests/fixtures/amp/grad_scaler_golden.txt: what torch's GradScaler does over a scripted
run with injected inf / NaN gradients, what Megatron-LM's DynamicGradScaler (hysteresis, min_scale)
does to the scale over a pattern of overflows, and the gradients unscale_ writes in f32, bf16 and
f16, so that tests/amp/test_grad_scaler.cpp checks headroom's GradScaler without needing Python.

How torch's GradScaler is run without CUDA. Debian's torch 1.13 has `_amp_update_scale_` and
`_amp_foreach_non_finite_check_and_unscale_` only for CUDA (on CPU tensors both raise
NotImplementedError), and its torch.cuda.amp.GradScaler disables itself without CUDA. So this
script runs 1.13's own GradScaler Python code (stage tracking per optimizer, the order of unscale,
skip and update, update(new_scale)) on the CPU with four patches:
  - amp_definitely_not_available() answers False, so the scaler stays enabled;
  - _MultiDeviceReplicator loses its is_cuda assertion;
  - scale() is called through cpu_scale() below, GradScaler.scale without its is_cuda assertion;
  - the two kernels are replaced by Python versions of aten/src/ATen/native/cuda/AmpKernels.cu:
    unscale: val = float(g); found_inf = 1 if not isfinite(val); g = dtype(val * inv_scale) unless
    inv_scale == 1 (an fp32 multiply, rounded to the gradient's dtype);
    update: on inf scale = float(scale * backoff_factor) (the product in double, as float * double
    in the kernel), tracker = 0; else tracker + 1, and at growth_interval
    scale = float(scale * growth_factor) only if that is finite, tracker = 0. The finiteness cap
    is torch >= 2.1's kernel (PR #98876); 1.13's kernel grows to inf. This run never gets near it.

The run ("torch" lines): one parameter group {w [2, 3]} and another {b [4]}, torch.optim.SGD with
lr 0.125 (a power of two, so -lr * g is exact and the update p - lr * g rounds once however the
kernel fuses it), init_scale 3000.7, growth_factor 1.7, backoff_factor 0.45, growth_interval 3 (odd
values, so that the fp32 rounding of the scale and of 1 / scale matters). At step k the loss is
sum(w * cw_k) + sum(b * cb_k), b taking part only on even steps (grad None on odd ones); the scaled
loss is backpropagated, so the gradients are scale * c. Chosen steps put a value into c that
overflows fp32 once scaled, or NaN, or inf; some of them in a row. On every fifth step unscale_ is
called explicitly before step(); at step 33 update(new_scale) replaces update().

The Megatron pattern ("megatron" lines) is megatron/core/optimizer/grad_scaler.py
DynamicGradScaler.update, transcribed below (scale, factors and min_scale as fp32 tensors, as
there): initial_scale 4096, min_scale 1024, growth_factor 2, backoff_factor 0.5, growth_interval 4,
hysteresis 2. With factors 2 and 0.5 its fp32 products equal torch's double-then-fp32 ones.

The unscale lines ("cast" lines) are random values of each dtype, scaled by a non-power-of-two
scale, unscaled as above. f16 cases include subnormal results; bf16 ones stay normal (headroom
flushes fp32 subnormals, and a bf16 subnormal is one).

Fixture lines (floats with 9 significant digits, which round-trip float32; inf / nan as printed):
  options <init_scale> <growth_factor> <backoff_factor> <growth_interval> <lr>
  init <name> <values...>                       w then b
  coeff <k> <name> <values...>                  c_k (no b line: b has no gradient at step k)
  unscale_first <k>                             unscale_ is called before step() at step k
  new_scale <k> <value>                         update(new_scale=value) instead of update()
  result <k> <scale before> <found_inf> <stepped> <scale after> <growth tracker after>
  grad <k> <name> <values...>                   the gradient after unscale_ (inf / nan kept)
  value <k> <name> <values...>                  the parameter after step()
  megatron_options <initial> <min_scale> <growth> <backoff> <interval> <hysteresis>
  megatron <k> <found_inf> <scale before> <scale after> <growth tracker> <hysteresis tracker>
  cast <dtype> <scale> <inv_scale> <n> <n scaled values> <n unscaled values>

Usage: /usr/bin/python3 tools/gen_grad_scaler_golden.py [--out tests/fixtures/amp/grad_scaler_golden.txt]
Needs torch (Debian's python3-torch 1.13 was used) and NumPy.
"""

import argparse
import math
import os
import warnings

import numpy as np
import torch
import torch.cuda.amp.grad_scaler as grad_scaler_module

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "amp", "grad_scaler_golden.txt")

FLT_MAX = float(np.finfo(np.float32).max)
STEPS = 40
INIT_SCALE, GROWTH, BACKOFF, INTERVAL, LR = 3000.7, 1.7, 0.45, 3, 0.125
# step -> (parameter, index, what): "overflow" is a finite coefficient that scale * c takes past
# fp32's largest value (the sign says which infinity); "nan" / "inf" are put in as they are.
INJECT = {
    5: [("w", 2, "overflow")],
    8: [("w", 4, "large")],  # scaled to 0.9 * FLT_MAX: finite, no skip
    11: [("w", 1, "nan")],
    12: [("b", 0, "inf")],
    20: [("w", 0, "-overflow"), ("w", 5, "nan")],
    27: [("w", 3, "overflow")],
    28: [("b", 3, "-inf")],
    29: [("w", 5, "overflow")],
}
UNSCALE_FIRST = {k for k in range(1, STEPS + 1) if k % 5 == 0}
NEW_SCALE = {33: 1234.567}

MEGATRON = dict(initial_scale=4096.0, min_scale=1024.0, growth_factor=2.0, backoff_factor=0.5,
                growth_interval=4, hysteresis=2)
MEGATRON_INF_STEPS = {3, 5, 6, 7, 13, 14, 24, 28}
MEGATRON_STEPS = 30


def fmt(values):
    if isinstance(values, torch.Tensor):
        values = values.detach().reshape(-1).tolist()
    return " ".join("%.9g" % v for v in values)


def f32(x):
    with np.errstate(over="ignore"):
        return np.float32(x)


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    inv = float(inv_scale.item())
    for g in grads:
        val = g.float()
        if not bool(torch.isfinite(val).all()):
            found_inf.fill_(1.0)
        if inv != 1.0:
            g.copy_(val * inv_scale)  # fp32 * fp32, rounded to g's dtype by copy_


def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                  growth_interval):
    current = np.float64(scale.item())
    if found_inf.item():
        scale.fill_(float(f32(current * backoff_factor)))
        growth_tracker.fill_(0)
    else:
        successful = int(growth_tracker.item()) + 1
        if successful == growth_interval:
            grown = f32(current * growth_factor)
            if np.isfinite(grown):
                scale.fill_(float(grown))
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale


class CpuReplicator(grad_scaler_module._MultiDeviceReplicator):
    def __init__(self, master_tensor):
        self.master = master_tensor
        self._per_device_tensors = {}


def patch_torch():
    grad_scaler_module.amp_definitely_not_available = lambda: False
    grad_scaler_module._MultiDeviceReplicator = CpuReplicator
    torch._amp_foreach_non_finite_check_and_unscale_ = non_finite_check_and_unscale_
    torch._amp_update_scale_ = update_scale_


def cpu_scale(scaler, outputs):
    if scaler._scale is None:
        scaler._lazy_init_scale_growth_tracker(outputs.device)
    return outputs * scaler._scale.to(device=outputs.device, non_blocking=True)


def coefficients(step, name, shape, generator, scale):
    c = torch.randn(shape, generator=generator)
    for param, index, what in INJECT.get(step, []):
        if param != name:
            continue
        if what in ("overflow", "-overflow"):
            value = 2.0 * FLT_MAX / scale
        elif what == "large":
            value = 0.9 * FLT_MAX / scale
        else:
            value = float(what)
        c.view(-1)[index] = -value if what.startswith("-") else value
    return c


def torch_run(lines):
    patch_torch()
    generator = torch.Generator().manual_seed(20261123)
    shapes = {"w": [2, 3], "b": [4]}
    params = {name: torch.randn(shape, generator=generator).requires_grad_(True)
              for name, shape in shapes.items()}
    lines.append("options %.9g %.9g %.9g %d %.9g" % (INIT_SCALE, GROWTH, BACKOFF, INTERVAL, LR))
    for name in shapes:
        lines.append("init %s %s" % (name, fmt(params[name])))
    optimizer = torch.optim.SGD([{"params": [params["w"]]}, {"params": [params["b"]]}], lr=LR,
                                foreach=False)
    scaler = grad_scaler_module.GradScaler(init_scale=INIT_SCALE, growth_factor=GROWTH,
                                           backoff_factor=BACKOFF, growth_interval=INTERVAL)
    assert scaler.is_enabled()
    for step in range(1, STEPS + 1):
        optimizer.zero_grad(set_to_none=True)
        scale_before = scaler.get_scale()
        names = ["w", "b"] if step % 2 == 0 else ["w"]
        loss = 0.0
        for name in names:
            c = coefficients(step, name, shapes[name], generator, scale_before)
            lines.append("coeff %d %s %s" % (step, name, fmt(c)))
            loss = loss + (params[name] * c).sum()
        cpu_scale(scaler, loss).backward()
        if step in UNSCALE_FIRST:
            lines.append("unscale_first %d" % step)
            scaler.unscale_(optimizer)
        before = {name: p.detach().clone() for name, p in params.items()}
        scaler.step(optimizer)
        found_inf = bool(sum(v.item() for v in scaler._found_inf_per_device(optimizer).values()))
        stepped = any(not torch.equal(before[n], params[n].detach()) for n in names)
        assert stepped != found_inf
        if step in NEW_SCALE:
            lines.append("new_scale %d %.9g" % (step, NEW_SCALE[step]))
            scaler.update(NEW_SCALE[step])
        else:
            scaler.update()
        lines.append("result %d %.9g %d %d %.9g %d" % (step, scale_before, found_inf, stepped,
                                                       scaler.get_scale(),
                                                       scaler._get_growth_tracker()))
        for name in names:
            lines.append("grad %d %s %s" % (step, name, fmt(params[name].grad)))
        for name in shapes:
            lines.append("value %d %s %s" % (step, name, fmt(params[name])))


class DynamicGradScaler:
    """megatron/core/optimizer/grad_scaler.py DynamicGradScaler's state and update(), on the CPU."""

    def __init__(self, initial_scale, min_scale, growth_factor, backoff_factor, growth_interval,
                 hysteresis):
        self._scale = torch.tensor([initial_scale], dtype=torch.float)
        self.min_scale = torch.tensor([min_scale], dtype=torch.float)
        self.growth_factor = torch.tensor([growth_factor], dtype=torch.float)
        self.backoff_factor = torch.tensor([backoff_factor], dtype=torch.float)
        self.growth_interval = growth_interval
        self.hysteresis = hysteresis
        self._growth_tracker = 0
        self._hysteresis_tracker = self.hysteresis

    def update(self, found_inf):
        if found_inf:
            self._growth_tracker = 0
            self._hysteresis_tracker -= 1
            if self._hysteresis_tracker <= 0:
                self._scale = torch.max(self._scale * self.backoff_factor, self.min_scale)
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._hysteresis_tracker = self.hysteresis
                self._scale = self._scale * self.growth_factor


def megatron_run(lines):
    m = MEGATRON
    lines.append("megatron_options %.9g %.9g %.9g %.9g %d %d" % (
        m["initial_scale"], m["min_scale"], m["growth_factor"], m["backoff_factor"],
        m["growth_interval"], m["hysteresis"]))
    scaler = DynamicGradScaler(**m)
    for step in range(1, MEGATRON_STEPS + 1):
        found_inf = step in MEGATRON_INF_STEPS
        before = scaler._scale.item()
        scaler.update(found_inf)
        lines.append("megatron %d %d %.9g %.9g %d %d" % (step, found_inf, before,
                                                         scaler._scale.item(),
                                                         scaler._growth_tracker,
                                                         scaler._hysteresis_tracker))


def cast_cases(lines):
    generator = torch.Generator().manual_seed(7)
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    for name, dtype in dtypes.items():
        for scale in (3000.7, 65536.0 * 1.3, 0.6):
            x = torch.randn(24, generator=generator) * 8.0
            if name == "f16":
                x[:4] = torch.tensor([3e-8, -5e-7, 2e-5, 6e-5]) * scale  # subnormal results
                x = x.clamp(-60000.0, 60000.0)
            scaled = x.to(dtype)
            scale_tensor = torch.full((1,), scale, dtype=torch.float32)
            inv_scale = scale_tensor.double().reciprocal().float()
            unscaled = scaled.clone()
            found_inf = torch.zeros(1)
            non_finite_check_and_unscale_([unscaled], found_inf, inv_scale)
            assert found_inf.item() == 0
            if name == "bf16":
                tiny = float(torch.finfo(torch.float32).tiny)
                assert bool((unscaled.float().abs() >= tiny).all())
            lines.append("cast %s %.9g %.9g %d %s %s" % (name, scale_tensor.item(),
                                                         inv_scale.item(), x.numel(),
                                                         fmt(scaled.float()),
                                                         fmt(unscaled.float())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("error")  # a disabled scaler would only warn

    lines = ["# GradScaler golden values: torch %s's GradScaler logic with the AmpKernels.cu rules "
             "(see tools/gen_grad_scaler_golden.py), Megatron-LM DynamicGradScaler." % torch.__version__,
             "# Written by tools/gen_grad_scaler_golden.py (see its docstring for the format); "
             "do not edit."]
    torch_run(lines)
    megatron_run(lines)
    cast_cases(lines)
    assert not any("nan" in line and line.startswith("result") for line in lines)
    assert all(math.isfinite(float(word)) for line in lines if line.startswith("megatron ")
               for word in line.split()[1:])

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as out:
        out.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
