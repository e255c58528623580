#!/usr/bin/env python3
"""Reference preference losses (DPO sigmoid, IPO, ORPO), implicit rewards and LoRA gradients with PyTorch +
transformers + PEFT + TRL on the tiny random llama of tests/fixtures/hf_tiny_llama, for tests/test_pref.c.

Setup (mirrored by the C test):
  - PEFT LoraConfig(r=8, lora_alpha=16, lora_dropout=0, all 7 linear projections), A and B from the
    closed-form formulas of make_peft_lm_ref.py (B non-zero, so the policy differs from the reference).
  - 3 pairs of random token ids (seed 11): prompt lengths 5, 8, 3; chosen / rejected completion lengths
    (4, 6), (3, 5), (7, 2). Each sequence = prompt + completion; its completion tokens are the targets.
  - Policy log-probabilities: the PEFT model; reference: the same model under `disable_adapter()` (what
    TRL's DPOTrainer does for a new PEFT adapter without a ref_model).
  - Losses: TRL 1.16's expressions — DPOTrainer._compute_loss "sigmoid" (-logsigmoid(beta * delta)) and
    "ipo" ((avg delta - 1/(2 beta))^2, delta of log-ratios averaged over the completion tokens), rewards
    beta * log-ratios (summed); ORPOTrainer.odds_ratio_loss called as is (average log-probabilities),
    with its NLL term: cross-entropy of the chosen sequences over every position (prompt included).
  - Gradients: loss.backward(); the L2 norm of every LoRA A and B gradient.

Run:  .venv-ref/bin/python tests/ref/make_pref_ref.py     (needs torch, transformers, peft, trl)
Output: tests/fixtures/pref_ref.bin (little-endian):
  b"AFPR", u32 version=1, u32 n_pairs, u32 r, u32 n_layers, u32 n_tok, u32 vocab
  i32 seq_start[2n+1] (sequence 2i chosen, 2i+1 rejected), i32 tokens[n_tok], i32 targets[n_tok]
  f64 ref_c[n], ref_r[n], pol_c[n], pol_r[n]          (log-probabilities summed over the completion)
  u32 n_types, per type: u32 type (0 sigmoid, 1 ipo, 2 orpo), f64 beta, f64 label_smoothing, f64 loss,
      f64 rewards/chosen, f64 rewards/rejected, f64 rewards/margins, f64 rewards/accuracies,
      f32 grad_norm[n_layers, 7, 2] (|dA|, |dB|; projections q,k,v,o,gate,up,down)
"""
import math
import os
import struct
import types

import numpy as np
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests", "fixtures", "hf_tiny_llama")
OUT = os.path.join(ROOT, "tests", "fixtures", "pref_ref.bin")
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA = 8, 16.0
PROMPTS = [5, 8, 3]
COMPLETIONS = [(4, 6), (3, 5), (7, 2)]
TYPES = [(0, 0.1, 0.0), (1, 0.5, 0.0), (2, 0.1, 0.0)]


def lora_a(l, p, rows, cols):
    j = np.arange(rows, dtype=np.float64)[:, None]
    i = np.arange(cols, dtype=np.float64)[None, :]
    return (0.02 * np.sin(0.37 * l + 1.1 * p + 0.71 * j + 0.0173 * i + 0.0029 * i * j + 0.3)).astype(np.float32)


def lora_b(l, p, rows, cols):
    o = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(cols, dtype=np.float64)[None, :]
    return (0.01 * np.cos(0.29 * l + 0.83 * p + 1.3 * j + 0.017 * o + 0.1)).astype(np.float32)


def main():
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32)
    cfg = base.config
    model = get_peft_model(base, LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=PROJ))
    layers = cfg.num_hidden_layers
    with torch.no_grad():
        for l in range(layers):
            for p, name in enumerate(PROJ):
                mod = dict(model.named_modules())[
                    "base_model.model.model.layers.%d.%s.%s" % (l, "self_attn" if p < 4 else "mlp", name)]
                A, B = mod.lora_A["default"].weight, mod.lora_B["default"].weight
                A.copy_(torch.from_numpy(lora_a(l, p, A.shape[0], A.shape[1])))
                B.copy_(torch.from_numpy(lora_b(l, p, B.shape[0], B.shape[1])))
    model.eval()  # no dropout (TRL disables it)
    rng = np.random.default_rng(11)
    seqs, targets = [], []
    for np_, (lc, lr) in zip(PROMPTS, COMPLETIONS):
        prompt = rng.integers(3, cfg.vocab_size, np_).tolist()
        for lcomp in (lc, lr):
            toks = prompt + rng.integers(3, cfg.vocab_size, lcomp).tolist()
            tg = [-1] * len(toks)
            for t in range(np_ - 1, len(toks) - 1):
                tg[t] = toks[t + 1]
            seqs.append(toks)
            targets.append(tg)

    def logps(seq, tg, full=False):
        ids = torch.tensor([seq])
        logits = model(input_ids=ids).logits[0].float()
        lp = F.log_softmax(logits, dim=-1)
        if full:
            idx = list(range(len(seq) - 1))
            tgt = seq[1:]
        else:
            idx = [t for t in range(len(seq)) if tg[t] >= 0]
            tgt = [tg[t] for t in idx]
        return lp[idx, tgt].sum(), len(idx)

    n = len(PROMPTS)
    with torch.no_grad(), model.disable_adapter():
        ref = [logps(s, t)[0].item() for s, t in zip(seqs, targets)]
    with torch.no_grad():
        pol = [logps(s, t)[0].item() for s, t in zip(seqs, targets)]
    from trl.experimental.orpo.orpo_trainer import ORPOTrainer

    results = []
    for typ, beta, ls in TYPES:
        model.zero_grad()
        lps = [logps(s, t) for s, t in zip(seqs, targets)]
        c = torch.stack([lps[2 * i][0] for i in range(n)])
        r = torch.stack([lps[2 * i + 1][0] for i in range(n)])
        nc = torch.tensor([float(lps[2 * i][1]) for i in range(n)])
        nr = torch.tensor([float(lps[2 * i + 1][1]) for i in range(n)])
        rc = torch.tensor([ref[2 * i] for i in range(n)], dtype=torch.float32)
        rr = torch.tensor([ref[2 * i + 1] for i in range(n)], dtype=torch.float32)
        if typ in (0, 1):
            chosen_logratios, rejected_logratios = c - rc, r - rr  # TRL: reverse_kl scores
            delta = chosen_logratios - rejected_logratios
            if typ == 0:
                per = -F.logsigmoid(beta * delta)
            else:
                ipo_delta = chosen_logratios / nc.clamp(min=1.0) - rejected_logratios / nr.clamp(min=1.0)
                per = (ipo_delta - 1 / (2 * beta)) ** 2
            loss = per.mean()
            cr, rjr = beta * chosen_logratios.detach(), beta * rejected_logratios.detach()
        else:
            ns = types.SimpleNamespace(beta=beta, accelerator=types.SimpleNamespace(device="cpu"))
            losses, cr, rjr, _, _ = ORPOTrainer.odds_ratio_loss(ns, c / nc, r / nr)
            full = [logps(seqs[2 * i], None, full=True) for i in range(n)]
            nll = -torch.stack([f[0] for f in full]).sum() / sum(f[1] for f in full)
            loss = nll - losses.mean()
        loss.backward()
        norms = []
        for l in range(layers):
            for p, name in enumerate(PROJ):
                mod = dict(model.named_modules())[
                    "base_model.model.model.layers.%d.%s.%s" % (l, "self_attn" if p < 4 else "mlp", name)]
                norms += [mod.lora_A["default"].weight.grad.norm().item(), mod.lora_B["default"].weight.grad.norm().item()]
        results.append((typ, beta, ls, loss.item(), cr.mean().item(), rjr.mean().item(), (cr - rjr).mean().item(),
                        (cr > rjr).float().mean().item(), norms))
        print("type %d beta %g: loss %.8f rewards %.6f / %.6f" % (typ, beta, loss.item(), cr.mean().item(), rjr.mean().item()))

    ss = [0]
    for s in seqs:
        ss.append(ss[-1] + len(s))
    tok = [t for s in seqs for t in s]
    tg = [t for x in targets for t in x]
    with open(OUT, "wb") as f:
        f.write(b"AFPR" + struct.pack("<6I", 1, n, R, layers, len(tok), cfg.vocab_size))
        f.write(struct.pack("<%di" % len(ss), *ss) + struct.pack("<%di" % len(tok), *tok) + struct.pack("<%di" % len(tg), *tg))
        f.write(struct.pack("<%dd" % n, *ref[0::2]) + struct.pack("<%dd" % n, *ref[1::2]))
        f.write(struct.pack("<%dd" % n, *pol[0::2]) + struct.pack("<%dd" % n, *pol[1::2]))
        f.write(struct.pack("<I", len(results)))
        for typ, beta, ls, loss, a, b, mg, acc, norms in results:
            f.write(struct.pack("<I7d", typ, beta, ls, loss, a, b, mg, acc))
            f.write(struct.pack("<%df" % len(norms), *norms))
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
