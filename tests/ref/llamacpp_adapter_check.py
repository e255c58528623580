#!/usr/bin/env python3
"""Cross-check `afinar export` and `afinar merge` against llama.cpp (through llama-cpp-python).

Run from the repository root with the python of the venv scripts/setup_llamacpp.sh made (numpy +
llama_cpp), after `make lib cli` (`make check-llamacpp` does all of it):

  .venv-llamacpp/bin/python tests/ref/llamacpp_adapter_check.py [--models M1.gguf,M2.gguf]

For each model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf, llama with permuted q/k rows,
and models/gemma-3-270m-Q4_K_M.gguf, gemma3; a missing file is skipped with a message):
  1. a random PEFT adapter directory (r 8, lora_alpha 16, all seven projections, every layer, A
     ~ U(+-1/sqrt(in)), B ~ N(0, 0.05^2), a fixed seed; B rows of q/k in HF order as PEFT holds them);
  2. `afinar export -m MODEL -a DIR -o lora.gguf`;
  3. the logits at every position of a fixed prompt (token ids from llama.cpp's tokenizer, the
     same ids given to both engines):
       afinar: a small C program on build/libafinar.a (af_session_load_adapter + af_session_eval
       all_logits) with no adapter, with DIR, and with lora.gguf (afinar loading the LoRA GGUF);
       llama.cpp: Llama(MODEL) and Llama(MODEL, lora_path=lora.gguf), logits_all;
  4. `afinar merge` (--type keep, and --type f32), the merged files run in llama.cpp without an
     adapter and in afinar.
Checks (exit 1 when one fails); llama.cpp quantizes the activations to 8 bits in its quantized
dot products and afinar does not, so even without an adapter the engines' logits differ
("base_llama_vs_afinar": max ~1.0-1.3 on these models); tolerances are stated against that:
  - export exact: afinar(DIR) and afinar(lora.gguf) logits identical (max |diff| == 0);
  - the adapter in llama.cpp: its effect (logits with minus without the adapter) agrees with
    afinar's: correlation >= 0.9 and max |effect_llama - effect_afinar| <= 0.2 * max |effect| +
    the base engines' max |diff|;
  - negative control (llama only): an export with the q/k rows left in HF order is further from
    afinar (larger max |diff|, lower correlation) than the real export;
  - merge --type f32: afinar(merged) vs afinar(DIR) max |diff| <= 1e-3; llama.cpp(merged) vs
    afinar(merged) <= 1.0; the merged file keeps the adapter's effect in llama.cpp (corr >= 0.95);
  - merge --type q8_0: the effect kept (corr >= 0.95 in afinar, >= 0.85 in llama.cpp); llama.cpp
    vs afinar on the merged file <= 2x the base engines' max |diff|;
  - merge keep (Q4_1 / Q4_K_M types): llama.cpp loads it and agrees with afinar on it (<= 2x the
    base engines' max |diff|); how much of the adapter survives re-quantization is measured and
    reported, not bounded (a small adapter largely rounds away in 4-bit types).
Re-quantization is also measured for the base alone: a zero adapter merged with the same --type
("afinar_base_alone_vs_base"; weight-level RMS in the merge's stderr line).
Every number goes to --results (JSON, default tests/fixtures/llamacpp_adapter_check.json) and stdout.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np

DUMP_C = r"""
#include "afinar.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* usage: afdump config MODEL             -> JSON of the model config on stdout
 *        afdump logits MODEL ADAPTER|- THREADS IDS OUT
 * IDS: u32 n, i32 ids[n]; OUT: u32 n, u32 vocab, f32 logits[n][vocab] (af_session_eval all_logits). */
static int die(const char *what) { fprintf(stderr, "afdump: %s: %s\n", what, af_last_error()); return 1; }
int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "config")) {
        af_model *m = NULL;
        if (af_model_load(NULL, argv[2], &m) != AF_OK) return die("model");
        const af_model_config *c = af_model_get_config(m);
        printf("{\"architecture\": \"%s\", \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,"
               " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d}\n",
               c->architecture, c->hidden_size, c->intermediate_size, c->num_hidden_layers, c->num_attention_heads,
               c->num_key_value_heads, c->head_dim);
        af_model_free(m);
        return 0;
    }
    if (argc != 7 || strcmp(argv[1], "logits")) { fprintf(stderr, "usage: see afdump.c\n"); return 2; }
    af_ctx_params cp;
    af_ctx_params_default(&cp);
    cp.n_threads = atoi(argv[4]);
    af_ctx *ctx = NULL;
    af_model *m = NULL;
    if (af_ctx_new(&cp, &ctx) != AF_OK) return die("ctx");
    if (af_model_load(ctx, argv[2], &m) != AF_OK) return die("model");
    FILE *in = fopen(argv[5], "rb");
    uint32_t n = 0;
    if (!in || fread(&n, 4, 1, in) != 1 || n == 0 || n > 4096) return die("ids");
    int32_t *ids = malloc(4 * (size_t)n);
    if (!ids || fread(ids, 4, n, in) != n) return die("ids");
    fclose(in);
    const int32_t V = af_model_get_config(m)->vocab_size;
    af_session *s = NULL;
    if (af_session_new(m, (int)n + 1, &s) != AF_OK) return die("session");
    if (strcmp(argv[3], "-") && af_session_load_adapter(s, argv[3], 1.0f) != AF_OK) return die("adapter");
    float *all = malloc(sizeof(float) * n * (size_t)V);
    if (!all) return die("memory");
    if (af_session_eval(s, ids, (int)n, NULL, all) != AF_OK) return die("eval");
    FILE *out = fopen(argv[6], "wb");
    uint32_t uv = (uint32_t)V;
    if (!out || fwrite(&n, 4, 1, out) != 1 || fwrite(&uv, 4, 1, out) != 1 ||
        fwrite(all, sizeof(float), n * (size_t)V, out) != n * (size_t)V || fclose(out))
        return die("write");
    af_session_free(s);
    af_model_free(m);
    af_ctx_free(ctx);
    free(all);
    free(ids);
    return 0;
}
"""

PROMPT = ("The old lighthouse keeper climbed the stairs every evening to light the lamp. "
          "One night, a storm rolled in from the sea and")

PROJ = [("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
        ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj")]


def log(*a):
    print(*a, flush=True)


def build_dump(work, afinar):
    bdir = os.path.dirname(os.path.abspath(afinar))
    src, exe = os.path.join(work, "afdump.c"), os.path.join(work, "afdump")
    with open(src, "w") as f:
        f.write(DUMP_C)
    subprocess.run(["cc", "-std=c11", "-O1", "-I", "include", src, os.path.join(bdir, "libafinar.a"), "-o", exe,
                    *subprocess.run(["make", "-s", "print-ldlibs"], capture_output=True, text=True,
                                   check=True).stdout.split()], check=True)
    return exe


def write_safetensors(path, tensors):
    """tensors: list of (name, float32 array); the safetensors format (8-byte header length, JSON, data)."""
    header, off, blobs = {}, 0, []
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def qk_gguf_to_hf(B, head_dim):
    """Rows of B [n_heads*head_dim, r] from GGUF (llama.cpp permuted) order to HF order (inverse of
    convert_hf_to_gguf.py LlamaModel.permute): GGUF row h*hd + 2b + a holds HF row h*hd + a*hd/2 + b."""
    out = np.empty_like(B)
    hd = head_dim
    for h in range(B.shape[0] // hd):
        for w in range(hd):
            out[h * hd + (w % 2) * (hd // 2) + w // 2] = B[h * hd + w]
    return out


def make_adapter(d, cfg, seed, r=8, alpha=16.0, b_std=0.05):
    """Random PEFT LoRA directory for a model config (b_std 0: a zero adapter)."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    H, F = cfg["hidden_size"], cfg["intermediate_size"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    shapes = {"q_proj": (nh * hd, H), "k_proj": (nkv * hd, H), "v_proj": (nkv * hd, H), "o_proj": (H, nh * hd),
              "gate_proj": (F, H), "up_proj": (F, H), "down_proj": (H, F)}
    ts = []
    for l in range(cfg["num_hidden_layers"]):
        for blk, p in PROJ:
            out, inn = shapes[p]
            A = rng.uniform(-1 / np.sqrt(inn), 1 / np.sqrt(inn), (r, inn)).astype(np.float32)
            B = (rng.standard_normal((out, r)) * b_std).astype(np.float32)
            pre = f"base_model.model.model.layers.{l}.{blk}.{p}"
            ts.append((pre + ".lora_A.weight", A))
            ts.append((pre + ".lora_B.weight", B))
    write_safetensors(os.path.join(d, "adapter_model.safetensors"), ts)
    conf = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
            "target_modules": [p for _, p in PROJ], "bias": "none", "use_rslora": False, "use_dora": False,
            "fan_in_fan_out": False, "base_model_name_or_path": None, "layers_to_transform": None,
            "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}, "inference_mode": True}
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(conf, f)
    return ts


def permute_dir_qk(src_ts, src_dir, d, cfg):
    """Negative control: the same adapter with the q/k B rows moved so that afinar's load-time
    HF -> GGUF conversion lands them in HF order: the export then holds unpermuted rows (= an
    exporter that forgot the permutation)."""
    os.makedirs(d, exist_ok=True)
    hd = cfg["head_dim"]
    ts = [(n, qk_gguf_to_hf(a, hd) if (".q_proj.lora_B" in n or ".k_proj.lora_B" in n) else a) for n, a in src_ts]
    write_safetensors(os.path.join(d, "adapter_model.safetensors"), ts)
    with open(os.path.join(src_dir, "adapter_config.json")) as f, open(os.path.join(d, "adapter_config.json"), "w") as g:
        g.write(f.read())


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r


def afinar_logits(exe, model, adapter, ids, threads, work):
    ip, op = os.path.join(work, "ids.bin"), os.path.join(work, "logits.bin")
    with open(ip, "wb") as f:
        f.write(struct.pack("<I", len(ids)))
        f.write(np.asarray(ids, dtype="<i4").tobytes())
    run([exe, "logits", model, adapter or "-", str(threads), ip, op])
    buf = open(op, "rb").read()
    n, V = struct.unpack_from("<II", buf, 0)
    return np.frombuffer(buf, dtype="<f4", count=n * V, offset=8).reshape(n, V).astype(np.float64)


def llama_logits(model, lora, ids, threads):
    from llama_cpp import Llama
    kw = dict(model_path=model, n_ctx=max(64, len(ids) + 8), n_batch=512, n_threads=threads, logits_all=True,
              verbose=False, seed=0)
    if lora:
        kw["lora_path"] = lora
    llm = Llama(**kw)
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)], dtype=np.float64)
    del llm
    return out


def llama_tokenize(model, text):
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=64, vocab_only=True, verbose=False)
    ids = llm.tokenize(text.encode(), add_bos=True, special=False)
    del llm
    return ids


def stats(a, b):
    d = np.abs(a - b)
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()),
            "argmax_agree": float(np.mean(a.argmax(1) == b.argmax(1)))}


def check_model(args, exe, model, res):
    name = os.path.basename(model)
    work = os.path.join(args.work, name.replace(".gguf", ""))
    os.makedirs(work, exist_ok=True)
    cfg = json.loads(run([exe, "config", model]).stdout)
    log(f"== {name}: {cfg}")
    adir = os.path.join(work, "adapter")
    ts = make_adapter(adir, cfg, seed=args.seed)
    lora = os.path.join(work, "lora.gguf")
    run([args.afinar, "export", "-m", model, "-a", adir, "-o", lora, "--overwrite"])
    ids = llama_tokenize(model, PROMPT)
    t = args.threads
    fails = []
    out = {"model": name, "architecture": cfg["architecture"], "n_tokens": len(ids), "r": 8, "lora_alpha": 16.0}

    a_base = afinar_logits(exe, model, None, ids, t, work)
    a_dir = afinar_logits(exe, model, adir, ids, t, work)
    a_gguf = afinar_logits(exe, model, lora, ids, t, work)
    l_base = llama_logits(model, None, ids, t)
    l_lora = llama_logits(model, lora, ids, t)

    out["afinar_dir_vs_afinar_lora_gguf"] = stats(a_dir, a_gguf)
    if out["afinar_dir_vs_afinar_lora_gguf"]["max_abs"] != 0.0:
        fails.append("afinar with the exported LoRA GGUF differs from afinar with the adapter directory")
    out["base_llama_vs_afinar"] = stats(l_base, a_base)
    out["lora_llama_vs_afinar"] = stats(l_lora, a_dir)
    eff_a, eff_l = a_dir - a_base, l_lora - l_base
    out["adapter_effect_max_abs_afinar"] = float(np.abs(eff_a).max())
    out["adapter_effect_max_abs_llama"] = float(np.abs(eff_l).max())
    out["effect_llama_vs_afinar"] = stats(eff_l, eff_a)
    out["adapter_effect_mean_abs_afinar"] = float(np.abs(eff_a).mean())
    out["effect_correlation"] = float(np.corrcoef(eff_l.ravel(), eff_a.ravel())[0, 1])
    tol = 0.2 * out["adapter_effect_max_abs_afinar"] + out["base_llama_vs_afinar"]["max_abs"]
    out["tolerance_effect"] = tol
    if out["effect_llama_vs_afinar"]["max_abs"] > tol:
        fails.append(f"adapter effect differs by {out['effect_llama_vs_afinar']['max_abs']:.4g} > {tol:.4g}")
    if out["effect_correlation"] < 0.9:
        fails.append(f"adapter effect correlation {out['effect_correlation']:.4f} < 0.9")

    if cfg["architecture"] == "llama":  # negative control: q/k rows not permuted
        ndir = os.path.join(work, "adapter_noperm")
        permute_dir_qk(ts, adir, ndir, cfg)
        nl = os.path.join(work, "lora_noperm.gguf")
        run([args.afinar, "export", "-m", model, "-a", ndir, "-o", nl, "--overwrite"])
        l_neg = llama_logits(model, nl, ids, t)
        out["negative_control_unpermuted_qk_vs_afinar"] = stats(l_neg - l_base, eff_a)
        out["negative_control_correlation"] = float(np.corrcoef((l_neg - l_base).ravel(), eff_a.ravel())[0, 1])
        if (out["negative_control_unpermuted_qk_vs_afinar"]["max_abs"] <= out["effect_llama_vs_afinar"]["max_abs"] or
                out["negative_control_correlation"] >= out["effect_correlation"]):
            fails.append("negative control (q/k rows not permuted) is not further from afinar")

    # merged files: f32 (no re-quantization), q8_0, and keep (each tensor's own 4/5/6-bit type)
    base_eng = out["base_llama_vs_afinar"]["max_abs"]
    zdir = os.path.join(work, "adapter_zero")  # B = 0: merging it = quantizing the base alone
    make_adapter(zdir, cfg, seed=args.seed, b_std=0.0)
    for ty in ("f32", "q8_0", "keep"):
        mg = os.path.join(work, f"merged_{ty}.gguf")
        r = run([args.afinar, "merge", "-m", model, "-a", adir, "-o", mg, "--type", ty, "--overwrite"])
        m = {"afinar_merge_stderr": r.stderr.strip()}
        l_m = llama_logits(mg, None, ids, t)
        a_m = afinar_logits(exe, mg, None, ids, t, work)
        m["llama_merged_vs_llama_unmerged"] = stats(l_m, l_lora)
        m["afinar_merged_vs_afinar_unmerged"] = stats(a_m, a_dir)
        m["llama_merged_vs_afinar_merged"] = stats(l_m, a_m)
        # how much of the adapter's effect the merged file keeps (1 = all of it)
        m["effect_kept_corr_afinar"] = float(np.corrcoef((a_m - a_base).ravel(), eff_a.ravel())[0, 1])
        m["effect_kept_corr_llama"] = float(np.corrcoef((l_m - l_base).ravel(), eff_l.ravel())[0, 1])
        # the same type for the base alone (zero adapter): the error quantizing the base costs
        zg = os.path.join(work, f"zero_{ty}.gguf")
        rz = run([args.afinar, "merge", "-m", model, "-a", zdir, "-o", zg, "--type", ty, "--overwrite"])
        m["base_alone_merge_stderr"] = rz.stderr.strip()
        m["afinar_base_alone_vs_base"] = stats(afinar_logits(exe, zg, None, ids, t, work), a_base)
        checks = [("llama_merged_vs_afinar_merged max", m["llama_merged_vs_afinar_merged"]["max_abs"],
                   (1.0 if ty == "f32" else 2.0 * base_eng))]
        if ty == "f32":
            checks.append(("afinar_merged_vs_afinar_unmerged max", m["afinar_merged_vs_afinar_unmerged"]["max_abs"], 1e-3))
            checks.append(("1 - effect_kept_corr_llama", 1 - m["effect_kept_corr_llama"], 0.05))
        if ty == "q8_0":
            checks.append(("1 - effect_kept_corr_afinar", 1 - m["effect_kept_corr_afinar"], 0.05))
            checks.append(("1 - effect_kept_corr_llama", 1 - m["effect_kept_corr_llama"], 0.15))
        m["checks"] = [{"what": w, "value": v, "max": lim} for w, v, lim in checks]
        for w, v, lim in checks:
            if v > lim:
                fails.append(f"merge {ty}: {w} = {v:.4g} > {lim:.4g}")
        out[f"merge_{ty}"] = m
    out["failures"] = fails
    res[name] = out
    log(json.dumps(out, indent=1))
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="models/SmolLM2-135M-Instruct.Q4_1.gguf,models/gemma-3-270m-Q4_K_M.gguf")
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--work", default="/tmp/afinar_llamacpp_check")
    ap.add_argument("--results", default="tests/fixtures/llamacpp_adapter_check.json")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.work, exist_ok=True)
    import llama_cpp
    exe = build_dump(args.work, args.afinar)
    res = {"llama_cpp_python": llama_cpp.__version__, "date": time.strftime("%Y-%m-%d"), "models": {}}
    fails, ran = [], 0
    for model in args.models.split(","):
        if not os.path.exists(model):
            log(f"SKIP {model}: missing (scripts/fetch_models.sh)")
            continue
        ran += 1
        fails += [f"{os.path.basename(model)}: {f}" for f in check_model(args, exe, model, res["models"])]
    with open(args.results, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    for f in fails:
        log("FAIL", f)
    log(f"RESULT llamacpp_adapter_check models={ran} failed={len(fails)} ({time.time() - t0:.0f} s)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
