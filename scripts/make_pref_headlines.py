#!/usr/bin/env python3
"""Preference pairs for headline writing from the BBC headline data (data/bbc_headlines, made by
scripts/export_bbc_headlines.py): each pair is an article's prompt with its true headline as
"chosen" and the headline of another article of the same split, drawn with a seeded generator, as
"rejected" (TRL's explicit-prompt preference format: {"prompt", "chosen", "rejected"}); or, with
--own-train/--own-test, the model's own greedy headline for the article as "rejected" (harder pairs:
the reference model produced that headline, so it already prefers it).

  python3 scripts/make_pref_headlines.py [--src data/bbc_headlines] --out DIR
         [--skip 64] [--n-train 16] [--n-test 8] [--seed 7]
         [--own-train GEN.json --own-test GEN.json]

--own-train / --own-test: the JSON written by `afinar eval --generate N --first-line --json FILE` on
the same articles (training examples [skip, skip + n_train), the first n_test test examples, in
that order): example k's "prediction" (its first line) becomes pair k's rejected side, with the
leading space the headline completions have. A pair whose greedy headline is empty or equals the
true headline (ignoring surrounding white space) carries no preference and is left out (counted).

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


def own_pairs(rows, gen_path):
    """Pairs with the model's greedy headline (gen_path's examples, one per row, in order) rejected;
    returns (pairs, number left out)."""
    with open(gen_path, encoding="utf-8") as f:
        ex = json.load(f)["examples"]
    if len(ex) != len(rows):
        raise SystemExit("make_pref_headlines: %s: %d generated examples, expected %d"
                         % (gen_path, len(ex), len(rows)))
    out, left = [], 0
    for k, (r, e) in enumerate(zip(rows, ex)):
        if e.get("line") != k + 1:
            raise SystemExit("make_pref_headlines: %s: example %d is line %r, expected line %d"
                             % (gen_path, k, e.get("line"), k + 1))
        pred = e["prediction"].strip()
        if not pred or pred == r["completion"].strip():
            left += 1
            continue
        out.append({"prompt": r["prompt"], "chosen": r["completion"], "rejected": " " + pred})
    return out, left


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
    ap.add_argument("--own-train", help="afinar eval --generate JSON of the n_train DPO articles")
    ap.add_argument("--own-test", help="afinar eval --generate JSON of the n_test test articles")
    a = ap.parse_args()
    if (a.own_train is None) != (a.own_test is None):
        raise SystemExit("make_pref_headlines: --own-train and --own-test go together")
    train, test = read(os.path.join(a.src, "train.jsonl")), read(os.path.join(a.src, "test.jsonl"))
    if a.skip + a.n_train > len(train) or a.n_test > len(test):
        raise SystemExit("make_pref_headlines: not enough examples (%d train, %d test)" % (len(train), len(test)))
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    if a.own_train:
        tr, ltr = own_pairs(train[a.skip:a.skip + a.n_train], a.own_train)
        te, lte = own_pairs(test[:a.n_test], a.own_test)
        how = "the model's own greedy headline rejected; left out (greedy == true or empty): %d train, %d test" % (ltr, lte)
    else:
        tr, te = pairs(train[a.skip:a.skip + a.n_train], rng), pairs(test[:a.n_test], rng)
        how = "another article's headline rejected"
    write(os.path.join(a.out, "train.jsonl"), tr)
    write(os.path.join(a.out, "test.jsonl"), te)
    print("make_pref_headlines: %d training pairs, %d test pairs (%s) -> %s" % (len(tr), len(te), how, a.out))


if __name__ == "__main__":
    main()
