#!/usr/bin/env python3
"""Preference pairs for headline writing from the BBC headline data (data/bbc_headlines, made by
scripts/export_bbc_headlines.py): each pair is an article's prompt with its true headline as
"chosen" and the headline of another article of the same split, drawn with a seeded generator, as
"rejected" (TRL's explicit-prompt preference format: {"prompt", "chosen", "rejected"}).

  python3 scripts/make_pref_headlines.py [--src data/bbc_headlines] --out DIR
         [--skip 64] [--n-train 16] [--n-test 8] [--seed 7]

train.jsonl: pairs from training examples [skip, skip + n_train) (the first `skip` are left to the
SFT stage, so SFT and DPO never see the same article); test.jsonl: pairs from the first n_test test
examples (held out from both). Standard library only; the same arguments give the same files.
"""
import argparse
import json
import os
import random


def pairs(rows, rng):
    out = []
    for i, r in enumerate(rows):
        j = i
        while j == i or rows[j]["completion"].strip() == r["completion"].strip():
            j = rng.randrange(len(rows))
        out.append({"prompt": r["prompt"], "chosen": r["completion"], "rejected": rows[j]["completion"]})
    return out


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default="data/bbc_headlines")
    ap.add_argument("--out", required=True, help="output directory (e.g. runs/dpo_headlines/pref)")
    ap.add_argument("--skip", type=int, default=64)
    ap.add_argument("--n-train", type=int, default=16)
    ap.add_argument("--n-test", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    train, test = read(os.path.join(a.src, "train.jsonl")), read(os.path.join(a.src, "test.jsonl"))
    if a.skip + a.n_train > len(train) or a.n_test > len(test):
        raise SystemExit("make_pref_headlines: not enough examples (%d train, %d test)" % (len(train), len(test)))
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    write(os.path.join(a.out, "train.jsonl"), pairs(train[a.skip:a.skip + a.n_train], rng))
    write(os.path.join(a.out, "test.jsonl"), pairs(test[:a.n_test], rng))
    print("make_pref_headlines: %d training pairs, %d test pairs -> %s" % (a.n_train, a.n_test, a.out))


if __name__ == "__main__":
    main()
