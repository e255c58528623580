#!/usr/bin/env python3
"""Reference loss, logits, LoRA/head gradients and 5 AdamW steps computed with PyTorch + PEFT on
SmolLM2-135M-Instruct (GGUF Q4_1, dequantized to float32 by transformers on load), for
tests/test_peft_parity.c.

Setup (mirrored exactly by the C test):
  - PEFT LoraConfig(r=4, lora_alpha=8, lora_dropout=0, target_modules = all 7 projections).
  - LoRA A and B of every (layer l, projection p) and the classification head set from closed-form
    formulas (no big fixture): see lora_a(), lora_b(), head_w(), head_b() below. Values are computed
    in float64 and rounded to float32. B rows are in Hugging Face order; the C side maps q/k rows
    through the GGUF q/k permutation (docs/FORMATS.md 3.3).
  - Head: mean pooling of each sample's final hidden states (after the final norm:
    model.model(...).last_hidden_state) + Linear(576, 3) with bias.
  - Loss: mean over the 3 samples of cross-entropy (each sample run unpadded on its own).
  - AdamW (torch.optim.AdamW, lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01, no clipping)
    over every LoRA A/B and the head, 5 steps; the loss before each step and after the last.

Run:  .venv-ref/bin/python tests/ref/make_peft_ref.py
      .venv-ref/bin/python tests/ref/make_peft_ref.py --bf16
        the first step only, under torch.autocast("cpu", dtype=torch.bfloat16) (Linear layers and
        matmuls in bfloat16 with f32 accumulation): loss, logits and gradient norms to
        tests/fixtures/peft_smollm2_bf16_ref.json, so the C test can compare afinar's bf16 products
        with PyTorch's own bf16 deviation from float32.
Output: tests/fixtures/peft_smollm2_ref.bin (little-endian):
  magic b"AFPP", u32 version=1, u32 n_samples, u32 n_classes, u32 r, u32 n_layers, u32 n_tok
  i32 seq_start[n_samples+1], i32 tokens[n_tok], i32 labels[n_samples]
  f64 loss, f32 logits[n_samples, n_classes]
  f32 grad_norm[n_layers, 7, 2]      L2 norm of dA, dB of every adapter (proj order q,k,v,o,gate,up,down)
  u32 n_full, then per entry: u32 layer, u32 proj, u32 in, u32 out, f32 dA[r, in], f32 dB[out, r] (HF row order)
  f32 dW[n_classes, hidden], f32 db[n_classes]
  u32 n_steps, f64 losses[n_steps + 1]
"""
import json
import os
import struct
import sys

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "tests", "fixtures", "peft_smollm2_ref.bin")
OUT_BF16 = os.path.join(ROOT, "tests", "fixtures", "peft_smollm2_bf16_ref.json")

PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA, C = 4, 8.0, 3
LENGTHS = [9, 24, 15]
LABELS = [2, 0, 1]
FULL = [(0, 0), (0, 6), (15, 0), (15, 6), (29, 0), (29, 6)]  # (layer, proj) with full gradients
N_STEPS = 5


def lora_a(l, p, rows, cols):
    """A[j, i] = 0.02 sin(0.37 l + 1.1 p + 0.71 j + 0.0173 i + 0.0029 i j + 0.3)."""
    j = np.arange(rows, dtype=np.float64)[:, None]
    i = np.arange(cols, dtype=np.float64)[None, :]
    return (0.02 * np.sin(0.37 * l + 1.1 * p + 0.71 * j + 0.0173 * i + 0.0029 * (i * j) + 0.3)).astype(np.float32)


def lora_b(l, p, rows, cols):
    """B[o, j] = 0.01 cos(0.29 l + 0.83 p + 1.3 j + 0.017 o + 0.1)  (o = HF output row)."""
    o = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(cols, dtype=np.float64)[None, :]
    return (0.01 * np.cos(0.29 * l + 0.83 * p + 1.3 * j + 0.017 * o + 0.1)).astype(np.float32)


def head_w(c, h):
    """W[c, k] = 0.05 sin(0.9 c + 0.031 k + 0.2)."""
    cc = np.arange(c, dtype=np.float64)[:, None]
    k = np.arange(h, dtype=np.float64)[None, :]
    return (0.05 * np.sin(0.9 * cc + 0.031 * k + 0.2)).astype(np.float32)


def head_b(c):
    """b[c] = 0.1 c - 0.1."""
    return (0.1 * np.arange(c, dtype=np.float64) - 0.1).astype(np.float32)


def main(bf16=False):
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=GGUF, dtype=torch.float32,
                                                 attn_implementation="eager")
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=PROJ, bias="none")
    pm = get_peft_model(model, cfg)
    pm.eval()  # no dropout anywhere (lora_dropout is 0 anyway)
    base = pm.base_model.model.model  # LlamaModel with LoRA layers injected
    n_layers = len(base.layers)
    hidden = model.config.hidden_size
    vocab = model.config.vocab_size

    mods = []  # (l, p, module)
    for l, layer in enumerate(base.layers):
        for p, name in enumerate(PROJ):
            parent = layer.self_attn if p < 4 else layer.mlp
            m = getattr(parent, name)
            A = m.lora_A["default"].weight
            B = m.lora_B["default"].weight
            with torch.no_grad():
                A.copy_(torch.from_numpy(lora_a(l, p, A.shape[0], A.shape[1])))
                B.copy_(torch.from_numpy(lora_b(l, p, B.shape[0], B.shape[1])))
            mods.append((l, p, A, B))
    W = torch.nn.Parameter(torch.from_numpy(head_w(C, hidden)))
    b = torch.nn.Parameter(torch.from_numpy(head_b(C)))

    rng = np.random.default_rng(2024)
    seq_start = np.concatenate([[0], np.cumsum(LENGTHS)]).astype(np.int32)
    tokens = rng.integers(1, vocab, size=int(seq_start[-1]), dtype=np.int64).astype(np.int32)

    def run():
        logits = []
        for s in range(len(LENGTHS)):
            ids = torch.from_numpy(tokens[seq_start[s]:seq_start[s + 1]].astype(np.int64))[None]
            h = base(input_ids=ids).last_hidden_state[0]  # [len, hidden], after the final norm
            logits.append(h.mean(0) @ W.T + b)
        logits = torch.stack(logits)
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(LABELS), reduction="sum") / len(LENGTHS)
        return loss, logits

    params = [t for (_, _, A, B) in mods for t in (A, B)] + [W, b]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    opt.zero_grad()
    if bf16:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, logits = run()
        loss.float().backward()
    else:
        loss, logits = run()
        loss.backward()
    loss0 = float(loss.item())
    logits0 = logits.detach().numpy().astype(np.float32)
    norms = np.zeros((n_layers, 7, 2), dtype=np.float32)
    full = []
    for (l, p, A, B) in mods:
        norms[l, p, 0] = float(torch.linalg.vector_norm(A.grad.double()))
        norms[l, p, 1] = float(torch.linalg.vector_norm(B.grad.double()))
        if (l, p) in FULL:
            full.append((l, p, A.shape[1], B.shape[0], A.grad.numpy().copy(), B.grad.numpy().copy()))
    if bf16:
        out = {"what": "PyTorch + PEFT, first step under torch.autocast(cpu, bfloat16); same setup as "
                       "peft_smollm2_ref.bin", "torch": torch.__version__, "loss": float(loss.float().item()),
               "logits": logits.detach().float().numpy().astype(np.float64).ravel().tolist(),
               "grad_norms": norms.astype(np.float64).ravel().tolist()}
        with open(OUT_BF16 + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(OUT_BF16 + ".tmp", OUT_BF16)
        print("wrote", OUT_BF16, "loss", out["loss"])
        return
    dW = W.grad.numpy().copy()
    db = b.grad.numpy().copy()
    losses = [loss0]
    for step in range(N_STEPS):
        if step > 0:
            opt.zero_grad()
            loss, _ = run()
            loss.backward()
            losses.append(float(loss.item()))
        opt.step()
    with torch.no_grad():
        loss, _ = run()
    losses.append(float(loss.item()))
    print("loss", loss0, "logits", logits0.tolist(), "losses", losses)

    with open(OUT + ".tmp", "wb") as f:
        f.write(b"AFPP")
        f.write(struct.pack("<6I", 1, len(LENGTHS), C, R, n_layers, len(tokens)))
        f.write(seq_start.astype("<i4").tobytes())
        f.write(tokens.astype("<i4").tobytes())
        f.write(np.asarray(LABELS, dtype="<i4").tobytes())
        f.write(struct.pack("<d", loss0))
        f.write(logits0.astype("<f4").tobytes())
        f.write(norms.astype("<f4").tobytes())
        f.write(struct.pack("<I", len(full)))
        for (l, p, din, dout, gA, gB) in full:
            f.write(struct.pack("<4I", l, p, din, dout))
            f.write(gA.astype("<f4").tobytes())
            f.write(gB.astype("<f4").tobytes())
        f.write(dW.astype("<f4").tobytes())
        f.write(db.astype("<f4").tobytes())
        f.write(struct.pack("<I", N_STEPS))
        f.write(np.asarray(losses, dtype="<f8").tobytes())
    os.replace(OUT + ".tmp", OUT)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main(bf16="--bf16" in sys.argv[1:])
