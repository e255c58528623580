#!/usr/bin/env python3
"""PyTorch + transformers + PEFT side of bench/train_vs_peft: the same LoRA classification job as
bench/bench_train.c, timed per optimizer step, printed as one JSON object on stdout.

Sub-commands (run with the reference venv, from the repository root):

  prepare --gguf models/X.gguf --out models/X.hf-f32
      Loads the GGUF with transformers (dequantized to float32 on load), and save_pretrained()s
      the model (LlamaForCausalLM weights, safetensors) and the tokenizer once, so that every
      benchmark process loads in seconds instead of re-dequantizing.

  check-tokens --hf DIR --data data/bbc/train.jsonl --tokens F
      Tokenizes the data with the transformers tokenizer, selects the first N samples with at
      least S tokens (as `bench_train tokens` does) and compares their ids with file F. Prints
      {"identical": k, "n": N}.

  train --hf DIR --tokens F --targets qv|all-linear [--dtype f32|bf16] [--batch 16] [--warmup 1]
        [--steps 3] [--threads 2] [--lr 2e-4]
      AutoModelForSequenceClassification (score = Linear(hidden, C, bias=False)) + PEFT
      LoraConfig(task_type=SEQ_CLS, r=16, lora_alpha=32, lora_dropout=0) on every layer;
      pooling = mean of the final hidden states (afinar's default, which PEFT's own forward
      cannot express, so it is written out: model.model(ids).last_hidden_state.mean(1) -> score);
      cross-entropy; torch.optim.AdamW(lr, weight_decay=0.01), no clipping; no gradient
      checkpointing. One step = zero_grad + forward + loss + backward + opt.step, on consecutive
      micro-batches of `batch` rows in file order (every row is exactly S tokens: no padding, no
      attention mask). --dtype bf16 runs forward + loss under torch.autocast("cpu", bfloat16)
      (weights, LoRA parameters and optimizer stay float32; backward follows autocast's casts).
"""
import argparse
import json
import os
import resource
import sys
import time

from bench_common import import_torch, proc_kib

PROJ_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def read_tokens(path):
    with open(path) as f:
        head = f.readline().split()
        n, C, S = int(head[2]), int(head[4]), int(head[6])
        labels, ids = [], []
        for _ in range(n):
            v = [int(x) for x in f.readline().split()]
            labels.append(v[0])
            ids.append(v[1:])
    return n, C, S, labels, ids


def cmd_prepare(a):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, f = os.path.dirname(a.gguf) or ".", os.path.basename(a.gguf)
    t0 = time.time()
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    # transformers refuses to save a model loaded from GGUF ("quantized with gguf"): copy the
    # (already float32) weights into a plain model built from the same config.
    cfg = m.config
    for k in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(cfg, k):
            delattr(cfg, k)
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(m.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        sys.exit(f"prepare: state dict mismatch: missing {missing[:4]}, unexpected {unexpected[:4]}")
    tmp = a.out + ".tmp"
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, a.out)
    print(json.dumps({"prepared": a.out, "seconds": round(time.time() - t0, 1)}))


def cmd_check_tokens(a):
    from transformers import AutoTokenizer
    n, _, S, _, ids = read_tokens(a.tokens)
    tok = AutoTokenizer.from_pretrained(a.hf)
    got = []
    with open(a.data) as f:
        for line in f:
            if not line.strip():
                continue
            t = tok(json.loads(line)["input"], add_special_tokens=True)["input_ids"]
            if len(t) >= S:
                got.append(t[:S])
            if len(got) == n:
                break
    same = sum(1 for x, y in zip(got, ids) if x == y)
    print(json.dumps({"identical": same, "n": n, "max_seq_len": S}))


def build_classifier(hf, num_labels, targets, r=16, alpha=32.0, dropout=0.0, seed=42):
    """The PyTorch side's model: AutoModelForSequenceClassification from the float32 checkpoint
    `hf` (made by `prepare`; score = Linear(hidden, num_labels, bias=False)) with PEFT
    LoraConfig(task_type=SEQ_CLS, r, lora_alpha=alpha, lora_dropout=dropout, bias="none") on
    q_proj,v_proj (targets "qv") or the 7 projections ("all-linear") of every layer, LoRA A
    initialised under torch.manual_seed(seed). pad_token_id = 2 (SmolLM2's <|im_end|>; only used
    where inputs are padded, with an attention mask). Returns (peft_model in train mode, inner),
    inner = the LlamaForSequenceClassification with the LoRA layers injected (inner.model: the
    decoder, inner.score: the head)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification
    base = AutoModelForSequenceClassification.from_pretrained(hf, num_labels=num_labels, dtype=torch.float32)
    base.config.pad_token_id = 2
    tm = ["q_proj", "v_proj"] if targets == "qv" else PROJ_ALL
    cfg = LoraConfig(task_type="SEQ_CLS", r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=tm, bias="none")
    torch.manual_seed(seed)
    pm = get_peft_model(base, cfg)
    pm.train()
    return pm, pm.base_model.model


def mean_pool_logits(inner, x, mask=None):
    """Logits [B, C] of afinar's --pooling mean, which PEFT's own forward cannot express: the final
    hidden states (after the final norm) [B, S, H] averaged over each row's real tokens (mask
    [B, S] of 0/1, right padding; None: every position is real), then inner.score."""
    h = inner.model(input_ids=x, attention_mask=mask).last_hidden_state
    if mask is None:
        return inner.score(h.mean(1))
    m = mask.to(h.dtype).unsqueeze(-1)
    return inner.score((h * m).sum(1) / m.sum(1).clamp(min=1.0))


def cmd_train(a):
    torch = import_torch(a.threads)
    import peft
    import transformers

    n, C, S, labels, ids = read_tokens(a.tokens)
    t0 = time.time()
    pm, inner = build_classifier(a.hf, C, a.targets, a.r, a.alpha)
    load_s = time.time() - t0
    rss_load = proc_kib("VmRSS")
    params = [p for p in pm.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    X = torch.tensor(ids, dtype=torch.long)
    Y = torch.tensor(labels, dtype=torch.long)
    B = a.batch
    total = a.warmup + a.steps
    dts, losses = [], []

    def forward(x, y):
        return torch.nn.functional.cross_entropy(mean_pool_logits(inner, x).float(), y)

    for s in range(total):
        rows = [(s * B + i) % n for i in range(B)]
        x, y = X[rows], Y[rows]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = forward(x, y)
        else:
            loss = forward(x, y)
        loss.backward()
        opt.step()
        dts.append(time.perf_counter() - t)
        losses.append(float(loss.item()))
        print(f"train_peft: step {s + 1}/{total} {dts[-1]:.3f} s loss {losses[-1]:.4f}", file=sys.stderr, flush=True)
    tt = sum(dts[a.warmup:])
    out = {
        "system": "pytorch", "dtype": a.dtype, "targets": a.targets, "r": a.r, "alpha": a.alpha, "batch": B,
        "max_seq_len": S, "threads": torch.get_num_threads(), "checkpointing": False,
        "attn_implementation": getattr(inner.config, "_attn_implementation", None),
        "warmup_steps": a.warmup, "timed_steps": a.steps, "trainable_params": n_train,
        "step_s": [round(v, 6) for v in dts], "step_tokens": [B * S] * total, "loss": [round(v, 6) for v in losses],
        "timed_s": tt, "samples_per_s": a.steps * B / tt, "tokens_per_s": a.steps * B * S / tt,
        "load_s": round(load_s, 3), "rss_after_load_kib": rss_load, "peak_rss_kib": proc_kib("VmHWM"),
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                     "mkldnn": torch.backends.mkldnn.is_available(), "mkl": torch.backends.mkl.is_available()},
    }
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("prepare")
    p.add_argument("--gguf", required=True)
    p.add_argument("--out", required=True)
    p = sp.add_parser("check-tokens")
    p.add_argument("--hf", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--tokens", required=True)
    p = sp.add_parser("train")
    p.add_argument("--hf", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--targets", choices=["qv", "all-linear"], default="qv")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-4)
    a = ap.parse_args()
    {"prepare": cmd_prepare, "check-tokens": cmd_check_tokens, "train": cmd_train}[a.cmd](a)


if __name__ == "__main__":
    main()
