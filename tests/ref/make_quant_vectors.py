#!/usr/bin/env python3
"""Write tests/fixtures/quant_vectors.bin: reference vectors for src/kernels/quant.c.

Run from the repository root with the reference venv:
    .venv-ref/bin/python tests/ref/make_quant_vectors.py
It needs the `gguf` package (numpy implementation of ggml's block formats, gguf/quants.py) and,
for the real-tensor records, models/SmolLM2-135M-Instruct.Q4_1.gguf and
models/gemma-3-270m-Q4_K_M.gguf (records for a missing model are left out, with a warning).

File format (all little-endian):
    header : char magic[4] = "AFQV"; u32 version = 1; u32 n_records
    record : u32 kind; u32 ggml_type; u32 n_rows; u32 n_cols (elements per row);
             char label[48] (NUL padded); u32 n_bytes (= n_rows * row_bytes(type, n_cols));
             kind 0 (dequantize): u8 raw[n_bytes], then f32 want[n_rows * n_cols]
                                  (want = gguf.quants.dequantize(raw, type))
             kind 1 (quantize):   f32 input[n_rows * n_cols], then u8 want[n_bytes]
                                  (want = gguf.quants.quantize(input, type))
Records of kind 0 with labels starting "random" hold random block bytes whose fp16 d/dmin fields
are set to finite values (some subnormal), so every output is finite; labels naming a tensor hold
the first rows of that tensor in the real model files.
"""
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join("tests", "fixtures", "quant_vectors.bin")
rng = np.random.default_rng(20240611)

# Byte offsets of the fp16 scale fields inside one block (ggml-common.h layouts).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def random_fp16_bits(n):
    """Finite fp16 bit patterns with magnitude < 8, including subnormals and zero-exponent."""
    sign = rng.integers(0, 2, n, dtype=np.uint16) << 15
    exp = rng.integers(0, 18, n, dtype=np.uint16)  # 0 = subnormal
    man = rng.integers(0, 1024, n, dtype=np.uint16)
    return (sign | (exp << 10) | man).astype(np.uint16)


def random_raw(qtype, n_rows, n_cols):
    bs, ts = GGML_QUANT_SIZES[qtype]
    nb = n_rows * n_cols // bs
    if qtype == T.F32:
        return rng.standard_normal(n_rows * n_cols).astype(np.float32).view(np.uint8)
    if qtype == T.F16:
        return random_fp16_bits(n_rows * n_cols).view(np.uint8)
    if qtype == T.BF16:
        bits = rng.integers(0, 65536, n_rows * n_cols, dtype=np.uint32).astype(np.uint16)
        exp = (bits >> 7) & 0xFF
        bits = np.where(exp == 0xFF, bits & 0x807F, bits).astype(np.uint16)  # no inf/nan
        return bits.view(np.uint8)
    raw = rng.integers(0, 256, (nb, ts), dtype=np.uint16).astype(np.uint8)
    for off in FP16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_fp16_bits(nb).view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1)


def dequant(raw, qtype, n_rows, n_cols):
    bs, ts = GGML_QUANT_SIZES[qtype]
    rows = np.ascontiguousarray(raw).reshape(n_rows, n_cols // bs * ts)
    if qtype == T.F32:
        out = rows.view(np.float32)
    elif qtype == T.F16:
        out = rows.view(np.float16).astype(np.float32)
    else:
        out = quants.dequantize(rows, qtype)
    out = np.asarray(out, dtype=np.float32).reshape(n_rows, n_cols)
    assert np.all(np.isfinite(out)), qtype
    return out


def quant_input(n_rows, n_cols):
    x = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    # Row 1: special blocks (all zero, constant, tiny, large, negative-dominated).
    x[1, 0:32] = 0.0
    x[1, 32:64] = 0.5
    x[1, 64:96] *= 1e-3
    x[1, 96:128] *= 100.0
    x[1, 128:160] = -np.abs(x[1, 128:160])
    x[1, 160:192] = np.abs(x[1, 160:192]) + 3.0
    return x


def quant_input_fp(n_cols):
    x = quant_input(2, n_cols)
    specials = [0.0, -0.0, 1e-6, -3e-8, 6e-8, 2.9e-8, 65504.0, 65519.0, 65520.0, -70000.0,
                1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1e30, -1e-30]
    x[0, :len(specials)] = np.array(specials, dtype=np.float32)
    return x


records = []


def add(kind, qtype, n_rows, n_cols, label, raw, f32):
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    f32 = np.ascontiguousarray(f32, dtype=np.float32).reshape(-1)
    assert f32.size == n_rows * n_cols
    bs, ts = GGML_QUANT_SIZES[qtype]
    assert raw.size == n_rows * n_cols // bs * ts
    head = struct.pack("<IIII", kind, int(qtype), n_rows, n_cols)
    head += label.encode()[:47].ljust(48, b"\0") + struct.pack("<I", raw.size)
    body = raw.tobytes() + f32.tobytes() if kind == 0 else f32.tobytes() + raw.tobytes()
    records.append(head + body)


DEQ_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
             T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
for qt in DEQ_TYPES:
    raw = random_raw(qt, 2, 256)
    add(0, qt, 2, 256, f"random {qt.name}", raw, dequant(raw, qt, 2, 256))

# Quantizers that gguf-py implements bit-exactly like ggml's quantize_row_*_ref.
for qt in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]:
    x = quant_input(2, 256)
    add(1, qt, 2, 256, f"quantize {qt.name}", quants.quantize(x, qt), x)
x = quant_input_fp(256)
with np.errstate(over="ignore"):
    add(1, T.F16, 2, 256, "quantize F16", x.astype(np.float16).view(np.uint8), x)
add(1, T.BF16, 2, 256, "quantize BF16", quants.quantize(x, T.BF16), x)

# Real tensors: (file, tensor name, rows to keep).
REAL = [
    ("models/SmolLM2-135M-Instruct.Q4_1.gguf", [
        ("token_embd.weight", 2), ("blk.0.attn_q.weight", 2), ("blk.0.ffn_down.weight", 1),
        ("blk.0.attn_norm.weight", 1)]),
    ("models/gemma-3-270m-Q4_K_M.gguf", [
        ("token_embd.weight", 1), ("blk.0.attn_k.weight", 2), ("blk.0.attn_output.weight", 1),
        ("blk.0.ffn_down.weight", 1), ("blk.1.attn_output.weight", 1), ("output_norm.weight", 1)]),
]
for path, wanted in REAL:
    if not os.path.exists(path):
        print(f"warning: {path} missing; its records are left out", file=sys.stderr)
        continue
    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    for name, n_rows in wanted:
        t = tensors[name]
        qt = T(int(t.tensor_type))
        n_cols = int(t.shape[0])
        data = np.asarray(t.data)
        if data.ndim == 1:
            data = data.reshape(1, -1)
        raw = np.ascontiguousarray(data[:n_rows]).view(np.uint8)
        want = dequant(raw, qt, n_rows, n_cols)
        add(0, qt, n_rows, n_cols, f"{os.path.basename(path)[:12]}:{name}", raw, want)
        print(f"{path}: {name} {qt.name} [{n_cols}] x {n_rows} rows")

blob = b"AFQV" + struct.pack("<II", 1, len(records)) + b"".join(records)
os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "wb") as f:
    f.write(blob)
print(f"wrote {OUT}: {len(records)} records, {len(blob)} bytes")
