#!/usr/bin/python3
"""Writes tests/fixtures/optim/lr_scheduler_golden.txt and clip_grad_golden.txt: the learning
rates HF transformers' schedules give through torch.optim.lr_scheduler.LambdaLR, and what
torch.nn.utils.clip_grad_norm_ does to a few gradients, so that tests/optim/test_lr_scheduler.cpp
and tests/optim/test_clip_grad.cpp check headroom against them without needing Python.

Schedules. transformers is not installed here, so the lambdas below are HF's, copied formula for
formula from transformers/src/transformers/optimization.py (_get_*_lr_lambda, and
get_polynomial_decay_schedule_with_warmup's lr_init = optimizer.defaults["lr"] and
get_inverse_sqrt_schedule's timescale default), and warmup_ratio becomes steps as
TrainingArguments.get_warmup_steps does (transformers/training_args.py). Each schedule drives
torch.optim.SGD with two parameter groups: group 0 takes the default lr (so defaults["lr"] is its
lr), group 1 sets its own. The lrs are read from optimizer.param_groups after construction (step 0,
LambdaLR's initial step) and after each scheduler.step(), up to num_training_steps + 3.

Lines of lr_scheduler_golden.txt (lrs are Python floats printed with 17 significant digits, which
round-trip):
  groups <lr of group 0 (the optimizer's default)> <lr of group 1>
  schedule <id> <type> warmup_steps <n> warmup_ratio <r> training_steps <n> [<option> <value>]...
      options: num_cycles, lr_end, power, timescale (HF's defaults where absent)
  warmup <id> <num_warmup_steps as get_warmup_steps resolves it>
  lr <id> <last_epoch> <lr of group 0> <lr of group 1>
  warmup_rule <training_steps> <warmup_steps> <warmup_ratio> <get_warmup_steps' result>

Clipping. Three fp32 gradients ("w" [4, 5], "b" [7], "e" [3, 2, 2], with some exact zeros) and a
parameter without one ("n"), clipped with norm types 2, 1, inf and 3, each with a max_norm below
the total norm (the gradients are scaled) and one above (they are not). bf16 cases use the same
values rounded to bf16; there the reference is torch's fp32 clip_grad_norm_ on the gradients
widened to fp32, the clipped values rounded back to bf16 (headroom keeps norms of bf16 gradients
in fp32, see Note [Gradient norms in fp32] in src/optim/clip_grad.h); `torch_native_total` is
what torch 1.13's own bf16 path returns, which rounds every norm to bf16.

Lines of clip_grad_golden.txt (values float32 printed with 9 significant digits, which round-trip):
  param <name> <ndim> <dims...>            ("n" has no gradient)
  grad <name> <values...>                  fp32 gradient
  case <id> <dtype f32|bf16> norm_type <p|inf> max_norm <x>
  total <id> <total norm>
  exact_total <id> <value>                 the norm of the same values in float64 (17 digits)
  torch_native_total <id> <value>          (bf16 cases only)
  clipped <id> <name> <values...>          the gradient after clipping

Usage: /usr/bin/python3 tools/gen_sched_clip_golden.py [--out-dir tests/fixtures/optim]
Needs torch (Debian's python3-torch 1.13 was used).
"""

import argparse
import math
import os
from functools import partial

import torch

# ---- HF's schedule lambdas (transformers/src/transformers/optimization.py) ----


def _get_constant_lambda(_=None):
    return 1


def _get_constant_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def _get_linear_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps,
                                               num_training_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) /
               float(max(1, num_training_steps - num_warmup_steps)))


def _get_cosine_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps,
                                               num_training_steps, num_cycles):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(
        max(1, num_training_steps - num_warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def _get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda(
        current_step, *, num_warmup_steps, num_training_steps, num_cycles):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(
        max(1, num_training_steps - num_warmup_steps))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def _get_polynomial_decay_schedule_with_warmup_lr_lambda(
        current_step, *, num_warmup_steps, num_training_steps, lr_end, power, lr_init):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    elif current_step > num_training_steps:
        return lr_end / lr_init  # as LambdaLR multiplies by lr_init
    else:
        lr_range = lr_init - lr_end
        decay_steps = num_training_steps - num_warmup_steps
        pct_remaining = 1 - (current_step - num_warmup_steps) / decay_steps
        decay = lr_range * pct_remaining**power + lr_end
        return decay / lr_init  # as LambdaLR multiplies by lr_init


def _get_inverse_sqrt_schedule_lr_lambda(current_step, *, num_warmup_steps, timescale=None):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    shift = timescale - num_warmup_steps
    decay = 1.0 / math.sqrt((current_step + shift) / timescale)
    return decay


def get_scheduler(name, optimizer, num_warmup_steps, num_training_steps, **kwargs):
    """HF's get_scheduler with get_*_schedule*'s defaults, for the types written above."""
    L = torch.optim.lr_scheduler.LambdaLR
    if name == "constant":
        return L(optimizer, _get_constant_lambda)
    if name == "constant_with_warmup":
        return L(optimizer, partial(_get_constant_schedule_with_warmup_lr_lambda,
                                    num_warmup_steps=num_warmup_steps))
    if name == "inverse_sqrt":
        timescale = kwargs.get("timescale")
        if timescale is None:
            timescale = num_warmup_steps or 10_000
        return L(optimizer, partial(_get_inverse_sqrt_schedule_lr_lambda,
                                    num_warmup_steps=num_warmup_steps, timescale=timescale))
    common = dict(num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps)
    if name == "linear":
        return L(optimizer, partial(_get_linear_schedule_with_warmup_lr_lambda, **common))
    if name == "cosine":
        return L(optimizer, partial(_get_cosine_schedule_with_warmup_lr_lambda, **common,
                                    num_cycles=kwargs.get("num_cycles", 0.5)))
    if name == "cosine_with_restarts":
        return L(optimizer, partial(_get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda,
                                    **common, num_cycles=kwargs.get("num_cycles", 1)))
    if name == "polynomial":
        lr_init = optimizer.defaults["lr"]
        lr_end = kwargs.get("lr_end", 1e-7)
        assert lr_init > lr_end
        return L(optimizer, partial(_get_polynomial_decay_schedule_with_warmup_lr_lambda,
                                    **common, lr_end=lr_end, power=kwargs.get("power", 1.0),
                                    lr_init=lr_init))
    raise ValueError(name)


def get_warmup_steps(num_training_steps, warmup_steps, warmup_ratio):
    """TrainingArguments.get_warmup_steps (transformers/training_args.py)."""
    return warmup_steps if warmup_steps > 0 else math.ceil(num_training_steps * warmup_ratio)


# ---- schedules recorded ----

GROUP_LRS = (1e-3, 3e-4)
# (id, type, warmup_steps, warmup_ratio, training_steps, options)
SCHEDULES = [
    ("constant", "constant", 0, 0.0, 10, {}),
    ("constant_warmup_ignored", "constant", 3, 0.0, 10, {}),
    ("constant_with_warmup", "constant_with_warmup", 4, 0.0, 12, {}),
    ("constant_with_warmup_ratio", "constant_with_warmup", 0, 0.25, 30, {}),
    ("linear", "linear", 0, 0.0, 20, {}),
    ("linear_warmup", "linear", 5, 0.0, 20, {}),
    ("linear_ratio", "linear", 0, 0.1, 30, {}),
    ("linear_warmup_is_total", "linear", 8, 0.0, 8, {}),
    ("cosine", "cosine", 0, 0.0, 20, {}),
    ("cosine_warmup", "cosine", 5, 0.0, 25, {}),
    ("cosine_ratio", "cosine", 0, 0.15, 21, {}),
    ("cosine_cycles", "cosine", 2, 0.0, 18, {"num_cycles": 1.25}),
    ("cosine_with_restarts", "cosine_with_restarts", 0, 0.0, 20, {}),
    ("cosine_with_restarts_3", "cosine_with_restarts", 4, 0.0, 28, {"num_cycles": 3}),
    ("polynomial", "polynomial", 0, 0.0, 20, {}),
    ("polynomial_warmup_power", "polynomial", 3, 0.0, 17,
     {"lr_end": 1e-5, "power": 2.0}),
    ("polynomial_ratio", "polynomial", 0, 0.2, 16, {"power": 0.5}),
    ("inverse_sqrt", "inverse_sqrt", 0, 0.0, 10, {}),
    ("inverse_sqrt_warmup", "inverse_sqrt", 5, 0.0, 20, {}),
    ("inverse_sqrt_timescale", "inverse_sqrt", 3, 0.0, 20, {"timescale": 8}),
    # Warmup longer than training, which HF accepts (the lr never leaves warmup in training);
    # the lrs recorded past num_training_steps show the lambdas beyond the warmup too.
    ("linear_warmup_beyond_total", "linear", 9, 0.0, 7, {}),
    ("cosine_warmup_beyond_total", "cosine", 9, 0.0, 7, {}),
    ("cosine_with_restarts_warmup_beyond_total", "cosine_with_restarts", 9, 0.0, 7, {}),
    ("polynomial_warmup_beyond_total", "polynomial", 9, 0.0, 7, {}),
    ("cosine_ratio_all_warmup", "cosine", 0, 1.0, 6, {}),
]

# get_warmup_steps(training_steps, warmup_steps, warmup_ratio): 100 * 0.07 is 7.000000000000001
# in doubles, so Python's ceil gives 8; warmup_steps wins over a ratio.
WARMUP_RULES = [(100, 0, 0.07), (30, 0, 0.1), (10, 0, 0.0), (10, 0, 1.0), (7, 0, 0.5),
                (100, 3, 0.5), (0, 0, 0.3)]


def schedule_lines():
    lines = ["# HF transformers schedules through torch.optim.lr_scheduler.LambdaLR: torch %s. "
             "Written by tools/gen_sched_clip_golden.py (see its docstring); do not edit."
             % torch.__version__,
             "groups %.17g %.17g" % GROUP_LRS]
    for sid, kind, warmup_steps, warmup_ratio, total, options in SCHEDULES:
        extra = "".join(" %s %r" % (k, v) for k, v in options.items())
        lines.append("schedule %s %s warmup_steps %d warmup_ratio %r training_steps %d%s"
                     % (sid, kind, warmup_steps, warmup_ratio, total, extra))
        warmup = get_warmup_steps(total, warmup_steps, warmup_ratio)
        lines.append("warmup %s %d" % (sid, warmup))
        params = [torch.nn.Parameter(torch.zeros(1)) for _ in GROUP_LRS]
        optimizer = torch.optim.SGD([{"params": [params[0]]},
                                     {"params": [params[1]], "lr": GROUP_LRS[1]}],
                                    lr=GROUP_LRS[0])
        scheduler = get_scheduler(kind, optimizer, warmup, total, **options)
        for step in range(total + 4):
            if step > 0:
                optimizer.step()
                scheduler.step()
            assert scheduler.last_epoch == step
            lines.append("lr %s %d %s" % (sid, step, " ".join(
                "%.17g" % g["lr"] for g in optimizer.param_groups)))
    for args in WARMUP_RULES:
        lines.append("warmup_rule %d %d %r %d" % (args + (get_warmup_steps(*args),)))
    return lines


# ---- clip_grad_norm_ ----

GRADS = [("w", [4, 5], 0.5), ("b", [7], 1.0), ("e", [3, 2, 2], 3.0)]
# (id, dtype, norm_type, max_norm)
CLIP_CASES = [
    ("l2_clip", "f32", 2.0, 1.0), ("l2_keep", "f32", 2.0, 100.0),
    ("l1_clip", "f32", 1.0, 5.0), ("l1_keep", "f32", 1.0, 1000.0),
    ("inf_clip", "f32", math.inf, 0.25), ("inf_keep", "f32", math.inf, 50.0),
    ("l3_clip", "f32", 3.0, 0.5),
    ("bf16_l2_clip", "bf16", 2.0, 1.0), ("bf16_inf_clip", "bf16", math.inf, 0.25),
    ("bf16_l1_keep", "bf16", 1.0, 1000.0),
]


def fmt(t):
    return " ".join("%.9g" % v for v in t.float().reshape(-1).tolist())


def clip_lines():
    torch.manual_seed(20241122)
    grads = {}
    for name, shape, scale in GRADS:
        g = torch.randn(shape) * scale
        g.view(-1)[1] = 0.0
        grads[name] = g
    lines = ["# torch.nn.utils.clip_grad_norm_ golden values: torch %s. Written by "
             "tools/gen_sched_clip_golden.py (see its docstring); do not edit." % torch.__version__]
    for name, shape, _ in GRADS:
        lines.append("param %s %d %s" % (name, len(shape), " ".join(map(str, shape))))
    lines.append("param n 1 3")
    for name, _, _ in GRADS:
        lines.append("grad %s %s" % (name, fmt(grads[name])))

    for cid, dtype, norm_type, max_norm in CLIP_CASES:
        lines.append("case %s %s norm_type %s max_norm %r"
                     % (cid, dtype, "inf" if math.isinf(norm_type) else repr(norm_type), max_norm))
        values = {n: g.bfloat16() if dtype == "bf16" else g.clone() for n, g in grads.items()}
        flat = torch.cat([values[n].double().reshape(-1) for n, _, _ in GRADS])
        exact = torch.linalg.vector_norm(flat, norm_type).item()
        params = []
        for name, _, _ in GRADS:
            p = torch.nn.Parameter(torch.zeros_like(values[name], dtype=torch.float32))
            p.grad = values[name].float()  # bf16 values widened: the fp32 reference
            params.append(p)
        params.append(torch.nn.Parameter(torch.zeros(3)))  # "n": grad None, skipped
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        lines.append("total %s %.9g" % (cid, total.item()))
        lines.append("exact_total %s %.17g" % (cid, exact))
        if dtype == "bf16":
            native = [torch.nn.Parameter(torch.zeros_like(values[n])) for n, _, _ in GRADS]
            for p, (name, _, _) in zip(native, GRADS):
                p.grad = values[name].clone()
            native_total = torch.nn.utils.clip_grad_norm_(native, max_norm, norm_type)
            lines.append("torch_native_total %s %.9g" % (cid, native_total.float().item()))
        for p, (name, _, _) in zip(params, GRADS):
            clipped = p.grad.bfloat16() if dtype == "bf16" else p.grad
            lines.append("clipped %s %s %s" % (cid, name, fmt(clipped)))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..",
                                                          "tests", "fixtures", "optim"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out_dir, exist_ok=True)
    for filename, lines in (("lr_scheduler_golden.txt", schedule_lines()),
                            ("clip_grad_golden.txt", clip_lines())):
        path = os.path.join(args.out_dir, filename)
        with open(path, "w") as out:
            out.write("\n".join(lines) + "\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
