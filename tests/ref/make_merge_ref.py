#!/usr/bin/env python3
"""NumPy reference of `afinar merge-adapters` (af_adapter_merge, include/afinar.h "Adapter merging").

Writes tests/fixtures/adapter_merge/:
  a0, a1, a2/        three small random PEFT LoRA adapters (SEQ_CLS, head "score" with labels) of one
                     tiny llama shape (hidden 24, q_proj [24, 24], v_proj [16, 24], down_proj [24, 32]):
                       a0: r 4, lora_alpha 8, q+v on layers 0-1, no head bias
                       a1: r 2, lora_alpha 4, use_rslora, q+v+down on layers 0-1, head bias
                       a2: r 3, lora_alpha 6, q+v on layer 1 only (layers_to_transform [1])
                     B matrices are random (not PEFT's zero init) so every ΔW is non-zero.
  bad_shape/         as a0 but q_proj of layer 0 is [24, 20] (another model)
  bad_labels/        as a0 with labels [neg, pos, neu] (same count, other order)
  bad_arch/          as a0 with afinar.json architecture "gemma3"
  no_head/           as a0 without the head (a CAUSAL_LM adapter)
  cases.json         the merge cases: method, weights, density, seed, rank, majority sign (slerp: t,
                     two adapters, no weights), and the reference file of each
  svd_ref.safetensors  F64 matrices (tall [9, 5], wide [5, 9], lowrank [30, 30] of rank 7, graded
                     [20, 12] with singular values 1 .. 1e-6, square [16, 16]) and "S.<name>",
                     numpy.linalg.svd's singular values
  ref_<case>.safetensors
                     per adapted projection "layers.{l}.{proj}" [out, in] (F32): the merged ΔW after
                     truncation to the case's rank (what the written adapter's s·B·A must equal);
                     "full.layers.{l}.{proj}": the merged ΔW before truncation; "head.weight",
                     "head.bias": Σ w_i head_i.

Method definitions (peft 0.21.2 utils/merge_utils.py, applied to ΔW_i = s_i B_i A_i as PEFT's *_svd
combinations do; PEFT's ties/dare use torch.topk/torch.bernoulli, re-done here so that afinar's
choices are reproducible):
  magnitude prune: keep the floor(density*N) largest |x| (ties: lowest row-major index first)
  random prune (DARE): keep entry e of adapter i when u01(key(seed, layer, proj, i), e) < density,
      with afinar's splitmix64 counter RNG (src/lora/lora.c af_ctr_key / af_ctr_u01, re-implemented
      below), then divide by density
  sign election: "total" sign(sum_i T_i), "frequency" sign(sum_i sign(T_i)), >= 0 -> +1
  disjoint merge: sum_i w_i T_i [sign(T_i) == elected] / max(1, count)
  slerp (not in PEFT; mergekit's formula on flattened tensors): slerp_delta below
The truncated SVD is numpy.linalg.svd (LAPACK gesdd) in float64.

Run from the repository root with the reference venv:  .venv-ref/bin/python tests/ref/make_merge_ref.py
Options: --peft also cross-checks the svd / cat / ties_svd references against PEFT's own
add_weighted_adapter on a tiny LlamaForCausalLM on CPU (needs torch, transformers, peft).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import save_file

OUT = "tests/fixtures/adapter_merge"
M64 = (1 << 64) - 1
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BLOCK = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
         "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
HIDDEN, KV, FFN, N_LAYERS = 24, 16, 32, 2
SHAPE = {"q_proj": (HIDDEN, HIDDEN), "v_proj": (KV, HIDDEN), "down_proj": (HIDDEN, FFN)}  # (out, in)
LABELS = ["neg", "neu", "pos"]


# ---------------------------------------------------------------- afinar's counter RNG (lora.c)
def mix64(z):
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9 & M64
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb & M64
    return z ^ (z >> 31)


def ctr_key(seed, a, b, c):
    h = mix64((seed + 0x9e3779b97f4a7c15) & M64)
    h = mix64(h ^ ((a * 0xd1b54a32d192ed03 + 1) & M64))
    h = mix64(h ^ ((b * 0xaef17502108ef2d9 + 2) & M64))
    h = mix64(h ^ ((c * 0xf58f7a5c5b1b1b4d + 3) & M64))
    return h


def ctr_u01(key, n):
    """u01(key, i) for i in [0, n), float64 (exact copies of afinar's float values)."""
    with np.errstate(over="ignore"):
        i = np.arange(n, dtype=np.uint64)
        z = np.uint64(key) + (i + np.uint64(1)) * np.uint64(0x9e3779b97f4a7c15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) / 16777216.0


# ---------------------------------------------------------------- methods
def magnitude_prune(x, density):
    if density >= 1:
        return x.copy()
    flat = x.ravel()
    k = int(density * flat.size)
    order = np.argsort(-np.abs(flat), kind="stable")
    out = np.zeros_like(flat)
    out[order[:k]] = flat[order[:k]]
    return out.reshape(x.shape)


def random_prune(x, density, seed, layer, proj, adapter):
    if density >= 1:
        return x.copy()
    u = ctr_u01(ctr_key(seed, layer, proj, adapter), x.size).reshape(x.shape)
    return np.where(u < density, x / density, 0.0)


def disjoint(ts, w, freq):
    ts = np.stack(ts)
    sign = np.sign(ts)
    tot = sign.sum(0) if freq else ts.sum(0)
    elected = np.where(tot >= 0, 1.0, -1.0)
    mask = sign == elected
    num = (ts * w.reshape(-1, 1, 1) * mask).sum(0)
    return num / np.maximum(mask.sum(0), 1.0)


def merge_delta(method, deltas, ids, w, density, seed, layer, proj, freq):
    """deltas: ΔW_i of the adapters that have the projection; ids: their positions."""
    w = np.asarray(w, dtype=np.float64)
    if method in ("linear", "svd", "cat"):
        return sum(wi * d for wi, d in zip(w, deltas))
    if method in ("ties", "magnitude-prune"):
        ts = [magnitude_prune(d, density) for d in deltas]
    else:
        ts = [random_prune(d, density, seed, layer, proj, i) for d, i in zip(deltas, ids)]
    if method in ("ties", "dare-ties"):
        return disjoint(ts, w, freq)
    return sum(wi * t for wi, t in zip(w, ts))


def slerp_delta(d0, d1, t, eps=1e-8, thr=0.9995):
    """Spherical interpolation of two ΔW (flattened, as mergekit's slerp): a ΔW with norm <= eps is
    left unnormalised; nearly (anti)parallel directions fall back to linear interpolation."""
    n0, n1 = np.linalg.norm(d0), np.linalg.norm(d1)
    u0 = d0 / n0 if n0 > eps else d0
    u1 = d1 / n1 if n1 > eps else d1
    dot = float(np.sum(u0 * u1))
    if abs(dot) > thr:
        return (1 - t) * d0 + t * d1
    th = np.arccos(dot)
    return np.sin((1 - t) * th) / np.sin(th) * d0 + np.sin(t * th) / np.sin(th) * d1


def truncate(M, rank):
    U, S, Vt = np.linalg.svd(M, full_matrices=False)
    k = min(rank, S.size)
    return (U[:, :k] * S[:k]) @ Vt[:k, :], S


# ---------------------------------------------------------------- adapters
def make_adapter(rng, r, alpha, rslora, targets, layers, head_bias, labels=LABELS, arch="llama", shapes=SHAPE,
                 head=True):
    t = {}
    for l in layers:
        for p in targets:
            out, inn = shapes[p]
            pre = f"base_model.model.model.layers.{l}.{BLOCK[p]}.{p}"
            t[pre + ".lora_A.weight"] = rng.uniform(-0.5, 0.5, (r, inn)).astype(np.float32)
            t[pre + ".lora_B.weight"] = rng.normal(0, 0.3, (out, r)).astype(np.float32)
    if head:
        t["base_model.model.score.weight"] = rng.normal(0, 0.2, (len(labels), HIDDEN)).astype(np.float32)
        if head_bias:
            t["base_model.model.score.bias"] = rng.normal(0, 0.2, (len(labels),)).astype(np.float32)
    cfg = {"peft_type": "LORA", "task_type": "SEQ_CLS" if head else "CAUSAL_LM", "r": r, "lora_alpha": alpha,
           "lora_dropout": 0.0, "use_rslora": rslora, "target_modules": sorted(targets), "bias": "none",
           "fan_in_fan_out": False, "use_dora": False, "init_lora_weights": True, "inference_mode": True,
           "modules_to_save": ["score"] if head else None, "base_model_name_or_path": "tiny-llama",
           "layers_to_transform": None if len(layers) == N_LAYERS else list(layers), "layers_pattern": None,
           "rank_pattern": {}, "alpha_pattern": {}}
    af = {"format": "afinar-adapter", "version": 2, "qk_row_order": "hf", "architecture": arch,
          "n_layers": N_LAYERS, "num_classes": len(labels) if head else 0, "hidden": HIDDEN,
          "head_bias": bool(head_bias), "pooling": "last"}
    if head:
        af["labels"] = labels
    return {"tensors": t, "config": cfg, "afinar": af, "r": r, "alpha": alpha, "rslora": rslora}


def write_adapter(name, ad):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save_file(ad["tensors"], os.path.join(d, "adapter_model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(ad["config"], f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "afinar.json"), "w") as f:
        json.dump(ad["afinar"], f, indent=2)
        f.write("\n")


def delta(ad, l, p):
    pre = f"base_model.model.model.layers.{l}.{BLOCK[p]}.{p}"
    if pre + ".lora_A.weight" not in ad["tensors"]:
        return None
    A = ad["tensors"][pre + ".lora_A.weight"].astype(np.float64)
    B = ad["tensors"][pre + ".lora_B.weight"].astype(np.float64)
    s = ad["alpha"] / (np.sqrt(ad["r"]) if ad["rslora"] else ad["r"])
    return s * (B @ A)


def slot_deltas(ads, l, p):
    """ΔW_i of the adapters that have projection p of layer l, and their positions i."""
    ds, ids = [], []
    for i, ad in enumerate(ads):
        d = delta(ad, l, p)
        if d is not None:
            ds.append(d)
            ids.append(i)
    return ds, ids


CASES = [
    # name, method, weights, density, seed, rank, majority sign
    ("linear", "linear", [1.0, 0.5, -0.7], 0, 0, 0, "total"),
    ("svd_r2", "svd", [0.3, 1.2, 0.8], 0, 0, 2, "total"),
    ("cat", "cat", [1.0, 0.5, -0.7], 0, 0, 0, "total"),
    ("ties", "ties", [1.0, 0.7, 0.5], 0.5, 0, 0, "total"),
    ("ties_freq_r6", "ties", [0.6, 1.0, -0.4], 0.3, 0, 6, "frequency"),
    ("dare_ties", "dare-ties", [1.0, 0.7, 0.5], 0.6, 7, 0, "total"),
    ("dare_linear", "dare-linear", [0.5, 0.5, 1.0], 0.5, 3, 0, "total"),
    ("magnitude_prune", "magnitude-prune", [1.0, -0.3, 0.9], 0.4, 0, 0, "total"),
]

SLERP_CASES = [
    # name, adapter positions, t, rank (0: the larger input rank)
    ("slerp", (0, 1), 0.3, 0),       # down_proj only in a1: d = 0, θ = π/2
    ("slerp_r6", (0, 1), 0.75, 6),   # rank r0 + r1: no truncation
    ("slerp_same", (1, 1), 0.4, 0),  # parallel: the linear fallback, ΔW of a1 itself
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peft", action="store_true", help="cross-check against PEFT's add_weighted_adapter")
    args = ap.parse_args()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    rng = np.random.default_rng(20261125)
    ads = [make_adapter(rng, 4, 8, False, ["q_proj", "v_proj"], [0, 1], False),
           make_adapter(rng, 2, 4, True, ["q_proj", "v_proj", "down_proj"], [0, 1], True),
           make_adapter(rng, 3, 6, False, ["q_proj", "v_proj"], [1], False)]
    for i, ad in enumerate(ads):
        write_adapter(f"a{i}", ad)
    bad_shape = dict(SHAPE, q_proj=(HIDDEN, 20))
    write_adapter("bad_shape", make_adapter(np.random.default_rng(1), 4, 8, False, ["q_proj", "v_proj"], [0, 1],
                                            False, shapes=bad_shape))
    write_adapter("bad_labels", make_adapter(np.random.default_rng(2), 4, 8, False, ["q_proj", "v_proj"], [0, 1],
                                             False, labels=["neg", "pos", "neu"]))
    write_adapter("bad_arch", make_adapter(np.random.default_rng(3), 4, 8, False, ["q_proj", "v_proj"], [0, 1],
                                           False, arch="gemma3"))
    write_adapter("no_head", make_adapter(np.random.default_rng(4), 4, 8, False, ["q_proj", "v_proj"], [0, 1],
                                          False, head=False))
    # SVD references (F64): matrices and numpy's singular values
    srng = np.random.default_rng(7)
    q1, _ = np.linalg.qr(srng.normal(size=(20, 20)))
    q2, _ = np.linalg.qr(srng.normal(size=(12, 12)))
    graded = (q1[:, :12] * np.logspace(0, -6, 12)) @ q2.T  # singular values 1 .. 1e-6
    mats = {"tall": srng.normal(size=(9, 5)), "wide": srng.normal(size=(5, 9)),
            "lowrank": srng.normal(size=(30, 7)) @ srng.normal(size=(7, 30)), "graded": graded,
            "square": srng.uniform(-1, 1, size=(16, 16))}
    st = {}
    for k, m in mats.items():
        st[k] = np.ascontiguousarray(m)
        st["S." + k] = np.linalg.svd(m, compute_uv=False)
    save_file(st, os.path.join(OUT, "svd_ref.safetensors"))
    sum_r = sum(a["r"] for a in ads)
    max_r = max(a["r"] for a in ads)
    manifest = []
    for name, method, w, density, seed, rank, sign in CASES:
        out_rank = sum_r if method == "cat" else (rank or max_r)
        t = {}
        worst = 0.0
        for l in range(N_LAYERS):
            for pi, p in enumerate(PROJ):
                ds, ids = slot_deltas(ads, l, p)
                if not ds:
                    continue
                M = merge_delta(method, ds, ids, [w[i] for i in ids], density, seed, l, pi, sign == "frequency")
                T, S = truncate(M, out_rank)
                if out_rank < S.size and S[out_rank] > 1e-12 * S[0]:  # truncation well defined: a gap at the rank
                    gap = (S[out_rank - 1] - S[out_rank]) / S[0]
                    assert gap > 1e-3, (name, l, p, gap)
                worst = max(worst, np.linalg.norm(M - T) / np.linalg.norm(M))
                t[f"layers.{l}.{p}"] = T.astype(np.float32)
                t[f"full.layers.{l}.{p}"] = M.astype(np.float32)
        hw = sum(wi * a["tensors"]["base_model.model.score.weight"].astype(np.float64) for wi, a in zip(w, ads))
        hb = sum(wi * a["tensors"].get("base_model.model.score.bias", np.zeros(3, np.float32)).astype(np.float64)
                 for wi, a in zip(w, ads))
        t["head.weight"] = hw.astype(np.float32)
        t["head.bias"] = hb.astype(np.float32)
        save_file(t, os.path.join(OUT, f"ref_{name}.safetensors"))
        manifest.append({"name": name, "method": method, "adapters": ["a0", "a1", "a2"], "weights": w,
                         "density": density, "seed": seed, "rank": rank, "majority_sign": sign,
                         "expect_rank": out_rank, "ref": f"ref_{name}.safetensors",
                         "max_truncation_rel_error": float(worst)})
        print(f"{name:16s} rank {out_rank}: truncation |M - M_r|_F/|M|_F up to {worst:.3g}")
    # slerp: two adapters, per projection, no weights; heads (1-t) W_0 + t W_1
    for name, pair, t, rank in SLERP_CASES:
        sel = [ads[i] for i in pair]
        out_rank = rank or max(a["r"] for a in sel)
        tens, worst, nproj = {}, 0.0, 0
        for l in range(N_LAYERS):
            for p in PROJ:
                d = [delta(a, l, p) for a in sel]
                if d[0] is None and d[1] is None:
                    continue
                shape = SHAPE[p]
                d = [x if x is not None else np.zeros(shape) for x in d]
                M = slerp_delta(d[0], d[1], t)
                T, _ = truncate(M, out_rank)
                worst = max(worst, np.linalg.norm(M - T) / np.linalg.norm(M))
                tens[f"layers.{l}.{p}"] = T.astype(np.float32)
                tens[f"full.layers.{l}.{p}"] = M.astype(np.float32)
                nproj += 1
        hw = [a["tensors"]["base_model.model.score.weight"].astype(np.float64) for a in sel]
        hb = [a["tensors"].get("base_model.model.score.bias", np.zeros(3, np.float32)).astype(np.float64) for a in sel]
        tens["head.weight"] = ((1 - t) * hw[0] + t * hw[1]).astype(np.float32)
        tens["head.bias"] = ((1 - t) * hb[0] + t * hb[1]).astype(np.float32)
        save_file(tens, os.path.join(OUT, f"ref_{name}.safetensors"))
        manifest.append({"name": name, "method": "slerp", "adapters": [f"a{i}" for i in pair], "weights": [],
                         "t": t, "density": 0, "seed": 0, "rank": rank, "majority_sign": "total",
                         "expect_rank": out_rank, "expect_projections": nproj, "ref": f"ref_{name}.safetensors",
                         "max_truncation_rel_error": float(worst)})
        print(f"{name:16s} rank {out_rank}: truncation |M - M_r|_F/|M|_F up to {worst:.3g}")
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"generator": "tests/ref/make_merge_ref.py", "numpy": np.__version__, "cases": manifest}, f,
                  indent=1)
        f.write("\n")
    if args.peft:
        peft_check(ads)


def peft_check(ads):
    """PEFT's own add_weighted_adapter (svd, cat, ties_svd) on a tiny LlamaForCausalLM vs this file's
    definitions (heads left out: PEFT does not merge modules_to_save)."""
    import tempfile

    import torch
    from peft import PeftModel
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=N_LAYERS, num_attention_heads=3,
                      num_key_value_heads=2, vocab_size=32, head_dim=8)
    torch.manual_seed(0)
    base = LlamaForCausalLM(cfg)
    tmp = tempfile.mkdtemp()
    for i, ad in enumerate(ads):
        d = os.path.join(tmp, f"a{i}")
        os.makedirs(d)
        t = {k: v for k, v in ad["tensors"].items() if "score" not in k}
        save_file(t, os.path.join(d, "adapter_model.safetensors"), metadata={"format": "pt"})
        c = dict(ad["config"], task_type="CAUSAL_LM", modules_to_save=None)
        json.dump(c, open(os.path.join(d, "adapter_config.json"), "w"))
    model = PeftModel.from_pretrained(base, os.path.join(tmp, "a0"), adapter_name="a0")
    model.load_adapter(os.path.join(tmp, "a1"), adapter_name="a1")
    model.load_adapter(os.path.join(tmp, "a2"), adapter_name="a2")
    worst = 0.0
    for comb, mine, w, density, rank in [("svd", "svd", [0.3, 1.2, 0.8], None, 2),
                                         ("cat", "cat", [1.0, 0.5, -0.7], None, None),
                                         ("ties_svd", "ties", [1.0, 0.7, 0.5], 0.5, 4)]:
        name = f"m_{comb}"
        model.add_weighted_adapter(["a0", "a1", "a2"], w, name, combination_type=comb, svd_rank=rank,
                                   density=density)
        for l in range(N_LAYERS):
            for pi, p in enumerate(PROJ):
                ds, ids = slot_deltas(ads, l, p)
                if not ds:
                    continue
                mod = getattr(model.base_model.model.model.layers[l], BLOCK[p]).__getattr__(p)
                got = mod.get_delta_weight(name).detach().double().numpy()
                M = merge_delta(mine, ds, ids, [w[i] for i in ids], density or 0, 0, l, pi, False)
                want = M if comb == "cat" else truncate(M, rank)[0]
                err = np.abs(got - want).max() / np.abs(want).max()
                worst = max(worst, err)
                assert err < 1e-4, (comb, l, p, err)
        print(f"PEFT add_weighted_adapter {comb}: matches (max error relative to max |ΔW| so far {worst:.2e})")


if __name__ == "__main__":
    sys.exit(main())
