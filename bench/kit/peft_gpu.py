#!/usr/bin/env python3
"""PyTorch + transformers + PEFT peer of the device kit's afinar training runs (bench/kit/run.sh), on
a CUDA GPU: the kit model's shape (a LlamaConfig from the hyper-parameters given here: the kit passes
those of its GGUF), the same LoRA job, timed per optimizer step; one JSON object on stdout.

The weights are random (from_config): the kit cannot carry the float checkpoint (it travels in
64 MiB), and the time of a step does not depend on the values. The losses are therefore not
comparable with afinar's; the speeds are (same shapes, same batch, same LoRA placement).

  --task cls   AutoModelForSequenceClassification (score = Linear(hidden, C, bias=False)) + PEFT
               LoraConfig(SEQ_CLS, r, alpha, dropout, targets) on the top --lora-top layers;
               mean pooling over the final hidden states (afinar's default; train_peft.py's
               mean_pool_logits), cross-entropy. `--grad-accum` micro-batches of `--batch` rows
               per optimizer step, as afinar's --batch / --grad-accum.
  --task lm    AutoModelForCausalLM + LoraConfig(CAUSAL_LM) on every layer; loss = the model's
               next-token cross-entropy over all positions.
Every row is exactly --seq random token ids (no padding). torch.optim.AdamW(lr, weight_decay=0.01).
--dtype bf16: forward + loss under torch.autocast("cuda", bfloat16), weights and optimizer float32.
Exit 3 (with a one-line JSON {"skipped": why}) when torch, peft or a CUDA device is missing.
"""
import argparse
import json
import os
import sys
import time

PROJ_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["cls", "lm"], default="cls")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--inter", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--rope-theta", type=float, default=1e4)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--targets", default="qv", help="qv | all-linear")
    ap.add_argument("--lora-top", type=int, default=0, help="adapters on the top N layers (0: all)")
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--dropout", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: only to check this script where no GPU is (tiny shapes)")
    a = ap.parse_args()
    try:
        import torch
        import peft
        import transformers
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, LlamaConfig
    except ImportError as e:
        print(json.dumps({"skipped": f"import: {e}"}))
        return 3
    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"skipped": "torch.cuda.is_available() is false"}))
        return 3
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_peft import mean_pool_logits

    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      rope_theta=a.rope_theta, rms_norm_eps=a.rms_eps, tie_word_embeddings=True,
                      max_position_embeddings=max(2048, a.seq), pad_token_id=2, num_labels=a.classes)
    torch.manual_seed(42)
    t0 = time.time()
    tm = ["q_proj", "v_proj"] if a.targets == "qv" else PROJ_ALL
    top = a.lora_top if 0 < a.lora_top <= a.layers else a.layers
    layers = list(range(a.layers - top, a.layers))
    if a.task == "cls":
        base = AutoModelForSequenceClassification.from_config(cfg, dtype=torch.float32)
        lc = LoraConfig(task_type="SEQ_CLS", r=a.r, lora_alpha=a.alpha, lora_dropout=a.dropout, target_modules=tm,
                        layers_to_transform=layers, bias="none")
    else:
        base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        lc = LoraConfig(task_type="CAUSAL_LM", r=a.r, lora_alpha=a.alpha, lora_dropout=a.dropout, target_modules=tm,
                        layers_to_transform=layers, bias="none")
    pm = get_peft_model(base, lc).to(dev)
    pm.train()
    inner = pm.base_model.model
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    load_s = time.time() - t0
    g = torch.Generator().manual_seed(1)
    total = a.warmup + a.steps
    n_rows = a.batch * a.grad_accum
    X = torch.randint(3, a.vocab, (total * n_rows, a.seq), generator=g).to(dev)
    Y = torch.randint(0, a.classes, (total * n_rows,), generator=g).to(dev)

    def loss_of(x, y):
        if a.task == "cls":
            return torch.nn.functional.cross_entropy(mean_pool_logits(inner, x).float(), y)
        return pm(input_ids=x, labels=x).loss

    dts, losses = [], []
    for s in range(total):
        sync()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        tot = 0.0
        for m in range(a.grad_accum):
            r0 = (s * a.grad_accum + m) * a.batch
            x, y = X[r0:r0 + a.batch], Y[r0:r0 + a.batch]
            if a.dtype == "bf16":
                with torch.autocast(a.device, dtype=torch.bfloat16):
                    loss = loss_of(x, y)
            else:
                loss = loss_of(x, y)
            (loss / a.grad_accum).backward()
            tot += float(loss.detach()) / a.grad_accum
        opt.step()
        sync()
        dts.append(time.perf_counter() - t)
        losses.append(tot)
    tt = sum(dts[a.warmup:])
    out = {
        "system": "pytorch+peft", "task": a.task, "dtype": a.dtype, "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu",
        "layers": a.layers, "targets": a.targets, "lora_layers": len(layers), "r": a.r, "alpha": a.alpha,
        "batch": a.batch, "grad_accum": a.grad_accum, "seq": a.seq, "warmup_steps": a.warmup, "timed_steps": a.steps,
        "trainable_params": sum(p.numel() for p in params), "step_s": [round(v, 5) for v in dts],
        "loss": [round(v, 5) for v in losses], "samples_per_s": a.steps * n_rows / tt if tt > 0 else None,
        "tokens_per_s": a.steps * n_rows * a.seq / tt if tt > 0 else None, "load_s": round(load_s, 2),
        "max_memory_mib": round(torch.cuda.max_memory_allocated() / 1048576, 1) if a.device == "cuda" else None,
        "attn_implementation": getattr(inner.config, "_attn_implementation", None),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "cuda": torch.version.cuda},
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
