#!/usr/bin/env python3
"""Write tests/fixtures/kquant_vectors.bin: Q4_K and Q6_K quantization by ggml's own reference
quantizers (quantize_row_q4_K_ref / quantize_row_q6_K_ref), for tests/test_quant.c.

The `gguf` Python package does not implement K-quant quantization, so the reference is ggml
itself: libggml-base.so of the llama-cpp-python build (scripts/setup_llamacpp.sh), called with
ctypes. Run from the repository root with that venv's python (numpy + llama_cpp):
    .venv-llamacpp/bin/python tests/ref/make_kquant_vectors.py
Same file format as tests/ref/make_quant_vectors.py (header "AFQV", version 1; records of kind 1:
f32 input[n_rows * n_cols], then the expected bytes).
Inputs: N(0,1) rows; a row of special blocks (zeros, a constant, tiny, huge, all-negative,
all-positive, a single spike); and "merge-like" rows: a K-quantized row dequantized by ggml plus a
small perturbation (what `afinar merge` re-quantizes).
"""
import ctypes
import os
import struct

import numpy as np
import llama_cpp

OUT = os.path.join("tests", "fixtures", "kquant_vectors.bin")
LIB = os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so")
ggml = ctypes.CDLL(LIB)
Q4_K, Q6_K = 12, 14
BLOCK = {Q4_K: 144, Q6_K: 210}
FN = {Q4_K: ("quantize_row_q4_K_ref", "dequantize_row_q4_K"),
      Q6_K: ("quantize_row_q6_K_ref", "dequantize_row_q6_K")}
for q, dq in FN.values():
    for n in (q, dq):
        getattr(ggml, n).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        getattr(ggml, n).restype = None

rng = np.random.default_rng(20261125)


def quantize(qt, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(x.size // 256 * BLOCK[qt], dtype=np.uint8)
    getattr(ggml, FN[qt][0])(x.ctypes.data, out.ctypes.data, x.size)
    return out


def dequantize(qt, raw, n):
    y = np.zeros(n, dtype=np.float32)
    getattr(ggml, FN[qt][1])(np.ascontiguousarray(raw).ctypes.data, y.ctypes.data, n)
    return y


def special_row(n):
    x = rng.standard_normal(n).astype(np.float32)
    x[0:32] = 0.0
    x[32:64] = 0.5
    x[64:96] *= 1e-3
    x[96:128] *= 100.0
    x[128:160] = -np.abs(x[128:160])
    x[160:192] = np.abs(x[160:192]) + 3.0
    x[192:256] = 0.0
    x[200] = 5.0
    x[256:512] = 0.0  # an all-zero super-block
    return x


records = []


def add(qt, label, x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
    rows, cols = x.shape
    raw = np.concatenate([quantize(qt, r) for r in x])
    head = struct.pack("<IIII", 1, qt, rows, cols) + label.encode()[:47].ljust(48, b"\0")
    head += struct.pack("<I", raw.size)
    records.append(head + x.tobytes() + raw.tobytes())


for qt, name in ((Q4_K, "Q4_K"), (Q6_K, "Q6_K")):
    add(qt, f"ggml quantize {name} normal", rng.standard_normal((4, 512)).astype(np.float32) * 0.05)
    add(qt, f"ggml quantize {name} special", special_row(1024)[None, :])
    base = rng.standard_normal((3, 768)).astype(np.float32) * 0.03
    merged = []
    for r in base:
        d = dequantize(qt, quantize(qt, r), r.size)
        merged.append(d + rng.standard_normal(r.size).astype(np.float32) * 0.002)
    add(qt, f"ggml quantize {name} merge-like", np.array(merged))

blob = b"AFQV" + struct.pack("<II", 1, len(records)) + b"".join(records)
with open(OUT, "wb") as f:
    f.write(blob)
print(f"wrote {OUT}: {len(records)} records, {len(blob)} bytes (reference: {LIB})")
