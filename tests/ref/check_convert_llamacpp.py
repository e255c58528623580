#!/usr/bin/env python3
"""Cross-check gemma4 and `afinar convert` against llama.cpp (llama-cpp-python, the venv of
scripts/setup_llamacpp.sh). Run from the repository root after `make lib cli` (`make check-llamacpp`):

  .venv-llamacpp/bin/python tests/ref/check_convert_llamacpp.py [--models-dir DIR] [--f16-kv]

1. gemma4: llama.cpp loads tests/fixtures/tiny_gemma4.gguf (written by tests/ref/make_gemma4_ref.py with
   the gguf package under llama.cpp's names: PLE, KV sharing, attention_k_eq_v, per-layer head_dim /
   KV heads / FFN width, proportional RoPE through rope_freqs, output scales, soft-capping) and gives
   transformers' logits (tests/fixtures/gemma4_ref.bin, as tests/test_gemma4.c compares afinar) at every
   position of the fixture's 2 sequences, and the same greedy continuation.
2. convert: `afinar convert DIR -o X.gguf` (keep) for the tiny HF fixtures (hf_tiny_llama f32 shards,
   hf_tiny_gemma3 bf16, hf_tiny_qwen2, hf_tiny_qwen3, hf_tiny_gemma4) and, when present,
   DIR/SmolLM2-135M-Instruct-hf (scripts/make_hf_dirs.sh; --models-dir, default models/); llama.cpp
   loads X.gguf and its logits at every position of 16 token ids agree with afinar's on the HF
   directory (the afdump program of tests/ref/llamacpp_adapter_check.py); for SmolLM2 the token ids of a
   prompt from llama.cpp's tokenizer (the converted tokenizer.ggml.* metadata) equal afinar's from
   tokenizer.json, and --type q8_0 is checked too.
Tolerances: f32 weights and an f32 KV cache (type_k = type_v = 0; --f16-kv: llama.cpp's default f16
cache) 1e-3 absolute; 2e-2 for the Gemma models, whose GELU llama.cpp's CPU backend computes through
an f16 table (ggml-cpu/vec.h GGML_GELU_FP16: the input rounded to f16; afinar and transformers agree
to 1e-5 on the same file); --type q8_0: llama.cpp (8-bit activations in its quantized dot
products) against afinar on the same converted file, <= 0.1·max|logit| + 0.05, and the quantization
itself (afinar on the q8_0 file vs afinar on the HF directory) reported.
Prints one line per model and "RESULT check_convert_llamacpp ..."; exit 1 when a check fails.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_qwen_llamacpp import read_ref  # noqa: E402
from llamacpp_adapter_check import afinar_logits, build_dump  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")


def log(*a):
    print(*a, flush=True)


def llama(model, kv, n_ctx=64):
    from llama_cpp import Llama
    return Llama(model_path=model, n_ctx=n_ctx, n_batch=512, logits_all=True, n_threads=2, verbose=False,
                 type_k=kv, type_v=kv, seed=0)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval([int(t) for t in ids])
    return np.asarray(llm.scores[: len(ids)], dtype=np.float64)


def check_gemma4(kv, tol):
    V, seqs, prompt, gen = read_ref(os.path.join(FIX, "gemma4_ref.bin"), b"AFG4")
    llm = llama(os.path.join(FIX, "tiny_gemma4.gguf"), kv)
    assert llm.n_vocab() == V
    worst = max(float(np.abs(llama_logits(llm, ids) - ref).max()) for ids, ref in seqs)
    llm.reset()
    llm.eval([int(t) for t in prompt])
    out = []
    for _ in range(len(gen)):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(nxt)
        llm.eval([nxt])
    same = out == [int(g) for g in gen]
    log("gemma4 (tiny, gguf package): llama.cpp vs transformers max |logit diff| %.3e over %d sequences; greedy %s"
        % (worst, len(seqs), "identical" if same else "DIFFERS %s vs %s" % (out, list(gen))))
    return [] if worst <= tol and same else ["gemma4 tiny GGUF vs transformers: %.3e, greedy %s" % (worst, same)]


def afinar_convert(afinar, d, out, typ):
    r = subprocess.run([afinar, "convert", d, "-o", out, "--overwrite", "--quiet", "--type", typ],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("afinar convert %s failed: %s" % (d, r.stderr))
    return r.stderr.strip()


def check_convert(exe, afinar, d, work, kv, tol, typ="keep", prompt=None, tok_exe=None):
    name = os.path.basename(d.rstrip("/"))
    out = os.path.join(work, "%s.%s.gguf" % (name, typ))
    afinar_convert(afinar, d, out, typ)
    llm = llama(out, kv, n_ctx=128)
    V = llm.n_vocab()
    fails = []
    if prompt:  # llama.cpp's tokenizer from the converted metadata vs afinar's from tokenizer.json
        ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
        r = subprocess.run([tok_exe, d, prompt], capture_output=True, text=True)
        ours = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
        log("  %s: prompt token ids llama.cpp (converted tokenizer) vs afinar (tokenizer.json): %s (%d ids)"
            % (name, "identical" if ours == ids else "DIFFER", len(ids)))
        if ours != ids:
            fails.append("%s: token ids differ: llama.cpp %s, afinar %s" % (name, ids[:20], (ours or [])[:20]))
    else:
        ids = [(i * 37 + 11) % V for i in range(16)]
    ref = afinar_logits(exe, d, None, ids, 2, work)
    got = llama_logits(llm, ids)
    what = "afinar(HF dir)"
    if typ != "keep":  # the engines on the same quantized file; the quantization error reported apart
        a_q = afinar_logits(exe, out, None, ids, 2, work)
        log("  %s --type %s: afinar(converted GGUF) vs afinar(HF dir): max |logit diff| %.3e, argmax agreement %.3f"
            % (name, typ, float(np.abs(a_q - ref).max()), float(np.mean(a_q.argmax(1) == ref.argmax(1)))))
        ref, what = a_q, "afinar(same GGUF)"
    diff = float(np.abs(got - ref).max())
    bound = tol if tol > 0 else 0.1 * float(np.abs(ref).max()) + 0.05
    agree = float(np.mean(got.argmax(1) == ref.argmax(1)))
    log("  %s --type %s: llama.cpp(converted GGUF) vs %s: max |logit diff| %.3e (bound %.3e), argmax "
        "agreement %.3f over %d positions" % (name, typ, what, diff, bound, agree, len(ids)))
    if diff > bound:
        fails.append("%s --type %s: %.3e > %.3e" % (name, typ, diff, bound))
    del llm
    os.remove(out)
    return fails


TOKENIZE_C = r"""
#include "afinar.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* usage: aftok DIR TEXT -> the token ids (BOS as the model adds it) on stdout */
int main(int argc, char **argv) {
    af_model *m = NULL;
    if (argc != 3 || af_model_load(NULL, argv[1], &m) != AF_OK || !af_model_tokenizer(m)) return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (af_tokenize(af_model_tokenizer(m), argv[2], strlen(argv[2]), 1, 0, &ids, &n) != AF_OK) return 1;
    for (size_t i = 0; i < n; i++) printf("%d ", ids[i]);
    printf("\n");
    free(ids);
    af_model_free(m);
    return 0;
}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--models-dir", default=os.environ.get("AF_MODEL_DIR", "models"))
    ap.add_argument("--f16-kv", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    kv = 1 if args.f16_kv else 0
    tol = 1e-2 if kv else 1e-3
    import llama_cpp
    log("llama-cpp-python %s" % llama_cpp.__version__)
    work = tempfile.mkdtemp(prefix="afinar_convert_check_")
    exe = build_dump(work, args.afinar)
    tsrc, texe = os.path.join(work, "aftok.c"), os.path.join(work, "aftok")
    open(tsrc, "w").write(TOKENIZE_C)
    bdir = os.path.dirname(os.path.abspath(args.afinar))
    subprocess.run(["cc", "-std=c11", "-O1", "-I", "include", tsrc, os.path.join(bdir, "libafinar.a"), "-o", texe,
                    *subprocess.run(["make", "-s", "print-ldlibs"], capture_output=True, text=True,
                                   check=True).stdout.split()], check=True)
    gelu_tol = max(tol, 2e-2)  # ggml's f16 GELU table (docstring)
    fails = check_gemma4(kv, gelu_tol)
    for name, t in (("hf_tiny_llama", tol), ("hf_tiny_gemma3", gelu_tol), ("hf_tiny_qwen2", tol),
                    ("hf_tiny_qwen3", tol), ("hf_tiny_gemma4", gelu_tol)):
        fails += check_convert(exe, args.afinar, os.path.join(FIX, name), work, kv, t)
    smol = os.path.join(args.models_dir, "SmolLM2-135M-Instruct-hf")
    if os.path.isdir(smol):
        p = "The old lighthouse keeper climbed the stairs every evening to light the lamp. One night, a storm"
        fails += check_convert(exe, args.afinar, smol, work, kv, 5e-3, "keep", p, texe)
        fails += check_convert(exe, args.afinar, smol, work, kv, 0, "q8_0")
    else:
        log("SKIP %s: missing (scripts/make_hf_dirs.sh)" % smol)
    for f in fails:
        log("FAIL", f)
    log("RESULT check_convert_llamacpp failed=%d (%.0f s)" % (len(fails), time.time() - t0))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
