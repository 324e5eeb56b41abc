"""Golden vectors for bitsandbytes' 8-bit AdamW, re-implemented in NumPy from bitsandbytes'
functional.py (create_dynamic_map) and its CUDA kernels (kQuantizeBlockwise / dQuantize,
kDequantizeBlockwise, kOptimizerStatic8bit2StateBlockwise, kOptimizer32bit2State), every
operation in float32 as those kernels round it. Writes tests/fixtures/optim/adamw8bit_golden.txt:

  map signed|unsigned <256 values>                  create_dynamic_map(signed), sorted
  quant signed|unsigned input|codes|absmax|dequant  quantize_blockwise (block 256) of a fixed input
  options lr .. beta1 .. beta2 .. eps .. weight_decay .. steps ..
  param <name> <numel> <salt>                      parameter and gradients from value_at() below
  bad_grad <step> <name> <index> inf|nan            a non-finite gradient element
  sample <step> <name> <stride> <values>            every stride-th parameter value after the step
  checksum <step> <name> <sum>                      the double sum of all values, in index order
  absmax <step> <name> 1|2 <values>                 the 8-bit tensor's absmax per block
  codes <name> 1|2 <hex>                            its state codes after the last step

Run with a Python that has NumPy (pyenv's python3). With /usr/bin/python3 and its torch it also
prints how far torch's own linspace puts the map (see Note [Dynamic map in fp32]).
"""
import os

import numpy as np

f32 = np.float32
BLOCK = 256


def linspace_f32(start, end, steps):
    # PyTorch's scalar CPU linspace in float32.
    start, end = f32(start), f32(end)
    step = f32((end - start) / f32(steps - 1))
    half = steps // 2
    return np.array([start + step * f32(i) if i < half else end - step * f32(steps - i - 1)
                     for i in range(steps)], dtype=f32)


def create_dynamic_map(signed, max_exponent_bits=7, total_bits=8):
    data = []
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        items = 2 ** (i + non_sign_bits - max_exponent_bits + (0 if signed else 1)) + 1
        b = linspace_f32(0.1, 1.0, items)
        means = (b[:-1] + b[1:]) / f32(2.0)
        scale = f32(10.0 ** (-(max_exponent_bits - 1) + i))
        data += list(scale * means)
        if signed:
            data += list(-scale * means)
    data += [f32(0.0), f32(1.0)]
    assert len(data) == 2 ** total_bits
    return np.sort(np.array(data, dtype=f32))


def quantize_nearest(code, x):
    # dQuantize<0>: binary search to an even pivot, then the nearest neighbour (ties to the pivot).
    x = np.asarray(x, dtype=f32)
    pivot = np.full(x.shape, 127, dtype=np.int64)
    upper_pivot = np.full(x.shape, 255, dtype=np.int64)
    lower_pivot = np.zeros(x.shape, dtype=np.int64)
    lower = np.full(x.shape, -1.0, dtype=f32)
    upper = np.full(x.shape, 1.0, dtype=f32)
    val = code[pivot]
    step = 64
    while step > 0:
        up = x > val
        lower_pivot = np.where(up, pivot, lower_pivot)
        lower = np.where(up, val, lower)
        upper_pivot = np.where(up, upper_pivot, pivot)
        upper = np.where(up, upper, val)
        pivot = np.where(up, pivot + step, pivot - step)
        val = code[pivot]
        step >>= 1
    upper = np.where(upper_pivot == 255, code[255], upper)
    lower = np.where(lower_pivot == 0, code[0], lower)
    up = x > val
    to_upper = x > (upper + val) * f32(0.5)
    to_lower = x < (lower + val) * f32(0.5)
    return np.where(up, np.where(to_upper, upper_pivot, pivot),
                    np.where(to_lower, lower_pivot, pivot)).astype(np.uint8)


def quantize_blockwise(code, a):
    n = a.size
    blocks = (n + BLOCK - 1) // BLOCK
    absmax = np.zeros(blocks, dtype=f32)
    out = np.zeros(n, dtype=np.uint8)
    with np.errstate(divide="ignore", invalid="ignore"):
        for b in range(blocks):
            part = a[b * BLOCK:(b + 1) * BLOCK]
            absmax[b] = np.max(np.abs(part))
            out[b * BLOCK:(b + 1) * BLOCK] = quantize_nearest(code, part * (f32(1.0) / absmax[b]))
    return out, absmax


def dequantize_blockwise(code, q, absmax):
    return code[q] * np.repeat(absmax, BLOCK)[:q.size]


def value_at(n, salt, step):
    # Values in [-1, 1] scaled by 2^-(block % 5); C++ computes the same integers and roundings.
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(salt * 97531 + step * 7919)) % np.uint64(2 ** 32)
    h = ((h ^ (h >> np.uint64(13))) * np.uint64(1274126177)) % np.uint64(2 ** 32)
    h ^= h >> np.uint64(16)
    u = (h % np.uint64(20001)).astype(np.int64) - 10000
    scale = np.ldexp(f32(1.0), -((np.arange(n) // BLOCK) % 5).astype(np.int32)).astype(f32)
    return (u.astype(f32) / f32(10000.0)) * scale


class Coefficients:
    def __init__(self, lr, beta1, beta2, eps, weight_decay, step):
        self.beta1, self.beta2 = f32(beta1), f32(beta2)
        self.omb1, self.omb2 = f32(1.0) - self.beta1, f32(1.0) - self.beta2
        lr = f32(lr)
        c1 = f32(1.0) - f32(float(self.beta1) ** step)
        c2 = np.sqrt(f32(1.0) - f32(float(self.beta2) ** step))
        self.eps_c2 = f32(eps) * c2
        self.step_size = (-lr * c2) / c1
        self.decay = f32(1.0) - lr * f32(weight_decay)


def adam32_step(p, g, m, v, c):
    m[:] = m * c.beta1 + c.omb1 * g
    v[:] = v * c.beta2 + c.omb2 * (g * g)
    p[:] = p + c.step_size * (m / (np.sqrt(v) + c.eps_c2))
    p[:] = p * c.decay


def adam8bit_step(p, g, s, q1, q2, c):
    n = p.size
    blocks = s["absmax1"].size
    pad = blocks * BLOCK - n
    # The CUDA block's lanes past the end load g = 0 and codes 128 / 0.
    gp = np.concatenate([g, np.zeros(pad, dtype=f32)]).reshape(blocks, BLOCK)
    c1 = np.concatenate([s["state1"], np.full(pad, 128, np.uint8)]).reshape(blocks, BLOCK)
    c2 = np.concatenate([s["state2"], np.zeros(pad, np.uint8)]).reshape(blocks, BLOCK)
    a1, a2 = s["absmax1"][:, None], s["absmax2"][:, None]
    valid = np.isfinite(gp)
    with np.errstate(invalid="ignore", over="ignore"):
        v = (q2[c2] * a2) * c.beta2 + (c.omb2 * gp) * gp
        m = (q1[c1] * a1) * c.beta1 + c.omb1 * gp
    m = np.where(valid, m, f32(0.0)).astype(f32)
    v = np.where(valid, v, f32(0.0)).astype(f32)
    max1, max2 = np.max(np.abs(m), axis=1), np.max(np.abs(v), axis=1)
    mr, vr, ok = m.reshape(-1)[:n], v.reshape(-1)[:n], valid.reshape(-1)[:n]
    updated = p + c.step_size * (mr / (np.sqrt(vr) + c.eps_c2))
    updated = updated * c.decay
    p[:] = np.where(ok, updated, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        code1 = quantize_nearest(q1, m / max1[:, None]).astype(np.int64)
        wrong_sign = np.signbit(q1[code1]) != np.signbit(m)
        code1 = np.where(wrong_sign, code1 + np.where(m > 0, 1, -1), code1) % 256
        code2 = quantize_nearest(q2, v / max2[:, None])
    s["state1"] = code1.astype(np.uint8).reshape(-1)[:n]
    s["state2"] = code2.reshape(-1)[:n]
    s["absmax1"], s["absmax2"] = max1.astype(f32), max2.astype(f32)


def fmt(values):
    return " ".join("%.9g" % float(x) for x in values)


def quant_input(code, signed):
    # Block 0: spread values (absmax 3); block 1: zeros; block 2: 1.0 and every midpoint between
    # neighbouring codes (exact ties, absmax 1); block 3 (short): tiny values around 1e-7.
    rng = np.random.RandomState(5)
    b0 = (rng.uniform(-3, 3, BLOCK) if signed else rng.uniform(0, 3, BLOCK)).astype(f32)
    b1 = np.zeros(BLOCK, dtype=f32)
    b2 = np.concatenate([[f32(1.0)], (code[:-1] + code[1:]) * f32(0.5)]).astype(f32)
    b3 = (rng.uniform(-1, 1, 100) if signed else rng.uniform(0, 1, 100)).astype(f32) * f32(1e-7)
    return np.concatenate([b0, b1, b2, b3]).astype(f32)


def main():
    out = []
    maps = {"signed": create_dynamic_map(True), "unsigned": create_dynamic_map(False)}
    for kind, code in maps.items():
        out.append("map %s %s" % (kind, fmt(code)))
    for kind, code in maps.items():
        a = quant_input(code, kind == "signed")
        q, absmax = quantize_blockwise(code, a)
        out.append("quant %s input %s" % (kind, fmt(a)))
        out.append("quant %s codes %s" % (kind, q.tobytes().hex()))
        out.append("quant %s absmax %s" % (kind, fmt(absmax)))
        out.append("quant %s dequant %s" % (kind, fmt(dequantize_blockwise(code, q, absmax))))

    lr, beta1, beta2, eps, wd, steps = 0.01, 0.9, 0.999, 1e-8, 0.1, 10
    out.append("options lr %r beta1 %r beta2 %r eps %r weight_decay %r steps %d"
               % (lr, beta1, beta2, eps, wd, steps))
    params = {"w": (4196, 1), "b": (777, 2)}  # 16 full blocks + 100 (8-bit); fp32 states
    bad = {(4, "w", 5): np.inf, (7, "w", 300): np.nan, (7, "w", 4100): -np.inf}
    for name, (n, salt) in params.items():
        out.append("param %s %d %d" % (name, n, salt))
    for (step, name, index), value in bad.items():
        out.append("bad_grad %d %s %d %s" % (step, name, index, "nan" if np.isnan(value) else
                                             ("inf" if value > 0 else "-inf")))
    q1, q2 = maps["signed"], maps["unsigned"]
    p = {name: value_at(n, salt, 0) for name, (n, salt) in params.items()}
    s8 = {"state1": np.zeros(4196, np.uint8), "state2": np.zeros(4196, np.uint8),
          "absmax1": np.zeros(17, f32), "absmax2": np.zeros(17, f32)}
    s32 = {"m": np.zeros(777, f32), "v": np.zeros(777, f32)}
    stride = 17
    for step in range(1, steps + 1):
        c = Coefficients(lr, beta1, beta2, eps, wd, step)
        g = {name: value_at(n, salt, step) for name, (n, salt) in params.items()}
        for (bad_step, name, index), value in bad.items():
            if bad_step == step:
                g[name][index] = f32(value)
        adam8bit_step(p["w"], g["w"], s8, q1, q2, c)
        adam32_step(p["b"], g["b"], s32["m"], s32["v"], c)
        for name in params:
            out.append("sample %d %s %d %s" % (step, name, stride, fmt(p[name][::stride])))
            out.append("checksum %d %s %.17g" % (step, name, sum(float(x) for x in p[name])))
        out.append("absmax %d w 1 %s" % (step, fmt(s8["absmax1"])))
        out.append("absmax %d w 2 %s" % (step, fmt(s8["absmax2"])))
    out.append("codes w 1 %s" % s8["state1"].tobytes().hex())
    out.append("codes w 2 %s" % s8["state2"].tobytes().hex())

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "tests", "fixtures", "optim", "adamw8bit_golden.txt")
    with open(path, "w") as f:
        f.write("# written by tools/gen_adamw8bit_golden.py\n")
        f.write("\n".join(out) + "\n")
    print("wrote", os.path.normpath(path))

    try:
        import torch
    except ImportError:
        return
    for kind, signed in (("signed", True), ("unsigned", False)):
        data = []
        for i in range(7):
            b = torch.linspace(0.1, 1, 2 ** i + 1 if signed else 2 ** (i + 1) + 1)
            means = (b[:-1] + b[1:]) / 2.0
            data += ((10 ** (-6 + i)) * means).tolist()
            if signed:
                data += (-(10 ** (-6 + i)) * means).tolist()
        data = sorted(data + [0.0, 1.0])
        theirs = np.array(data, dtype=f32)
        differ = theirs != maps[kind]
        ulps = np.abs(theirs.view(np.int32).astype(np.int64) - maps[kind].view(np.int32))
        print("torch %s: %s map differs in %d values, at most %d ulp"
              % (torch.__version__, kind, differ.sum(), ulps.max()))


if __name__ == "__main__":
    main()
