#!/usr/bin/env python3
"""PEFT DoRA on the tiny Hugging Face llama of tests/fixtures/hf_tiny_llama, for tests/test_dora.c (d):
the adapter PEFT saves (loaded by afinar as it is), the summed next-token loss of a small batch and the
gradients of every lora_A, lora_B and lora_magnitude_vector.

Setup: LoraConfig(r=4, lora_alpha=8, lora_dropout=0, use_dora=True, target_modules = the 7 projections);
lora_B set to N(0, 0.05) and every magnitude scaled by U(0.8, 1.2) from its initial norm (torch seed
20261127), so the DoRA terms are all active. Two samples of token ids (lengths 7 and 11), each run alone
from position 0; loss = Σ over every position but a sample's last of the cross-entropy of the next token
(reduction sum), float32.

Run from the repository root:  .venv-ref/bin/python tests/ref/make_dora_model_ref.py
Output: tests/fixtures/dora_adapter/ (adapter_config.json, adapter_model.safetensors: PEFT's own files)
        tests/fixtures/dora_model_ref.safetensors: "tokens" [18], "seq_start" [3] (as F64), "loss" [1], and
        "grad.<PEFT tensor name>" for every adapter tensor (F32, HF row order).
"""
import os
import shutil

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from safetensors.numpy import save_file
from transformers import AutoModelForCausalLM

HF = os.path.join("tests", "fixtures", "hf_tiny_llama")
OUT_DIR = os.path.join("tests", "fixtures", "dora_adapter")
OUT = os.path.join("tests", "fixtures", "dora_model_ref.safetensors")
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main():
    torch.manual_seed(20261127)
    base = AutoModelForCausalLM.from_pretrained(HF, dtype=torch.float32)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, use_dora=True, target_modules=PROJ, task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
            elif "lora_magnitude_vector" in name:
                p.mul_(torch.empty_like(p).uniform_(0.8, 1.2))
    model.train()
    rng = np.random.default_rng(7)
    lens = [7, 11]
    seqs = [rng.integers(3, 256, n) for n in lens]
    loss = torch.zeros((), dtype=torch.float32)
    for s in seqs:
        ids = torch.tensor(s, dtype=torch.long).unsqueeze(0)
        logits = model(input_ids=ids).logits[0]
        loss = loss + torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="sum")
    loss.backward()
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    model.save_pretrained(OUT_DIR)
    os.remove(os.path.join(OUT_DIR, "README.md"))  # PEFT's model card: not part of the adapter
    out = {"tokens": np.concatenate(seqs).astype(np.float64), "seq_start": np.array([0, 7, 18], dtype=np.float64),
           "loss": np.array([loss.item()])}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        key = name.replace(".default", "")  # the saved names (get_peft_model_state_dict)
        if key.endswith("lora_magnitude_vector.weight"):
            key = key[: -len(".weight")]
        out["grad." + key] = p.grad.detach().numpy().astype(np.float32)
    save_file(out, OUT)
    print("loss", loss.item(), "tensors", len(out) - 3)


if __name__ == "__main__":
    main()
