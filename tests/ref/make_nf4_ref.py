#!/usr/bin/env python3
"""Write tests/fixtures/nf4_ref.bin: NF4 (QLoRA NormalFloat4) codes and scales made by bitsandbytes.

Run from the repository root with the reference venv (bitsandbytes is in tests/ref/requirements.txt):
    .venv-ref/bin/python tests/ref/make_nf4_ref.py
bitsandbytes' CPU path (backends/default quantize_4bit, the pure-torch kernel it runs on CPU):
absmax per block of 64 (f32), scaled = clamp(x * (1 / max(absmax, 1e-38)), -1, 1) in f32,
code = torch.bucketize(scaled, midpoints of the 16 sorted NF4 values) (ties go to the lower code),
two codes per byte with the first element in the high nibble. Dequantization: code[q] * absmax.
Single quantization only (compress_statistics=False).

File format (little-endian):
    char magic[4] = "AFN4"; u32 version = 1; u32 n_rows; u32 n_cols (multiple of 64)
    f32 code[16]                         bitsandbytes.functional.get_4bit_type("nf4")
    f32 x[n_rows * n_cols]               input, row-major
    u8  packed[n_rows * n_cols / 2]      bitsandbytes quantize_4bit(x.flatten(), 64, "nf4") codes
    f32 absmax[n_rows * n_cols / 64]     its per-block scales
    f32 deq[n_rows * n_cols]             bitsandbytes dequantize_4bit of those
"""
import struct

import numpy as np
import torch
import bitsandbytes
import bitsandbytes.functional as F

OUT = "tests/fixtures/nf4_ref.bin"
ROWS, COLS = 8, 192


def main():
    rng = np.random.default_rng(20231)
    code = F.get_4bit_type("nf4", device="cpu").numpy().astype(np.float32)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[1] *= np.float32(1e-3)                       # small magnitudes
    x[2, :64] = 0.0                                 # an all-zero block
    x[2, 64:128] = 0.0
    x[2, 100] = -3.0                                # one nonzero, negative absmax
    mids = ((code[:-1] + code[1:]) / np.float32(2)).astype(np.float32)
    # values whose scaled value lands exactly on a midpoint (absmax 1 -> x == scaled): tie rule
    x[3, :64] = 0.0
    x[3, 0] = 1.0
    x[3, 1:16] = mids
    x[3, 16:31] = -mids
    x[3, 31:46] = np.nextafter(mids, np.float32(2))
    x[3, 46:61] = np.nextafter(mids, np.float32(-2))
    x[4] = np.round(x[4] * 4) / 4                   # repeated values
    x[5] *= np.float32(1e30)                        # large magnitudes
    x[6, :64] = rng.uniform(-1, 1, 64).astype(np.float32)
    x[6, 5] = -1.0                                  # absmax from a negative value, exact +-1
    t = torch.from_numpy(x.copy())
    packed, st = F.quantize_4bit(t.reshape(-1), blocksize=64, quant_type="nf4", compress_statistics=False)
    packed = packed.reshape(-1).numpy().astype(np.uint8)
    absmax = st.absmax.reshape(-1).numpy().astype(np.float32)
    deq = F.dequantize_4bit(torch.from_numpy(packed).reshape(-1, 1), st).reshape(-1).numpy().astype(np.float32)
    assert packed.size == ROWS * COLS // 2 and absmax.size == ROWS * COLS // 64
    with open(OUT, "wb") as f:
        f.write(b"AFN4" + struct.pack("<III", 1, ROWS, COLS))
        f.write(code.tobytes())
        f.write(x.reshape(-1).tobytes())
        f.write(packed.tobytes())
        f.write(absmax.tobytes())
        f.write(deq.tobytes())
    print(f"{OUT}: {ROWS}x{COLS}, bitsandbytes {bitsandbytes.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
