#!/usr/bin/python3
"""Writes tests/fixtures/optim/adamw_golden.txt: what torch.optim.AdamW (single-tensor path,
foreach=False) does to two small fp32 parameters over 10 steps, so that tests/optim/test_adamw.cpp
checks headroom's AdamW against it without needing Python.

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

    params = {name: t.clone().requires_grad_(True) for name, t in tensors.items()}
    optimizer = torch.optim.AdamW(
        [{"params": [params[name]], "weight_decay": wd} for name, _, wd in PARAMS],
        lr=LR, betas=BETAS, eps=EPS, foreach=False)
    for step in range(1, STEPS + 1):
        if step == LR_CHANGE_STEP:
            for group in optimizer.param_groups:
                group["lr"] = LR_LATER
            lines.append("lr %d %.9g" % (step, LR_LATER))
        for name, shape, _ in PARAMS:
            if (step, name) in SKIP:
                params[name].grad = None
                continue
            grad = torch.randn(shape)
            grad.view(-1)[step % grad.numel()] = 0.0  # m and v decay without new input there
            params[name].grad = grad
            lines.append("grad %d %s %s" % (step, name, fmt(grad)))
        optimizer.step()
        for name, _, _ in PARAMS:
            lines.append("value %d %s %s" % (step, name, fmt(params[name].detach())))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as out:
        out.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
