#!/usr/bin/env python3
"""Writes tests/fixtures/dtype_golden.txt: what ml_dtypes and NumPy answer for headroom's number
formats (f16, bf16, f8_e4m3fn, f8_e5m2), so that the C++ tests check our conversions against
them without needing Python.

The f32 inputs (a little over a million) are not stored. They come from structured sets and a
splitmix64 generator that tests/core/test_dtype_golden.cpp builds identically; the fixture stores
CRC-32s (zlib.crc32) of the inputs and of every output stream per block of 65536 elements, so a
mismatch names its block. Small tables (the fp8 decode tables) and ~640 curated cases are stored
in full so that a failure message shows the bits.

Usage: python3 tools/gen_dtype_golden.py [--out tests/fixtures/dtype_golden.txt]
Needs numpy and ml_dtypes (0.6 was used).

Fixture lines:
  inputs <count>
  set <name> <first index> <count>
  crc <stream> <block> <crc32 hex>        streams: inputs, encode_<fmt>_<ieee|saturate>,
                                           decode_<f16|bf16>, roundtrip_<f16|bf16>
  decode <fmt> <code> <f32 bits> <code re-encoded>   (all 256 codes of both fp8 formats)
  case <fmt> <ieee|saturate> <f32 bits> <code>
"""

import argparse
import os
import sys
import warnings
import zlib

import ml_dtypes
import numpy as np

BLOCK = 65536
SIGN = 0x80000000

# name -> (dtype, code type, largest finite positive code, mantissa bits)
FORMATS = {
    "f16": (np.float16, np.uint16, 0x7BFF, 10),
    "bf16": (ml_dtypes.bfloat16, np.uint16, 0x7F7F, 7),
    "f8_e4m3fn": (ml_dtypes.float8_e4m3fn, np.uint8, 0x7E, 3),
    "f8_e5m2": (ml_dtypes.float8_e5m2, np.uint8, 0x7B, 2),
}
MODES = ("ieee", "saturate")

SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
SEED_RANDOM_BITS = 0x68656164726F6F6D  # "headroom"
SEED_RANDOM_SCALED = 0x0DDBA11
RANDOM_BITS_COUNT = 327680
SCALED_EXPONENTS = (-30, -24, -20, -16, -12, -8, -4, 0, 4, 8, 12, 16, 20)
SCALED_PER_EXPONENT = 16384
NAN_PATTERNS = (0x7F800001, 0x7F800002, 0x7F801FFF, 0x7F802000, 0x7F803FFF, 0x7F9FFFFF,
                0x7FA00000, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FD55555, 0x7FE00000,
                0x7FFFE000, 0x7FFFFFFF)


def splitmix64(seed, n):
    """Outputs 1..n of splitmix64 started at `seed` (state += gamma, then the mix)."""
    state = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(SPLITMIX_GAMMA)
    z = (state ^ (state >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def decode(fmt, codes):
    dtype, code_type, _, _ = FORMATS[fmt]
    codes = np.asarray(codes, dtype=code_type)
    return codes.view(dtype).astype(np.float32).view(np.uint32)


def encode(fmt, bits, mode):
    dtype, code_type, max_code, _ = FORMATS[fmt]
    x = np.asarray(bits, dtype=np.uint32).view(np.float32)
    if mode == "saturate":
        fmax = np.float32(decode(fmt, [max_code]).view(np.float32)[0])
        x = np.clip(x, -fmax, fmax)
    return x.astype(dtype).view(code_type)


def ties(fmt):
    """Midpoints between neighbours (and max + ulp/2), each -1, +0, +1 f32 ulp, both signs."""
    _, _, max_code, _ = FORMATS[fmt]
    b = decode(fmt, np.arange(max_code + 1)).astype(np.int64)
    nxt = np.empty_like(b)
    nxt[:-1] = b[1:]
    nxt[-1] = 2 * b[-1] - b[-2]
    # f32 bit patterns are linear in value within a binade (and up to the next power of two),
    # which holds two neighbours; only the pair (0, smallest subnormal) needs halving by value.
    first = np.where(nxt >= 0x00800000, nxt - 0x00800000, nxt // 2)
    mid = np.where(b == 0, first, (b + nxt) // 2)
    near = np.stack([mid - 1, mid, mid + 1], axis=1)
    return np.concatenate([near, near | SIGN], axis=1).reshape(-1).astype(np.uint32)


def format_anchors(fmt):
    _, _, max_code, mantissa = FORMATS[fmt]
    b = [int(v) for v in decode(fmt, [max_code, max_code - 1, 1 << mantissa,
                                       (1 << mantissa) - 1, 1])]
    top, below_top, min_normal, max_subnormal, min_subnormal = b
    half_min_subnormal = (min_subnormal - 0x00800000 if min_subnormal >= 0x00800000
                          else min_subnormal // 2)
    return [top, top + (top - below_top) // 2, min_normal, max_subnormal, min_subnormal,
            half_min_subnormal]


COMMON_ANCHORS = [0x3F800000, 0x7F7FFFFF, 0x00800000, 0x00000001, 0x7F800000, 0x00000000]


def boundaries():
    anchors = [a for fmt in FORMATS for a in format_anchors(fmt)] + COMMON_ANCHORS
    out = []
    for a in anchors:
        for d in range(-8, 9):
            v = (a + d) & 0xFFFFFFFF
            out += [v, v ^ SIGN]
    return np.array(out, dtype=np.uint32)


def specials():
    out = []
    for v in (0, 0x7F800000) + NAN_PATTERNS:
        out += [v, v | SIGN]
    return np.array(out, dtype=np.uint32)


def random_scaled():
    """Irwin-Hall(4) approximations of normals at scales 2^k: integer sums, then one exact
    conversion and a power-of-two multiply, so C++ reproduces the bits."""
    count = SCALED_PER_EXPONENT * len(SCALED_EXPONENTS)
    r = (splitmix64(SEED_RANDOM_SCALED, 4 * count) >> np.uint64(40)).astype(np.int64)
    s = r.reshape(-1, 4).sum(axis=1) - (1 << 25)
    scale = np.repeat(np.array([2.0 ** (k - 24) for k in SCALED_EXPONENTS], dtype=np.float32),
                      SCALED_PER_EXPONENT)
    return (s.astype(np.float32) * scale).view(np.uint32)


def golden_inputs():
    sets = [
        ("f16_values", decode("f16", np.arange(65536))),
        ("bf16_values", np.arange(65536, dtype=np.uint32) << np.uint32(16)),
        ("f8_e4m3fn_values", decode("f8_e4m3fn", np.arange(256))),
        ("f8_e5m2_values", decode("f8_e5m2", np.arange(256))),
    ]
    sets += [(f"ties_{fmt}", ties(fmt)) for fmt in FORMATS]
    sets += [
        ("boundaries", boundaries()),
        ("specials", specials()),
        ("random_bits", (splitmix64(SEED_RANDOM_BITS, RANDOM_BITS_COUNT)
                         & np.uint64(0xFFFFFFFF)).astype(np.uint32)),
        ("random_scaled", random_scaled()),
    ]
    return sets


def block_crcs(values):
    data = np.ascontiguousarray(values)
    data = data.astype(data.dtype.newbyteorder("<"), copy=False)
    return [zlib.crc32(data[i:i + BLOCK].tobytes()) for i in range(0, len(data), BLOCK)]


def check_reference_behaviour(inputs):
    """Pins down the reference semantics we copy, so that a different NumPy or ml_dtypes that
    behaves otherwise fails here instead of silently producing other goldens."""
    def one(fmt, bits, mode="ieee"):
        return int(encode(fmt, [bits], mode)[0])

    # NumPy's f16 keeps the NaN payload (no quieting); a payload lost to truncation becomes 1.
    assert one("f16", 0x7F800001) == 0x7C01 and one("f16", 0xFFA00000) == 0xFD00
    assert int(decode("f16", [0x7C01])[0]) == 0x7F802000
    # ml_dtypes: bf16 NaN -> +-0x7FC0; fp8 NaN -> +-0x7F (e4m3fn) / +-0x7E (e5m2); decoded fp8
    # NaNs are +-0x7FC00000; e4m3fn overflow (and inf) gives NaN.
    assert one("bf16", 0xFFA00000) == 0xFFC0 and one("bf16", 0x7F800001) == 0x7FC0
    assert one("f8_e4m3fn", 0xFF800001) == 0xFF and one("f8_e5m2", 0x7F800001) == 0x7E
    assert int(decode("f8_e5m2", [0xFD])[0]) == 0xFFC00000
    assert one("f8_e4m3fn", 0x43E80000) == 0x7E and one("f8_e4m3fn", 0x43E80001) == 0x7F
    assert one("f8_e4m3fn", 0x7F800000) == 0x7F

    # Clipping before the cast (the saturate golden) equals saturating after rounding, which is
    # CUDA's __NV_SATFINITE: finite overflow and +-inf -> +-max, NaN unchanged.
    x = inputs.view(np.float32)
    is_nan = np.isnan(x)
    for fmt, (_, code_type, max_code, _) in FORMATS.items():
        rounded = encode(fmt, inputs, "ieee")
        back = decode(fmt, rounded).view(np.float32)
        overflowed = ~is_nan & ~np.isfinite(back)
        expect = np.where(overflowed, (rounded & (1 << (8 * rounded.itemsize - 1))) | max_code,
                          rounded).astype(code_type)
        assert np.array_equal(expect, encode(fmt, inputs, "saturate")), fmt

    # Round trips: every f16 pattern comes back; bf16 patterns too except NaNs, which become
    # +-0x7FC0.
    codes = np.arange(65536, dtype=np.uint16)
    assert np.array_equal(encode("f16", decode("f16", codes), "ieee"), codes)
    bf16_back = encode("bf16", decode("bf16", codes), "ieee")
    bf16_nan = (codes & 0x7FFF) > 0x7F80
    assert np.array_equal(bf16_back[~bf16_nan], codes[~bf16_nan])
    assert np.array_equal(bf16_back[bf16_nan], (codes[bf16_nan] & 0x8000) | 0x7FC0)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures",
                                                       "dtype_golden.txt"))
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # NaN/overflow casts are the point here
    np.seterr(all="ignore")

    sets = golden_inputs()
    inputs = np.concatenate([values for _, values in sets]).astype(np.uint32)
    check_reference_behaviour(inputs)

    lines = [
        "# Golden vectors for headroom's number formats: ml_dtypes %s, NumPy %s."
        % (ml_dtypes.__version__, np.__version__),
        "# Written by tools/gen_dtype_golden.py (see its docstring for the format); do not edit.",
        f"inputs {len(inputs)}",
    ]
    start = 0
    for name, values in sets:
        lines.append(f"set {name} {start} {len(values)}")
        start += len(values)

    def add_crcs(stream, values):
        lines.extend(f"crc {stream} {i} {crc:08x}" for i, crc in enumerate(block_crcs(values)))

    add_crcs("inputs", inputs)
    for fmt in FORMATS:
        for mode in MODES:
            add_crcs(f"encode_{fmt}_{mode}", encode(fmt, inputs, mode))
    codes = np.arange(65536, dtype=np.uint16)
    for fmt in ("f16", "bf16"):
        decoded = decode(fmt, codes)
        add_crcs(f"decode_{fmt}", decoded)
        add_crcs(f"roundtrip_{fmt}", encode(fmt, decoded, "ieee"))

    for fmt in ("f8_e4m3fn", "f8_e5m2"):
        codes8 = np.arange(256, dtype=np.uint8)
        decoded = decode(fmt, codes8)
        again = encode(fmt, decoded, "ieee")
        lines.extend(f"decode {fmt} {c:02x} {d:08x} {a:02x}"
                     for c, d, a in zip(codes8, decoded, again))

    for fmt in FORMATS:
        near = [(a + d) & 0xFFFFFFFF for a in format_anchors(fmt) + [0x3F800000, 0x7F7FFFFF]
                for d in (-1, 0, 1)]
        case_inputs = np.array(list(specials()) + [v | s for v in near for s in (0, SIGN)],
                               dtype=np.uint32)
        for mode in MODES:
            out = encode(fmt, case_inputs, mode)
            lines.extend(f"case {fmt} {mode} {i:08x} {int(o):0{2 * out.itemsize}x}"
                         for i, o in zip(case_inputs, out))

    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(inputs)} inputs, {len(lines)} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
