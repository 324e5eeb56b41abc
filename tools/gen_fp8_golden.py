"""Golden values of Transformer Engine's FP8 scaling recipes, written to
tests/fixtures/amp/fp8_recipe_golden.txt for tests/amp/test_fp8_recipe.cpp and
tests/quant/test_fp8_quantize.cpp.

TE itself needs a GPU, so this script transcribes its formulas (see Note [FP8 scale formulas] in
src/core/fp8_scaling.h for the source files) in NumPy float32 arithmetic, every cast to FP8 by
ml_dtypes after np.clip to +-max (TE's kernels cast with __NV_SATFINITE):

  DelayedScaling (recipe/delayed_scaling.cu, kernel_bulk, one rank): last = history[0]; when
    last != 0 the history rolls (new[i] = old[i + 1], new[len - 1] = last, new[0] = 0) and amax is
    the fmaxf of the rolled values; when last == 0 nothing rolls and amax stays 0. most_recent takes
    amax = last. scale = (fp8_max * 2^-margin) / amax if amax is finite and > 0, else the previous
    scale; inf -> FLT_MAX; scale_inv = 1 / scale. Before each update the step's quantizations have
    recorded their amax into history[0] (a max).
  Float8CurrentScaling (recipe/recipe_common.cuh, compute_scale_from_amax, epsilon 0):
    scale = fp8_max / amax, 1 for amax 0 / inf / NaN; inf -> FLT_MAX.
  Float8BlockScaling: that scale per 1 x 128 or 128 x 128 block with the mantissa bits cleared.
  MXFP8BlockScaling (util/ptx.cuh float_to_e8m0, pre-Blackwell branch): e = the E8M0 exponent of
    amax * float32(1 / fp8_max), rounded up; data = x * 2^(127 - e).

Every float is written as the hex of its IEEE bits. Lines:
  delayed <e4m3|e5m2> <history_len> <max|most_recent> <margin>   starts a delayed sequence
  step <amax> <scale> <scale_inv> <history...>        amax recorded this step, then the state after
                                                      the update
  current <e4m3|e5m2> <amax> <scale>                  current scaling's scale
  pow2 <e4m3|e5m2> <amax> <scale>                     block scaling's scale
  e8m0 <e4m3|e5m2> <amax> <exponent>                  MXFP8's block exponent (decimal)
  quantize <name> <recipe> <e4m3|e5m2> <rows> <cols> <block_rows> <block_cols> [<scale>]
                                                      a quantization of a [rows, cols] f32 input
                                                      (block 0 0: per tensor; delayed gives its
                                                      scale, current computes it)
  input <bf16...> (the f32 input's values are bf16 values)   bytes <hex of the FP8 bytes>   scale_inv <f32...> | exponents <E8M0 bytes hex>
  amax <f32>   counts <overflow> <underflow>

Run: /work/venv/bin/python tools/gen_fp8_golden.py
"""
import os

import ml_dtypes
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "amp", "fp8_recipe_golden.txt")

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max
FORMATS = {"e4m3": (ml_dtypes.float8_e4m3fn, F32(448.0)), "e5m2": (ml_dtypes.float8_e5m2, F32(57344.0))}


def hx(values):
    arr = np.asarray(values, dtype=np.float32).reshape(-1)
    return " ".join(f"{int(b):08x}" for b in arr.view(np.uint32))


def hx_bf16(values):
    bits = np.asarray(values, np.float32).reshape(-1).view(np.uint32) >> 16
    return " ".join(f"{int(b):04x}" for b in bits)


def delayed_update(history, scale, algo, scaled_max):
    history = history.copy()
    last = history[0]
    amax = F32(0)
    if last != 0:
        rolled = np.concatenate([history[1:], [last]]).astype(np.float32)
        for a in rolled:
            amax = np.fmax(amax, a)
        history = rolled.copy()
        history[0] = 0
    if algo == "most_recent":
        amax = last
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        new_scale = F32(scaled_max / amax) if np.isfinite(amax) and amax > 0 else scale
    if np.isinf(new_scale):
        new_scale = FLT_MAX
    with np.errstate(divide="ignore"):
        scale_inv = F32(F32(1) / new_scale)
    return history, F32(new_scale), scale_inv


def scale_from_amax(amax, fp8_max, pow2):
    amax = F32(amax)
    if np.isinf(amax) or amax == 0 or np.isnan(amax):
        return F32(1)
    with np.errstate(over="ignore"):
        scale = F32(fp8_max / amax)
    if np.isinf(scale):
        scale = FLT_MAX
    if pow2:
        scale = np.array([scale], np.float32).view(np.uint32)
        scale &= np.uint32(0xFF800000)
        scale = scale.view(np.float32)[0]
    return F32(scale)


def e8m0(amax, fp8_max):
    value = F32(F32(amax) * F32(1.0 / float(fp8_max)))
    if np.isnan(value):
        return 0xFF
    if np.isinf(value):
        return 0xFE
    if value == 0:
        return 0
    bits = int(np.array([value], np.float32).view(np.uint32)[0])
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    if mantissa > 0 and exponent != 0xFE and not (exponent == 0 and mantissa <= 0x400000):
        exponent += 1
    return exponent


def cast(scaled, fmt):
    dtype, fp8_max = FORMATS[fmt]
    scaled = np.asarray(scaled, np.float32)
    clipped = np.clip(scaled, -fp8_max, fp8_max)  # NaN stays NaN
    q = clipped.astype(dtype)
    overflow = int(np.sum(np.isfinite(scaled) & (np.abs(scaled) > fp8_max)))
    return q, overflow


def underflows(x, q):
    bits = q.view(np.uint8)
    return int(np.sum((x != 0) & ((bits & 0x7F) == 0)))


def delayed_sequences(lines):
    rng = np.random.default_rng(23)
    cases = [("e4m3", 4, "max", 0), ("e4m3", 4, "most_recent", 0), ("e5m2", 3, "max", 1),
             ("e4m3", 1, "max", 2), ("e5m2", 5, "most_recent", 0)]
    for fmt, length, algo, margin in cases:
        fp8_max = FORMATS[fmt][1]
        scaled_max = F32(fp8_max * F32(np.power(F32(2), F32(-margin))))
        lines.append(f"delayed {fmt} {length} {algo} {margin}")
        history = np.zeros(length, np.float32)
        scale = F32(1)
        # A step with no amax (0: the slot was not used), an inf and a NaN (a diverged step), a
        # tiny amax whose scale overflows to FLT_MAX, and ordinary ones up and down.
        amaxes = [F32(abs(rng.normal()) * 10.0 ** int(rng.integers(-2, 3))) for _ in range(9)]
        amaxes[2] = F32(0)
        amaxes[5] = F32(np.inf)
        amaxes[6] = F32(1e-39)
        amaxes[7] = F32(np.nan)
        for a in amaxes:
            history[0] = np.fmax(history[0], a) if not np.isnan(a) else a
            history, scale, scale_inv = delayed_update(history, scale, algo, scaled_max)
            lines.append(f"step {hx([a])} {hx([scale])} {hx([scale_inv])} {hx(history)}")


def scalar_scales(lines):
    amaxes = [F32(v) for v in (1.0, 3.7, 448.0, 1000.5, 1e-3, 6.1e-5, 1e-38, 1e-45, 0.0, np.inf,
                               np.nan, 57344.0, 2.5e-36, 0.0078125)]
    for fmt, (_, fp8_max) in FORMATS.items():
        for a in amaxes:
            lines.append(f"current {fmt} {hx([a])} {hx([scale_from_amax(a, fp8_max, False)])}")
            lines.append(f"pow2 {fmt} {hx([a])} {hx([scale_from_amax(a, fp8_max, True)])}")
            lines.append(f"e8m0 {fmt} {hx([a])} {e8m0(a, fp8_max)}")


def test_input(rng, rows, cols):
    # Rows of different magnitudes, a zero block, values small enough to underflow.
    x = rng.normal(size=(rows, cols)).astype(np.float32)
    x *= (10.0 ** rng.integers(-3, 3, size=(rows, 1))).astype(np.float32)
    x[0, : min(cols, 32)] = 0
    x[-1, -1] = F32(1e-9)
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)  # bf16 values: a compact fixture


def quantize_cases(lines):
    rng = np.random.default_rng(2323)
    cases = [
        ("delayed_e4m3", "delayed", "e4m3", 5, 48, 0, 0, F32(300.0)),
        ("delayed_e5m2", "delayed", "e5m2", 4, 40, 0, 0, F32(3.0e3)),
        ("current_e4m3", "current", "e4m3", 6, 40, 0, 0, None),
        ("current_e5m2", "current", "e5m2", 3, 33, 0, 0, None),
        ("mxfp8_e4m3", "mxfp8", "e4m3", 4, 96, 1, 32, None),
        ("mxfp8_e5m2", "mxfp8", "e5m2", 3, 70, 1, 32, None),
        ("block_1x128", "block", "e4m3", 3, 300, 1, 128, None),
        ("block_128x128", "block", "e4m3", 130, 129, 128, 128, None),
    ]
    for name, recipe, fmt, rows, cols, br, bc, scale in cases:
        fp8_max = FORMATS[fmt][1]
        x = test_input(rng, rows, cols)
        head = f"quantize {name} {recipe} {fmt} {rows} {cols} {br} {bc}"
        amax = F32(np.max(np.abs(x)))
        if recipe in ("delayed", "current"):
            if recipe == "current":
                scale = scale_from_amax(amax, fp8_max, False)
            q, overflow = cast(x * scale, fmt)
            lines.append(head + (f" {hx([scale])}" if recipe == "delayed" else ""))
            lines.append(f"input {hx_bf16(x)}")
            lines.append(f"bytes {q.view(np.uint8).tobytes().hex()}")
            lines.append(f"scale_inv {hx([F32(1) / scale])}")
            lines.append(f"amax {hx([amax])}")
            lines.append(f"counts {overflow} {underflows(x, q)}")
            continue
        q = np.zeros((rows, cols), FORMATS[fmt][0])
        nbr, nbc = -(-rows // br), -(-cols // bc)
        scales = np.zeros((nbr, nbc), np.float32)
        exps = np.zeros((nbr, nbc), np.uint8)
        overflow = 0
        for i in range(nbr):
            for j in range(nbc):
                block = x[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
                a = F32(np.max(np.abs(block)))
                if recipe == "mxfp8":
                    e = e8m0(a, fp8_max)
                    exps[i, j] = e
                    factor = F32(1) if e == 0 else np.array([(254 - e) << 23], np.uint32).view(np.float32)[0]
                    qb, ov = cast(block * factor, fmt)
                else:
                    s = scale_from_amax(a, fp8_max, True)
                    scales[i, j] = F32(1) / s
                    qb, ov = cast(block * s, fmt)
                overflow += ov
                q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = qb
        lines.append(head)
        lines.append(f"input {hx_bf16(x)}")
        lines.append(f"bytes {q.view(np.uint8).tobytes().hex()}")
        if recipe == "mxfp8":
            lines.append(f"exponents {exps.tobytes().hex()}")
        else:
            lines.append(f"scale_inv {hx(scales)}")
        lines.append(f"counts {overflow} {underflows(x, q)}")


def main():
    lines = [
        "# FP8 recipe golden values: Transformer Engine's formulas in NumPy float32 with ml_dtypes casts.",
        f"# Written by tools/gen_fp8_golden.py (ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}); do not edit.",
    ]
    delayed_sequences(lines)
    scalar_scales(lines)
    quantize_cases(lines)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
