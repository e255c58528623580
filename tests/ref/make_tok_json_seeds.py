#!/usr/bin/env python3
"""Small tokenizer.json seeds for the tok_json fuzz target (tests/fuzz/corpus/tok_json/), cut from
the real files of the HF directories made by tests/ref/make_hf_dirs.py: the first N vocabulary
entries (plus the added tokens), the merges among them, and the file's normalizer /
pre_tokenizer / post_processor exactly as transformers wrote them.

Run: .venv-ref/bin/python tests/ref/make_tok_json_seeds.py
"""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus", "tok_json")
SRC = [("smollm2", "models/SmolLM2-135M-Instruct-hf/tokenizer.json", 400),
       ("gemma3", "models/gemma-3-270m-hf-tok/tokenizer.json", 300)]


def merge_parts(m):
    return m.split(" ", 1) if isinstance(m, str) else m


def cut(src, n, pair_form):
    j = json.load(open(os.path.join(ROOT, src), encoding="utf-8"))
    added = {t["id"]: t for t in j.get("added_tokens", []) if t["id"] < 3 or t["id"] < n}
    # the first n ids, or (large vocabularies whose first ids are control tokens) the first 3, the
    # byte tokens and the one-character tokens
    big = len(j["model"]["vocab"]) > 100000
    keep = {t: i for t, i in j["model"]["vocab"].items()
            if (i < n if not big else (i < 3 or t.startswith("<0x") or (len(t) == 1 and ord(t) < 128) or t in ("▁", "▁▁")))}
    ids = sorted(set(keep.values()) | {i for i in added if i < n})
    remap = {old: new for new, old in enumerate(ids)}
    vocab = {t: remap[i] for t, i in keep.items() if i in remap}
    merges = []
    for m in j["model"]["merges"]:
        a, b = merge_parts(m)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append([a, b] if pair_form else a + " " + b)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges
    j["added_tokens"] = [dict(t, id=remap[i]) for i, t in added.items() if i in remap]
    return j


os.makedirs(OUT, exist_ok=True)
for name, src, n in SRC:
    if not os.path.exists(os.path.join(ROOT, src)):
        print("skip", src)
        continue
    for pair_form in (False, True):
        j = cut(src, n, pair_form)
        path = os.path.join(OUT, f"{name}-{'pairs' if pair_form else 'strings'}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        print(path, os.path.getsize(path))
