#!/usr/bin/env python3
"""Derive the BBC News headline-generation data (SFT, prompt/completion) from the classification
export in data/bbc (scripts/export_bbc.py), so both tasks use the same articles and the same
train/val/test split.

Each article's "input" is "<headline>\\n\\n<body>" (export_bbc.py keeps the file's first line, the
title, then the body). Here:
  headline   = the first line, stripped of surrounding whitespace
  body       = the rest, its first WORDS (default 100) whitespace-separated words joined by single
               spaces (paragraph breaks become spaces; a truncated body is not marked) -- short
               prompts keep training fast: ~150 tokens per example with SmolLM2's tokenizer
  prompt     = "Write the headline of this BBC News article.\\n\\n" + body + "\\n\\nHeadline:"
  completion = " " + headline   (the space belongs to the completion: the model continues after
               "Headline:" the way the text reads, and exact match trims it)
With --task lede (the second SFT set, bench/sft_time_to_quality.sh; output data/bbc_lede):
  prompt     = "Write the opening paragraph of a BBC News article with this headline.\n\nHeadline: "
               + headline + "\n\nOpening paragraph:"
  completion = " " + the body's first non-empty line (the article's opening paragraph, one or two
               sentences: 21.6 words on average in the training split)
Output: DIR/{train,val,test}.jsonl with {"prompt": str, "completion": str} (TRL's
prompt-completion form), lines in the classification files' order.

Usage: python scripts/export_bbc_headlines.py [--src data/bbc] [--task headline|lede] [--out DIR]
                                              [--words 100]
"""
import argparse
import hashlib
import json
import os
import pathlib
import sys

INSTRUCTION = "Write the headline of this BBC News article."
INSTRUCTION_LEDE = "Write the opening paragraph of a BBC News article with this headline."


def convert(text, words, task="headline"):
    head, sep, body = text.partition("\n")
    head = head.strip()
    if not head or not sep or not body.strip():
        return None
    if task == "lede":
        lede = next(ln.strip() for ln in body.splitlines() if ln.strip())
        return {"prompt": f"{INSTRUCTION_LEDE}\n\nHeadline: {head}\n\nOpening paragraph:", "completion": " " + lede}
    w = body.split()
    prompt = f"{INSTRUCTION}\n\n{' '.join(w[:words])}\n\nHeadline:"
    return {"prompt": prompt, "completion": " " + head}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default="data/bbc")
    ap.add_argument("--task", choices=["headline", "lede"], default="headline")
    ap.add_argument("--out", default=None, help="default: data/bbc_headlines, data/bbc_lede for --task lede")
    ap.add_argument("--words", type=int, default=100)
    a = ap.parse_args()
    src = pathlib.Path(a.src)
    out = pathlib.Path(a.out or ("data/bbc_lede" if a.task == "lede" else "data/bbc_headlines"))
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test"):
        f = src / f"{split}.jsonl"
        if not f.is_file():
            sys.exit(f"export_bbc_headlines: {f} missing (run scripts/fetch_data.sh first)")
        rows = []
        for ln, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            r = convert(json.loads(line)["input"], a.words, a.task)
            if r is None:
                sys.exit(f"export_bbc_headlines: {f}:{ln}: no headline line followed by a body")
            rows.append(r)
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        tmp = out / f"{split}.jsonl.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / f"{split}.jsonl")
        hw = sum(len(r["completion"].split()) for r in rows) / len(rows)
        h = hashlib.sha256(text.encode()).hexdigest()[:16]
        print(f"export_bbc_headlines: {split}: {len(rows)} examples, completion {hw:.1f} words on average, "
              f"sha256 {h} -> {out}/{split}.jsonl")


if __name__ == "__main__":
    main()
