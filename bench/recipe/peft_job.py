#!/usr/bin/env python3
"""The PyTorch + transformers + PEFT cell of the recipe evaluation (bench/recipe/README.md):
train a LoRA classifier on data/SET/train.jsonl, evaluate it on data/SET/test.jsonl, and write
OUT/cell.json in the format of bench/recipe/run_one.sh (summarize.py reads both). Run by
bench/recipe/run_peft.sh with the reference venv's python, from the repository root.

  peft_job.py --hf DIR --set SET --out DIR [--epochs 1] [--batch 16] [--lr 2e-4] [--max-seq-len 128]
              [--targets qv|all-linear] [--r 16] [--alpha 32] [--dropout 0] [--warmup 0.06]
              [--class-weights uniform|sqrt-inverse] [--threads 2] [--seed 42]

The model is bench/train_peft.py's (build_classifier: float32 checkpoint made by its `prepare`
from the same GGUF afinar trains, so both start from the same weights; PEFT LoRA on every layer;
mean pooling written out by mean_pool_logits, as afinar's default --pooling mean). Data: the
JSONL {"input", "label": id|name} of the set, tokenized by the checkpoint's tokenizer (the
GGUF's, identical ids to afinar's on BBC News: train_peft.py check-tokens) without special
tokens, cut to the first --max-seq-len tokens (an empty text: one <|endoftext|> token, as afinar).
Training: a seeded shuffle every epoch, micro-batches of --batch samples right-padded to the
batch's longest with an attention mask (one micro-batch per optimizer step: the effective batch
afinar reaches with 8 x grad-accum 2), cross-entropy (optionally weighted w_c ∝ 1/sqrt(n_c),
mean 1, as afinar's --class-weights sqrt-inverse), torch.optim.AdamW(lr, weight decay 0.01),
gradient-norm clipping at 1.0, linear warm-up over ceil(warmup x steps) steps then cosine decay
to 0 (transformers.get_cosine_schedule_with_warmup; afinar's --schedule cosine). No validation
evaluation during training: the last step's adapter is evaluated on the test data (accuracy and
macro-F1 over the classes present in gold or predictions, as afinar's metrics.c and sklearn).
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from train_peft import build_classifier, mean_pool_logits  # noqa: E402  (bench/train_peft.py)


def log(*a):
    print("peft_job:", *a, file=sys.stderr, flush=True)


def read_set(path, names):
    """[(text, class id)] of a JSONL file; labels given as ids or as names of labels.txt."""
    idx = {n: i for i, n in enumerate(names)}
    rows = []
    with open(path, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            o = json.loads(line)
            y = o["label"]
            y = idx[y] if isinstance(y, str) else int(y)
            if not 0 <= y < len(names):
                sys.exit(f"peft_job: {path}:{ln}: label {o['label']!r} out of range")
            rows.append((o["input"], y))
    return rows


def encode(tok, rows, max_len):
    fill = tok.eos_token_id if tok.eos_token_id is not None else 0
    out = []
    for text, _ in rows:
        ids = tok(text, add_special_tokens=False)["input_ids"][:max_len]
        out.append(ids if ids else [fill])
    return out


def pad(torch, seqs, pad_id):
    L = max(len(s) for s in seqs)
    x = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    m = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        m[i, :len(s)] = 1
    return x, m


def metrics(gold, pred, C):
    tp = [0] * C
    sup = [0] * C
    prd = [0] * C
    for g, p in zip(gold, pred):
        sup[g] += 1
        prd[p] += 1
        tp[g] += g == p
    f1s = []
    for c in range(C):
        if sup[c] == 0 and prd[c] == 0:
            continue
        pr = tp[c] / prd[c] if prd[c] else 0.0
        rc = tp[c] / sup[c] if sup[c] else 0.0
        f1s.append(2 * pr * rc / (pr + rc) if pr + rc > 0 else 0.0)
    return sum(tp) / len(gold), sum(f1s) / len(f1s) if f1s else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", required=True)
    ap.add_argument("--set", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default="data")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--targets", choices=["qv", "all-linear"], default="qv")
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--warmup", type=float, default=0.06)
    ap.add_argument("--class-weights", choices=["uniform", "sqrt-inverse"], default="uniform")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import peft
    import transformers
    from transformers import AutoTokenizer, get_cosine_schedule_with_warmup

    d = os.path.join(a.data, a.set)
    with open(os.path.join(d, "labels.txt"), encoding="utf-8") as f:
        names = [ln.strip() for ln in f if ln.strip()]
    C = len(names)
    train, test = read_set(os.path.join(d, "train.jsonl"), names), read_set(os.path.join(d, "test.jsonl"), names)
    tok = AutoTokenizer.from_pretrained(a.hf)
    Xtr, Ytr = encode(tok, train, a.max_seq_len), [y for _, y in train]
    Xte, Yte = encode(tok, test, a.max_seq_len), [y for _, y in test]
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 2

    t_load = time.time()
    pm, inner = build_classifier(a.hf, C, a.targets, a.r, a.alpha, a.dropout, a.seed)
    load_s = time.time() - t_load
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    n, B = len(Xtr), a.batch
    spe = math.ceil(n / B)
    total = spe * a.epochs
    warm = math.ceil(a.warmup * total - 1e-9)
    sched = get_cosine_schedule_with_warmup(opt, warm, total)
    weight = None
    if a.class_weights == "sqrt-inverse":
        cnt = [max(1, Ytr.count(c)) for c in range(C)]
        w = [1.0 / math.sqrt(k) for k in cnt]
        s = sum(w) / C
        weight = torch.tensor([v / s for v in w], dtype=torch.float32)
    g = torch.Generator().manual_seed(a.seed)
    log(f"{a.set}: {n} train / {len(Xte)} test samples, {C} classes; {total} steps ({spe} per epoch, batch {B}), "
        f"warm-up {warm}, lr {a.lr}, LoRA {a.targets} r {a.r} alpha {a.alpha}, max_seq_len {a.max_seq_len}, "
        f"{sum(p.numel() for p in params)} trainable parameters")
    losses = []
    t0 = time.time()
    step = 0
    pm.train()
    for ep in range(a.epochs):
        order = torch.randperm(n, generator=g).tolist()
        for i in range(spe):
            rows = order[i * B:(i + 1) * B]
            x, m = pad(torch, [Xtr[r] for r in rows], pad_id)
            y = torch.tensor([Ytr[r] for r in rows], dtype=torch.long)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(mean_pool_logits(inner, x, m).float(), y, weight=weight)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            losses.append(float(loss.item()))
            if step % 5 == 0 or step == total:
                el = time.time() - t0
                log(f"step {step}/{total} epoch {ep + 1} loss {sum(losses[-5:]) / len(losses[-5:]):.4f} "
                    f"{el / step:.2f} s/step, ETA {el / step * (total - step) / 60:.1f} min")
    train_s = time.time() - t0
    t1 = time.time()
    pm.eval()
    pred = [0] * len(Xte)
    order = sorted(range(len(Xte)), key=lambda i: len(Xte[i]))  # less padding; rows are independent
    with torch.no_grad():
        for i in range(0, len(order), B):
            rows = order[i:i + B]
            x, m = pad(torch, [Xte[r] for r in rows], pad_id)
            for r, p in zip(rows, mean_pool_logits(inner, x, m).argmax(-1).tolist()):
                pred[r] = p
    eval_s = time.time() - t1
    acc, mf1 = metrics(Yte, pred, C)
    res = {"train_s": round(train_s, 1), "eval_s": round(eval_s, 1), "load_s": round(load_s, 1),
           "test_accuracy": acc, "test_macro_f1": mf1, "total_steps": total, "loss_first": losses[0],
           "loss_last5": sum(losses[-5:]) / len(losses[-5:]),
           "config": {"epochs": a.epochs, "batch": B, "lr": a.lr, "max-seq-len": a.max_seq_len, "targets": a.targets,
                      "lora-layers": "all", "r": a.r, "alpha": a.alpha, "lora-dropout": a.dropout,
                      "warmup": warm, "schedule": "cosine", "weight-decay": 0.01, "max-grad-norm": 1.0,
                      "class-weights": a.class_weights, "pooling": "mean", "precision": "f32",
                      "threads": torch.get_num_threads(), "seed": a.seed},
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "peft": peft.__version__}}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "peft_result.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
