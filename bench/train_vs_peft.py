#!/usr/bin/env python3
"""Orchestrator of bench/train_vs_peft (run by that script with the reference venv's python):
LoRA training throughput, peak memory and MFU of afinar (bench_train, Q4_1 and f32 base) against
PyTorch + transformers + PEFT (float32 and bfloat16 autocast), interleaved in one run.

Writes OUT/train_vs_peft.md and OUT/train_vs_peft.json; with --profile also OUT/train_profile.md
(perf record of one afinar step). See bench/README.md for what is measured and the fairness notes.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import bench_common
from bench_common import TARGETS, cpu_flags_summary, cpu_model, loadavg, target_text

PROJ = ["q", "k", "v", "o", "gate", "up", "down"]


def log(*a):
    print("train_vs_peft:", *a, flush=True)


def run_child(cmd, logf, env=None, prefix=(), tolerate=False):
    return bench_common.run_child(cmd, logf, env, prefix, tolerate, name="train_vs_peft")


def step_flops(cfg, T, B, targets, r, C):
    """Useful FLOPs of one training step on B full rows of T tokens (see bench/README.md):
    frozen linears 2·in·out per token forward and 2·in·out for dx backward (no dW; layer 0's q/k/v
    need no dx because the embeddings are frozen); LoRA xa = x·Aᵀ, y += s·xa·Bᵀ forward and dB,
    t = dy·B, dA, dx backward (2·r·in or 2·r·out each); attention QKᵀ and PV over the causal pairs
    T(T+1)/2 only (2·hd FLOPs per pair each), backward 2x forward (dQ, dK, dV, dP); head 2·H·C per
    sample forward, 2x backward. Elementwise ops (norms, RoPE, softmax, SiLU, residuals) ignored."""
    H, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    kvd = nkv * hd
    shape = {"q": (H, nh * hd), "k": (H, kvd), "v": (H, kvd), "o": (nh * hd, H), "gate": (H, F), "up": (H, F),
             "down": (F, H)}
    tgt = ["q", "v"] if targets == "qv" else PROJ
    tok = B * T
    lin = sum(i * o for i, o in shape.values())
    qkv0 = sum(shape[p][0] * shape[p][1] for p in ("q", "k", "v"))
    f_lin_fwd = 2 * lin * L * tok
    f_lin_bwd = 2 * lin * L * tok - 2 * qkv0 * tok
    lo_f = sum(2 * r * (shape[p][0] + shape[p][1]) for p in tgt) * L * tok
    lo_b = sum(4 * r * shape[p][1] + 4 * r * shape[p][0] for p in tgt) * L * tok \
        - sum(2 * r * shape[p][0] for p in tgt if p in ("q", "k", "v")) * tok
    pairs = T * (T + 1) // 2
    at_f = nh * 2 * (2 * hd * pairs) * L * B
    at_b = 2 * at_f
    hf = 2 * H * C * B
    parts = {"linear_fwd": f_lin_fwd, "linear_bwd_dx": f_lin_bwd, "lora_fwd": lo_f, "lora_bwd": lo_b,
             "attention_fwd": at_f, "attention_bwd": at_b, "head": 3 * hf}
    parts["total"] = sum(parts.values())
    return parts


def torch_gemm(py, threads, bf16_reps=5):
    """sgemm / bf16 GEMM reference through PyTorch (MKL / oneDNN), the BLAS this machine has.
    bf16_reps: timed repetitions of the bf16 products (1 where the CPU has no bf16 arithmetic:
    emulated, about a minute per 2048^3 product)."""
    code = r"""
import json, time, torch
torch.set_num_threads(%d)
res = {"torch_threads": torch.get_num_threads()}
for name, (m, k, n) in {"2048x2048x2048": (2048, 2048, 2048), "2048x576x1536 (SmolLM2 up_proj, 2048 tok)": (2048, 576, 1536)}.items():
    for dt in (torch.float32, torch.bfloat16):
        a = torch.randn(m, k).to(dt); b = torch.randn(k, n).to(dt)
        reps = 5 if dt == torch.float32 else %d
        if reps > 1:
            torch.mm(a, b)
        best = 1e9
        for _ in range(reps):
            t = time.perf_counter(); torch.mm(a, b); best = min(best, time.perf_counter() - t)
        res[f"{str(dt).replace('torch.', '')} {name}"] = round(2 * m * k * n / best * 1e-9, 1)
print(json.dumps(res))
""" % (threads, bf16_reps)
    p = subprocess.run([py, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-500:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def profile_one(a, tokfile, prefix, extra):
    """perf record (cpu-clock sampling: hardware counters are not exposed in this VM) of one warm-up
    and one timed afinar step; (step JSON, [(percent, symbol)])."""
    data = os.path.join(a.work, "perf.data")
    cmd = ["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-o", data, "--", a.bench_train, "train",
           "--model", a.model, "--tokens", tokfile, "--targets", a.profile_targets, "--warmup", "1", "--steps", "1",
           "--threads", str(a.threads), "--batch", str(a.batch)] + extra
    p = subprocess.run(list(prefix) + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        log("perf record failed:", p.stderr[-400:])
        return None, None
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso,symbol",
                          "--percent-limit", "0", "-g", "none"], capture_output=True, text=True)
    agg = {}
    for line in rep.stdout.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0].startswith("#") or not parts[0].endswith("%"):
            continue
        pct, dso, kind, sym = float(parts[0].rstrip("%")), parts[1], parts[2], parts[3]
        if "libgomp" in dso:  # stripped: its addresses are the OpenMP runtime (barriers, spin/sleep waits)
            name = "libgomp (OpenMP runtime: barrier spin-waits, thread wake-up)"
        elif kind == "[k]":
            name = "kernel (page faults, scheduling, interrupts)"
        elif "libc" in dso:
            name = "libc (" + sym + ")"
        else:
            name = sym
        agg[name] = agg.get(name, 0.0) + pct
    rows = sorted(((p, n) for n, p in agg.items() if p >= 0.3), reverse=True)
    step = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    return step, rows


def profile_afinar(a, tokfile, out_md, prefix):
    """Profiles of one afinar step with f32 and (where the CPU has AVX512_BF16) bf16 products;
    top symbols to out_md."""
    res = {}
    with open(out_md, "w") as f:
        f.write("# Where the time of one afinar training step goes\n\n")
        f.write(f"{datetime.datetime.now().isoformat(timespec='seconds')}, {cpu_model()}, {os.cpu_count()} cores, "
                f"load average before {loadavg()}.\n\n")
        for name, extra in [("f32 products", []), ("bf16 products (--bf16)", ["--bf16"])]:
            step, rows = profile_one(a, tokfile, prefix, extra)
            if step is None:
                f.write(f"## {name}: not available on this machine\n\n")
                continue
            res[name] = {"step": step, "top": rows[:30]}
            f.write(f"## {name}\n\n")
            f.write(f"`perf record -e cpu-clock -F 999` (software-timer sampling: this VM exposes no hardware "
                    f"counters) of `bench_train train --targets {a.profile_targets} --max-seq-len "
                    f"{step['max_seq_len']} --batch {a.batch} --threads {a.threads} --warmup 1 --steps 1 "
                    f"{' '.join(extra)}` on `{os.path.basename(a.model)}`: one warm-up step (first touch of the "
                    f"workspace: the kernel's page-fault time) and one timed step of {step['step_s'][-1]:.2f} s "
                    f"(loss {step['loss'][-1]:.4f}). Self time per symbol (`perf report --no-children --sort "
                    f"dso,symbol`; libgomp, kernel and libc entries summed), symbols >= 0.3 %:\n\n")
            f.write("| % of samples | symbol |\n|---:|---|\n")
            for pct, sym in rows[:30]:
                f.write(f"| {pct:.2f} | `{sym}` |\n")
            f.write("\n")
        f.write("OMP barrier / wait symbols (libgomp) are time threads spent waiting for each other. "
                "`af_gp_ukernel_bf16` / `ukernel512` / `ukernel256` (AVX2): the packed-GEMM micro-kernels "
                "(frozen-weight products, LoRA products, attention); `af_gp_tpack_*`, `tr8x16_store`, `tpack256`: "
                "operand packing; `panel512`/`panel256`: small f32 products (head); "
                "`fwd_512`/`bwd_512`/`dotblk_512` (`_256` on AVX2): row attention kernels (sequences < 192 "
                "tokens in the forward); `grad_row*`/`softmax_row*`: blocked attention's softmax.\n")
    return res or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--hf", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--bench-train", required=True)
    ap.add_argument("--peak-flops", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--seq", default="128,512")
    ap.add_argument("--targets", default="qv,all-linear")
    ap.add_argument("--systems", default="afinar-q4,afinar-q4-bf16,torch-f32,afinar-f32,torch-bf16,afinar-q4-ckpt")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", default="2", help="timed steps, one number or one per --seq entry (e.g. 3,1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prio", type=int, default=0)
    ap.add_argument("--profile", type=int, default=1)
    ap.add_argument("--profile-seq", type=int, default=128)
    ap.add_argument("--profile-targets", default="all-linear")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    logf = os.path.join(a.work, "train_vs_peft.log")
    open(logf, "w").close()
    prefix = ("nice", "-n", str(a.prio)) if a.prio else ()
    py = sys.executable
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    t_start = time.time()
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": cpu_model(),
            "cpu_flags": cpu_flags_summary(), "cores": os.cpu_count(), "kernel": platform.release(),
            "load_before": loadavg(), "threads": a.threads, "batch": a.batch, "warmup_steps": a.warmup,
            "timed_steps": a.steps, "model": a.model, "hf_model": a.hf, "data": a.data, "nice": a.prio,
            "python": platform.python_version()}
    try:
        meta["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip()
    except OSError:
        pass
    with open(os.path.join(a.hf, "config.json")) as f:
        cfg = json.load(f)
    log(f"start {meta['date']}, load {meta['load_before']} on {meta['cores']} cores, {meta['cpu']}")

    peak, _, _ = run_child([a.peak_flops, str(a.threads)], logf, env, prefix)
    # The MFU denominator is the peak of `threads` cores: max(measured with all threads, threads x the
    # one-thread peak): on a shared machine both cores are rarely free at once, so the all-thread
    # measurement can fall short of the hardware's rate.
    for k in ("f32_avx512", "f32_avx2", "bf16_avx512", "bf16_amx"):
        if k + "_gflops" in peak:
            peak[k + "_peak"] = max(peak[k + "_gflops"], a.threads * peak[k + "_gflops_1t"])
    log("peak:", peak)
    bk = bench_common.bf16_peak_key(peak)  # the bf16 MFU's denominator
    has_bf16 = any(f in cpu_flags_summary().split() for f in ("avx512_bf16", "amx_bf16"))
    gemm = torch_gemm(py, a.threads, 5 if has_bf16 else 1)
    log("torch GEMM:", gemm)

    seqs = [int(s) for s in a.seq.split(",")]
    tgts = a.targets.split(",")
    systems = a.systems.split(",")
    st = [int(x) for x in a.steps.split(",")]
    steps = {S: st[i] if i < len(st) else st[-1] for i, S in enumerate(seqs)}
    meta["timed_steps"] = steps
    tokfiles, tokcheck = {}, {}
    for S in seqs:
        n_samples = (a.warmup + steps[S]) * a.batch
        tf = os.path.join(a.work, f"tokens_{S}.txt")
        info, _, _ = run_child([a.bench_train, "tokens", "--model", a.model, "--data", a.data, "--labels", a.labels,
                                "--max-seq-len", str(S), "--n", str(n_samples), "--out", tf], logf, env)
        chk, _, _ = run_child([py, "bench/train_peft.py", "check-tokens", "--hf", a.hf, "--data", a.data,
                               "--tokens", tf], logf, env)
        tokfiles[S], tokcheck[S] = tf, dict(info, transformers_identical=chk["identical"])
        log(f"tokens S={S}: {tokcheck[S]}")

    runs = []
    for S in seqs:
        for tg in tgts:
            for sy in systems:
                if "@" in sy:  # "name@128": only at that sequence length
                    sy, only = sy.split("@", 1)
                    if int(only) != S:
                        continue
                if sy.startswith("afinar"):
                    cmd = [a.bench_train, "train", "--model", a.model, "--tokens", tokfiles[S], "--targets", tg,
                           "--batch", str(a.batch), "--warmup", str(a.warmup), "--steps", str(steps[S]),
                           "--threads", str(a.threads)]
                    if "f32" in sy:
                        cmd.append("--f32")
                    if sy.endswith("ckpt"):
                        cmd.append("--checkpointing")
                    if "bf16" in sy:
                        cmd.append("--bf16")
                    if "int8" in sy:
                        cmd.append("--int8")
                else:
                    cmd = [py, "bench/train_peft.py", "train", "--hf", a.hf, "--tokens", tokfiles[S], "--targets",
                           tg, "--dtype", "bf16" if "bf16" in sy else "f32", "--batch", str(a.batch), "--warmup",
                           str(a.warmup), "--steps", str(steps[S]), "--threads", str(a.threads)]
                if "bf16" in sy and not has_bf16:
                    # no bf16 arithmetic in hardware: afinar refuses --bf16, and PyTorch's autocast
                    # falls back to emulation (torch.mm bf16 measured above at a few GFLOP/s): hours
                    runs.append({"config": sy, "seq": S, "targets_set": tg, "cpu_share": 0.0,
                                 "failed": "not run: this CPU has no AVX512_BF16/AMX_BF16 (torch.mm bf16 " +
                                 ", ".join(f"{v}" for k, v in gemm.items() if "bfloat16" in k) + " GFLOP/s)"})
                    log(f"S={S} {tg:10s} {sy:15s} not run (no bf16 hardware)")
                    continue
                if "int8" in sy and "avx512_vnni" not in cpu_flags_summary().split():
                    runs.append({"config": sy, "seq": S, "targets_set": tg, "cpu_share": 0.0,
                                 "failed": "not run: this CPU has no AVX512_VNNI (afinar's int8 products need it)"})
                    log(f"S={S} {tg:10s} {sy:15s} not run (no AVX512_VNNI)")
                    continue
                la = loadavg()[0]
                res, wall, share = run_child(cmd, logf, env, prefix, tolerate=True)
                res.update({"config": sy, "seq": S, "targets_set": tg, "wall_s": round(wall, 2),
                            "cpu_share": round(share, 3), "load_1min_before": la})
                if "failed" in res:
                    runs.append(res)
                    continue
                fl = step_flops(cfg, S, a.batch, tg, res.get("r", 16), tokcheck[S].get("classes", 5))
                res["flops_per_step"] = fl
                res["median_step_s"] = statistics.median(res["step_s"][a.warmup:])
                res["achieved_gflops"] = fl["total"] / (res["timed_s"] / steps[S]) * 1e-9
                res["mfu_f32"] = res["achieved_gflops"] / peak.get("f32_avx512_peak", peak.get("f32_avx2_peak", float("nan")))
                if sy.endswith("bf16") and bk:
                    res["mfu_bf16"] = res["achieved_gflops"] / peak[bk]
                runs.append(res)
                log(f"S={S} {tg:10s} {sy:15s} {res['samples_per_s']:.3f} samples/s {res['tokens_per_s']:.1f} tok/s "
                    f"peak RSS {res['peak_rss_kib'] / 1024:.0f} MiB loss {res['loss'][-1]:.4f} "
                    f"MFU {100 * res['mfu_f32']:.1f}% cpu share {share:.2f} (elapsed {time.time() - t_start:.0f} s)")
                with open(os.path.join(a.work, "partial.json"), "w") as f:  # survives an aborted run
                    json.dump({"meta": meta, "peak_flops": peak, "runs": runs}, f, indent=1)

    prof = None
    if a.profile:
        prof = profile_afinar(a, tokfiles[a.profile_seq] if a.profile_seq in tokfiles else tokfiles[seqs[0]],
                              os.path.join(a.out, "train_profile.md"), prefix)
    meta["load_after"] = loadavg()
    meta["total_s"] = round(time.time() - t_start, 1)
    report = {"meta": meta, "peak_flops": peak, "torch_gemm_gflops": gemm, "tokens": tokcheck,
              "runs": runs, "profile_top": {k: v["top"] for k, v in prof.items()} if prof else None}
    with open(os.path.join(a.out, "train_vs_peft.json"), "w") as f:
        json.dump(report, f, indent=1)
    write_md(report, os.path.join(a.out, "train_vs_peft.md"))
    log(f"done in {meta['total_s']} s; wrote {a.out}/train_vs_peft.md and .json")


def write_md(rep, path):
    m, pk, runs = rep["meta"], rep["peak_flops"], rep["runs"]
    v = next((r["versions"] for r in runs if "versions" in r), {})
    ok = [r for r in runs if "failed" not in r]
    ak = pk.get("afinar_kernels", {})
    L = []
    L.append("# LoRA training: afinar vs PyTorch + transformers + PEFT (`bench/train_vs_peft`)\n")
    L.append(f"- Date {m['date']}, git {m.get('git', '?')}, CPU **{m['cpu']}** ({m['cpu_flags']}), "
             f"{m['cores']} cores, Linux {m['kernel']}; {m['threads']} threads for every system.")
    L.append(f"- torch {v.get('torch', '?')} (CPU capability {v.get('cpu_capability', '?')}, MKL "
             f"{v.get('mkl', '?')}, oneDNN {v.get('mkldnn', '?')}), transformers {v.get('transformers', '?')}, "
             f"peft {v.get('peft', '?')}, Python {m['python']}; afinar kernels: "
             f"{next((r['kernel_path'] for r in ok if 'kernel_path' in r), '?')}.")
    L.append(f"- Load average (1, 5, 15 min) at start {m['load_before']}, at end {m['load_after']}; "
             f"nice {m['nice']}; whole run {m['total_s'] / 60:.1f} min. "
             + ("**The machine was shared with other jobs during the run (load > cores): absolute numbers are "
                "low and noisy; configurations were interleaved so ratios are less affected.**"
                if max(m["load_before"][0], m["load_after"][0]) > 0.5 * m["cores"] else ""))
    L.append(f"- Job: {os.path.basename(m['model'])} (SmolLM2-135M), BBC News train samples, micro-batch "
             f"{m['batch']}, rows of exactly max_seq_len tokens (the first samples at least that long; identical "
             f"token ids on both sides: "
             + ", ".join(f"S={S}: {t['transformers_identical']}/{t['samples']} identical to the transformers "
                         f"tokenizer" for S, t in rep["tokens"].items())
             + f"), LoRA r=16 alpha=32 dropout 0 on all 30 layers, classification head (5 classes, mean "
               f"pooling, no bias), cross-entropy, AdamW lr 2e-4 wd 0.01, no clipping. "
               f"{m['warmup_steps']} warm-up + "
             + ", ".join(f"{n} (S={S})" for S, n in m["timed_steps"].items())
             + " timed optimizer steps per configuration, "
               f"each configuration in its own process.")
    L.append("")
    L.append("## Peak arithmetic throughput (bench/peak_flops.c)\n")
    T = m["threads"]
    L.append(f"| | 1 thread | {T} threads measured | peak used for MFU |\n|---|---:|---:|---:|")
    for k, name in [("f32_avx512", "f32 FMA, AVX-512 (zmm)"), ("f32_avx2", "f32 FMA, AVX2 (ymm)"),
                    ("bf16_avx512", "bf16 VDPBF16PS (2 FLOPs per pair)"),
                    ("bf16_amx", "bf16 AMX TDPBF16PS (16·16·32·2 FLOPs per instruction)")]:
        if k + "_gflops" in pk:
            L.append(f"| {name} | {pk[k + '_gflops_1t']:.1f} | {pk[k + '_gflops']:.1f} | {pk[k + '_peak']:.1f} |")
    L.append(f"\nPeak used = max({T}-thread measurement, {T} x 1-thread measurement): on a shared machine both "
             "cores are rarely free at the same moment, so the all-thread number can fall short of the hardware.")
    L.append("\nGFLOP/s. Measured GEMM references (%d threads; OpenBLAS is not installed, PyTorch's "
             "MKL/oneDNN is the BLAS here): " % m["threads"]
             + ", ".join(f"torch.mm {k} {val}" for k, val in rep["torch_gemm_gflops"].items() if k != "torch_threads")
             + ("; afinar kernels (" + ak.get("shape", "") + "): "
                + ", ".join(f"{k} {val}" for k, val in ak.items() if k not in ("shape", "threads")) if ak else "")
             + ".\n")
    L.append("## Results\n")
    L.append("samples/s and tokens/s over the timed steps (step = zero grads + forward + loss + backward + AdamW); "
             "peak RSS = VmHWM of the process; loss = loss of the last timed step's batch; MFU = useful FLOPs "
             "(see below) / step time / peak f32 FLOP/s of %d cores (bf16 systems: also over the bf16 peak, AMX's "
             "where the CPU has AMX). "
             "Ratios: afinar samples/s divided by PyTorch's for the same (seq, targets).\n" % m["threads"])
    L.append("| seq | targets | system | samples/s | tokens/s | s/step | peak RSS MiB | loss | GFLOP/s | MFU | "
             "x torch f32 | x torch bf16 | CPU share |")
    L.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    names = {"afinar-q4": "afinar, Q4_1 base", "afinar-f32": "afinar, f32 base",
             "afinar-q4-bf16": "afinar, Q4_1 base, bf16 compute",
             "afinar-q4-int8": "afinar, Q4_1 base, int8 frozen products",
             "afinar-q4-ckpt": "afinar, Q4_1, checkpointing", "torch-f32": "PyTorch f32",
             "torch-bf16": "PyTorch bf16 autocast"}
    groups = {}
    for r in runs:
        groups.setdefault((r["seq"], r["targets_set"]), {})[r["config"]] = r
    for (S, tg), g in groups.items():
        for sy in ["afinar-q4", "afinar-q4-bf16", "afinar-q4-int8", "afinar-f32", "afinar-q4-ckpt", "torch-f32",
                   "torch-bf16"]:
            if sy not in g:
                continue
            r = g[sy]
            if "failed" in r:
                why = r["failed"] if r["failed"].startswith("not run") else "failed: " + r["failed"]
                L.append(f"| {S} | {tg} | {names.get(sy, sy)} | {why} | | | | | | | | | "
                         f"{r['cpu_share']:.2f} |")
                continue
            mfu = f"{100 * r['mfu_f32']:.1f}%"
            if "mfu_bf16" in r:
                mfu += f" ({100 * r['mfu_bf16']:.1f}% of bf16)"
            rf = rb = ""
            if sy.startswith("afinar"):
                if "torch-f32" in g and "failed" not in g["torch-f32"]:
                    rf = f"{r['samples_per_s'] / g['torch-f32']['samples_per_s']:.2f}"
                if "torch-bf16" in g and "failed" not in g["torch-bf16"]:
                    rb = f"{r['samples_per_s'] / g['torch-bf16']['samples_per_s']:.2f}"
            L.append(f"| {S} | {tg} | {names.get(sy, sy)} | {r['samples_per_s']:.3f} | {r['tokens_per_s']:.0f} | "
                     f"{r['timed_s'] / r['timed_steps']:.2f} | {r['peak_rss_kib'] / 1024:.0f} | {r['loss'][-1]:.4f} | "
                     f"{r['achieved_gflops']:.1f} | {mfu} | {rf} | {rb} | {r['cpu_share']:.2f} |")
    L.append("\nCPU share = CPU seconds / wall seconds of the process (about %d when it had the cores to itself)."
             % m["threads"])
    L.append("Losses differ between systems only through the initialisation (each side draws its own LoRA A and "
             "head weights; B = 0) and arithmetic; data order and hyper-parameters are the same.\n")
    L.append("## Against the training-speed targets\n")
    L.append(f"Targets: samples/s {target_text('train_vs_torch')} PyTorch at the same precision "
             f"({TARGETS['train_vs_torch'][2]}); MFU {target_text('train_mfu', pct=True)} (of the f32 peak, or of "
             "the bf16 peak for bf16 compute: AMX's where the CPU has AMX). afinar f32 = Q4_1 base with f32 "
             "products (the default); afinar bf16 = Q4_1 base with `--bf16`.\n")
    L.append("| seq | targets | afinar f32 / torch f32 | afinar bf16 / torch f32 | afinar bf16 / torch bf16 | "
             "RSS afinar / torch f32 | RSS afinar ckpt / torch f32 | MFU afinar f32 | MFU afinar bf16 (of bf16 peak) |")
    L.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|")

    def ok(g, k):
        return k in g and "failed" not in g[k]
    for (S, tg), g in groups.items():
        if not (ok(g, "torch-f32") and ok(g, "afinar-q4")):
            continue
        tf, a32 = g["torch-f32"], g["afinar-q4"]
        c = [f"{a32['samples_per_s'] / tf['samples_per_s']:.2f}"]
        c.append(f"{g['afinar-q4-bf16']['samples_per_s'] / tf['samples_per_s']:.2f}" if ok(g, "afinar-q4-bf16") else "")
        c.append(f"{g['afinar-q4-bf16']['samples_per_s'] / g['torch-bf16']['samples_per_s']:.2f}"
                 if ok(g, "afinar-q4-bf16") and ok(g, "torch-bf16") else "")
        c.append(f"{a32['peak_rss_kib'] / tf['peak_rss_kib']:.2f}")
        c.append(f"{g['afinar-q4-ckpt']['peak_rss_kib'] / tf['peak_rss_kib']:.2f}" if ok(g, "afinar-q4-ckpt") else "")
        c.append(f"{100 * a32['mfu_f32']:.0f}%")
        c.append(f"{100 * g['afinar-q4-bf16'].get('mfu_bf16', float('nan')):.0f}%" if ok(g, "afinar-q4-bf16") else "")
        L.append(f"| {S} | {tg} | " + " | ".join(c) + " |")
    L.append("")
    L.append("## Memory\n")
    L.append("| seq | targets | system | RSS after load MiB | peak RSS MiB | peak - load MiB | afinar saved "
             "activations KiB/token (ckpt off / on) |")
    L.append("|---:|---|---|---:|---:|---:|---:|")
    for (S, tg), g in groups.items():
        for sy, r in g.items():
            if "failed" in r:
                L.append(f"| {S} | {tg} | {names.get(sy, sy)} | | {r['failed']} | | |")
                continue
            act = ""
            if "act_bytes_per_token" in r:
                act = f"{r['act_bytes_per_token'] / 1024:.0f} / {r['act_bytes_per_token_ckpt'] / 1024:.0f}"
            L.append(f"| {S} | {tg} | {names.get(sy, sy)} | {r['rss_after_load_kib'] / 1024:.0f} | "
                     f"{r['peak_rss_kib'] / 1024:.0f} | {(r['peak_rss_kib'] - r['rss_after_load_kib']) / 1024:.0f} "
                     f"| {act} |")
    L.append("\nafinar's KiB/token = af_engine_bytes(model, layout, n_tok, checkpointing) / n_tok for the batch "
             "(activations + scratch of the engine workspace). afinar Q4_1 keeps the 98 MB GGUF mapped (file "
             "pages); its f32 variant dequantizes every matrix once into an owned f32 copy (~540 MB) and drops "
             "the mapped Q4_1 pages. PyTorch holds the float32 model (~540 MB) plus autograd's saved tensors.\n")
    L.append("## FLOP count (per step)\n")
    L.append("Useful FLOPs only: frozen linear layers 2·in·out per token forward and 2·in·out backward for dx "
             "(no dW for frozen weights; layer 0's q/k/v need no dx); LoRA x·Aᵀ and xa·Bᵀ forward, dB, dy·B, dA, "
             "dx backward; attention QKᵀ and PV counted over the causal pairs T(T+1)/2 only (2·head_dim FLOPs "
             "per pair each; backward = 2x forward); head; elementwise ops ignored.\n")
    L.append("| seq | targets | total GFLOP | linear fwd | linear bwd dx | LoRA fwd+bwd | attention fwd+bwd |")
    L.append("|---:|---|---:|---:|---:|---:|---:|")
    for (S, tg), g in groups.items():
        f = next((r for r in g.values() if "flops_per_step" in r), None)
        if f is None:
            continue
        f = f["flops_per_step"]
        L.append(f"| {S} | {tg} | {f['total'] / 1e9:.0f} | {f['linear_fwd'] / 1e9:.0f} | "
                 f"{f['linear_bwd_dx'] / 1e9:.0f} | {(f['lora_fwd'] + f['lora_bwd']) / 1e9:.1f} | "
                 f"{(f['attention_fwd'] + f['attention_bwd']) / 1e9:.0f} |")
    if isinstance(rep.get("profile_top"), list):  # reports written before the bf16 profile existed
        rep["profile_top"] = {"f32 products": rep["profile_top"]}
    if rep.get("profile_top"):
        L.append("\n## Where afinar's time goes\n\nSee [train_profile.md](train_profile.md); top symbols: "
                 + "; ".join(f"{name}: " + ", ".join(f"`{s}` {p:.1f}%" for p, s in top[:6])
                             for name, top in rep["profile_top"].items()) + ".")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
