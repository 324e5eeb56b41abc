"""Golden vectors for QLoRA's 4-bit weights, made by bitsandbytes itself (its CPU path,
bitsandbytes.functional.quantize_4bit / dequantize_4bit) on fixed inputs. Writes
tests/fixtures/quant/quant4bit_golden.txt, one keyword per line, every number as the hex of its
bits (little-endian bytes for byte arrays, the IEEE bits of each fp32 / f16 / bf16 value):

  order fp4 <16 ints>                      torch.argsort of the FP4 code (its zeros tie)
  code nf4|fp4 <16 f32>                    get_4bit_type, as quant_map is saved
  nested_code <256 f32>                    the signed dynamic map of double quantization
  case <name> <nf4|fp4> <blocksize> <double 0|1> <storage> <dtype> <ndim> <dims...>
  input <values in dtype>                  the tensor quantized
  packed <bytes>                           the packed codes (storage's bytes)
  absmax <f32...> | absmax_u8 <bytes>      per block; u8 codes with double quantization
  offset <f32>  nested_absmax <f32...>     double quantization's statistics
  dequant <values in dtype>                dequantize_4bit of the result (some cases)
  blockwise <n> <blocksize> / input <f32> / codes <bytes> / absmax <f32>
                                           bitsandbytes' CPU quantize_blockwise (signed map)

Run with a python3 that has torch and bitsandbytes (a venv with them from PyPI).
"""
import os

import numpy as np
import torch
import bitsandbytes as bnb
import bitsandbytes.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "quant", "quant4bit_golden.txt")

TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
               "u8": torch.uint8}
INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def hex_values(t):
    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.uint8:
        return t.numpy().tobytes().hex()
    bits = t.view(INT_VIEW[t.dtype]).numpy()
    width = 8 if t.dtype == torch.float32 else 4
    mask = (1 << (4 * width)) - 1
    return " ".join(format(int(b) & mask, "0%dx" % width) for b in bits)


def edge_input():
    # Blocks of 64 with absmax 1, so scaled == x: every midpoint of both codes (ties), values
    # just beside them, zeros of both signs, a block of zeros and a short block of zeros.
    values = []
    for quant_type in ("nf4", "fp4"):
        code = F.get_4bit_type(quant_type, device="cpu")
        srt = torch.sort(code).values
        mids = ((srt[:-1] + srt[1:]) / 2).tolist()
        for m in mids:
            m32 = np.float32(m)
            values += [m32, np.nextafter(m32, np.float32(2)), np.nextafter(m32, np.float32(-2))]
    values += [0.0, -0.0, 1e-30, -1e-30, 0.0026, -0.0026, 0.5, -1.0]
    blocks = []
    for i in range(0, len(values), 62):
        chunk = values[i:i + 62]
        blocks.append([1.0] + chunk + [0.25] * (63 - len(chunk)))
    blocks.append([0.0] * 64)
    flat = [v for b in blocks for v in b] + [0.0] * 5
    return torch.tensor(np.array(flat, dtype=np.float32))


def main():
    torch.manual_seed(1234)
    lines = ["# made by tools/gen_quant4bit_golden.py with bitsandbytes %s, torch %s"
             % (bnb.__version__, torch.__version__)]
    fp4 = F.get_4bit_type("fp4", device="cpu")
    lines.append("order fp4 " + " ".join(str(int(i)) for i in torch.argsort(fp4)))
    for quant_type in ("nf4", "fp4"):
        lines.append("code %s %s" % (quant_type, hex_values(F.get_4bit_type(quant_type, device="cpu"))))
    lines.append("nested_code " + hex_values(F.create_dynamic_map(signed=True)))

    def randn(shape, dtype, scale_rows=True):
        x = torch.randn(shape, dtype=torch.float32)
        if scale_rows and len(shape) == 2:
            x = x * torch.logspace(-3, 1, shape[0]).reshape(-1, 1)
        return x.to(dtype)

    cases = [
        ("nf4_bs64", "nf4", 64, False, "u8", "f32", randn([21, 29], torch.float32)),
        ("fp4_bs64", "fp4", 64, False, "u8", "f32", randn([21, 29], torch.float32)),
        ("nf4_bs32_dq", "nf4", 32, True, "u8", "f32", randn([673], torch.float32)),
        ("nf4_bs128_dq_f16", "nf4", 128, True, "u8", "f16", randn([45, 23], torch.float16)),
        ("fp4_bs256_dq_bf16", "fp4", 256, True, "u8", "bf16", randn([1007], torch.bfloat16)),
        ("nf4_bs4096_bf16", "nf4", 4096, False, "u8", "bf16", randn([3, 1401], torch.bfloat16)),
        # More than 256 blocks: two nested blocks, the second short.
        ("nf4_bs32_dq_many", "nf4", 32, True, "u8", "bf16", randn([83, 100], torch.bfloat16)),
        ("nf4_edges", "nf4", 64, False, "u8", "f32", edge_input()),
        ("fp4_edges", "fp4", 64, False, "u8", "f32", edge_input()),
        ("nf4_bs64_dq_storage_bf16", "nf4", 64, True, "bf16", "bf16", randn([24, 20], torch.bfloat16)),
        ("fp4_bs512_storage_f32", "fp4", 512, False, "f32", "f32", randn([40, 40], torch.float32)),
    ]
    for name, quant_type, blocksize, double, storage, dtype, x in cases:
        packed, state = F.quantize_4bit(x, blocksize=blocksize, compress_statistics=double,
                                        quant_type=quant_type, quant_storage=TORCH_DTYPE[storage])
        lines.append("case %s %s %d %d %s %s %d %s" % (name, quant_type, blocksize, int(double),
                                                      storage, dtype, x.dim(),
                                                      " ".join(str(d) for d in x.shape)))
        lines.append("input " + hex_values(x))
        lines.append("packed " + packed.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes().hex())
        if double:
            lines.append("absmax_u8 " + hex_values(state.absmax))
            lines.append("offset " + hex_values(state.offset.reshape(1)))
            lines.append("nested_absmax " + hex_values(state.state2.absmax))
            assert state.state2.blocksize == 256
        else:
            lines.append("absmax " + hex_values(state.absmax))
        if (double and "many" not in name) or "edges" in name:
            lines.append("dequant " + hex_values(F.dequantize_4bit(packed, state)))

    x = torch.randn(1500) * 0.01
    x[100:356] = 0
    codes, state = F.quantize_blockwise(x, blocksize=256)
    lines.append("blockwise %d 256" % x.numel())
    lines.append("input " + hex_values(x))
    lines.append("codes " + hex_values(codes))
    lines.append("absmax " + hex_values(state.absmax))

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
