#!/usr/bin/env python3
"""PEFT PiSSA and OLoRA initialisation on the tiny Hugging Face llama of tests/fixtures/hf_tiny_llama,
for tests/test_dora.c (f): the initial A0, B0 PEFT computes (init_lora_weights="pissa" / "olora", which
also write W - s*B0*A0 into the base weights), then the summed next-token loss and the gradients of A
and B after moving A, B away from A0, B0.

Setup: LoraConfig(r=4, lora_alpha=8, lora_dropout=0, target_modules = the 7 projections); after the
init, A = A0 + N(0, 0.01) and B = B0 + N(0, 0.01) (torch seed 20261127); two samples of token ids
(lengths 7 and 11, numpy seed 7), each run alone from position 0; loss = sum over every position but a
sample's last of the next token's cross-entropy; float32.

Run from the repository root:  .venv-ref/bin/python tests/ref/make_pissa_ref.py
Output: tests/fixtures/pissa_ref.safetensors with, for m in (pissa, olora) and every adapter tensor T
(PEFT's saved name, HF row order): "<m>.init.<T>" (A0 / B0), "<m>.param.<T>" (the moved A / B),
"<m>.grad.<T>", "<m>.loss" [1]; "tokens" [18], "seq_start" [3] (F64).
"""
import os

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from safetensors.numpy import save_file
from transformers import AutoModelForCausalLM

HF = os.path.join("tests", "fixtures", "hf_tiny_llama")
OUT = os.path.join("tests", "fixtures", "pissa_ref.safetensors")
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run(method, seqs, out):
    torch.manual_seed(20261127)
    base = AutoModelForCausalLM.from_pretrained(HF, dtype=torch.float32)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=PROJ, task_type="CAUSAL_LM",
                     init_lora_weights=method)
    model = get_peft_model(base, cfg)
    def key(name):
        return name.replace(".default", "")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                out[f"{method}.init.{key(name)}"] = p.detach().numpy().copy()
                p.add_(torch.randn_like(p) * 0.01)
                out[f"{method}.param.{key(name)}"] = p.detach().numpy().copy()
    model.train()
    loss = torch.zeros((), dtype=torch.float32)
    for s in seqs:
        ids = torch.tensor(s, dtype=torch.long).unsqueeze(0)
        logits = model(input_ids=ids).logits[0]
        loss = loss + torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="sum")
    loss.backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            out[f"{method}.grad.{key(name)}"] = p.grad.detach().numpy().astype(np.float32)
    out[f"{method}.loss"] = np.array([loss.item()], dtype=np.float64)
    print(method, "loss", loss.item())


def main():
    rng = np.random.default_rng(7)
    seqs = [rng.integers(3, 256, n) for n in (7, 11)]
    out = {"tokens": np.concatenate(seqs).astype(np.float64), "seq_start": np.array([0, 7, 18], dtype=np.float64)}
    for m in ("pissa", "olora"):
        run(m, seqs, out)
    save_file({k: np.ascontiguousarray(v) for k, v in out.items()}, OUT)


if __name__ == "__main__":
    main()
