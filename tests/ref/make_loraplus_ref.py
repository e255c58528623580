#!/usr/bin/env python3
"""LoRA+ with PEFT's own optimizer (peft 0.21 create_loraplus_optimizer) on the tiny Hugging Face llama of
tests/fixtures/hf_tiny_llama, for tests/test_dora.c (g): three AdamW steps of a plain LoRA and of a DoRA
adapter (its magnitudes are 1-D parameters: PEFT puts them in the lr x ratio group).

Setup: LoraConfig(r=4, lora_alpha=8, lora_dropout=0, the 7 projections, use_dora False / True); lora_B set
to N(0, 0.05) (torch seed 20261127) so that A has a gradient from the first step; the adapter is saved
(tests/fixtures/loraplus_adapter_{lora,dora}/, PEFT's files) before training. Optimizer:
create_loraplus_optimizer(model, torch.optim.AdamW, lr=1e-2, loraplus_lr_ratio=16,
loraplus_weight_decay=0.01), betas (0.9, 0.999), eps 1e-8, no clipping. Each step: the summed next-token
cross-entropy of two samples (lengths 7 and 11, numpy seed 7, each alone from position 0), backward, step.

Run from the repository root:  .venv-ref/bin/python tests/ref/make_loraplus_ref.py
Output: tests/fixtures/loraplus_ref.safetensors: "tokens" [18], "seq_start" [3], "<kind>.losses" [4] (the loss
before each step and after the last; F64), "<kind>.final.<T>" (F32) the parameters after 3 steps.
"""
import os
import shutil

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from peft.optimizers import create_loraplus_optimizer
from safetensors.numpy import save_file
from transformers import AutoModelForCausalLM

HF = os.path.join("tests", "fixtures", "hf_tiny_llama")
OUT = os.path.join("tests", "fixtures", "loraplus_ref.safetensors")
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def loss_of(model, seqs):
    loss = torch.zeros((), dtype=torch.float32)
    for s in seqs:
        ids = torch.tensor(s, dtype=torch.long).unsqueeze(0)
        logits = model(input_ids=ids).logits[0]
        loss = loss + torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="sum")
    return loss


def run(kind, seqs, out):
    torch.manual_seed(20261127)
    base = AutoModelForCausalLM.from_pretrained(HF, dtype=torch.float32)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=PROJ, task_type="CAUSAL_LM",
                     use_dora=kind == "dora")
    model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    d = os.path.join("tests", "fixtures", f"loraplus_adapter_{kind}")
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.save_pretrained(d)
    os.remove(os.path.join(d, "README.md"))
    opt = create_loraplus_optimizer(model, torch.optim.AdamW, lr=1e-2, loraplus_lr_ratio=16, loraplus_weight_decay=0.01,
                                    betas=(0.9, 0.999), eps=1e-8)
    model.train()
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = loss_of(model, seqs)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    with torch.no_grad():
        losses.append(loss_of(model, seqs).item())
    out[f"{kind}.losses"] = np.array(losses, dtype=np.float64)
    for name, p in model.named_parameters():
        if p.requires_grad:
            key = name.replace(".default", "")
            if key.endswith("lora_magnitude_vector.weight"):
                key = key[: -len(".weight")]
            out[f"{kind}.final.{key}"] = p.detach().numpy().astype(np.float32)
    print(kind, "losses", losses)


def main():
    rng = np.random.default_rng(7)
    seqs = [rng.integers(3, 256, n) for n in (7, 11)]
    out = {"tokens": np.concatenate(seqs).astype(np.float64), "seq_start": np.array([0, 7, 18], dtype=np.float64)}
    for kind in ("lora", "dora"):
        run(kind, seqs, out)
    save_file({k: np.ascontiguousarray(v) for k, v in out.items()}, OUT)


if __name__ == "__main__":
    main()
