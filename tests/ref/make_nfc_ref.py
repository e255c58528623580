#!/usr/bin/env python3
"""Tokenizer NFC fixture: the qwen2-style byte-level BPE of tests/ref/make_qwen_ref.py (normalizer NFC,
Qwen2's split regex, ByteLevel; the same training corpus, so the same vocabulary as
tests/fixtures/tiny_qwen2.gguf) saved as tests/fixtures/tok_nfc/tokenizer.json, and the ids HF
`tokenizers` gives for strings that are NOT in NFC (combining accents, Hangul jamo, the Angstrom
sign) plus controls (a compatibility ligature NFC keeps, NFC text) in tests/fixtures/tok_nfc/ids.txt:
one line per string, "<utf-8 hex>\\t<id> <id> ...". tests/test_tokenizer.c checks afinar's ids
through tokenizer.json and through tiny_qwen2.gguf (pre "qwen2": NFC as well).

Run:  .venv-ref/bin/python tests/ref/make_nfc_ref.py
"""
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qwen_ref import FIX, build_tokenizer  # noqa: E402

STRINGS = [
    "Cafe\u0301 au lait",                 # e + U+0301 -> U+00E9
    "A\u030Angstro\u0308m and n\u0303",   # A + ring, o + diaeresis, n + tilde
    "\u1100\u1161\u11A8 Hangul jamo",     # conjoining jamo -> U+AC01
    "\u212B is the Angstrom sign",        # singleton: U+212B -> U+00C5
    "e\u0301\u0327 two marks",            # reordering of combining marks, then composition
    "\ufb01 ligature stays",              # compatibility only: NFC keeps U+FB01 (not NFKC)
    "already NFC: café Ångström",
]


def main():
    tok = build_tokenizer()
    d = os.path.join(FIX, "tok_nfc")
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "ids.txt"), "w") as f:
        for s in STRINGS:
            ids = tok.encode(s).ids
            assert ids == tok.encode(unicodedata.normalize("NFC", s)).ids
            f.write("%s\t%s\n" % (s.encode("utf-8").hex(), " ".join(map(str, ids))))
            print(repr(s), "NFC" if unicodedata.normalize("NFC", s) == s else "not NFC", ids)


if __name__ == "__main__":
    main()
