#!/usr/bin/env python3
"""Reference optimizer steps of preference tuning (DPO sigmoid, IPO, ORPO) with PyTorch + transformers +
PEFT and TRL's loss expressions on the tiny random llama of tests/fixtures/hf_tiny_llama (or qwen2:
tests/fixtures/hf_tiny_qwen2, with its q/k/v biases), for the
trainer-level parity of tests/test_pref_train.c (what `afinar train --task dpo|orpo` runs).

Setup (mirrored by the C test, which runs the af_trainer on the same token ids):
  - PEFT LoraConfig(r=4, lora_alpha=8, lora_dropout=0, all 7 linear projections); A initialised as
    afinar initialises it (src/lora/lora.c af_lora_init_params: U(-1/sqrt(in), 1/sqrt(in)) from the
    counter RNG af_ctr_key(seed 42, layer, projection, 0), re-implemented in make_merge_ref.py), B = 0,
    so the first step's policy equals the reference.
  - 3 pairs of random token ids (seed 11, as make_pref_ref.py): prompt lengths 5, 8, 3; chosen /
    rejected completion lengths (4, 6), (3, 5), (7, 2). Targets: the completion tokens.
  - Every optimizer step sees all 3 pairs (afinar: --batch 3 --grad-accum 1, or --batch 1
    --grad-accum 3: the same mean over the step's pairs); torch.optim.AdamW(lr 5e-3, betas (0.9,
    0.999), eps 1e-8, weight_decay 0.01) on every LoRA A and B; constant learning rate, no clipping.
  - Reference log-probabilities: the model under disable_adapter() (TRL DPOTrainer with a PEFT model
    and no ref_model); no dropout (model.eval(), as TRL disables dropout).
  - Losses (TRL 1.16): DPOTrainer "sigmoid" -logsigmoid(beta * delta), "ipo" (delta of completion-averaged
    log-ratios - 1/(2 beta))^2, rewards beta * summed log-ratios; ORPOTrainer.odds_ratio_loss on the
    completion-averaged log-probabilities plus the NLL of the chosen sequences over every position.
  - Recorded per step (before its update, as afinar's metrics.jsonl "loss"): the loss, rewards/margins,
    logps/chosen (means over the pairs).

Run:  .venv-ref/bin/python tests/ref/make_pref_train_ref.py [llama|qwen2]   (needs torch, transformers, peft, trl)
Output: tests/fixtures/pref_train_ref.bin (llama), pref_train_ref_qwen2.bin (little-endian):
  b"AFPT", u32 version=1, u32 n_pairs, u32 r, u32 n_steps, f64 lr, u32 n_tok
  i32 seq_start[2n+1] (sequence 2i chosen, 2i+1 rejected), i32 tokens[n_tok], i32 mask[n_tok] (1: a target)
  u32 n_types, per type: u32 type (0 sigmoid, 1 ipo, 2 orpo), f64 beta,
      f64 loss[n_steps], f64 margin[n_steps], f64 logps_chosen[n_steps]
"""
import os
import struct
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_merge_ref import ctr_key, ctr_u01  # noqa: E402  afinar's counter RNG

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCH = sys.argv[1] if len(sys.argv) > 1 else "llama"  # llama | qwen2
MODEL = os.path.join(ROOT, "tests", "fixtures", "hf_tiny_" + ARCH)
OUT = os.path.join(ROOT, "tests", "fixtures", "pref_train_ref%s.bin" % ("" if ARCH == "llama" else "_" + ARCH))
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA, SEED, LR, STEPS = 4, 8.0, 42, 5e-3, 4
PROMPTS = [5, 8, 3]
COMPLETIONS = [(4, 6), (3, 5), (7, 2)]
TYPES = [(0, 0.1), (1, 0.5), (2, 0.1)]


def module(model, l, p):
    return dict(model.named_modules())["base_model.model.model.layers.%d.%s.%s" % (l, "self_attn" if p < 4 else "mlp", PROJ[p])]


def run(typ, beta, seqs, targets):
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=PROJ))
    with torch.no_grad():
        for l in range(base.config.num_hidden_layers):
            for p in range(7):
                mod = module(model, l, p)
                A, B = mod.lora_A["default"].weight, mod.lora_B["default"].weight
                bound = np.float32(1.0) / np.sqrt(np.float32(A.shape[1]), dtype=np.float32)
                u = ctr_u01(ctr_key(SEED, l, p, 0), A.numel()).astype(np.float32)
                a = ((np.float32(2.0) * u - np.float32(1.0)) * bound).astype(np.float32).reshape(A.shape)
                A.copy_(torch.from_numpy(a))
                B.zero_()
    model.eval()
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    def logps(seq, tg, full=False):
        logits = model(input_ids=torch.tensor([seq])).logits[0].float()
        lp = F.log_softmax(logits, dim=-1)
        idx = list(range(len(seq) - 1)) if full else [t for t in range(len(seq)) if tg[t] >= 0]
        tgt = seq[1:] if full else [tg[t] for t in idx]
        return lp[idx, tgt].sum(), len(idx)

    n = len(PROMPTS)
    with torch.no_grad(), model.disable_adapter():
        ref = [logps(s, t)[0].item() for s, t in zip(seqs, targets)]
    rc = torch.tensor(ref[0::2], dtype=torch.float32)
    rr = torch.tensor(ref[1::2], dtype=torch.float32)
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        lps = [logps(s, t) for s, t in zip(seqs, targets)]
        c = torch.stack([lps[2 * i][0] for i in range(n)])
        r = torch.stack([lps[2 * i + 1][0] for i in range(n)])
        nc = torch.tensor([float(lps[2 * i][1]) for i in range(n)])
        nr = torch.tensor([float(lps[2 * i + 1][1]) for i in range(n)])
        if typ in (0, 1):
            cl, rl = c - rc, r - rr
            if typ == 0:
                per = -F.logsigmoid(beta * (cl - rl))
            else:
                per = ((cl / nc - rl / nr) - 1 / (2 * beta)) ** 2
            loss = per.mean()
            cr, rjr = beta * cl.detach(), beta * rl.detach()
        else:
            from trl.experimental.orpo.orpo_trainer import ORPOTrainer
            ns = types.SimpleNamespace(beta=beta, accelerator=types.SimpleNamespace(device="cpu"))
            losses, cr, rjr, _, _ = ORPOTrainer.odds_ratio_loss(ns, c / nc, r / nr)
            full = [logps(seqs[2 * i], None, full=True) for i in range(n)]
            nll = -torch.stack([f[0] for f in full]).sum() / sum(f[1] for f in full)
            loss = nll - losses.mean()
        out.append((loss.item(), (cr - rjr).mean().item(), c.detach().mean().item()))
        loss.backward()
        opt.step()
    print("type %d beta %g: losses %s" % (typ, beta, " ".join("%.8f" % o[0] for o in out)))
    return out


def main():
    from transformers import AutoConfig
    vocab = AutoConfig.from_pretrained(MODEL).vocab_size
    rng = np.random.default_rng(11)
    seqs, targets, masks = [], [], []
    for np_, (lc, lr) in zip(PROMPTS, COMPLETIONS):
        prompt = rng.integers(3, vocab, np_).tolist()
        for lcomp in (lc, lr):
            toks = prompt + rng.integers(3, vocab, lcomp).tolist()
            tg = [-1] * len(toks)
            for t in range(np_ - 1, len(toks) - 1):
                tg[t] = toks[t + 1]
            seqs.append(toks)
            targets.append(tg)
            masks.append([0] * np_ + [1] * lcomp)
    results = [(typ, beta, run(typ, beta, seqs, targets)) for typ, beta in TYPES]
    ss = [0]
    for s in seqs:
        ss.append(ss[-1] + len(s))
    tok = [t for s in seqs for t in s]
    msk = [m for x in masks for m in x]
    n = len(PROMPTS)
    with open(OUT, "wb") as f:
        f.write(b"AFPT" + struct.pack("<4Id I", 1, n, R, STEPS, LR, len(tok)))
        f.write(struct.pack("<%di" % len(ss), *ss) + struct.pack("<%di" % len(tok), *tok) + struct.pack("<%di" % len(msk), *msk))
        f.write(struct.pack("<I", len(results)))
        for typ, beta, out in results:
            f.write(struct.pack("<Id", typ, beta))
            for k in range(3):
                f.write(struct.pack("<%dd" % STEPS, *[o[k] for o in out]))
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
