#!/usr/bin/env python3
"""How afinar's cost grows with the model: load time, peak RSS and tokens/s of decode,
classification LoRA training and causal-LM LoRA SFT (with and without --checkpointing) on the
random-weight Q4_K llama GGUFs of scripts/make_scale_models.py (Llama-3.2-1B, Llama-3.2-3B and
Llama-3.1-8B shapes, SmolLM2's 49,152-token vocabulary), against each model's quantized bytes and
FLOPs per token; the issue's targets checked and printed met / missed.

    scaling.py run [--sizes 1b,3b,8b] [--cells decode,cls,sft_ckpt,sft] [--steps N] [--steps-8b N]
                   [--threads T] [--rss-limit-gib G] [--afinar build/afinar] [--models models/scale]
                   [--work build/bench/scaling] [--out bench/results]
        Runs each (size, cell) as a child process, one at a time (never two models at once), and
        merges its result into OUT/scaling-<cpu slug>.json (a later run adds or replaces cells, so
        the 8B can be measured on its own); then writes OUT/scaling-<slug>.md and prints it.
    scaling.py report [--out bench/results] [--slug S] [--json FILE]
        Rewrites the table (and the targets' verdicts) from the JSON.

Cells (all with --threads threads, data from data/):
  decode    `afinar generate -f bench/prompt_128.txt -n N --temp 0 --ignore-eos --timings`: prompt
            and decode tok/s as afinar prints them; load = wall time - prompt time - decode time
            (model load, tokenizer, session set-up, warm page cache).
  cls       `afinar train` classification on data/bbc/train.jsonl, --recipe fixed, LoRA q,v (r 16)
            on all layers, --max-seq-len 128 --batch 4 --grad-accum 1, N steps: all but one of the
            1,558 BBC articles are longer than 128 tokens, so a step is 4 x 128 tokens.
  sft_ckpt  `afinar train --task causal-lm` on data/bbc_headlines/train.jsonl, all-linear LoRA r 16
  sft       on all layers, --max-seq-len 512 --batch 1 --grad-accum 1 (packed: 512 tokens a step),
            N steps, with and without --checkpointing.
  Training cells: first step = the first record's "elapsed" of metrics.jsonl (from the start of
  training), step = the mean of the later steps (the first when N = 1), tokens/s from the records'
  num_tokens (causal-LM) or 4 x 128 per step (classification); startup = wall - the last record's
  elapsed (load, data, set-up, the final save).
  Peak RSS: ru_maxrss of the child (wait4), the OS's exact figure; CPU share: its user + system
  CPU time / wall time, to read the times of a loaded machine. A watchdog kills a child whose
  RSS passes --rss-limit-gib (default 12) and records the cell as failed.

FLOPs per token (forward, one token, matrix products only + attention scores and values):
  2 x (the layers' matrix parameters) [+ 2 x vocab x hidden for the LM head: decode and causal-LM;
  the classifier's head is negligible] + 4 x layers x n_heads x head_dim x context, with the
  context 128 + N/2 for decode and seq/2 for training. Training multiplies it by ~2 (forward +
  input gradients through the frozen weights), ~3 with --checkpointing (a second forward); the
  ratio between sizes, which the targets use, does not depend on that multiplier.

Targets (issue: how cost grows with the model):
  memory     8B causal-LM LoRA SFT at 512 tokens with --checkpointing: peak RSS <= 1.5 x the
             quantized weights' bytes + 1.5 GB (10^9 bytes).
  tokens/s   for each cell, tokens/s(smallest) / tokens/s(size) <= FLOPs/token(size) /
             FLOPs/token(smallest) x 1.10 (10% allowance for measurement noise on a loaded machine),
             on the wall clock and per CPU-second; training cells compare the later steps' rate, or
             the first step's when a size ran only one step.
  linear     nothing quadratic: the exponent k of load time ~ bytes^k (decode cell), first training
             step ~ FLOPs^k and peak RSS ~ bytes^k, fitted between the smallest and the largest size
             measured, <= 1.25 (a quadratic cost gives k ~ 2).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
import thread_scaling  # noqa: E402  (cpu slug and machine facts)

SIZES = {  # must match scripts/make_scale_models.py
    "1b": dict(label="Llama-3.2-1B shape", hidden=2048, layers=16, heads=32, kv_heads=8, ff=8192, head_dim=64, tied=True),
    "3b": dict(label="Llama-3.2-3B shape", hidden=3072, layers=28, heads=24, kv_heads=8, ff=8192, head_dim=128, tied=True),
    "8b": dict(label="Llama-3.1-8B shape", hidden=4096, layers=32, heads=32, kv_heads=8, ff=14336, head_dim=128, tied=False),
}
VOCAB = 49152
CELLS = ["decode", "cls", "sft_ckpt", "sft"]
CELL_NAMES = {"decode": "decode", "cls": "classification training", "sft_ckpt": "causal-LM SFT 512, --checkpointing",
              "sft": "causal-LM SFT 512"}
CLS_BATCH, CLS_SEQ, SFT_SEQ = 4, 128, 512
PROMPT = "bench/prompt_128.txt"
GB = 1e9
GIB = 2 ** 30


def model_facts(key):
    s = SIZES[key]
    H, q, kv = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    per_layer = H * q + 2 * H * kv + q * H + 3 * H * s["ff"]
    layer_params = s["layers"] * per_layer
    emb = VOCAB * H
    params = layer_params + emb * (1 if s["tied"] else 2)
    return {"params": params, "layer_params": layer_params, "head_params": emb, "q_dim": q,
            "layers": s["layers"]}


def flops_per_token(key, ctx, lm_head):
    f = model_facts(key)
    return 2 * f["layer_params"] + (2 * f["head_params"] if lm_head else 0) + 4 * f["layers"] * f["q_dim"] * ctx


def model_path(a, key):
    return os.path.join(a.models, f"llama-{key}-random-Q4_K.gguf")


def run_watched(cmd, logf, limit_kib):
    """Run cmd; return (rc, wall s, peak RSS KiB (ru_maxrss), CPU s (user + system), stdout, stderr,
    killed_for_memory)."""
    t0 = time.time()
    out_f = open(logf + ".out", "w+")
    err_f = open(logf + ".err", "w+")
    p = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, preexec_fn=bench_common.oom_first)
    killed = False
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            break
        try:
            with open(f"/proc/{p.pid}/status") as f:
                m = re.search(r"VmRSS:\s+(\d+)", f.read())
            if m and int(m.group(1)) > limit_kib and not killed:
                killed = True
                p.kill()
        except OSError:
            pass
        time.sleep(0.25)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    out_f.seek(0)
    err_f.seek(0)
    so, se = out_f.read(), err_f.read()
    out_f.close()
    err_f.close()
    with open(logf, "a") as f:
        f.write("$ " + " ".join(cmd) + f"\n[rc {p.returncode}, {wall:.1f} s, peak RSS {ru.ru_maxrss} KiB]\n" + se[-6000:] + "\n")
    return p.returncode, wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, so, se, killed


def fail(rc, se, killed, limit_gib):
    if killed:
        return {"failed": f"killed by the watchdog: RSS above {limit_gib} GiB"}
    tail = se.strip().splitlines()[-1] if se.strip() else ""
    return {"failed": f"exit status {rc}: {tail[:300]}"}


def cell_decode(a, key, logf, limit_kib):
    cmd = a.prefix + [a.afinar, "generate", "-m", model_path(a, key), "-f", PROMPT, "-n", str(a.n_gen), "--temp", "0",
                      "--ignore-eos", "--timings", "-t", str(a.threads)]
    rc, wall, rss, cpu, so, se, killed = run_watched(cmd, logf, limit_kib)
    if rc != 0:
        return fail(rc, se, killed, a.rss_limit_gib)
    m = re.search(r"timings: prompt (\d+) tokens ([\d.]+) s \(([\d.]+) tok/s\), decode (\d+) tokens ([\d.]+) s "
                  r"\(([\d.]+) tok/s\)", se)
    if not m:
        return {"failed": "no timings line in the output"}
    npr, tpr, _, ndec, tdec, _ = m.groups()
    npr, ndec, tpr, tdec = int(npr), int(ndec), float(tpr), float(tdec)
    ctx = npr + ndec / 2.0
    return {"wall_s": round(wall, 2), "peak_rss_kib": rss, "cpu_s": round(cpu, 2), "load_s": round(wall - tpr - tdec, 3),
            "prompt_tokens": npr, "prompt_s": tpr, "prompt_tok_s": npr / tpr if tpr > 0 else None,
            "decode_tokens": ndec, "decode_s": tdec, "tokens_per_s": ndec / tdec if tdec > 0 else None,
            "fwd_flops_per_token": flops_per_token(key, ctx, True), "flops_mult": 1}


def cell_train(a, key, cell, logf, limit_kib):
    steps = a.steps_8b if key == "8b" and a.steps_8b else a.steps
    out = os.path.join(a.work, f"{key}-{cell}")
    common = ["-m", model_path(a, key), "-o", out, "--overwrite", "--max-steps", str(steps), "--grad-accum", "1",
              "--schedule", "constant", "--warmup", "0", "--lora-r", "16", "--lora-layers", "all", "--no-plot",
              "-t", str(a.threads), "--log-every", "1"]
    if cell == "cls":
        cmd = [a.afinar, "train", "--train", "data/bbc/train.jsonl", "--recipe", "fixed", "--targets", "qv",
               "--max-seq-len", str(CLS_SEQ), "--batch", str(CLS_BATCH)] + common
        seq, lm_head = CLS_SEQ, False
    else:
        cmd = [a.afinar, "train", "--task", "causal-lm", "--train", "data/bbc_headlines/train.jsonl", "--recipe",
               "fixed", "--targets", "all-linear", "--max-seq-len", str(SFT_SEQ), "--batch", "1"] + common
        if cell == "sft_ckpt":
            cmd.append("--checkpointing")
        seq, lm_head = SFT_SEQ, True
    rc, wall, rss, cpu, so, se, killed = run_watched(a.prefix + cmd, logf, limit_kib)
    if rc != 0:
        return fail(rc, se, killed, a.rss_limit_gib)
    recs = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if o.get("type") == "train" and "elapsed" in o:
                recs.append(o)
    if not recs:
        return {"failed": "metrics.jsonl has no step record"}
    el = [r["elapsed"] for r in recs]
    first = el[0]
    step = (el[-1] - el[0]) / (len(el) - 1) if len(el) > 1 else first
    if cell == "cls":
        tok_step = tok_first = CLS_BATCH * CLS_SEQ
    else:
        nt = [r["num_tokens"] for r in recs]
        tok_step = (nt[-1] - nt[0]) / (len(nt) - 1) if len(nt) > 1 else nt[0]
        tok_first = nt[0]
    return {"wall_s": round(wall, 2), "peak_rss_kib": rss, "cpu_s": round(cpu, 2), "steps": len(recs),
            "first_step_tokens": tok_first, "first_step_s": round(first, 2),
            "step_s": round(step, 2), "tokens_per_step": tok_step, "tokens_per_s": tok_step / step if step > 0 else None,
            "startup_s": round(wall - el[-1], 2), "loss": [r["loss"] for r in recs],
            "fwd_flops_per_token": flops_per_token(key, seq / 2.0, lm_head),
            "flops_mult": 3 if cell == "sft_ckpt" else 2}


def results_path(out, slug):
    return os.path.join(out, f"scaling-{slug}")


def load_results(base):
    try:
        with open(base + ".json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"benchmark": "scaling", "cells": {}}


def save_json(base, rep):
    tmp = base + ".json.tmp"
    with open(tmp, "w") as f:
        json.dump(rep, f, indent=1)
        f.write("\n")
    os.replace(tmp, base + ".json")


def cmd_run(a):
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    mach = thread_scaling.machine_facts(a.work, os.cpu_count())
    slug = a.slug or mach["slug"]
    base = results_path(a.out, slug)
    rep = load_results(base)
    rep["machine"] = {k: mach[k] for k in ("model_name", "vendor", "uarch", "nproc", "isa_flags", "mem_total_kib",
                                           "kernel", "slug")}
    rep.setdefault("models", {})
    logf = os.path.join(a.work, "scaling.log")
    limit_kib = int(a.rss_limit_gib * 1024 * 1024)
    a.prefix = ["nice", "-n", str(a.nice)] if a.nice else []
    for key in [s.strip() for s in a.sizes.split(",") if s.strip()]:
        if key not in SIZES:
            sys.exit(f"scaling: --sizes: unknown size {key!r} (known: {', '.join(SIZES)})")
        path = model_path(a, key)
        if not os.path.isfile(path):
            sys.exit(f"scaling: {path} missing: scripts/make_scale_models.sh --sizes {key}")
        f = model_facts(key)
        rep["models"][key] = {"label": SIZES[key]["label"], "file": path, "file_bytes": os.path.getsize(path),
                              "params": f["params"], "q4k_bytes": f["params"] // 256 * 144, "vocab": VOCAB}
        for cell in [c.strip() for c in a.cells.split(",") if c.strip()]:
            if cell not in CELLS:
                sys.exit(f"scaling: --cells: unknown cell {cell!r} (known: {', '.join(CELLS)})")
            print(f"scaling: {key} {cell} (load {bench_common.loadavg()[0]:.1f}) ...", flush=True)
            t0 = time.time()
            r = cell_decode(a, key, logf, limit_kib) if cell == "decode" else cell_train(a, key, cell, logf, limit_kib)
            r["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            r["loadavg_after"] = bench_common.loadavg()
            r["threads"] = a.threads
            rep["cells"][f"{key}/{cell}"] = r
            print(f"scaling: {key} {cell}: {time.time() - t0:.0f} s: " +
                  json.dumps({k: v for k, v in r.items() if k not in ("loss",)}), flush=True)
            save_json(base, rep)
    write_report(base, rep)


def fmt(v, nd=2):
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def first_rate(c):
    """Tokens/s of a training cell's first step (None when unknown)."""
    n = c.get("first_step_tokens", c.get("tokens_per_step") if c.get("steps") == 1 else None)
    return n / c["first_step_s"] if n and c.get("first_step_s") else None


def per_cpu(c, rate=None):
    """Tokens per CPU-second of a cell: rate(c) (default its tokens/s) / its CPU share; None without
    the CPU time."""
    r = rate(c) if rate else c.get("tokens_per_s")
    if not r or not c.get("cpu_s") or not c.get("wall_s"):
        return None
    return r * c["wall_s"] / c["cpu_s"]


def exponent(y1, y0, x1, x0):
    if not (y1 and y0 and x1 and x0) or x1 == x0 or y1 <= 0 or y0 <= 0:
        return None
    return math.log(y1 / y0) / math.log(x1 / x0)


def targets(rep):
    """[(name, met: True/False/None, text)]"""
    cells, models = rep["cells"], rep["models"]
    out = []
    sizes = [k for k in SIZES if k in models]
    # memory
    c = cells.get("8b/sft_ckpt")
    if c and "peak_rss_kib" in c and "8b" in models:
        lim = 1.5 * models["8b"]["q4k_bytes"] + 1.5 * GB
        rss = c["peak_rss_kib"] * 1024
        out.append(("memory: 8B SFT 512 --checkpointing peak RSS <= 1.5 x Q4_K bytes + 1.5 GB", rss <= lim,
                    f"{rss / GB:.2f} GB vs limit {lim / GB:.2f} GB (weights {models['8b']['q4k_bytes'] / GB:.2f} GB)"))
    else:
        out.append(("memory: 8B SFT 512 --checkpointing peak RSS <= 1.5 x Q4_K bytes + 1.5 GB", None,
                    "not measured" + (f" ({c['failed']})" if c and "failed" in c else "")))
    # tokens/s vs FLOPs: on the wall clock, and per CPU-second (tokens/s / CPU share), which a
    # loaded machine disturbs less
    for cell in CELLS:
        # training cells: the later steps' rate when every size has them, else the first step's
        first = cell != "decode" and any(cells.get(f"{k}/{cell}", {}).get("steps") == 1 for k in sizes)
        wall_rate = (lambda c: first_rate(c)) if first else (lambda c: c.get("tokens_per_s"))
        for view, rate in (("wall clock", wall_rate), ("per CPU-second", lambda c, w=wall_rate: per_cpu(c, w))):
            have = [k for k in sizes if rate(cells.get(f"{k}/{cell}", {}))]
            name = f"tokens/s ({view}): {CELL_NAMES[cell]} falls <= FLOPs/token grow x 1.10"
            if len(have) < 2:
                out.append((name, None, "fewer than two sizes measured"))
                continue
            s0 = have[0]
            c0 = cells[f"{s0}/{cell}"]
            for k in have[1:]:
                ck = cells[f"{k}/{cell}"]
                fall = rate(c0) / rate(ck)
                grow = ck["fwd_flops_per_token"] / c0["fwd_flops_per_token"]
                out.append((f"{name}, {s0} -> {k}", fall <= grow * 1.10,
                            f"fell {fall:.2f}x, FLOPs/token grew {grow:.2f}x" + (", first steps" if first else "")))
    # nothing quadratic
    def fit(name, cell, field, xfield):
        have = [k for k in sizes if isinstance(cells.get(f"{k}/{cell}", {}).get(field), (int, float))]
        if len(have) < 2:
            out.append((name, None, "fewer than two sizes measured"))
            return
        lo, hi = have[0], have[-1]
        cl, ch = cells[f"{lo}/{cell}"], cells[f"{hi}/{cell}"]
        if xfield == "bytes":
            x0, x1, xn = models[lo]["q4k_bytes"], models[hi]["q4k_bytes"], "bytes"
        else:
            x0, x1, xn = cl["fwd_flops_per_token"], ch["fwd_flops_per_token"], "FLOPs/token"
        k = exponent(ch[field], cl[field], x1, x0)
        out.append((name, None if k is None else k <= 1.25,
                    f"{lo} -> {hi}: {field} {fmt(cl[field])} -> {fmt(ch[field])}, {xn} x{x1 / x0:.2f}: "
                    f"exponent {fmt(k)}"))
    fit("linear: load time ~ bytes^k, k <= 1.25 (decode cell)", "decode", "load_s", "bytes")
    for cell in ("cls", "sft_ckpt", "sft"):
        fit(f"linear: first step ~ FLOPs^k, k <= 1.25 ({CELL_NAMES[cell]})", cell, "first_step_s", "flops")
        fit(f"linear: peak RSS ~ bytes^k, k <= 1.25 ({CELL_NAMES[cell]})", cell, "peak_rss_kib", "bytes")
    return out


def write_report(base, rep):
    m, models, cells = rep["machine"], rep["models"], rep["cells"]
    L = [f"# How cost grows with the model (`bench/scaling.sh`)\n",
         f"Machine: {m['model_name']} ({m.get('uarch') or '?'}), {m['nproc']} cores, "
         f"{m['mem_total_kib'] / 2**20:.1f} GiB RAM, ISA {' '.join(m['isa_flags'])}, kernel {m['kernel']}.",
         "Models: random-weight llama GGUFs, every matrix Q4_K, in the Llama-3.2-1B / 3B and Llama-3.1-8B shapes "
         "(`scripts/make_scale_models.sh`) with SmolLM2's 49,152-token vocabulary instead of Llama 3's 128,256, "
         "so the embedding and the 8B's LM head are smaller than the real models'.\n",
         "| size | parameters | Q4_K bytes (GB) | file (GiB) |", "|---|---:|---:|---:|"]
    for k in SIZES:
        if k in models:
            mm = models[k]
            L.append(f"| {k} ({mm['label']}) | {mm['params'] / 1e9:.3f}e9 | {mm['q4k_bytes'] / GB:.2f} | "
                     f"{mm['file_bytes'] / GIB:.2f} |")
    L += ["", "| size | work | peak RSS (GiB) | RSS / Q4_K bytes | load or startup (s) | first step (s) | "
              "step (s) | tokens/s | CPU share | tokens per CPU-s | fwd GFLOP/token | achieved GFLOP/s | load avg | when |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for k in SIZES:
        for cell in CELLS:
            c = cells.get(f"{k}/{cell}")
            if not c:
                continue
            if "failed" in c:
                L.append(f"| {k} | {CELL_NAMES[cell]} | failed: {c['failed']} |||||||||||")
                continue
            rss = c["peak_rss_kib"] * 1024
            st = c.get("load_s", c.get("startup_s"))
            tps = c.get("tokens_per_s")
            gfs = tps * c["fwd_flops_per_token"] * c["flops_mult"] / 1e9 if tps else None
            extra = f" (prompt {c['prompt_tok_s']:.1f} tok/s)" if cell == "decode" and c.get("prompt_tok_s") else ""
            L.append(f"| {k} | {CELL_NAMES[cell]} | {rss / GIB:.2f} | {rss / models[k]['q4k_bytes']:.2f} | {fmt(st, 1)} | "
                     f"{fmt(c.get('first_step_s'), 1)} | {fmt(c.get('step_s'), 1)} | {fmt(tps, 2)}{extra} | "
                     f"{fmt(c['cpu_s'] / c['wall_s'] if c.get('cpu_s') else None)} | {fmt(per_cpu(c), 2)} | "
                     f"{c['fwd_flops_per_token'] / 1e9:.2f} | {fmt(gfs, 1)} | {c['loadavg_after'][0]:.1f} | "
                     f"{c['date'][:16]} |")
    L += ["", "Load (decode) = wall - prompt - decode time; startup (training) = wall - the last step's elapsed "
              "(load, data, set-up, final save). CPU share = the child's user + system CPU time / wall time "
              "(at most the thread count); tokens per CPU-s = tokens/s / CPU share. Achieved GFLOP/s = tokens/s x forward FLOPs/token x 1 (decode), "
              "2 (training), 3 (--checkpointing). Peak RSS is the kernel's ru_maxrss (exact). Times are speed "
              "figures only where the machine was otherwise idle: the load average after each cell is shown "
              "(the cell's own threads count in it, so up to about the thread count is a quiet machine).", "",
          "## Targets", ""]
    for name, met, text in targets(rep):
        L.append(f"- {name}: **{'met' if met else 'missed' if met is False else 'not measured'}** ({text})")
    txt = "\n".join(L) + "\n"
    tmp = base + ".md.tmp"
    with open(tmp, "w") as f:
        f.write(txt)
    os.replace(tmp, base + ".md")
    print(txt)


def cmd_report(a):
    if a.json:
        base = a.json[:-5] if a.json.endswith(".json") else a.json
    else:
        base = results_path(a.out, a.slug or thread_scaling.machine_facts(a.out, os.cpu_count())["slug"])
    rep = load_results(base)
    if not rep.get("cells"):
        sys.exit(f"scaling: {base}.json has no results")
    write_report(base, rep)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--sizes", default="1b,3b,8b")
    r.add_argument("--cells", default=",".join(CELLS))
    r.add_argument("--steps", type=int, default=2, help="optimizer steps of each training cell")
    r.add_argument("--steps-8b", type=int, default=1, help="optimizer steps at 8B (0: --steps)")
    r.add_argument("--n-gen", type=int, default=16, help="decode tokens")
    r.add_argument("--threads", type=int, default=os.cpu_count())
    r.add_argument("--nice", type=int, default=10, help="nice level of the children (0: none)")
    r.add_argument("--rss-limit-gib", type=float, default=12.0)
    r.add_argument("--afinar", default="build/afinar")
    r.add_argument("--models", default="models/scale")
    r.add_argument("--work", default="build/bench/scaling")
    r.add_argument("--out", default="bench/results")
    r.add_argument("--slug", default="")
    p = sub.add_parser("report")
    p.add_argument("--out", default="bench/results")
    p.add_argument("--slug", default="")
    p.add_argument("--json", default="", help="the results file (default: OUT/scaling-<slug>.json); the table "
                   "is written beside it")
    a = ap.parse_args()
    cmd_run(a) if a.cmd == "run" else cmd_report(a)


if __name__ == "__main__":
    main()
