#!/usr/bin/env python3
"""Cross-check: llama.cpp (built by llama-cpp-python, .venv-bench) loads the tiny qwen2 / qwen3 GGUFs of
tests/ref/make_qwen_ref.py and gives the logits transformers gave (tests/fixtures/qwen_*_ref.bin,
which tests/test_qwen.c also compares afinar against), for every position and vocabulary entry of
the fixture's token sequences, and the same greedy continuation. Not part of `make test`; run by
`make check-llamacpp` (CI's llama.cpp stage); prints the worst absolute logit difference per model. The KV cache is f32
(type_k = type_v = 0) unless --f16-kv (llama.cpp's default f16 cache; ~1e-3..4e-3 differences here).

Run:  .venv-llamacpp/bin/python tests/ref/check_qwen_llamacpp.py [--f16-kv]   (or .venv-bench)
"""
import os
import struct
import sys

import numpy as np
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
KV = 1 if "--f16-kv" in sys.argv[1:] else 0  # GGML_TYPE_F16 / GGML_TYPE_F32


def read_ref(path, magic=b"AFQW"):
    """Vocabulary, [(ids, logits)], greedy prompt and continuation of a qwen / gemma4 reference file."""
    b = open(path, "rb").read()
    assert b[:4] == magic
    ver, V, L, H = struct.unpack_from("<4I", b, 4)
    off = 20
    (n_seq,) = struct.unpack_from("<I", b, off)
    off += 4
    seqs = []
    for _ in range(n_seq):
        (n,) = struct.unpack_from("<I", b, off)
        off += 4
        ids = np.frombuffer(b, "<i4", n, off)
        off += 4 * n
        lg = np.frombuffer(b, "<f4", n * V, off).reshape(n, V)
        off += 4 * n * V
        seqs.append((ids, lg))
    (npr,) = struct.unpack_from("<I", b, off)
    off += 4
    prompt = np.frombuffer(b, "<i4", npr, off)
    off += 4 * npr
    (ng,) = struct.unpack_from("<I", b, off)
    off += 4
    gen = np.frombuffer(b, "<i4", ng, off)
    return V, seqs, prompt, gen


def main():
    worst_all = 0.0
    for arch in ("qwen2", "qwen3"):
        V, seqs, prompt, gen = read_ref(os.path.join(FIX, "qwen_%s_ref.bin" % arch))
        llm = Llama(model_path=os.path.join(FIX, "tiny_%s.gguf" % arch), n_ctx=64, n_batch=64, logits_all=True,
                    n_threads=2, verbose=False, type_k=KV, type_v=KV)
        assert llm.n_vocab() == V
        worst = 0.0
        for ids, ref in seqs:
            llm.reset()
            llm.eval([int(t) for t in ids])
            got = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
            worst = max(worst, float(np.abs(got - ref).max()))
        llm.reset()
        out = []
        llm.eval([int(t) for t in prompt])
        for _ in range(len(gen)):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            out.append(nxt)
            llm.eval([nxt])
        same = out == [int(g) for g in gen]
        print("%s: llama.cpp %s vs transformers: max |logit diff| %.3e over %d sequences; greedy %s"
              % (arch, getattr(sys.modules["llama_cpp"], "__version__", "?"), worst, len(seqs),
                 "identical" if same else "DIFFERS %s vs %s" % (out, list(gen))))
        worst_all = max(worst_all, worst)
        if not same:
            worst_all = float("inf")
    sys.exit(0 if worst_all < (1e-2 if KV else 1e-3) else 1)


if __name__ == "__main__":
    main()
