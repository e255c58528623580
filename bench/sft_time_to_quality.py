#!/usr/bin/env python3
"""Causal-LM SFT time to quality: PyTorch + transformers + PEFT trains one epoch as a careful user
would (the headline job's settings), then afinar's *default* run (no training flag but the data and
`--time-budget` = a third of PEFT's one-epoch time) trains on the same examples; both adapters are
scored by the same greedy generation (`afinar eval --task causal-lm --generate N --first-line`,
ROUGE-L F identical to rouge_score) on the same test prompts. Target (issue 34, item 5): afinar's
default run with a third of PEFT's time reaches PEFT's ROUGE-L. Run by bench/sft_time_to_quality.sh
(reference venv's python, repository root).

Sub-commands:

  peft --hf DIR --data FILE --out DIR [--epochs 1] [--batch 8] [--grad-accum 2] [--lr 4e-4]
       [--warmup-ratio 0.06] [--max-seq-len 256] [--r 16] [--alpha 32] [--threads 2] [--seed 42]
       [--dtype f32|bf16]
      One process: AutoModelForCausalLM (float32 checkpoint made from the GGUF) + PEFT LoraConfig
      (CAUSAL_LM, r, lora_alpha, dropout 0, the 7 projections). Data tokenized as TRL's SFTTrainer
      does for prompt-completion data (bench/sft_vs_peft.py tokenize_sft: completion-only labels,
      EOS appended, truncated to max_seq_len), shuffled once per epoch with torch.Generator(seed)
      (transformers' RandomSampler), micro-batches of --batch right-padded with an attention mask,
      --grad-accum micro-batches per optimizer step, loss = each micro-batch's mean over its target
      tokens / grad_accum (transformers' Trainer), AdamW (weight decay 0.01), gradient clipping 1.0,
      transformers' get_cosine_schedule_with_warmup(ceil(warmup_ratio * steps), steps). The
      adapter is saved with save_pretrained (safetensors) in OUT/adapter. Prints one JSON object:
      train_s (the training loop's wall time, tokenization and model load excluded), load_s,
      tokens, steps, per-step loss, peak RSS.

  run --set headlines|lede [--n-train N] [--n-test 100] [--budget-fraction 0.3333] ...
      The orchestrator: PEFT's epoch (a child process), then `afinar train --task causal-lm -m MODEL
      --train FILE -o DIR --time-budget T` with T = fraction x PEFT's train_s (in minutes), then
      `afinar eval` of both adapters (and of the base model) on the first --n-test test examples,
      and OUT/sft_ttq-SET-<cpu-slug>.{md,json} with the verdict (slug: bench/thread_scaling.py).
      Sets: headlines = the headline job (scripts/sft_job.sh: the first 960 examples of
      data/bbc_headlines/train.jsonl, ~157 tokens each); lede = data/bbc_lede (scripts/
      export_bbc_headlines.py --task lede: write a BBC article's opening paragraph from its
      headline, 1,558 training examples of ~60 tokens).
"""
import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import time

import bench_common
import thread_scaling
from bench_common import cpu_flags_summary, cpu_model, loadavg, proc_kib
from sft_vs_peft import PROJ_ALL, pad_batch, read_examples, tokenize_sft

SETS = {
    "headlines": {"dir": "data/bbc_headlines", "n_train": 960, "max_seq_len": 256},
    "lede": {"dir": "data/bbc_lede", "n_train": 0, "max_seq_len": 256},  # 0 = every example
}


def log(*a):
    print("sft_time_to_quality:", *a, flush=True)


def count_lines(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def cmd_peft(a):
    import contextlib

    torch = bench_common.import_torch(a.threads)
    import peft
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

    tok = AutoTokenizer.from_pretrained(a.hf)
    rows = tokenize_sft(tok, read_examples(a.data, count_lines(a.data)), a.max_seq_len)
    t0 = time.time()
    base = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32)
    cfg = LoraConfig(task_type="CAUSAL_LM", r=a.r, lora_alpha=a.alpha, lora_dropout=0.0, target_modules=PROJ_ALL,
                     bias="none")
    torch.manual_seed(a.seed)
    pm = get_peft_model(base, cfg)
    pm.train()
    load_s = time.time() - t0
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    B, G = a.batch, a.grad_accum
    n_micro = math.ceil(len(rows) / B)
    steps_per_epoch = math.ceil(n_micro / G)
    total = steps_per_epoch * a.epochs
    sched = get_cosine_schedule_with_warmup(opt, math.ceil(a.warmup_ratio * total), total)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    gen = torch.Generator().manual_seed(a.seed)
    losses, ntok, step = [], 0, 0
    t_train = time.perf_counter()
    for ep in range(a.epochs):
        order = torch.randperm(len(rows), generator=gen).tolist()
        micro = [order[i:i + B] for i in range(0, len(order), B)]
        for s0 in range(0, len(micro), G):
            group = micro[s0:s0 + G]
            opt.zero_grad(set_to_none=True)
            acc = 0.0
            for mb_idx in group:
                x, y, m = pad_batch(torch, [rows[i] for i in mb_idx], pad)
                with (torch.autocast("cpu", dtype=torch.bfloat16) if a.dtype == "bf16"
                      else contextlib.nullcontext()):
                    loss = pm(input_ids=x, attention_mask=m, labels=y).loss / len(group)
                loss.backward()
                acc += float(loss.item())
                ntok += int(m.sum())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            losses.append(round(acc, 6))
            el = time.perf_counter() - t_train
            print(f"sft_time_to_quality peft: step {step}/{total} loss {acc:.4f} {ntok / el:.1f} tok/s "
                  f"{el:.0f} s", file=sys.stderr, flush=True)
    train_s = time.perf_counter() - t_train
    os.makedirs(a.out, exist_ok=True)
    pm.save_pretrained(os.path.join(a.out, "adapter"))
    print(json.dumps({
        "system": "pytorch-peft-" + a.dtype, "examples": len(rows), "epochs": a.epochs, "steps": total,
        "batch": B, "grad_accum": G, "lr": a.lr, "warmup_ratio": a.warmup_ratio, "max_seq_len": a.max_seq_len,
        "r": a.r, "alpha": a.alpha, "threads": torch.get_num_threads(), "seed": a.seed, "loss": losses,
        "train_s": round(train_s, 2), "load_s": round(load_s, 2), "tokens": ntok, "tokens_per_s": ntok / train_s,
        "peak_rss_kib": proc_kib("VmHWM"), "adapter": os.path.join(a.out, "adapter"),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
    }))


def afinar_eval(a, adapter, test_file, out_json, logf):
    """ROUGE-L F, exact match and completion loss of `adapter` (None: the base model) on test_file."""
    cmd = [a.afinar, "eval", "--task", "causal-lm", "-m", a.model, "--data", test_file, "--max-seq-len", "256",
           "--generate", "0", "--max-new-tokens", "64", "--first-line", "-t", str(a.threads), "--json", out_json]
    if adapter:
        cmd[4:4] = ["-a", adapter]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(logf, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout[-3000:] + "\n")
    if p.returncode != 0:
        return {"failed": f"exit status {p.returncode}: {p.stdout.strip().splitlines()[-1:]}"}
    with open(out_json) as f:
        return json.load(f)


def metric(ev, name):
    """rouge_l_f, exact_match or loss of an `afinar eval --generate --json` object (None if absent)."""
    try:
        v = ev["rouge_l"]["f"] if name == "rouge_l_f" else ev[name]
        return float(v)
    except (KeyError, TypeError, ValueError):
        return None


def cmd_run(a):
    st = SETS[a.set]
    work = os.path.join(a.work, a.set)
    os.makedirs(work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    logf = os.path.join(work, "sft_ttq.log")
    n_train = a.n_train if a.n_train is not None else st["n_train"]
    src_train = os.path.join(st["dir"], "train.jsonl")
    n_train = n_train or count_lines(src_train)
    train_file, test_file = os.path.join(work, "train.jsonl"), os.path.join(work, "test.jsonl")
    for src, dst, n in ((src_train, train_file, n_train), (os.path.join(st["dir"], "test.jsonl"), test_file,
                                                             a.n_test)):
        with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
            k = 0
            for line in f:
                if line.strip() and k < n:
                    g.write(line)
                    k += 1
        if k < n:
            sys.exit(f"sft_time_to_quality: {src} has {k} examples, {n} needed")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_model(),
            "cpu_flags": cpu_flags_summary(), "cores": os.cpu_count(), "threads": a.threads, "set": a.set,
            "train": f"{src_train} (first {n_train})", "test": f"{st['dir']}/test.jsonl (first {a.n_test})",
            "budget_fraction": a.budget_fraction, "load_before": loadavg()}
    log(f"{meta['cpu']}, {meta['cores']} cores, load {meta['load_before']}; set {a.set}: {n_train} training "
        f"examples, {a.n_test} test prompts")
    rep = {"meta": meta}
    peft_json = os.path.join(work, "peft.json")
    if a.reuse_peft and os.path.exists(peft_json):
        with open(peft_json) as f:
            rep["peft"] = json.load(f)
        log("PEFT: reusing", peft_json)
    else:
        res, wall, share = bench_common.run_child(
            [sys.executable, "bench/sft_time_to_quality.py", "peft", "--hf", a.hf, "--data", train_file, "--out",
             os.path.join(work, "peft"), "--threads", str(a.threads), "--max-seq-len", str(st["max_seq_len"]),
             "--dtype", a.peft_dtype],
            logf, tolerate=True, name="sft_time_to_quality")
        res["wall_s"], res["cpu_share"] = round(wall, 1), round(share, 2)
        rep["peft"] = res
        if "failed" in res:
            sys.exit(f"sft_time_to_quality: the PEFT run failed: {res['failed']} (log {logf})")
        with open(peft_json, "w") as f:
            json.dump(res, f, indent=1)
    pf = rep["peft"]
    log(f"PEFT: {pf['steps']} steps in {pf['train_s']:.0f} s ({pf['tokens_per_s']:.1f} tok/s)")
    budget_min = max(0.1, a.budget_fraction * pf["train_s"] / 60.0)  # 0.1: afinar's smallest --time-budget
    af_out = os.path.join(work, "afinar")
    cmd = ["/usr/bin/time", "-v", a.afinar, "train", "--task", "causal-lm", "-m", a.model, "--train", train_file,
           "-o", af_out, "--overwrite", "--time-budget", f"{budget_min:.3f}", "-t", str(a.threads), "--no-plot"]
    log("afinar: " + " ".join(cmd[2:]))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=bench_common.oom_first)
    wall = time.time() - t0
    with open(logf, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout[-6000:] + p.stderr[-6000:] + "\n")
    if p.returncode != 0:
        sys.exit(f"sft_time_to_quality: afinar train failed ({p.returncode}); log {logf}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    done = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("done:")]
    with open(os.path.join(af_out, "run.json")) as f:
        rj = json.load(f)
    rep["afinar"] = {"wall_s": round(wall, 1), "budget_min": round(budget_min, 3),
                     "peak_rss_kib": int(m.group(1)) if m else -1, "done": done[-1] if done else None,
                     "settings": rj.get("settings"), "recipe": rj.get("recipe")}
    log(f"afinar: {wall:.0f} s (budget {budget_min * 60:.0f} s); {rep['afinar']['done']}")
    evals = {}
    for name, adapter in (("base", None), ("peft", pf["adapter"]), ("afinar", os.path.join(af_out, "final"))):
        if name == "base" and not a.eval_base:
            continue
        evals[name] = afinar_eval(a, adapter, test_file, os.path.join(work, f"eval_{name}.json"), logf)
        log(f"eval {name}:", json.dumps({k: metric(evals[name], k) for k in ("rouge_l_f", "exact_match", "loss")}))
    rep["eval"] = evals
    meta["load_after"] = loadavg()
    rp, ra = metric(evals["peft"], "rouge_l_f"), metric(evals["afinar"], "rouge_l_f")
    rep["verdict"] = {"peft_rouge_l": rp, "afinar_rouge_l": ra, "afinar_time_over_peft": wall / pf["train_s"],
                      "met": (ra is not None and rp is not None and ra >= rp and wall <= a.budget_fraction *
                              pf["train_s"] * 1.02)}
    # the CPU in the name: each machine kind keeps its own result (thread_scaling's slug, as cpu_suite)
    slug = thread_scaling.cpu_slug(thread_scaling.cpuinfo(), a.threads)
    base = os.path.join(a.out, f"sft_ttq-{a.set}-{slug}")
    with open(base + ".json", "w") as f:
        json.dump(rep, f, indent=1)
    write_md(rep, base + ".md")
    log(f"wrote {base}.md and .json")


def choices(settings):
    """The settings run.json marks as the recipe's ("epochs": "1.2 (recipe)"), as "name value" text."""
    out = []
    for k, v in (settings or {}).items():
        if isinstance(v, str) and v.endswith("(recipe)"):
            v = v[:-len("(recipe)")].strip()
            try:
                v = f"{float(v):.3g}"
            except ValueError:
                pass
            out.append(f"{k} {v}")
    return ", ".join(out) or "none recorded"


def write_md(rep, path):
    m, pf, af, ev, v = rep["meta"], rep["peft"], rep["afinar"], rep["eval"], rep["verdict"]

    def cells(e):
        if "failed" in e:
            return f"not scored: {e['failed']} | | "
        f = lambda x, d: "—" if x is None else f"{x:.{d}f}"  # noqa: E731
        return (f"{f(metric(e, 'rouge_l_f'), 4)} | {f(metric(e, 'exact_match'), 4)} | "
                f"{f(metric(e, 'loss'), 4)}")
    L = [f"# Causal-LM SFT time to quality: afinar's default vs PyTorch + PEFT (`bench/sft_time_to_quality.sh`)\n",
         f"{m['date']}, **{m['cpu']}** ({m['cpu_flags']}), {m['cores']} cores, {m['threads']} threads each; load "
         f"average before {m['load_before']}, after {m['load_after']}.\n",
         f"Set **{m['set']}**: training {m['train']}, scored on {m['test']} by `afinar eval --task causal-lm "
         f"--generate 0 --first-line` (greedy, ROUGE-L F as rouge_score), the same for both adapters.\n",
         f"PyTorch + PEFT ({pf['versions']}): {pf['epochs']} epoch, {pf['steps']} steps of {pf['batch']}x"
         f"{pf['grad_accum']} examples, lr {pf['lr']} cosine, {pf['warmup_ratio']:.0%} warm-up, r {pf['r']}, alpha "
         f"{pf['alpha']}, all 7 projections, {pf['system']}. afinar: `train --task causal-lm --time-budget "
         f"{af['budget_min']:.2f}` (a {m['budget_fraction']:.3g} of PEFT's training time) and nothing else: "
         f"{af['done']}; its own choices: {choices(af['settings'])}.\n",
         "| system | training wall time | ROUGE-L F | exact match | completion loss |", "|---|---:|---:|---:|---:|"]
    if "base" in ev:
        L.append(f"| base model (no adapter) | — | {cells(ev['base'])} |")
    L.append(f"| PyTorch + PEFT, 1 epoch | {pf['train_s'] / 60:.1f} min ({pf['tokens_per_s']:.0f} tok/s; load "
             f"{pf['load_s']:.0f} s) | {cells(ev['peft'])} |")
    L.append(f"| afinar default, `--time-budget {af['budget_min']:.2f}` | {af['wall_s'] / 60:.1f} min (whole "
             f"command) | {cells(ev['afinar'])} |")
    L.append(f"\nTarget: afinar's default run within {m['budget_fraction']:.3g} of PEFT's one-epoch time reaches "
             f"PEFT's ROUGE-L: afinar {v['afinar_rouge_l']:.4f} vs PEFT {v['peft_rouge_l']:.4f} in "
             f"{v['afinar_time_over_peft']:.2f}x of PEFT's time — **{'met' if v['met'] else 'missed'}**.")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("peft")
    p.add_argument("--hf", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--warmup-ratio", type=float, default=0.06)
    p.add_argument("--max-seq-len", type=int, default=256)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p = sp.add_parser("run")
    p.add_argument("--set", choices=sorted(SETS), required=True)
    p.add_argument("--hf", required=True)
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--afinar", default="build/afinar")
    p.add_argument("--work", default="build/bench/sft_ttq")
    p.add_argument("--out", default="bench/results")
    p.add_argument("--n-train", type=int, default=None, help="training examples (default: the set's)")
    p.add_argument("--n-test", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget-fraction", type=float, default=1 / 3)
    p.add_argument("--peft-dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--reuse-peft", action="store_true", help="reuse WORK/SET/peft.json and its adapter")
    p.add_argument("--eval-base", action="store_true", help="also score the base model")
    a = ap.parse_args()
    {"peft": cmd_peft, "run": cmd_run}[a.cmd](a)


if __name__ == "__main__":
    main()
