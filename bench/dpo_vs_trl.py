#!/usr/bin/env python3
"""TRL side of bench/dpo_vs_trl.sh: the DPO stage of scripts/dpo_job.sh with TRL's DPOTrainer on
PyTorch (float32, CPU), on the same merged SFT model and the same preference pairs, and a report
next to afinar's numbers from the job's run directory.

  trl    --hf HF_DIR --job RUN_DIR --out JSON [--threads 2]
      HF_DIR: the job's merged SFT model (RUN_DIR/sft_merged.gguf, q8_0) as a float32 transformers
      checkpoint (bench/train_peft.py prepare: transformers' gguf_file loader dequantizes the
      q8_0 tensors to the f32 values afinar computes with). PEFT LoraConfig with the settings of
      afinar's DPO run (RUN_DIR/dpo/run.json: r, alpha, all 7 projections of every layer, dropout
      0), DPOConfig(beta, learning_rate, per_device_train_batch_size = batch pairs,
      gradient_accumulation_steps, 1 epoch, max_length = max_seq_len, cosine schedule with
      afinar's warm-up steps - 1 (HF's warm-up starts from lr 0), weight_decay 0.01, max_grad_norm
      1.0, no gradient checkpointing (afinar's default), precompute_ref_log_probs:
      the reference is the model with the adapter disabled, computed once as afinar does).
      Measures: the reference ranking (the fraction of held-out pairs whose chosen completion has
      the higher summed log-probability under the SFT model, before any DPO step), trainer.train()
      wall time, trainer.evaluate() on the held-out pairs (eval_rewards/accuracies, margins),
      greedy first-line headlines (max 32 new tokens) for RUN_DIR/test_subset.jsonl before (adapter
      disabled) and after DPO: exact match and ROUGE-L F, scored as `afinar eval --generate`
      scores (outer white space trimmed; ROUGE-L on lowercase [a-z0-9] runs, no stemming, Lin
      2004). Writes one JSON object to OUT (atomically).

  report --job RUN_DIR --trl JSON --trl-time TIME_V_FILE --afinar-time TIME_V_FILE --out MD
      The markdown side-by-side: afinar's numbers from RUN_DIR (dpo/metrics.jsonl, gen_*.json,
      dpo_job.txt, the /usr/bin/time -v output of its DPO stage), TRL's from JSON, the CPU and the
      load average.

The LoRA initialisation (random) and the order of the pairs (each trainer shuffles with its own
generator) differ between the two sides; everything else is set equal.
"""
import argparse
import json
import os
import re
import sys
import time

PROJ_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def rouge_tokens(s):
    return re.findall(r"[a-z0-9]+", s.lower())


def rouge_l_f(ref, pred):
    """ROUGE-L F1 (Lin 2004) over lowercase [a-z0-9] runs: LCS length / lengths."""
    r, p = rouge_tokens(ref), rouge_tokens(pred)
    if not r or not p:
        return 0.0
    prev = [0] * (len(p) + 1)
    for x in r:
        cur = [0] * (len(p) + 1)
        for j, y in enumerate(p):
            cur[j + 1] = prev[j] + 1 if x == y else max(prev[j + 1], cur[j])
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    pr, rc = lcs / len(p), lcs / len(r)
    return 2 * pr * rc / (pr + rc)


def greedy_headlines(model, tok, rows, max_new):
    """Greedy first non-empty line of each prompt's continuation; (exact match, ROUGE-L F, list)."""
    import torch
    nl = [i for t, i in tok.get_vocab().items() if "\n" in tok.convert_tokens_to_string([t])]
    nl = set(nl)
    out, em, rl = [], 0, 0.0
    for r in rows:
        ids = tok(r["prompt"], return_tensors="pt", add_special_tokens=False)["input_ids"]
        new = []
        with torch.no_grad():
            past, x = None, ids
            for _ in range(max_new):
                o = model(input_ids=x, past_key_values=past, use_cache=True)
                past = o.past_key_values
                t = int(o.logits[0, -1].argmax())
                if t == tok.eos_token_id:
                    break
                new.append(t)
                text = tok.decode(new)
                if t in nl and text.strip():
                    break
                x = torch.tensor([[t]])
        text = tok.decode(new)
        pred = next((ln.strip() for ln in text.split("\n") if ln.strip()), "")
        ref = r["completion"].strip()
        em += pred == ref
        f = rouge_l_f(ref, pred)
        rl += f
        out.append({"reference": ref, "prediction": pred, "rouge_l_f": f})
    n = max(len(rows), 1)
    return em / n, rl / n, out


def completion_logps(model, tok, pairs, eos):
    """Summed log-probabilities of each pair's chosen and rejected completion (+ EOS, as TRL adds
    it), the completion starting where the prompt's and prompt+completion's tokens diverge."""
    import torch

    def one(prompt, completion):
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        full = tok(prompt + completion + eos, add_special_tokens=False)["input_ids"]
        k = 0
        while k < min(len(p), len(full)) and p[k] == full[k]:
            k += 1
        x = torch.tensor([full])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), -1)
        tgt = x[0, 1:]
        return float(lp[torch.arange(k - 1, len(full) - 1), tgt[k - 1:]].sum())

    return [(one(q["prompt"], q["chosen"]), one(q["prompt"], q["rejected"])) for q in pairs]


def peak_rss_mib():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cmd_trl(a):
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import transformers
    import trl
    from trl import DPOConfig, DPOTrainer

    torch.set_num_threads(a.threads)
    torch.manual_seed(42)
    run = json.load(open(os.path.join(a.job, "dpo", "run.json")))
    c = run["config"]
    beta, lr = float(c["beta"]), float(c["lr"])
    batch, accum = int(c["batch"]), int(c["grad-accum"])
    r, alpha, max_len = int(c["lora-r"]), float(c["lora-alpha"]), int(c["max-seq-len"])
    # HF's warm-up starts at lr 0 on the first step; afinar's step k <= w of w warm-up steps uses
    # lr * k / w: w - 1 HF warm-up steps give the same first step (for w = 1, the full lr).
    warmup = max(int(run["warmup_steps"]) - 1, 0)
    train = read_jsonl(os.path.join(a.job, "pref", "train.jsonl"))
    test = read_jsonl(os.path.join(a.job, "pref", "test.jsonl"))
    articles = read_jsonl(os.path.join(a.job, "test_subset.jsonl"))
    tok = AutoTokenizer.from_pretrained(a.hf)
    model = AutoModelForCausalLM.from_pretrained(a.hf, dtype=torch.float32)
    model.eval()
    rep = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "trl": trl.__version__, "peft": __import__("peft").__version__},
           "settings": {"beta": beta, "lr": lr, "batch": batch, "grad_accum": accum, "lora_r": r,
                        "lora_alpha": alpha, "max_length": max_len, "warmup_steps": warmup,
                        "afinar_warmup_steps": int(run["warmup_steps"]),
                        "threads": a.threads, "train_pairs": len(train), "eval_pairs": len(test)}}

    t0 = time.time()
    lp = completion_logps(model, tok, test, tok.eos_token)
    rep["reference_ranking_accuracy"] = sum(c_ > r_ for c_, r_ in lp) / len(lp)
    rep["reference_logps"] = {"chosen": sum(x for x, _ in lp) / len(lp), "rejected": sum(y for _, y in lp) / len(lp)}
    rep["reference_seconds"] = round(time.time() - t0, 1)
    if a.gen_before:
        t0 = time.time()
        em, rl, _ = greedy_headlines(model, tok, articles, a.max_new)
        rep["before"] = {"exact_match": em, "rouge_l_f": rl, "seconds": round(time.time() - t0, 1)}
    print(json.dumps({"stage": "reference", "ref_rank_acc": rep["reference_ranking_accuracy"],
                      **rep.get("before", {})}), flush=True)

    cfg = DPOConfig(output_dir=os.path.join(a.work, "trl_dpo"), beta=beta, learning_rate=lr,
                    per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
                    gradient_accumulation_steps=accum, num_train_epochs=1, max_length=max_len,
                    lr_scheduler_type="cosine", warmup_steps=warmup, weight_decay=0.01,
                    max_grad_norm=1.0, precompute_ref_log_probs=True, gradient_checkpointing=False, logging_steps=1,
                    save_strategy="no", eval_strategy="no", report_to=[], seed=42,
                    use_cpu=True, dataloader_num_workers=0, bf16=False, fp16=False)
    peft_cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=PROJ_ALL,
                          task_type="CAUSAL_LM")
    t0 = time.time()
    trainer = DPOTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(train),
                         eval_dataset=Dataset.from_list(test), processing_class=tok, peft_config=peft_cfg)
    rep["init_seconds"] = round(time.time() - t0, 1)  # tokenization + precompute_ref_log_probs
    t0 = time.time()
    out = trainer.train()
    rep["train_seconds"] = round(time.time() - t0, 1)
    rep["train_steps"] = out.global_step
    rep["train_log"] = [h for h in trainer.state.log_history if "loss" in h]
    t0 = time.time()
    ev = trainer.evaluate()
    rep["eval"] = ev
    rep["eval_seconds"] = round(time.time() - t0, 1)
    print(json.dumps({"stage": "trained", "train_seconds": rep["train_seconds"], "eval": ev}), flush=True)
    pm = trainer.model
    pm.eval()
    t0 = time.time()
    em, rl, ex = greedy_headlines(pm, tok, articles, a.max_new)
    rep["after"] = {"exact_match": em, "rouge_l_f": rl, "seconds": round(time.time() - t0, 1), "examples": ex[:3]}
    rep["peak_rss_mib_self"] = round(peak_rss_mib(), 1)
    write_atomic(a.out, json.dumps(rep, indent=1) + "\n")
    print(json.dumps({"stage": "after", "exact_match": em, "rouge_l_f": rl}), flush=True)


def time_v(path):
    """(wall seconds, peak RSS MiB) from a /usr/bin/time -v output."""
    wall, rss = None, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("Elapsed (wall clock) time"):
                v = line.rsplit(" ", 1)[1].split(":")
                wall = sum(float(x) * 60 ** i for i, x in enumerate(reversed(v)))
            elif line.startswith("Maximum resident set size"):
                rss = int(line.rsplit(" ", 1)[1]) / 1024.0
    return wall, rss


def cmd_report(a):
    t = json.load(open(a.trl))
    ev = [json.loads(x) for x in open(os.path.join(a.job, "dpo", "metrics.jsonl")) if '"type":"eval"' in x]
    tr = [json.loads(x) for x in open(os.path.join(a.job, "dpo", "metrics.jsonl")) if '"type":"train"' in x]
    e = ev[-1]
    gs, gd = (json.load(open(os.path.join(a.job, f))) for f in ("gen_sft.json", "gen_dpo.json"))
    aw, ar = time_v(a.afinar_time)
    tw, trss = time_v(a.trl_time)
    te = t["eval"]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    s = t["settings"]
    rows = [
        ("held-out pairs", e["eval_pairs"], s["eval_pairs"]),
        ("reference (SFT model) ranking accuracy", "(same model: TRL's column)", "%.3f" % t["reference_ranking_accuracy"]),
        ("eval_rewards/accuracies after DPO", "%.3f" % e["eval_rewards/accuracies"], "%.3f" % te["eval_rewards/accuracies"]),
        ("eval_rewards/margins", "%.4f" % e["eval_rewards/margins"], "%.4f" % te["eval_rewards/margins"]),
        ("eval_rewards/chosen", "%.4f" % e["eval_rewards/chosen"], "%.4f" % te["eval_rewards/chosen"]),
        ("eval_rewards/rejected", "%.4f" % e["eval_rewards/rejected"], "%.4f" % te["eval_rewards/rejected"]),
        ("eval_loss", "%.4f" % e["eval_loss"], "%.4f" % te["eval_loss"]),
        ("final train loss (last step)", "%.4f" % tr[-1]["loss"], "%.4f" % t["train_log"][-1]["loss"]),
        ("optimizer steps", tr[-1]["step"], t["train_steps"]),
        ("ROUGE-L F, SFT model (%d articles)" % gs["n"], "%.4f" % gs["rouge_l"]["f"],
         "%.4f" % t["before"]["rouge_l_f"] if "before" in t else "(same model: afinar's)"),
        ("ROUGE-L F, SFT + DPO", "%.4f" % gd["rouge_l"]["f"], "%.4f" % t["after"]["rouge_l_f"]),
        ("exact match, SFT / SFT + DPO", "%.3f / %.3f" % (gs["exact_match"], gd["exact_match"]),
         "%s / %.3f" % ("%.3f" % t["before"]["exact_match"] if "before" in t else "-", t["after"]["exact_match"])),
        ("DPO training wall time (s)", "%.0f (whole `afinar train`: load, reference pass, steps, %d evaluation(s), saves)" % (aw, len(ev)),
         "%.0f (DPOTrainer(...) %.0f: tokenization + reference pass; trainer.train() %.0f: the steps; evaluate() %.0f)"
         % (t["init_seconds"] + t["train_seconds"] + t["eval_seconds"], t["init_seconds"], t["train_seconds"], t["eval_seconds"])),
        ("peak RSS (MiB)", "%.0f" % ar, "%.0f (whole process)" % trss),
    ]
    md = ["# DPO on BBC headlines: afinar vs TRL DPOTrainer (`bench/dpo_vs_trl.sh`)", "",
          "%s, **%s**, %d cores; load average %s (shared machine: times are approximate)." %
          (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), cpu, os.cpu_count(), a.load), "",
          "Same merged SFT model (`%s/sft_merged.gguf`, q8_0; TRL: dequantized to float32 by transformers), "
          "same %d training / %d held-out pairs, LoRA r %d alpha %g dropout 0 on the 7 projections of every layer, "
          "beta %g, lr %g cosine with %d warm-up step(s) (TRL: %d, its warm-up starts from lr 0), batch %d x grad-accum %d pairs, 1 epoch, max length %d, "
          "%d threads. The LoRA initialisation and the pair order differ." %
          (a.job, s["train_pairs"], s["eval_pairs"], s["lora_r"], s["lora_alpha"], s["beta"], s["lr"],
           s["afinar_warmup_steps"], s["warmup_steps"], s["batch"], s["grad_accum"], s["max_length"], s["threads"]), "",
          "| | afinar | TRL %s (torch %s, transformers %s, peft %s) |" %
          (t["versions"]["trl"], t["versions"]["torch"], t["versions"]["transformers"], t["versions"]["peft"]),
          "|---|---:|---:|"]
    md += ["| %s | %s | %s |" % row for row in rows]
    md += ["", "Reference ranking accuracy: the fraction of held-out pairs whose chosen headline has the higher "
           "summed log-probability (+ EOS) under the SFT model, before any DPO step (computed in PyTorch on the "
           "same model; the implicit rewards of the reference itself are 0). TRL's greedy headlines after DPO took "
           "%.0f s; its reference ranking pass %.0f s." % (t["after"]["seconds"], t["reference_seconds"]), ""]
    write_atomic(a.out, "\n".join(md))
    print("\n".join(md))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("trl")
    p.add_argument("--hf", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="build/bench/dpo_vs_trl")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-new", type=int, default=32)
    p.add_argument("--gen-before", action="store_true",
                   help="also the SFT model's greedy headlines in PyTorch (the job has afinar's)")
    p = sub.add_parser("report")
    for k in ("--job", "--trl", "--trl-time", "--afinar-time", "--out", "--load"):
        p.add_argument(k, required=True)
    a = ap.parse_args()
    {"trl": cmd_trl, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
