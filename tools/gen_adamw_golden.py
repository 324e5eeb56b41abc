#!/usr/bin/python3
"""Writes tests/fixtures/optim/adamw_golden.txt: what torch.optim.AdamW (single-tensor path,
foreach=False) does to two small fp32 parameters over 10 steps, so that tests/optim/test_adamw.cpp
checks headroom's AdamW against it without needing Python; and the same run with bf16 states
(headroom's optim=adamw_bf16), modelled in torch as described below.

Parameter "a" [4, 3] is in a group with weight decay 0.1, "b" [5] in one with none; lr 0.01,
betas (0.8, 0.95), eps 1e-6. Gradients are fixed per step (randn, some elements exactly 0); at
step 4 "b" has no gradient (grad None: skipped, its step count does not advance) and from step 7 on
the learning rate of both groups is 0.005, as a scheduler would set it.

Fixture lines (values are float32, printed with 9 significant digits, which round-trip):
  options lr <lr> beta1 <b1> beta2 <b2> eps <eps>
  param <name> <weight_decay> <ndim> <dims...>
  init <name> <values...>
  lr <step> <lr>                  the learning rate set before that step
  grad <step> <name> <values...>  (no line: grad None at that step)
  value <step> <name> <values...> the parameter after the step
  bf16_value <step> <name> <values...>       the parameter after the step, with bf16 states
  bf16_exp_avg <step> <name> <values...>     exp_avg and exp_avg_sq after the step, with bf16
  bf16_exp_avg_sq <step> <name> <values...>  states (bf16 numbers: they read back exactly); none
                                             for "b" at its skipped step

bf16 states: headroom (src/optim/adamw.h, src/backend/cpu/adamw.cpp: adamw_update_mixed) keeps
exp_avg and exp_avg_sq in bf16, widens them to fp32 at each step, runs the whole update in fp32 --
the new exp_avg and exp_avg_sq, and the parameter update computed from those fp32 values -- and
only then stores exp_avg and exp_avg_sq rounded to nearest (even) bf16. The natural torch
formulation, bf16 state tensors updated by torch's in-place ops, would instead round after each op
(mul_, add_, addcmul_) and compute the parameter update from the rounded states; that is not
headroom's rule, so this script models headroom's: torch.optim.AdamW with fp32 states, and after
each optimizer.step() each state tensor is replaced by its value rounded to bf16
(state.copy_(state.to(torch.bfloat16))). The next step therefore starts from exactly the bf16 values
headroom holds. One difference is left: torch's AVX2 kernels fuse the multiply-adds of the exp_avg
and exp_avg_sq updates (Note [AdamW order of operations] in src/backend/cpu/adamw.cpp) where
headroom's mixed-dtype kernel rounds each product, so the fp32 states can differ in their last bit
before rounding to bf16 (which could, rarely, round them to neighbouring bf16 numbers); the test
allows for an fp32 ulp or so in the parameters and reports how many values are bit-identical.

Usage: /usr/bin/python3 tools/gen_adamw_golden.py [--out tests/fixtures/optim/adamw_golden.txt]
Needs torch (Debian's python3-torch 1.13 was used).
"""

import argparse
import os

import torch

STEPS = 10
LR, LR_LATER, LR_CHANGE_STEP = 0.01, 0.005, 7
BETAS, EPS = (0.8, 0.95), 1e-6
PARAMS = [("a", [4, 3], 0.1), ("b", [5], 0.0)]
SKIP = {(4, "b")}


def fmt(values):
    return " ".join("%.9g" % v for v in values.reshape(-1).tolist())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "optim", "adamw_golden.txt"))
    args = parser.parse_args()
    torch.manual_seed(20240611)
    torch.set_num_threads(1)

    tensors = {name: torch.randn(shape) for name, shape, _ in PARAMS}
    lines = ["# torch.optim.AdamW golden values: torch %s. Written by tools/gen_adamw_golden.py "
             "(see its docstring); do not edit." % torch.__version__,
             "options lr %.9g beta1 %.9g beta2 %.9g eps %.9g" % (LR, BETAS[0], BETAS[1], EPS)]
    for name, shape, wd in PARAMS:
        lines.append("param %s %.9g %d %s" % (name, wd, len(shape), " ".join(map(str, shape))))
    for name, _, _ in PARAMS:
        lines.append("init %s %s" % (name, fmt(tensors[name])))

    grads = {}  # (step, name) -> gradient, drawn once and shared by both runs

    def run(bf16_states, prefix):
        params = {name: t.clone().requires_grad_(True) for name, t in tensors.items()}
        optimizer = torch.optim.AdamW(
            [{"params": [params[name]], "weight_decay": wd} for name, _, wd in PARAMS],
            lr=LR, betas=BETAS, eps=EPS, foreach=False)
        for step in range(1, STEPS + 1):
            if step == LR_CHANGE_STEP:
                for group in optimizer.param_groups:
                    group["lr"] = LR_LATER
                if not bf16_states:
                    lines.append("lr %d %.9g" % (step, LR_LATER))
            for name, shape, _ in PARAMS:
                if (step, name) in SKIP:
                    params[name].grad = None
                    continue
                if (step, name) not in grads:
                    grad = torch.randn(shape)
                    grad.view(-1)[step % grad.numel()] = 0.0  # m and v decay without new input
                    grads[(step, name)] = grad
                    lines.append("grad %d %s %s" % (step, name, fmt(grad)))
                params[name].grad = grads[(step, name)].clone()
            optimizer.step()
            for name, _, _ in PARAMS:
                state = optimizer.state[params[name]]
                if bf16_states and (step, name) not in SKIP:
                    # headroom's rule (see the docstring): the step ran in fp32, the states are
                    # stored rounded to nearest bf16.
                    for key in ("exp_avg", "exp_avg_sq"):
                        state[key].copy_(state[key].to(torch.bfloat16))
                        lines.append("%s%s %d %s %s" % (prefix, key, step, name, fmt(state[key])))
                lines.append("%svalue %d %s %s" % (prefix, step, name,
                                                   fmt(params[name].detach())))

    run(bf16_states=False, prefix="")
    run(bf16_states=True, prefix="bf16_")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as out:
        out.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
