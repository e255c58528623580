#!/usr/bin/env python3
"""Report of bench/thread_scaling.sh (python3, standard library only).

    thread_scaling.py report --work DIR --out DIR [--slug S] [--meta K=V ...]
        Reads the runs listed in DIR/index.tsv (one line a run: phase, threads, rep, file prefix;
        PREFIX.out/.err: the child's stdout/stderr, PREFIX.time: bash `time` "wall user sys"),
        the machine facts (/proc/cpuinfo, sysfs caches, DIR/lscpu.txt, DIR/version.txt,
        DIR/omp_env.txt), and writes OUT/threads-<slug>.md and .json; prints the table.
    thread_scaling.py slug
        Prints the CPU slug of this machine (e.g. amd-epyc-zen3-2c).
"""
import argparse
import hashlib
import json
import os
import re
import statistics
import sys

TIMINGS_RE = re.compile(
    r"timings: prompt (\d+) tokens ([0-9.eE+-]+) s \(([0-9.eE+-]+) tok/s\), "
    r"decode (\d+) tokens ([0-9.eE+-]+) s \(([0-9.eE+-]+) tok/s\)")


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


# --- machine facts -------------------------------------------------------------------------

def cpuinfo(path="/proc/cpuinfo"):
    """First processor block of /proc/cpuinfo (or of a saved copy at path) as a dict."""
    d = {}
    for line in read(path).splitlines():
        if not line.strip():
            if d:
                break
            continue
        k, _, v = line.partition(":")
        d.setdefault(k.strip(), v.strip())
    return d


def lscpu_fields(text):
    d = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep and v.strip():
            d[k.strip()] = v.strip()
    return d


def sysfs_caches():
    """cpu0's caches from sysfs: [{level, type, size, shared_cpu_list}]."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    out = []
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("index"))
    except OSError:
        return out
    for n in names:
        p = os.path.join(base, n)
        out.append({k: read(os.path.join(p, k)).strip() for k in ("level", "type", "size", "shared_cpu_list")})
    return out


def amd_uarch(family, model):
    if family == 23:
        return "zen2" if model >= 0x30 else "zen1"
    if family == 25:  # Zen 4: Genoa/Bergamo/Siena, Raphael, Phoenix; the rest Zen 3
        zen4 = (0x10 <= model <= 0x1F) or (0x60 <= model <= 0x7F) or (0xA0 <= model <= 0xAF)
        return "zen4" if zen4 else "zen3"
    if family == 26:
        return "zen5"
    return "f%d-m%d" % (family, model)


INTEL_UARCH = {85: "skylake-sp", 106: "icelake-sp", 108: "icelake-d", 143: "sapphire-rapids",
               207: "emerald-rapids", 173: "granite-rapids", 175: "sierra-forest", 79: "broadwell-ep",
               63: "haswell-ep", 151: "alder-lake", 183: "raptor-lake", 170: "meteor-lake"}


def uarch(ci):
    vendor = ci.get("vendor_id", "")
    try:
        fam, mod = int(ci.get("cpu family", "-1")), int(ci.get("model", "-1"))
    except ValueError:
        return ""
    if vendor == "AuthenticAMD":
        return amd_uarch(fam, mod)
    if vendor == "GenuineIntel" and fam == 6:
        return INTEL_UARCH.get(mod, "")
    return ""


def clean_words(name):
    s = name.lower()
    s = re.sub(r"\((r|tm|c)\)", " ", s)
    s = re.sub(r"@.*$", " ", s)                    # "@ 2.70GHz"
    s = re.sub(r"\b\d+-core\b", " ", s)
    s = re.sub(r"\b(processor|cpu|with radeon.*)\b", " ", s)
    return "-".join(re.findall(r"[a-z0-9]+", s))


def cpu_slug(ci, ncpu):
    """amd-epyc-zen3-2c, intel-xeon-platinum-8481c-4c, ...: the model name's words, the AMD
    microarchitecture (AMD's names rarely say it; VMs often say only "AMD EPYC"), the Intel one
    when the name has no model number, and the number of cores used (scaling depends on it)."""
    name = ci.get("model name", "") or "unknown-cpu"
    s = clean_words(name) or "cpu"
    ua = uarch(ci)
    if ci.get("vendor_id") == "AuthenticAMD" and ua and ua not in s:
        s += "-" + ua
    elif ci.get("vendor_id") == "GenuineIntel" and not re.search(r"\d", s):
        s += "-" + (ua or "f%s-m%s" % (ci.get("cpu family", "x"), ci.get("model", "x")))
    return "%s-%dc" % (s, ncpu)


def machine_facts(work, ncpu):
    ci = cpuinfo()
    ls = lscpu_fields(read(os.path.join(work, "lscpu.txt")))
    keep = ("Model name", "Vendor ID", "CPU family", "Model", "Stepping", "CPU(s)", "Thread(s) per core",
            "Core(s) per socket", "Socket(s)", "NUMA node(s)", "CPU max MHz", "Hypervisor vendor",
            "L1d cache", "L1i cache", "L2 cache", "L3 cache")
    isa = sorted(f for f in ci.get("flags", "").split()
                 if f.startswith(("avx", "amx", "fma", "f16c", "vnni")))
    mem = re.search(r"MemTotal:\s+(\d+) kB", read("/proc/meminfo"))
    return {
        "model_name": ci.get("model name", ls.get("Model name", "")),
        "vendor": ci.get("vendor_id", ls.get("Vendor ID", "")),
        "family": ci.get("cpu family", ls.get("CPU family", "")),
        "model": ci.get("model", ls.get("Model", "")),
        "stepping": ci.get("stepping", ""),
        "uarch": uarch(ci),
        "cpu_mhz": ci.get("cpu MHz", ""),
        "nproc": ncpu,
        "lscpu": {k: ls[k] for k in keep if k in ls},
        "caches_cpu0": sysfs_caches(),
        "isa_flags": isa,
        "mem_total_kib": int(mem.group(1)) if mem else None,
        "kernel": os.uname().release,
        "slug": cpu_slug(ci, ncpu),
    }


# --- runs ------------------------------------------------------------------------------------

def parse_time(path):
    parts = read(path).split()
    if len(parts) < 3:
        raise SystemExit("thread_scaling: no timing in %s" % path)
    wall, user, sys_ = (float(x) for x in parts[-3:])
    return wall, user, sys_


def parse_run(phase, threads, rep, prefix):
    wall, user, sys_ = parse_time(prefix + ".time")
    r = {"phase": phase, "threads": threads, "rep": rep, "wall_s": wall, "user_s": user, "sys_s": sys_,
         "cpu_share": (user + sys_) / wall if wall > 0 else None}
    out, err = read(prefix + ".out"), read(prefix + ".err")
    if phase == "generate":
        m = None
        for m in TIMINGS_RE.finditer(err):
            pass
        if not m:
            raise SystemExit("thread_scaling: no `timings:` line in %s.err:\n%s" % (prefix, err[-2000:]))
        r.update(prompt_tokens=int(m.group(1)), prompt_s=float(m.group(2)), prompt_tok_s=float(m.group(3)),
                 decode_tokens=int(m.group(4)), decode_s=float(m.group(5)), decode_tok_s=float(m.group(6)),
                 output_sha256=hashlib.sha256(out.encode("utf-8")).hexdigest()[:16])
    else:
        js = None
        for line in out.splitlines():
            if line.startswith("{"):
                js = json.loads(line)
        if js is None:
            raise SystemExit("thread_scaling: no JSON in %s.out; stderr:\n%s" % (prefix, err[-2000:]))
        r.update({k: js.get(k) for k in ("samples_per_s", "tokens_per_s", "timed_s", "step_s", "loss",
                                         "kernel_path", "threads", "batch", "max_seq_len", "peak_rss_kib")})
    return r


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    return "—" if x is None else ("%.*f" % (nd, x))


def report(args):
    work = args.work
    meta = dict(kv.split("=", 1) for kv in (args.meta or []))
    runs = []
    for line in read(os.path.join(work, "index.tsv")).splitlines():
        if line.strip():
            phase, t, rep, prefix = line.split("\t")
            runs.append(parse_run(phase, int(t), int(rep), prefix))
    if not runs:
        raise SystemExit("thread_scaling: no runs in %s/index.tsv" % work)
    ncpu = int(meta.get("nproc", os.cpu_count() or 1))
    mach = machine_facts(work, ncpu)
    slug = args.slug or mach["slug"]
    version = read(os.path.join(work, "version.txt")).strip()
    kpath = re.search(r"->\s*(\S+)", version)
    dthr = re.search(r"threads:\s*(\d+)", version)
    omp = [l for l in read(os.path.join(work, "omp_env.txt")).splitlines() if l.strip()]

    threads = sorted({r["threads"] for r in runs})
    gen = [r for r in runs if r["phase"] == "generate"]
    trn = [r for r in runs if r["phase"] == "train"]
    table = {}
    for t in threads:
        g = [r for r in gen if r["threads"] == t]
        tr = [r for r in trn if r["threads"] == t]
        table[t] = {
            "prompt_tok_s": med([r["prompt_tok_s"] for r in g]),
            "decode_tok_s": med([r["decode_tok_s"] for r in g]),
            "generate_cpu_share": med([r["cpu_share"] for r in g]),
            "train_samples_per_s": med([r["samples_per_s"] for r in tr]),
            "train_tokens_per_s": med([r["tokens_per_s"] for r in tr]),
            "train_cpu_share": med([r["cpu_share"] for r in tr]),
            "n_generate": len(g), "n_train": len(tr),
        }
    phases = [("prompt", "prompt_tok_s"), ("decode", "decode_tok_s"), ("train", "train_samples_per_s")]
    for t in threads:
        for ph, key in phases:
            b, v = table.get(1, {}).get(key), table[t][key]
            table[t]["speedup_" + ph] = v / b if (b and v is not None) else None

    # "two threads are never slower than one", per phase; and where adding threads lost speed
    verdict, drops = {}, {}
    for ph, key in phases:
        a, b = table.get(1, {}).get(key), table.get(2, {}).get(key)
        verdict[ph] = None if (a is None or b is None) else {"holds": b >= a, "ratio_2_to_1": b / a}
        vals = [(t, table[t][key]) for t in threads if table[t][key] is not None]
        drops[ph] = [{"from": t0, "to": t1, "ratio": v1 / v0} for (t0, v0), (t1, v1) in zip(vals, vals[1:]) if v1 < v0]
    hashes = {}
    for r in gen:
        hashes.setdefault(r["threads"], set()).add(r["output_sha256"])
    all_h = set().union(*hashes.values()) if hashes else set()
    identical = len(all_h) == 1 if all_h else None

    idle = float(meta.get("idle_load", "0.5"))
    lb, la = meta.get("load_before", ""), meta.get("load_after", "")
    busy = False
    try:
        busy = float(lb.split()[0]) >= idle
    except (ValueError, IndexError):
        pass

    res = {
        "benchmark": "thread_scaling", "slug": slug, "meta": meta, "machine": mach,
        "afinar": {"version": version, "kernel_path": kpath.group(1) if kpath else None,
                   "default_threads": int(dthr.group(1)) if dthr else None},
        "environment": {"omp_vars": omp, "default": not omp},
        "threads": threads, "table": {str(t): table[t] for t in threads},
        "two_threads_not_slower": verdict, "throughput_drops": drops,
        "greedy_outputs_identical_across_threads": identical,
        "output_sha256_by_threads": {str(t): sorted(h) for t, h in hashes.items()},
        "busy_at_start": busy, "runs": runs,
    }

    have_train = bool(trn)
    hdr = ["threads", "prompt tok/s", "decode tok/s", "generate CPU share"]
    if have_train:
        hdr += ["train samples/s", "train CPU share"]
    hdr += ["speedup prompt", "speedup decode"] + (["speedup train"] if have_train else [])
    rows = ["| " + " | ".join(hdr) + " |", "|" + "---:|" * len(hdr)]
    for t in threads:
        x = table[t]
        c = [str(t), fmt(x["prompt_tok_s"]), fmt(x["decode_tok_s"]), fmt(x["generate_cpu_share"], 2)]
        if have_train:
            c += [fmt(x["train_samples_per_s"], 2), fmt(x["train_cpu_share"], 2)]
        c += [fmt(x["speedup_prompt"], 2), fmt(x["speedup_decode"], 2)]
        if have_train:
            c += [fmt(x["speedup_train"], 2)]
        rows.append("| " + " | ".join(c) + " |")

    def vline():
        parts = []
        for ph, _ in phases:
            v = verdict[ph]
            if ph == "train" and not have_train:
                continue
            if v is None:
                parts.append("%s: not measured (needs 1 and 2 threads)" % ph)
            else:
                parts.append("%s %s (2 threads = %.2fx of 1)" % (ph, "holds" if v["holds"] else "**FAILS**",
                                                                 v["ratio_2_to_1"]))
        return "; ".join(parts)

    s = meta
    L = ["# Thread scaling: afinar prompt, decode and training throughput", ""]
    L.append("- date: %s to %s; git %s" % (s.get("date_start", "?"), s.get("date_end", "?"), s.get("git", "?")))
    L.append("- CPU: %s (%s family %s model %s stepping %s%s), %d cores online (threads/core %s, cores/socket %s, "
             "sockets %s)%s" % (
                 mach["model_name"], mach["vendor"], mach["family"], mach["model"], mach["stepping"],
                 (": " + mach["uarch"]) if mach["uarch"] else "", ncpu,
                 mach["lscpu"].get("Thread(s) per core", "?"), mach["lscpu"].get("Core(s) per socket", "?"),
                 mach["lscpu"].get("Socket(s)", "?"),
                 ("; hypervisor " + mach["lscpu"]["Hypervisor vendor"]) if "Hypervisor vendor" in mach["lscpu"] else ""))
    caches = ", ".join("%s %s" % (k.replace(" cache", ""), mach["lscpu"][k])
                       for k in ("L1d cache", "L2 cache", "L3 cache") if k in mach["lscpu"])
    per = ", ".join("L%s%s %s (CPUs %s)" % (c["level"], {"Data": "d", "Instruction": "i"}.get(c["type"], ""),
                                           c["size"], c["shared_cpu_list"]) for c in mach["caches_cpu0"])
    L.append("- caches: %s%s" % (caches or "?", ("; cpu0: " + per) if per else ""))
    L.append("- ISA flags: %s; memory %s GiB; kernel %s" % (
        " ".join(mach["isa_flags"]) or "?",
        "%.1f" % (mach["mem_total_kib"] / 1048576) if mach["mem_total_kib"] else "?", mach["kernel"]))
    L.append("- afinar: %s" % "; ".join(version.splitlines()))
    L.append("- environment: %s" % ("no OMP_* variables set (the default environment)" if not omp else
                                    "**not the default environment**: " + " ".join(omp)))
    L.append("- generate: `%s generate -m %s -f PROMPT -n %s --temp 0 --ignore-eos -t T --timings%s`; "
             "prompt %s tokens (plain text, no chat template); median of %s run(s) per thread count, interleaved "
             "(order reversed every other repetition, after one untimed warm-up run)" % (
                 s.get("build", "build") + "/afinar", s.get("model", "?"), s.get("ndecode", "?"),
                 (" " + s["gen_args"]) if s.get("gen_args") else "",
                 fmt(med([r["prompt_tokens"] for r in gen]), 0), s.get("reps", "?")))
    if have_train:
        L.append("- training: `bench_train train --targets %s --batch %s --warmup %s --steps %s --threads T%s` "
                 "(LoRA r=16 on all layers, classification head, AdamW) on %s BBC samples of %s tokens; "
                 "median of %s run(s); samples/s over the timed steps" % (
                     s.get("train_targets", "?"), s.get("train_batch", "?"), s.get("train_warmup", "?"), s.get("train_steps", "?"),
                     (" " + s["train_args"]) if s.get("train_args") else "", s.get("train_n", "?"),
                     s.get("train_seq", "?"), s.get("train_reps", "?")))
    L.append("- load average (1/5/15 min) before: %s, after: %s; %s" % (lb, la, s.get("prio", "")))
    L += ["", "\n".join(rows), ""]
    L.append("CPU share = (user + sys CPU s) / wall s of the whole process (at most T): for generate "
             "that includes loading and the prompt, but decode dominates; for training, loading and the "
             "warm-up step. Speedups are against the 1-thread medians.")
    L.append("")
    L.append("Two threads are never slower than one: %s." % vline())
    dl = []
    for ph, _ in phases:
        if ph == "train" and not have_train:
            continue
        for d in drops[ph]:
            dl.append("%s %d->%d threads %.2fx" % (ph, d["from"], d["to"], d["ratio"]))
    L.append("")
    L.append("Throughput drops when adding threads: %s." % ("; ".join(dl) if dl else "none"))
    L.append("")
    if identical is None:
        pass
    elif identical:
        L.append("Greedy outputs identical at every thread count and repetition: yes.")
    else:
        L.append("Greedy outputs identical at every thread count and repetition: **no** (sha256 prefixes by threads: %s)."
                 % "; ".join("%d: %s" % (t, ",".join(sorted(h))) for t, h in sorted(hashes.items())))
    if busy:
        L += ["", "**Warning**: the machine was busy (load %s on %d cores, threshold %s) when the benchmark "
                  "started; threads that wait for a descheduled partner suffer most, treat these numbers as void."
              % (lb.split()[0], ncpu, idle)]
    md = "\n".join(L) + "\n"

    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, "threads-" + slug)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(md)
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print(md)
    print("thread_scaling: wrote %s.md and %s.json" % (base, base))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report")
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--slug", default="")
    r.add_argument("--meta", action="append", help="KEY=VALUE recorded in the report")
    sub.add_parser("slug")
    a = ap.parse_args()
    if a.cmd == "slug":
        print(cpu_slug(cpuinfo(), len(os.sched_getaffinity(0))))
    else:
        report(a)


if __name__ == "__main__":
    sys.exit(main())
