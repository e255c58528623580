#!/usr/bin/env python3
"""Reference causal-LM (SFT) loss, logits, LoRA gradients and 5 AdamW steps computed with PyTorch +
PEFT on the real GGUF models (transformers dequantizes the GGUF blocks to float32 on load), for
tests/test_peft_lm_parity.c.

Setup (mirrored exactly by the C test):
  - PEFT LoraConfig(r=8, lora_alpha=16, lora_dropout=0, target_modules = all 7 linear projections).
  - LoRA A and B of every (layer l, projection p) from closed-form formulas (lora_a, lora_b below;
    float64 rounded to float32; B rows in Hugging Face order: the C side maps q/k rows of llama
    GGUFs through the converter's permutation, docs/FORMATS.md 3.3).
  - 3 samples of random token ids, lengths 9, 24, 15. Targets (next token, -1 = no loss): sample 0
    every position; sample 1 only positions >= 9 (a "completion" after a 10-token prompt); sample 2
    every position from 3 on. Each sample runs on its own (positions from 0), which is what afinar's
    packed batch computes (attention never crosses samples, positions restart).
  - Loss: sum of token cross-entropies / number of target tokens of the whole batch (the C side
    accumulates two micro-batches, sample 0 and samples 1+2 packed, each scaled by 1/N_total).
  - Logits: rows 0, 4, 8 of sample 0, the first 512 vocabulary entries, and logsumexp of each row.
  - AdamW (torch.optim.AdamW, lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01, no clipping)
    over every LoRA A and B, 5 steps; the loss before each step and after the last.

Run:  .venv-ref/bin/python tests/ref/make_peft_lm_ref.py            # SmolLM2-135M-Instruct Q4_1
      .venv-ref/bin/python tests/ref/make_peft_lm_ref.py gemma      # Gemma 3 270M Q4_K_M
Output: tests/fixtures/peft_lm_{smollm2,gemma3}_ref.bin (little-endian):
  magic b"AFPL", u32 version=1, u32 n_samples, u32 r, u32 n_layers, u32 n_tok, u32 vocab,
  u32 n_rows, u32 n_cols
  i32 seq_start[n_samples+1], i32 tokens[n_tok], i32 targets[n_tok]
  f64 loss, u32 n_targets
  i32 rows[n_rows] (token positions), f32 logits[n_rows, n_cols], f64 lse[n_rows]
  f32 grad_norm[n_layers, 7, 2]      L2 norm of dA, dB of every adapter (proj order q,k,v,o,gate,up,down)
  u32 n_full, then per entry: u32 layer, u32 proj, u32 in, u32 out, u32 k, f32 dA[:k] (first k of the
      row-major [r, in]), f32 dB[:k] (first k of the row-major [out, r], HF row order)
  u32 n_steps, f64 losses[n_steps + 1]
"""
import os
import struct
import sys

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
GEMMA = len(sys.argv) > 1 and sys.argv[1] == "gemma"
GGUF = "gemma-3-270m-Q4_K_M.gguf" if GEMMA else "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "tests", "fixtures", "peft_lm_%s_ref.bin" % ("gemma3" if GEMMA else "smollm2"))

PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA = 8, 16.0
LENGTHS = [9, 24, 15]
FIRST_TARGET = [0, 9, 3]  # first position with a target in each sample
ROWS = [0, 4, 8]          # logits rows (positions of sample 0)
N_COLS = 512
FULL_K = 512
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


def main():
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=GGUF, dtype=torch.float32,
                                                 attn_implementation="eager")
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=PROJ, bias="none",
                     task_type="CAUSAL_LM")
    pm = get_peft_model(model, cfg)
    pm.eval()
    lm = pm.base_model.model          # *ForCausalLM with LoRA layers injected
    layers = lm.model.layers if hasattr(lm.model, "layers") else lm.model.language_model.layers
    n_layers = len(layers)
    vocab = lm.config.get_text_config().vocab_size if hasattr(lm.config, "get_text_config") else lm.config.vocab_size

    mods = []
    for l, layer in enumerate(layers):
        for p, name in enumerate(PROJ):
            parent = layer.self_attn if p < 4 else layer.mlp
            m = getattr(parent, name)
            A = m.lora_A["default"].weight
            B = m.lora_B["default"].weight
            with torch.no_grad():
                A.copy_(torch.from_numpy(lora_a(l, p, A.shape[0], A.shape[1])))
                B.copy_(torch.from_numpy(lora_b(l, p, B.shape[0], B.shape[1])))
            mods.append((l, p, A, B))

    rng = np.random.default_rng(2025)
    seq_start = np.concatenate([[0], np.cumsum(LENGTHS)]).astype(np.int32)
    tokens = rng.integers(1, min(vocab, 32000), size=int(seq_start[-1]), dtype=np.int64).astype(np.int32)
    targets = np.full(len(tokens), -1, dtype=np.int32)
    for s, n in enumerate(LENGTHS):
        for t in range(FIRST_TARGET[s], n - 1):
            targets[seq_start[s] + t] = tokens[seq_start[s] + t + 1]
    n_targets = int((targets >= 0).sum())

    def run(keep_logits=False):
        total = 0.0
        kept = None
        for s in range(len(LENGTHS)):
            a, b = int(seq_start[s]), int(seq_start[s + 1])
            ids = torch.from_numpy(tokens[a:b].astype(np.int64))[None]
            logits = lm(input_ids=ids).logits[0].float()  # [len, vocab] (Gemma: final soft-cap if configured)
            tg = torch.from_numpy(targets[a:b].astype(np.int64))
            total = total + torch.nn.functional.cross_entropy(logits, tg, ignore_index=-1, reduction="sum")
            if s == 0 and keep_logits:
                kept = logits.detach()
        return total / n_targets, kept

    params = [t for (_, _, A, B) in mods for t in (A, B)]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    opt.zero_grad()
    loss, lg = run(keep_logits=True)
    loss.backward()
    loss0 = float(loss.item())
    rows = np.asarray(ROWS, dtype=np.int32)
    lrows = lg[ROWS, :N_COLS].numpy().astype(np.float32)
    lse = torch.logsumexp(lg[ROWS].double(), dim=1).numpy()
    norms = np.zeros((n_layers, 7, 2), dtype=np.float32)
    full_at = [(0, 0), (n_layers // 2, 3), (n_layers - 1, 6), (n_layers - 1, 1)]
    full = []
    for (l, p, A, B) in mods:
        norms[l, p, 0] = float(torch.linalg.vector_norm(A.grad.double()))
        norms[l, p, 1] = float(torch.linalg.vector_norm(B.grad.double()))
        if (l, p) in full_at:
            full.append((l, p, A.shape[1], B.shape[0], A.grad.numpy().ravel()[:FULL_K].copy(),
                         B.grad.numpy().ravel()[:FULL_K].copy()))
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
    print(GGUF, "loss", loss0, "targets", n_targets, "losses", losses)

    with open(OUT + ".tmp", "wb") as f:
        f.write(b"AFPL")
        f.write(struct.pack("<8I", 1, len(LENGTHS), R, n_layers, len(tokens), vocab, len(ROWS), N_COLS))
        f.write(seq_start.astype("<i4").tobytes())
        f.write(tokens.astype("<i4").tobytes())
        f.write(targets.astype("<i4").tobytes())
        f.write(struct.pack("<dI", loss0, n_targets))
        f.write(rows.astype("<i4").tobytes())
        f.write(lrows.astype("<f4").tobytes())
        f.write(lse.astype("<f8").tobytes())
        f.write(norms.astype("<f4").tobytes())
        f.write(struct.pack("<I", len(full)))
        for (l, p, din, dout, gA, gB) in full:
            f.write(struct.pack("<5I", l, p, din, dout, FULL_K))
            f.write(gA.astype("<f4").tobytes())
            f.write(gB.astype("<f4").tobytes())
        f.write(struct.pack("<I", N_STEPS))
        f.write(np.asarray(losses, dtype="<f8").tobytes())
    os.replace(OUT + ".tmp", OUT)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
