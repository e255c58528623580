#!/usr/bin/env python3
"""PEFT adapter reference for afinar's adapter_io (src/formats/adapter_io.h).

Run with the reference venv: /work/main/.venv-ref/bin/python tests/ref/check_peft_adapter.py ...

  make-fixture [OUT]      (default OUT = tests/fixtures/peft_adapter_small)
      Builds a tiny random LlamaForSequenceClassification / LlamaForCausalLM (TINY below), wraps it
      with PEFT LoRA, fills every trainable tensor with random non-zero values and saves
        OUT/seq_cls/    task SEQ_CLS, r=2, alpha=4, all 7 projections, score head (modules_to_save)
        OUT/causal_lm/  task CAUSAL_LM, r=4, alpha=8, use_rslora, q,k,v,o only, no head
      with PEFT's own save_pretrained, plus OUT/*/expected.json: for every saved tensor its shape,
      float64 sum, first 4 and last value (float32 values, exact), so the C test checks values
      without trusting its own safetensors reader.

  check DIR [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
      Loads an adapter directory written by afinar with PeftModel.from_pretrained onto the matching
      base: the TINY random model by default (dims must match TINY), or a GGUF model loaded with
      transformers (AutoModelForSequenceClassification for SEQ_CLS, AutoModelForCausalLM
      otherwise; num_labels from the score tensor). Compares the keys PEFT would save
      (get_peft_model_state_dict) with the file's keys and values; prints missing/unexpected keys
      and exits non-zero unless everything loaded bit-exactly. The C test writes such directories
      with AF_TEST_ADAPTER_OUT=DIR build/tests/test_adapter_io: DIR/tiny, DIR/tiny_layers (adapters
      on layer 1 only: checks that PEFT honours the layers_to_transform afinar writes) and
      DIR/smollm2 (use --gguf).

  End-to-end prediction agreement (afinar <-> PEFT on real data): tests/ref/peft_interop.py.
"""
import json
import os
import sys

import torch
from peft import LoraConfig, PeftConfig, PeftModel, TaskType, get_peft_model
from peft.utils import get_peft_model_state_dict
from safetensors import safe_open
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
TINY_NUM_LABELS = 3


def fill_random(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def write_expected(out_dir):
    readme = os.path.join(out_dir, "README.md")  # PEFT's model card: not needed in a fixture
    if os.path.exists(readme):
        os.remove(readme)
    exp = {}
    with safe_open(os.path.join(out_dir, "adapter_model.safetensors"), "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k).to(torch.float32).flatten()
            exp[k] = {"shape": list(f.get_slice(k).get_shape()), "sum": float(t.double().sum()),
                      "first": [float(x) for x in t[:4]], "last": float(t[-1])}
    with open(os.path.join(out_dir, "expected.json"), "w") as fp:
        json.dump(exp, fp, indent=1, sort_keys=True)
    return exp


def make_fixture(out):
    torch.manual_seed(0)
    base = LlamaForSequenceClassification(LlamaConfig(**TINY, num_labels=TINY_NUM_LABELS))
    cfg = LoraConfig(task_type=TaskType.SEQ_CLS, r=2, lora_alpha=4, lora_dropout=0.1,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    pm = get_peft_model(base, cfg)
    fill_random(pm, 1)
    d = os.path.join(out, "seq_cls")
    pm.save_pretrained(d)
    exp = write_expected(d)
    print(f"{d}: {len(exp)} tensors; head names: {[k for k in exp if 'score' in k]}")

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(**TINY))
    cfg = LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8, use_rslora=True,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    pm = get_peft_model(base, cfg)
    fill_random(pm, 2)
    d = os.path.join(out, "causal_lm")
    pm.save_pretrained(d)
    exp = write_expected(d)
    print(f"{d}: {len(exp)} tensors")


def check(adir, gguf):
    pcfg = PeftConfig.from_pretrained(adir)
    wpath = os.path.join(adir, "adapter_model.safetensors")
    with safe_open(wpath, "pt") as f:
        file_t = {k: f.get_tensor(k) for k in f.keys()}
    head = [k for k in file_t if k.endswith("score.weight")]
    num_labels = file_t[head[0]].shape[0] if head else TINY_NUM_LABELS
    seq_cls = pcfg.task_type == "SEQ_CLS"
    if gguf:
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
        cls = AutoModelForSequenceClassification if seq_cls else AutoModelForCausalLM
        kw = {"num_labels": num_labels} if seq_cls else {}
        base = cls.from_pretrained(os.path.dirname(gguf) or ".", gguf_file=os.path.basename(gguf), **kw)
    else:
        torch.manual_seed(0)
        base = (LlamaForSequenceClassification(LlamaConfig(**TINY, num_labels=num_labels)) if seq_cls
                else LlamaForCausalLM(LlamaConfig(**TINY)))
    pm = PeftModel.from_pretrained(base, adir)
    model_sd = get_peft_model_state_dict(pm)
    missing = sorted(set(model_sd) - set(file_t))
    unexpected = sorted(set(file_t) - set(model_sd))
    mismatched = sorted(k for k in set(model_sd) & set(file_t)
                        if not torch.equal(model_sd[k].float().cpu(), file_t[k].float()))
    print(f"peft config: task_type={pcfg.task_type} r={pcfg.r} lora_alpha={pcfg.lora_alpha} "
          f"use_rslora={pcfg.use_rslora} target_modules={sorted(pcfg.target_modules)} "
          f"modules_to_save={pcfg.modules_to_save}")
    print(f"tensors in file: {len(file_t)}, expected by PEFT: {len(model_sd)}")
    print(f"missing keys ({len(missing)}): {missing[:8]}")
    print(f"unexpected keys ({len(unexpected)}): {unexpected[:8]}  (PEFT ignores these silently)")
    print(f"value mismatches ({len(mismatched)}): {mismatched[:8]}")
    ok = not missing and not unexpected and not mismatched
    print("PEFT LOADED ALL TENSORS BIT-EXACTLY" if ok else "PEFT LOAD CHECK FAILED")
    return 0 if ok else 1


def main(argv):
    if len(argv) >= 2 and argv[1] == "make-fixture":
        make_fixture(argv[2] if len(argv) > 2 else "tests/fixtures/peft_adapter_small")
        return 0
    if len(argv) >= 3 and argv[1] == "check":
        gguf = argv[argv.index("--gguf") + 1] if "--gguf" in argv else None
        return check(argv[2], gguf)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
