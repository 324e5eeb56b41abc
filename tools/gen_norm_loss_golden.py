#!/usr/bin/python3
"""Golden values for layer_norm, rms_norm and cross_entropy from PyTorch (Debian's torch 1.13).

Writes tests/fixtures/ops/norm_loss_golden.txt, read by tests/ops/test_norm_loss.cpp. Each line is
    <case> <field> <dims, comma-separated, or "scalar"> <values...>
Inputs are generated here in fp32 and the reference is computed in float64 from those fp32
values; gradients are of sum(out * gy) for the norms (gy recorded) and of the loss itself.
RMSNorm is written as Hugging Face's LlamaRMSNorm.

Usage: /usr/bin/python3 tools/gen_norm_loss_golden.py
"""
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "ops",
                   "norm_loss_golden.txt")


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, weight, eps):
        super().__init__()
        self.weight = weight
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32 if input_dtype != torch.float64
                                         else torch.float64)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def line(case, field, t):
    t = t.detach()
    dims = "scalar" if t.dim() == 0 else ",".join(str(d) for d in t.shape)
    if t.dtype in (torch.int64, torch.int32):
        vals = " ".join(str(int(v)) for v in t.flatten())
    else:
        vals = " ".join("%.9g" % float(v) for v in t.flatten())
    return f"{case} {field} {dims} {vals}"


def leaf(t):
    """The fp32 value as a float64 leaf that requires grad."""
    return t.to(torch.float32).to(torch.float64).requires_grad_(True)


def main():
    g = torch.Generator().manual_seed(2024)
    rand = lambda *s, scale=1.0: (torch.randn(*s, generator=g) * scale).to(torch.float32)
    lines = []

    # layer_norm with weight and bias, and without affine.
    for case, dims, affine, eps in (("layer_norm_affine", (3, 5), True, 1e-5),
                                    ("layer_norm_plain", (2, 6), False, 1e-3)):
        x = leaf(rand(*dims, scale=2.0) + 0.5)
        w = leaf(rand(dims[-1]) + 1.0) if affine else None
        b = leaf(rand(dims[-1])) if affine else None
        gy = rand(*dims).to(torch.float64)
        y = F.layer_norm(x, (dims[-1],), w, b, eps)
        (y * gy).sum().backward()
        lines.append(line(case, "eps", torch.tensor(eps, dtype=torch.float64)))
        lines += [line(case, "x", x), line(case, "gy", gy), line(case, "out", y),
                  line(case, "dx", x.grad)]
        if affine:
            lines += [line(case, "weight", w), line(case, "bias", b),
                      line(case, "dweight", w.grad), line(case, "dbias", b.grad)]

    # rms_norm as LlamaRMSNorm.
    x = leaf(rand(3, 6, scale=1.5))
    w = leaf(rand(6) * 0.2 + 1.0)
    gy = rand(3, 6).to(torch.float64)
    y = LlamaRMSNorm(w, 1e-6)(x)
    (y * gy).sum().backward()
    lines.append(line("rms_norm", "eps", torch.tensor(1e-6, dtype=torch.float64)))
    lines += [line("rms_norm", "x", x), line("rms_norm", "weight", w), line("rms_norm", "gy", gy),
              line("rms_norm", "out", y), line("rms_norm", "dx", x.grad),
              line("rms_norm", "dweight", w.grad)]

    # cross_entropy: default ignore_index with one ignored row, and ignore_index = 1 on 3-D logits.
    for case, dims, targets, ignore in (
            ("cross_entropy_2d", (4, 7), torch.tensor([3, -100, 0, 6]), -100),
            ("cross_entropy_3d", (2, 3, 5), torch.tensor([[1, 4, 0], [2, 1, 3]]), 1)):
        logits = leaf(rand(*dims, scale=2.0))
        loss = F.cross_entropy(logits.reshape(-1, dims[-1]), targets.reshape(-1),
                               ignore_index=ignore)
        loss.backward()
        lines.append(line(case, "ignore_index", torch.tensor(ignore)))
        lines += [line(case, "logits", logits), line(case, "targets", targets),
                  line(case, "loss", loss), line(case, "dlogits", logits.grad)]

    with open(OUT, "w") as f:
        f.write("# Made by tools/gen_norm_loss_golden.py with torch %s\n" % torch.__version__)
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
