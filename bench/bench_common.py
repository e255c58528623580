#!/usr/bin/env python3
"""Helpers shared by the benchmark scripts in bench/ (train_vs_peft.py, train_peft.py,
sft_vs_peft.py, decode_llamacpp.py, cpu_suite.py): CPU facts, load average, memory of the current
process, running a benchmark child process that prints one JSON object as its last stdout line, and
the speed targets with their met/missed verdicts (standard library only)."""
import json
import math
import platform
import resource
import subprocess
import sys
import time


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pct(xs, p):
    """The p-th percentile of xs by nearest rank (the smallest value with at least p% of xs at or
    below it); NaN for an empty list."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(math.ceil(p / 100.0 * len(xs))) - 1))]


def cpu_flags_summary():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    fl = set(line.split(":", 1)[1].split())
                    want = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                            "amx_bf16", "amx_tile"]
                    return " ".join(w for w in want if w in fl)
    except OSError:
        pass
    return ""


def import_torch(threads):
    """torch, set to `threads` intra-op threads and one inter-op thread (the PyTorch side of every
    CPU comparison: the same thread count as afinar's -t)."""
    import torch
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass
    return torch


def proc_kib(field):
    """A /proc/self/status field in KiB (VmRSS, VmHWM = peak RSS), -1 when unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def oom_first():
    """Child set-up: make a benchmark process the OOM killer's first choice, so that a
    configuration that does not fit in RAM dies alone instead of a neighbour."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def run_child(cmd, logf, env=None, prefix=(), tolerate=False, name="bench"):
    """Run cmd, return (parsed JSON of the last stdout line, wall s, CPU share). With tolerate, a
    failed child (e.g. killed for memory) returns ({"failed": reason}, wall, share). stderr is
    appended to logf; `name` prefixes the messages."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run(list(prefix) + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                       preexec_fn=oom_first)
    wall = time.time() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    with open(logf, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stderr + "\n")
    if p.returncode != 0:
        why = f"exit status {p.returncode}" + (" (killed: SIGKILL, most likely out of memory)"
                                               if p.returncode in (-9, 137) else "")
        if tolerate:
            print(f"{name}: failed: {why}: {' '.join(cmd)}", flush=True)
            return {"failed": why, "stderr_tail": p.stderr[-400:]}, wall, cpu / wall if wall > 0 else 0.0
        sys.exit(f"{name}: failed ({why}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    lines = [l for l in p.stdout.splitlines() if l.strip().startswith("{")]
    return json.loads(lines[-1]), wall, cpu / wall if wall > 0 else 0.0


# The speed targets of the per-CPU benchmark suite (bench/cpu_suite.sh) and of the scripts it runs:
# key -> (comparison, threshold, what is compared). One table, so every script states the same aims.
TARGETS = {
    "decode_vs_llamacpp": (">=", 1.5, "decode tok/s, afinar / llama.cpp"),
    "prompt_vs_llamacpp": (">=", 2.5, "prompt tok/s, afinar / llama.cpp"),
    "train_vs_torch": (">=", 2.0, "classification training samples/s, afinar / PyTorch + PEFT (same precision)"),
    "train_mfu": (">=", 0.70, "classification training MFU of afinar (of the measured peak)"),
    "sft_vs_torch": (">=", 2.5, "causal-LM SFT tokens/s, afinar / PyTorch + PEFT f32"),
    "sft_rss_vs_torch": ("<=", 0.2, "causal-LM SFT peak RSS, afinar / PyTorch + PEFT f32"),
    "two_threads_compete": (">=", 1.0, "2 threads / 1 thread with one competing process"),
}


def bf16_peak_key(peak):
    """The key of bench/peak_flops.c's results (with train_vs_peft.py's "_peak" keys) that the bf16 MFU
    is taken over: the AMX TDPBF16PS peak where it was measured (the bf16 products of afinar and of
    PyTorch's oneDNN then run on the tiles), else the AVX512_BF16 VDPBF16PS peak; None without either."""
    return next((k for k in ("bf16_amx_peak", "bf16_avx512_peak") if k in peak), None)


def target_text(key, pct=False):
    """The target as text: ">= 1.5x", "<= 0.2x", or ">= 70%" with pct."""
    op, thr, _ = TARGETS[key]
    return f"{op} {100 * thr:.0f}%" if pct else f"{op} {thr:g}x"


def verdict(key, value):
    """"met" / "missed" for a measured value against TARGETS[key]; None when value is None."""
    if value is None:
        return None
    op, thr, _ = TARGETS[key]
    return "met" if (value >= thr if op == ">=" else value <= thr) else "missed"
