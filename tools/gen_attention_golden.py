#!/usr/bin/env python3
"""Writes tests/fixtures/ops/attention_golden.txt: PyTorch's answers for a tiny causal
grouped-query attention and for HF Llama's rotary embedding, with gradients, so that
tests/ops/test_attention.cpp checks scaled_dot_product_attention and rotary_embedding against
numbers from outside without Python.

Attention is written out explicitly (repeat_kv, then a masked softmax of q k^T * scale), as HF
Llama's eager attention computes it; rotary follows LlamaRotaryEmbedding / apply_rotary_pos_emb.
Everything runs in fp32.

Usage: /usr/bin/python3 tools/gen_attention_golden.py [--out tests/fixtures/ops/attention_golden.txt]
Needs torch (1.13 was used).

Fixture lines, one tensor each:
  <name> <ndim> <dim>... : <values in row-major order, %.9g>
"""

import argparse
import math
import os

import torch


def repeat_kv(x, groups):
    b, h, t, d = x.shape
    return x[:, :, None, :, :].expand(b, h, groups, t, d).reshape(b, h * groups, t, d)


def attention(q, k, v):
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    t = q.shape[2]
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[3])
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(x, theta, offset):
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    positions = torch.arange(offset, offset + x.shape[2], dtype=torch.int64).float()
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def line(name, t):
    t = t.detach().contiguous()
    values = " ".join("%.9g" % v for v in t.flatten().tolist())
    return "%s %d %s : %s\n" % (name, t.dim(), " ".join(str(s) for s in t.shape), values)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "ops", "attention_golden.txt"))
    args = parser.parse_args()
    torch.manual_seed(0)
    lines = ["# torch %s: causal GQA attention (B 1, Hq 4, Hkv 2, T 6, D 8) and rotary "
             "(theta 10000, offset 3)\n" % torch.__version__]

    q = torch.randn(1, 4, 6, 8, requires_grad=True)
    k = torch.randn(1, 2, 6, 8, requires_grad=True)
    v = torch.randn(1, 2, 6, 8, requires_grad=True)
    out = attention(q, k, v)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    for name, t in [("attention.q", q), ("attention.k", k), ("attention.v", v),
                    ("attention.out", out), ("attention.grad_out", grad_out),
                    ("attention.grad_q", q.grad), ("attention.grad_k", k.grad),
                    ("attention.grad_v", v.grad)]:
        lines.append(line(name, t))

    x = torch.randn(1, 2, 5, 8, requires_grad=True)
    out = rotary(x, 10000.0, 3)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    for name, t in [("rotary.x", x), ("rotary.out", out), ("rotary.grad_out", grad_out),
                    ("rotary.grad_x", x.grad)]:
        lines.append(line(name, t))

    with open(args.out, "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
