#!/usr/bin/env python3
"""Reference scores for afinar's text-generation metrics (src/infer/text_metrics.c).

Run with the reference venv (rouge-score is in tests/ref/requirements.txt):
    .venv-ref/bin/python tests/ref/make_rouge_ref.py [OUT]     (default tests/fixtures/rouge_pairs.jsonl)

Writes one JSON line per (prediction, reference) pair:
    {"pred": str, "ref": str, "p": float, "r": float, "f": float, "em": 0|1}
where p/r/f are rouge_score 0.1.2's RougeScorer(["rougeL"], use_stemmer=False).score(ref, pred)
["rougeL"] (its default tokenizer: lowercase, non-[a-z0-9] to spaces, no stemming) and em is
exact match after stripping ASCII whitespace at both ends, case kept (afinar's stated rule,
computed here independently). test_text_metrics.c reads the file and compares every value
(tolerance 1e-12: both sides compute LCS/len and 2PR/(P+R) in double).

The pairs are fixed text (no randomness): headline-like strings, case and punctuation variants,
repeated tokens, empty and whitespace-only strings, digits, and non-ASCII text (accents, CJK,
emoji, Cyrillic, the two characters Python lowercases to ASCII: U+0130 and U+212A).
"""
import json
import sys

from rouge_score import rouge_scorer

WS = " \t\n\r\v\f"

PAIRS = [
    ("Ad sales boost Time Warner profit", "Ad sales boost Time Warner profit"),
    ("ad sales boost time warner profit", "Ad sales boost Time Warner profit"),
    ("  Ad sales boost Time Warner profit\n", "Ad sales boost Time Warner profit"),
    ("Time Warner profit boosted by ad sales", "Ad sales boost Time Warner profit"),
    ("Dollar gains on Greenspan speech", "Dollar gains on Greenspan speech"),
    ("Greenspan speech lifts the dollar", "Dollar gains on Greenspan speech"),
    ("Yukos unit buyer faces loan claim", "Yukos unit buyer faces loan claim"),
    ("Loan claim hits Yukos", "Yukos unit buyer faces loan claim"),
    ("", "Yukos unit buyer faces loan claim"),
    ("Yukos unit buyer faces loan claim", ""),
    ("", ""),
    ("   ", "   "),
    ("\t\n", ""),
    ("!!! ???", "..."),
    ("!!! ???", "Ad sales"),
    ("the the the the", "the cat sat on the mat"),
    ("the cat sat on the mat", "the the the the"),
    ("a b c d e f g", "g f e d c b a"),
    ("a b a b a b", "b a b a b a"),
    ("U.S. economy grows 3.5% in 2004", "US economy grew 3.5 per cent in 2004"),
    ("Rock'n'roll's biggest night", "Rock 'n' roll's biggest night"),
    ("e-mail spam rises", "email spam rises"),
    ("Café owner wins £1m lottery", "Cafe owner wins 1m lottery"),
    ("Café owner wins £1m lottery", "Café owner wins £1m lottery"),
    ("naïve résumé for Zürich", "naive resume for Zurich"),
    ("Москва принимает саммит", "Moscow hosts summit"),
    ("Москва принимает саммит", "Москва принимает саммит"),
    ("東京 stocks rise 2%", "Tokyo stocks rise 2%"),
    ("東京株式市場", "東京株式市場"),
    ("Apple 🍎 unveils iPod 🎵 mini", "Apple unveils iPod mini"),
    ("🎉🎉🎉", "🎉🎉🎉"),
    ("İstanbul hosts Champions League final", "Istanbul hosts Champions League final"),
    ("\u212Aelvin scale bet", "Kelvin scale bet"),
    ("İİ\u212A\u212A", "i i kk"),
    ("Straße", "strasse"),
    ("ﬁnal ﬁgures", "final figures"),
    ("Ⅻ Olympics", "XII Olympics"),
    ("١٢٣ numbers", "123 numbers"),
    ("Half² of ½", "Half 2 of 1 2"),
    ("Blair & Brown split", "Blair and Brown split"),
    ("Blair and Brown split", "Blair & Brown split"),
    ("FA Cup: Arsenal 2-1 Chelsea", "Arsenal beat Chelsea 2-1 in FA Cup"),
    ("Arsenal beat Chelsea 2-1 in FA Cup", "FA Cup: Arsenal 2-1 Chelsea"),
    ("Mobile phones top 1.5bn users worldwide", "Mobile phones top 1.5bn users"),
    ("Mobile", "Mobile phones top 1.5bn users"),
    ("Mobile phones top 1.5bn users", "Mobile"),
    ("x" * 300, "x" * 300),
    (" ".join(["word"] * 200), " ".join(["word"] * 150) + " end"),
    ("Ad sales boost Time Warner profit. Quarterly profits at US media giant TimeWarner jumped 76%",
     "Ad sales boost Time Warner profit"),
    ("Headline\nSecond line of text", "Headline"),
    ("Case Matters", "case matters"),
    ("tab\tseparated\twords", "tab separated words"),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/rouge_pairs.jsonl"
    sc = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    with open(out, "w", encoding="utf-8") as f:
        for pred, ref in PAIRS:
            s = sc.score(ref, pred)["rougeL"]  # rouge_score's order: (target, prediction)
            em = int(pred.strip(WS) == ref.strip(WS))
            f.write(json.dumps({"pred": pred, "ref": ref, "p": s.precision, "r": s.recall,
                                "f": s.fmeasure, "em": em}, ensure_ascii=False) + "\n")
    print(f"make_rouge_ref: {len(PAIRS)} pairs -> {out}")


if __name__ == "__main__":
    main()
