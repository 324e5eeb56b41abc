#!/usr/bin/env python3
"""Writes tests/fixtures/ops/pointwise_golden.txt: PyTorch's gelu (approximate="tanh"), silu,
silu(gate) * up and softmax values and input gradients for a few small inputs, so that
tests/ops/test_pointwise.cpp checks our kernels against them without needing Python.

Usage: /usr/bin/python3 tools/gen_pointwise_golden.py [--out tests/fixtures/ops/pointwise_golden.txt]
Needs torch (1.13 was used). Computed in float32 on the CPU.

Fixture lines (floats printed with 9 significant digits, which round-trip float32):
  case <name> <op> <rows> <cols> <dim>    op: gelu, silu, swiglu, softmax (dim for softmax only)
  <tensor> <rows * cols values>           tensors: x (swiglu: gate, up), dy, y, then dx
                                           (swiglu: dgate, dup); dx is the gradient of sum(y * dy)
"""

import argparse
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "ops", "pointwise_golden.txt")


def fmt(t):
    return " ".join("%.9g" % v for v in t.detach().reshape(-1).tolist())


def inputs(rows, cols, seed, scale):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * scale).float()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()

    lines = [
        "# PyTorch %s golden values for gelu(tanh) / silu / swiglu / softmax." % torch.__version__,
        "# Written by tools/gen_pointwise_golden.py (see its docstring for the format); do not edit.",
    ]

    def unary(name, op, fn, x, dim=0):
        x = x.clone().requires_grad_(True)
        dy = inputs(*x.shape, seed=100 + len(lines), scale=1.0)
        y = fn(x)
        (y * dy).sum().backward()
        lines.append("case %s %s %d %d %d" % (name, op, x.shape[0], x.shape[1], dim))
        for label, t in (("x", x), ("dy", dy), ("y", y), ("dx", x.grad)):
            lines.append("%s %s" % (label, fmt(t)))

    # A dense sweep through both branches of tanh and the tails, then random values.
    sweep = torch.linspace(-12.0, 12.0, 97).reshape(1, 97)
    gelu = lambda t: torch.nn.functional.gelu(t, approximate="tanh")
    unary("gelu_sweep", "gelu", gelu, sweep)
    unary("gelu_random", "gelu", gelu, inputs(3, 17, 1, 2.0))
    unary("silu_sweep", "silu", torch.nn.functional.silu, sweep)
    unary("silu_random", "silu", torch.nn.functional.silu, inputs(3, 17, 2, 2.0))
    unary("softmax_last", "softmax", lambda t: torch.softmax(t, -1), inputs(4, 33, 3, 3.0), -1)
    unary("softmax_first", "softmax", lambda t: torch.softmax(t, 0), inputs(5, 7, 4, 3.0), 0)
    unary("softmax_large", "softmax", lambda t: torch.softmax(t, -1),
          inputs(2, 9, 5, 1.0) * 30.0 + 500.0, -1)

    gate = inputs(3, 13, 6, 2.0).requires_grad_(True)
    up = inputs(3, 13, 7, 1.0).requires_grad_(True)
    dy = inputs(3, 13, 8, 1.0)
    y = torch.nn.functional.silu(gate) * up
    (y * dy).sum().backward()
    lines.append("case swiglu_random swiglu 3 13 0")
    for label, t in (("gate", gate), ("up", up), ("dy", dy), ("y", y), ("dgate", gate.grad),
                     ("dup", up.grad)):
        lines.append("%s %s" % (label, fmt(t)))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
