#!/usr/bin/env python3
"""Write llama-architecture GGUFs with random Q4_K weights in the shapes of Llama-3.2-1B,
Llama-3.2-3B and Llama-3.1-8B, for the model-size scaling benchmark (bench/scaling.sh).

    scripts/make_scale_models.sh [--sizes 1b,3b,8b] [--out models/scale] [--force]
    (runs this file with the venv .venv-scale: the `gguf` and `numpy` PyPI packages)

Shapes (hidden_size, layers, attention heads, key/value heads, intermediate_size, head_dim,
rope_theta, the llama3 RoPE scaling, tied embeddings) are those of the models' public
config.json. The tokenizer is NOT Llama 3's: every tokenizer.* field is copied from the SmolLM2
GGUF given by --tokenizer-from (vocabulary 49,152 instead of 128,256), so the embedding (and the
8B's separate LM head) are smaller than the real models'. Parameter counts with that vocabulary:
1B 1.07e9 (real 1.24e9), 3B 2.97e9 (real 3.21e9), 8B 7.38e9 (real 8.03e9); see `describe()`.

Weights: every matrix (the token embedding and the 8B's output.weight included) is Q4_K
(ggml block_q4_K: f16 d, f16 dmin, 12 bytes of packed 6-bit sub-block scales and mins, 128 bytes of
4-bit quants per 256 weights; 4.5 bits a weight). The blocks are drawn, not quantized from f32:
quants uniform in 0..15, sub-block scales sc uniform in 32..63, mins m = sc and dmin = 7.5 d, so a
weight d*sc*q - dmin*m = d*sc*(q - 7.5) has mean 0 and standard deviation d*sc*sqrt(255/12); d is
drawn per block within +-25% of 0.02 / (47.5 * sqrt(255/12)), which gives the 0.02 standard
deviation of Llama's initializer_range: projections of RMS-normalised inputs stay O(1), nothing
overflows. Norm weights are f32, 1 + N(0, 0.02^2). llama3 RoPE scaling is stored as llama.cpp's
rope_freqs.weight (the per-frequency divisors of Meta's reference formula). Deterministic: the
seed of each tensor is --seed plus its index. The output is written to NAME.tmp and renamed, one
tensor at a time (memory: the largest tensor, ~33 MB).
"""
import argparse
import math
import os
import sys

import numpy as np

try:
    from gguf import GGUFReader, GGUFWriter, GGUFValueType
    from gguf.constants import GGMLQuantizationType as QT
except ImportError:
    sys.exit("make_scale_models: the 'gguf' package is missing: run scripts/make_scale_models.sh "
             "(it makes the venv .venv-scale)")

# public config.json values (meta-llama/Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B)
SHAPES = {
    "1b": dict(label="Llama-3.2-1B", hidden=2048, layers=16, heads=32, kv_heads=8, ff=8192, head_dim=64,
               rope_theta=500000.0, rope_factor=32.0, tied=True),
    "3b": dict(label="Llama-3.2-3B", hidden=3072, layers=28, heads=24, kv_heads=8, ff=8192, head_dim=128,
               rope_theta=500000.0, rope_factor=32.0, tied=True),
    "8b": dict(label="Llama-3.1-8B", hidden=4096, layers=32, heads=32, kv_heads=8, ff=14336, head_dim=128,
               rope_theta=500000.0, rope_factor=8.0, tied=False),
    # a few MB, for tests/check_scaling.sh: two layers, an untied LM head
    "tiny": dict(label="tiny test", hidden=256, layers=2, heads=4, kv_heads=2, ff=512, head_dim=64,
                 rope_theta=500000.0, rope_factor=8.0, tied=False),
}
# shared by the three configs: rms_norm_eps, max_position_embeddings, llama3 rope_scaling
RMS_EPS = 1e-5
CONTEXT = 131072
LOW_FREQ, HIGH_FREQ, OLD_CTX = 1.0, 4.0, 8192

QK_K = 256          # weights per Q4_K block
Q4K_BYTES = 144     # 2 + 2 + 12 + 128
INIT_STD = 0.02     # Llama's initializer_range
SC_LO, SC_HI = 32, 63
Q_STD = math.sqrt((16 * 16 - 1) / 12.0)  # standard deviation of a uniform integer in 0..15


def matrices(s, vocab):
    """(name, rows = output features, cols = input features) of every Q4_K matrix, file order."""
    H, hd = s["hidden"], s["head_dim"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    out = [("token_embd.weight", vocab, H)]
    for i in range(s["layers"]):
        p = f"blk.{i}."
        out += [(p + "attn_q.weight", q, H), (p + "attn_k.weight", kv, H), (p + "attn_v.weight", kv, H),
                (p + "attn_output.weight", H, q), (p + "ffn_gate.weight", s["ff"], H),
                (p + "ffn_up.weight", s["ff"], H), (p + "ffn_down.weight", H, s["ff"])]
    if not s["tied"]:
        out.append(("output.weight", vocab, H))
    return out


def describe(s, vocab):
    """Parameter count and Q4_K bytes of the matrices (norms and rope factors add < 0.01%)."""
    n = sum(r * c for _, r, c in matrices(s, vocab))
    return n, n // QK_K * Q4K_BYTES


def pack_scales(sc, m):
    """ggml's 12-byte packing of eight 6-bit scales sc[:, 8] and mins m[:, 8] (the inverse of
    get_scale_min_k4 in ggml-quants.c): bytes 0-3 sc[0..3] | (sc[4..7] >> 4) << 6, bytes 4-7
    m[0..3] | (m[4..7] >> 4) << 6, bytes 8-11 (sc[4..7] & 15) | (m[4..7] & 15) << 4."""
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def random_q4k(rng, rows, cols):
    """uint8 [rows, cols/256*144]: random Q4_K blocks with zero-mean weights of std ~INIT_STD."""
    nb = rows * (cols // QK_K)
    blk = rng.integers(0, 256, size=(nb, Q4K_BYTES), dtype=np.uint8)  # the quants: uniform nibbles
    d0 = INIT_STD / ((SC_LO + SC_HI) / 2.0 * Q_STD)
    d = (d0 * rng.uniform(0.75, 1.25, size=nb)).astype(np.float16)
    dmin = (d.astype(np.float32) * 7.5).astype(np.float16)
    blk[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    blk[:, 2:4] = dmin.view(np.uint8).reshape(nb, 2)
    sc = rng.integers(SC_LO, SC_HI + 1, size=(nb, 8), dtype=np.uint8)
    blk[:, 4:16] = pack_scales(sc, sc)
    return blk.reshape(rows, cols // QK_K * Q4K_BYTES)


def llama3_rope_factors(s):
    """Divisors of the RoPE frequencies for llama3 rope_scaling (Meta's reference
    apply_scaling: wavelengths above OLD_CTX/LOW_FREQ divided by factor, below OLD_CTX/HIGH_FREQ
    kept, smooth interpolation between), as llama.cpp's rope_freqs.weight stores them."""
    hd, base, factor = s["head_dim"], s["rope_theta"], s["rope_factor"]
    lo_wl, hi_wl = OLD_CTX / LOW_FREQ, OLD_CTX / HIGH_FREQ
    out = []
    for i in range(0, hd, 2):
        wl = 2 * math.pi * base ** (i / hd)
        if wl < hi_wl:
            out.append(1.0)
        elif wl > lo_wl:
            out.append(factor)
        else:
            smooth = (OLD_CTX / wl - LOW_FREQ) / (HIGH_FREQ - LOW_FREQ)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def copy_tokenizer(w, src):
    r = GGUFReader(src)
    vocab = None
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        if vt == GGUFValueType.ARRAY:
            val = f.contents()
            w.add_key_value(name, val, vt, sub_type=f.types[-1])
            if name == "tokenizer.ggml.tokens":
                vocab = len(val)
        else:
            w.add_key_value(name, f.contents(), vt)
    if not vocab:
        sys.exit(f"make_scale_models: {src}: no tokenizer.ggml.tokens array")
    return vocab


def write_model(key, path, tok_src, seed):
    s = SHAPES[key]
    w = GGUFWriter(None, "llama")
    w.add_string("general.type", "model")
    w.add_string("general.name", f"random {s['label']} shape (afinar scaling benchmark)")
    w.add_uint32("general.file_type", 14)  # LLAMA_FTYPE_MOSTLY_Q4_K_S: every matrix Q4_K
    w.add_uint32("general.quantization_version", 2)
    vocab = copy_tokenizer(w, tok_src)
    w.add_uint32("llama.block_count", s["layers"])
    w.add_uint32("llama.context_length", CONTEXT)
    w.add_uint32("llama.embedding_length", s["hidden"])
    w.add_uint32("llama.feed_forward_length", s["ff"])
    w.add_uint32("llama.attention.head_count", s["heads"])
    w.add_uint32("llama.attention.head_count_kv", s["kv_heads"])
    w.add_uint32("llama.attention.key_length", s["head_dim"])
    w.add_uint32("llama.attention.value_length", s["head_dim"])
    w.add_float32("llama.rope.freq_base", s["rope_theta"])
    w.add_float32("llama.attention.layer_norm_rms_epsilon", RMS_EPS)
    w.add_uint32("llama.rope.dimension_count", s["head_dim"])
    w.add_uint32("llama.vocab_size", vocab)

    H = s["hidden"]
    mats = matrices(s, vocab)
    vecs = [("rope_freqs.weight", s["head_dim"] // 2), ("output_norm.weight", H)]
    for i in range(s["layers"]):
        vecs += [(f"blk.{i}.attn_norm.weight", H), (f"blk.{i}.ffn_norm.weight", H)]
    order = [("v",) + v for v in vecs] + [("m",) + m for m in mats]
    for kind, name, *dims in order:
        if kind == "v":
            w.add_tensor_info(name, (dims[0],), np.dtype(np.float32), dims[0] * 4)
        else:
            rows, cols = dims
            nbytes = rows * cols // QK_K * Q4K_BYTES
            w.add_tensor_info(name, (rows, cols // QK_K * Q4K_BYTES), np.dtype(np.uint8), nbytes, raw_dtype=QT.Q4_K)
    tmp = path + ".tmp"
    w.write_header_to_file(path=tmp)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for idx, (kind, name, *dims) in enumerate(order):
        rng = np.random.default_rng(seed + idx)
        if name == "rope_freqs.weight":
            t = llama3_rope_factors(s)
        elif kind == "v":
            t = (1.0 + INIT_STD * rng.standard_normal(dims[0])).astype(np.float32)
        else:
            t = random_q4k(rng, *dims)
        w.write_tensor_data(t)
    w.close()
    os.replace(tmp, path)
    return vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1b,3b,8b", help="comma list of 1b, 3b, 8b (tiny: a test model)")
    ap.add_argument("--out", default="models/scale", help="output folder (files llama-<size>-random-Q4_K.gguf)")
    ap.add_argument("--tokenizer-from", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    a = ap.parse_args()
    sizes = [x.strip().lower() for x in a.sizes.split(",") if x.strip()]
    bad = [x for x in sizes if x not in SHAPES]
    if bad:
        sys.exit(f"make_scale_models: --sizes: unknown size {bad[0]!r} (known: {', '.join(SHAPES)})")
    if not os.path.isfile(a.tokenizer_from):
        sys.exit(f"make_scale_models: --tokenizer-from {a.tokenizer_from}: no such file (scripts/fetch_models.sh)")
    os.makedirs(a.out, exist_ok=True)
    for k in sizes:
        path = os.path.join(a.out, f"llama-{k}-random-Q4_K.gguf")
        if os.path.exists(path) and not a.force:
            print(f"make_scale_models: {path} exists (--force rewrites it)")
            continue
        vocab = write_model(k, path, a.tokenizer_from, a.seed)
        n, qb = describe(SHAPES[k], vocab)
        print(f"make_scale_models: {path}: {SHAPES[k]['label']} shape, vocab {vocab}, {n / 1e9:.3f}e9 parameters, "
              f"{qb / 2**30:.2f} GiB of Q4_K, file {os.path.getsize(path) / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
