#!/usr/bin/env python3
"""The BBC headline SFT job (scripts/sft_job.sh) for N optimizer steps with PyTorch + transformers
+ PEFT and with afinar, in one run: tokens/s, peak RSS, loss after N steps, and their ratios with
the CPU named. Run by bench/sft_vs_peft.sh (reference venv's python, repository root).

Sub-commands:

  torch --hf DIR --data FILE [--steps N] [--warmup W] [--batch B] [--max-seq-len S] [--r 16]
        [--alpha 32] [--lr 2e-4] [--threads 2]
      One process: AutoModelForCausalLM (float32, from the checkpoint bench/train_peft.py
      `prepare` made from the GGUF with transformers' gguf_file loader) + PEFT LoraConfig(task_type
      CAUSAL_LM, r, lora_alpha, lora_dropout 0, the 7 projections = "all-linear" minus lm_head).
      Data: the first (W + N)·B examples of FILE ({"prompt", "completion"} JSONL) tokenized as TRL's
      SFTTrainer does for prompt-completion data: ids = tok(prompt + completion) + [eos] (no BOS:
      SmolLM2's tokenizer adds none), the first len(tok(prompt)) positions masked out of the loss
      (completion-only loss), truncated to S tokens. Micro-batch of B examples right-padded with an
      attention mask (padding = TRL's default; afinar packs without padding); loss = sum of the
      target tokens' cross-entropies / number of target tokens (transformers' ForCausalLMLoss).
      AdamW (weight decay 0.01) at a constant lr, gradient clipping at 1.0; no gradient
      checkpointing. tokens/s counts real (non-pad) tokens of the timed steps; peak RSS is VmHWM.
      --dtype bf16: forward + loss under torch.autocast("cpu", bfloat16) (weights, LoRA parameters
      and AdamW stay float32), as bench/train_peft.py does for classification. Prints one JSON object.

  run [--steps N] ... (the orchestrator)
      Runs the torch side (a child process), then afinar's `train --task causal-lm` on the same
      examples (the first (W + N)·B lines written to a file; --max-steps W + N, the same r, alpha,
      lr, batch, max_seq_len, all-linear) under /usr/bin/time -v for its peak RSS, and writes
      OUT/sft_vs_peft.{md,json} with the ratios. Where afinar's causal-LM training is not built
      (no `--task causal-lm`), its column says so and only PyTorch's numbers are reported.
      Rows: PyTorch f32 and afinar with --frozen-precision f32 (the same work, the target's ratio);
      with --bf16 on (auto: where the CPU has AVX512_BF16) also PyTorch bf16 autocast and afinar
      with --frozen-precision bf16; and afinar's default (no precision flag: what the automatic
      recipe chooses, read from its run.json) against PyTorch f32.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

import bench_common
from bench_common import cpu_flags_summary, cpu_model, loadavg, proc_kib, target_text, verdict

PROJ_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def log(*a):
    print("sft_vs_peft:", *a, flush=True)


def read_examples(path, n):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                out.append((o["prompt"], o["completion"]))
                if len(out) == n:
                    break
    if len(out) < n:
        sys.exit(f"sft_vs_peft: {path} has {len(out)} examples, {n} needed")
    return out


def tokenize_sft(tok, examples, max_len):
    """TRL prompt-completion tokenization with completion-only labels (-100 = no loss)."""
    rows = []
    for p, c in examples:
        pid = tok(p, add_special_tokens=True)["input_ids"]
        ids = tok(p + c, add_special_tokens=True)["input_ids"]
        if tok.eos_token_id is not None and (not ids or ids[-1] != tok.eos_token_id):
            ids = ids + [tok.eos_token_id]
        lab = [-100] * len(pid) + ids[len(pid):]
        rows.append((ids[:max_len], lab[:max_len]))
    return rows


def pad_batch(torch, mb, pad):
    """Right-padded tensors of a micro-batch of (ids, labels) rows: input ids (pad), labels (-100 on
    padding) and the attention mask, each [len(mb), longest row]."""
    L = max(len(r[0]) for r in mb)
    x = torch.full((len(mb), L), pad, dtype=torch.long)
    y = torch.full((len(mb), L), -100, dtype=torch.long)
    m = torch.zeros((len(mb), L), dtype=torch.long)
    for i, (ids, lab) in enumerate(mb):
        x[i, :len(ids)] = torch.tensor(ids)
        y[i, :len(lab)] = torch.tensor(lab)
        m[i, :len(ids)] = 1
    return x, y, m


def cmd_torch(a):
    import contextlib

    torch = bench_common.import_torch(a.threads)
    import peft
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    B, total = a.batch, a.warmup + a.steps
    tok = AutoTokenizer.from_pretrained(a.hf)
    rows = tokenize_sft(tok, read_examples(a.data, B * total), a.max_seq_len)
    t0 = time.time()
    base = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32)
    cfg = LoraConfig(task_type="CAUSAL_LM", r=a.r, lora_alpha=a.alpha, lora_dropout=0.0, target_modules=PROJ_ALL,
                     bias="none")
    torch.manual_seed(42)
    pm = get_peft_model(base, cfg)
    pm.train()
    load_s = time.time() - t0
    rss_load = proc_kib("VmRSS")
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    dts, losses, ntok, ntgt = [], [], [], []
    for s in range(total):
        x, y, m = pad_batch(torch, rows[s * B:(s + 1) * B], pad)
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with (torch.autocast("cpu", dtype=torch.bfloat16) if a.dtype == "bf16" else contextlib.nullcontext()):
            loss = pm(input_ids=x, attention_mask=m, labels=y).loss  # sum over target tokens / their count
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        dts.append(time.perf_counter() - t)
        losses.append(float(loss.item()))
        ntok.append(int(m.sum()))
        ntgt.append(int((y[:, 1:] != -100).sum()))
        print(f"sft_vs_peft torch: step {s + 1}/{total} {dts[-1]:.2f} s, {ntok[-1]} tokens, loss {losses[-1]:.4f}",
              file=sys.stderr, flush=True)
    tt = sum(dts[a.warmup:])
    toks = sum(ntok[a.warmup:])
    print(json.dumps({
        "system": "pytorch-" + ("bf16-autocast" if a.dtype == "bf16" else "f32"), "r": a.r, "alpha": a.alpha, "lr": a.lr, "batch": B, "max_seq_len": a.max_seq_len,
        "threads": torch.get_num_threads(), "warmup_steps": a.warmup, "timed_steps": a.steps,
        "trainable_params": sum(p.numel() for p in params), "step_s": [round(v, 4) for v in dts],
        "step_tokens": ntok, "step_target_tokens": ntgt, "loss": [round(v, 6) for v in losses],
        "timed_s": round(tt, 3), "tokens_per_s": toks / tt, "final_loss": losses[-1],
        "load_s": round(load_s, 2), "rss_after_load_kib": rss_load, "peak_rss_kib": proc_kib("VmHWM"),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "cpu_capability": torch.backends.cpu.get_cpu_capability()},
    }))


def run_afinar(a, data_file, logf, precision=None):
    """afinar's run of the same steps (--frozen-precision `precision`; None: no flag, the recipe's
    choice); {"failed": why} when `train --task causal-lm` is not available or the run fails."""
    probe = subprocess.run([a.afinar, "train", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "causal-lm" not in probe.stdout:
        return {"failed": f"{a.afinar} has no 'train --task causal-lm' (the causal-LM trainer is not merged)"}
    out = os.path.join(a.work, "afinar_run_" + (precision or "default"))
    cmd = ["/usr/bin/time", "-v", a.afinar, "train", "--task", "causal-lm", "-m", a.model, "--train", data_file,
           "-o", out, "--overwrite", "--max-steps", str(a.warmup + a.steps), "--batch", str(a.batch),
           "--grad-accum", "1", "--lr", str(a.lr), "--schedule", "constant", "--warmup", "0",
           "--lora-r", str(a.r), "--lora-alpha", str(a.alpha), "--lora-dropout", "0", "--targets", "all-linear",
           "--lora-layers", "all", "--max-seq-len", str(a.max_seq_len), "-t", str(a.threads), "--no-plot",
           "--no-packing"]  # the same examples per step as PyTorch
    if precision:
        cmd += ["--frozen-precision", precision]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=bench_common.oom_first)
    wall = time.time() - t0
    with open(logf, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout[-4000:] + p.stderr + "\n")
    if p.returncode != 0:
        return {"failed": f"exit status {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}"}
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    # per-step records of metrics.jsonl (TRL names: loss, num_tokens; lmtrain's trainer) -- the
    # timed steps are those after the warm-up; tokens/s from the records' own time stamps
    steps = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if "loss" in o and "step" in o and "num_tokens" in o:
                steps.append(o)
    r = {"system": "afinar", "wall_s": round(wall, 2), "peak_rss_kib": int(m.group(1)) if m else -1,
         "records": len(steps), "frozen_precision": run_precision(out)}
    if len(steps) >= a.warmup + a.steps:
        timed = steps[a.warmup:a.warmup + a.steps]
        r["final_loss"] = timed[-1]["loss"]
        tkey = next((k for k in ("elapsed", "elapsed_s", "time_s", "wall_s", "t") if k in timed[-1]), None)
        if tkey:
            t_start = steps[a.warmup - 1][tkey] if a.warmup > 0 else 0.0
            ntok = timed[-1]["num_tokens"] - (steps[a.warmup - 1]["num_tokens"] if a.warmup > 0 else 0)
            r["tokens_per_s"] = ntok / (timed[-1][tkey] - t_start)
        else:
            r["note"] = "metrics.jsonl has no time stamp: tokens/s from the whole run's wall time"
            r["tokens_per_s"] = timed[-1]["num_tokens"] / wall
    return r


def run_precision(out):
    """The frozen products' precision a run used, from its run.json ("bf16 (recipe)" -> "bf16")."""
    try:
        with open(os.path.join(out, "run.json")) as f:
            d = json.load(f)
        v = d.get("settings", {}).get("frozen-precision") or d.get("config", {}).get("frozen-precision")
    except (OSError, ValueError):
        return None
    # run.json's settings list what differs from the defaults: absent, the products were f32
    return v.split()[0] if isinstance(v, str) and v else "f32"


def cmd_run(a):
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    logf = os.path.join(a.work, "sft_vs_peft.log")
    n = a.batch * (a.warmup + a.steps)
    data_file = os.path.join(a.work, "sft_subset.jsonl")
    with open(a.data, encoding="utf-8") as f, open(data_file, "w", encoding="utf-8") as g:
        k = 0
        for line in f:
            if line.strip() and k < n:
                g.write(line)
                k += 1
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_model(),
            "cpu_flags": cpu_flags_summary(), "cores": os.cpu_count(), "threads": a.threads, "batch": a.batch,
            "max_seq_len": a.max_seq_len, "r": a.r, "alpha": a.alpha, "lr": a.lr, "warmup_steps": a.warmup,
            "timed_steps": a.steps, "data": a.data, "examples": n, "load_before": loadavg()}
    log(f"{meta['cpu']}, {meta['cores']} cores, load {meta['load_before']}; {a.warmup}+{a.steps} steps of "
        f"{a.batch} examples, max_seq_len {a.max_seq_len}, r {a.r}, alpha {a.alpha}, lr {a.lr}")
    py = sys.executable
    bf16 = a.bf16 == "on" or (a.bf16 == "auto" and "avx512_bf16" in cpu_flags_summary())
    meta["bf16_rows"] = bf16

    def torch_run(dtype):
        res, _, share = bench_common.run_child(
            [py, "bench/sft_vs_peft.py", "torch", "--hf", a.hf, "--data", data_file, "--steps", str(a.steps),
             "--warmup", str(a.warmup), "--batch", str(a.batch), "--max-seq-len", str(a.max_seq_len), "--r",
             str(a.r), "--alpha", str(a.alpha), "--lr", str(a.lr), "--threads", str(a.threads), "--dtype", dtype],
            logf, tolerate=True, name="sft_vs_peft")
        res["cpu_share"] = round(share, 2)
        log(f"pytorch {dtype}:", json.dumps({k: res.get(k) for k in ("tokens_per_s", "peak_rss_kib", "final_loss",
                                                                      "failed")}))
        return res

    rep = {"meta": meta, "pytorch_f32": torch_run("f32")}
    if bf16:
        rep["pytorch_bf16"] = torch_run("bf16")
    # afinar: the same work in f32 (the target's row), in bf16, and its default (the recipe's choice;
    # the run of that precision is reused rather than repeated)
    rep["afinar"] = run_afinar(a, data_file, logf, "f32")
    log("afinar f32:", json.dumps(rep["afinar"]))
    if bf16:
        rep["afinar_bf16"] = run_afinar(a, data_file, logf, "bf16")
        log("afinar bf16:", json.dumps(rep["afinar_bf16"]))
    d = run_afinar(a, data_file, logf, None)
    log("afinar default:", json.dumps(d))
    rep["afinar_default"] = d
    meta["load_after"] = loadavg()
    af, t = rep["afinar"], rep["pytorch_f32"]
    tps = lambda r: r.get("tokens_per_s") if "failed" not in r else None  # noqa: E731
    if tps(af) and tps(t):
        rep["ratios"] = {"tokens_per_s_afinar_over_torch": af["tokens_per_s"] / t["tokens_per_s"],
                         "peak_rss_afinar_over_torch": af["peak_rss_kib"] / t["peak_rss_kib"]}
        if tps(d):
            rep["ratios"]["tokens_per_s_afinar_default_over_torch"] = d["tokens_per_s"] / t["tokens_per_s"]
        if bf16 and tps(rep["afinar_bf16"]) and tps(rep["pytorch_bf16"]):
            rep["ratios"]["tokens_per_s_afinar_bf16_over_torch_bf16"] = (rep["afinar_bf16"]["tokens_per_s"]
                                                                          / rep["pytorch_bf16"]["tokens_per_s"])
    with open(os.path.join(a.out, "sft_vs_peft.json"), "w") as f:
        json.dump(rep, f, indent=1)
    write_md(rep, os.path.join(a.out, "sft_vs_peft.md"))
    log(f"wrote {a.out}/sft_vs_peft.md and .json")


def write_md(rep, path):
    m, t, af = rep["meta"], rep["pytorch_f32"], rep["afinar"]
    L = ["# SFT (causal-LM LoRA) training: afinar vs PyTorch + transformers + PEFT (`bench/sft_vs_peft.sh`)\n",
         f"{m['date']}, **{m['cpu']}** ({m['cpu_flags']}), {m['cores']} cores, {m['threads']} threads each; "
         f"load average before {m['load_before']}, after {m['load_after']} (the machine is shared: treat "
         f"absolute numbers as approximate).\n",
         f"Job: BBC headlines ({m['data']}), the first {m['examples']} examples, {m['warmup_steps']} warm-up + "
         f"{m['timed_steps']} timed optimizer steps of {m['batch']} examples, max_seq_len {m['max_seq_len']}, "
         f"LoRA r={m['r']} alpha={m['alpha']} on all 7 projections of all layers, AdamW lr {m['lr']} constant, "
         f"clipping 1.0, completion-only loss.\n",
         "| system | tokens/s | peak RSS (MiB) | loss after the timed steps |", "|---|---:|---:|---:|"]

    def row(name, r):
        if "failed" in r:
            return f"| {name} | — | — | not run: {r['failed']} |"
        return (f"| {name} | {r['tokens_per_s']:.1f} | {r['peak_rss_kib'] / 1024:.0f} | {r['final_loss']:.4f} |")
    L.append(row("PyTorch f32", t))
    if "pytorch_bf16" in rep:
        L.append(row("PyTorch bf16 autocast", rep["pytorch_bf16"]))
    L.append(row("afinar (Q4_1 base, --frozen-precision f32)", af))
    if "afinar_bf16" in rep:
        L.append(row("afinar (Q4_1 base, --frozen-precision bf16)", rep["afinar_bf16"]))
    if "afinar_default" in rep:
        dp = rep["afinar_default"].get("frozen_precision") or "?"
        L.append(row(f"afinar's default (no precision flag: {dp} products)", rep["afinar_default"]))
    if "ratios" in rep:
        q = rep["ratios"]
        t_r, m_r = q["tokens_per_s_afinar_over_torch"], q["peak_rss_afinar_over_torch"]
        L.append(f"\nafinar / PyTorch f32: tokens/s **{t_r:.2f}x** (target {target_text('sft_vs_torch')}: "
                 f"{verdict('sft_vs_torch', t_r)}), peak RSS **{m_r:.2f}x** (target {target_text('sft_rss_vs_torch')}: "
                 f"{verdict('sft_rss_vs_torch', m_r)}).")
        if "tokens_per_s_afinar_default_over_torch" in q:
            L.append(f"\nafinar's default / PyTorch f32: tokens/s **{q['tokens_per_s_afinar_default_over_torch']:.2f}x**.")
        if "tokens_per_s_afinar_bf16_over_torch_bf16" in q:
            L.append(f"\nafinar bf16 / PyTorch bf16 autocast: tokens/s "
                     f"**{q['tokens_per_s_afinar_bf16_over_torch_bf16']:.2f}x**.")
    if "loss" in t:
        L.append(f"\nPyTorch per-step loss: {t['loss']}; step times (s): {t['step_s']}; tokens per step: "
                 f"{t['step_tokens']}; versions: {t['versions']}.")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    for name in ("torch", "run"):
        p = sp.add_parser(name)
        p.add_argument("--hf", required=True)
        p.add_argument("--data", default="data/bbc_headlines/train.jsonl")
        p.add_argument("--steps", type=int, default=4)
        p.add_argument("--warmup", type=int, default=1)
        p.add_argument("--batch", type=int, default=16)
        p.add_argument("--max-seq-len", type=int, default=256)
        p.add_argument("--r", type=int, default=16)
        p.add_argument("--alpha", type=float, default=32.0)
        p.add_argument("--lr", type=float, default=2e-4)
        p.add_argument("--threads", type=int, default=2)
        if name == "run":
            p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
            p.add_argument("--afinar", default="build/afinar")
            p.add_argument("--work", default="build/bench/sft_vs_peft")
            p.add_argument("--out", default="bench/results")
            p.add_argument("--bf16", choices=["auto", "on", "off"], default="auto",
                           help="bf16 rows (PyTorch autocast, afinar --frozen-precision bf16); auto: AVX512_BF16")
        else:
            p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    a = ap.parse_args()
    {"torch": cmd_torch, "run": cmd_run}[a.cmd](a)


if __name__ == "__main__":
    main()
