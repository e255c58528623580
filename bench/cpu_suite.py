#!/usr/bin/env python3
"""The pure parts of bench/cpu_suite.sh (python3, standard library only): the machine's facts and
file-name slug, the decode weight bytes per token, and the one table of a CPU with every target
met or missed.

    cpu_suite.py slug [--cpuinfo FILE] [--cores N]
        The CPU slug (bench/thread_scaling.py's: model-name words + AMD Zen generation or Intel
        microarchitecture + cores), e.g. amd-epyc-zen4-2c.
    cpu_suite.py facts [--cpuinfo FILE] [--meminfo FILE] [--cores N]
        The machine facts as JSON: model name, vendor, family/model/stepping, microarchitecture,
        ISA (AVX2, AVX-512, VNNI, BF16, AMX), cores, memory, slug.
    cpu_suite.py weight-bytes INFO_TXT
        Bytes of quantized weights one decode token reads, from `afinar info MODEL` output: every
        tensor except the token embedding (one row is read), which counts in full when it is the
        LM head too (tied: no output.weight). JSON.
    cpu_suite.py report --work DIR --out DIR [--cpuinfo FILE] [--meminfo FILE] [--cores N]
                        [--meta KEY=VALUE ...]
        Reads the parts' results under DIR (parts.tsv: part, status, seconds, note per line;
        decode/decode.json, train/train_vs_peft.json, sft/sft_vs_peft.json, stream.json,
        model_info.txt, threads/threads-compete.json) and writes OUT/cpu-<slug>.md and .json
        (atomically); prints the table. A part that did not run, or whose file is missing or
        unreadable, gives rows saying so; the report itself fails (exit 1) only when no part left
        a result.

Definitions (docs in bench/README.md, "One run per CPU kind"):
  decode % of the weight-bandwidth floor = achieved decode tok/s / (read bandwidth / weight bytes
  per token), the bandwidth measured by bench/stream_read.c with the decode's thread count.
  Targets and verdicts: bench_common.TARGETS.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import TARGETS, bf16_peak_key, target_text, verdict  # noqa: E402
import thread_scaling  # noqa: E402

PARTS = ("stream", "decode", "train", "sft", "threads")


# --- machine facts ----------------------------------------------------------------------------

def cores_default():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def isa(flags):
    """The instruction-set features that decide the kernels and the peers' paths."""
    f = set(flags.split())
    return {
        "avx2": "avx2" in f and "fma" in f,
        "avx512": "avx512f" in f,
        "vnni": sorted(x for x in ("avx512_vnni", "avx_vnni") if x in f),
        "bf16": sorted(x for x in ("avx512_bf16", "amx_bf16") if x in f),
        "amx": sorted(x for x in ("amx_tile", "amx_int8", "amx_bf16") if x in f),
    }


def isa_text(i):
    parts = ["AVX2" if i["avx2"] else "no AVX2", "AVX-512" if i["avx512"] else "no AVX-512"]
    parts.append("VNNI (" + ", ".join(i["vnni"]) + ")" if i["vnni"] else "no VNNI")
    parts.append("BF16 (" + ", ".join(i["bf16"]) + ")" if i["bf16"] else "no BF16")
    parts.append("AMX (" + ", ".join(i["amx"]) + ")" if i["amx"] else "no AMX")
    return ", ".join(parts)


def facts(cpuinfo_path, meminfo_path, cores):
    ci = thread_scaling.cpuinfo(cpuinfo_path)
    if not ci:
        raise SystemExit(f"cpu_suite: {cpuinfo_path}: no processor block (not a /proc/cpuinfo copy?)")
    mem = re.search(r"MemTotal:\s+(\d+) kB", thread_scaling.read(meminfo_path))
    return {
        "model_name": ci.get("model name", "?"), "vendor": ci.get("vendor_id", "?"),
        "family": ci.get("cpu family", "?"), "model": ci.get("model", "?"), "stepping": ci.get("stepping", "?"),
        "uarch": thread_scaling.uarch(ci) or "?", "cores": cores, "isa": isa(ci.get("flags", "")),
        "mem_gib": round(int(mem.group(1)) / 1048576, 1) if mem else None,
        "slug": thread_scaling.cpu_slug(ci, cores),
    }


# --- decode weight bytes ---------------------------------------------------------------------

TENSOR_RE = re.compile(r"^\s+(\S+)\s+(\S+)\s+\[[0-9, ]*\]\s+(\d+)\s*$")


def weight_bytes(info_text):
    """(bytes per decode token, what the LM head is, number of tensors) from `afinar info`."""
    tensors = {}
    in_table = False
    for line in info_text.splitlines():
        if line.startswith("tensors ("):
            in_table = True
            continue
        m = TENSOR_RE.match(line) if in_table else None
        if m and m.group(1) != "name":
            tensors[m.group(1)] = (m.group(2), int(m.group(3)))
    if not tensors:
        raise ValueError("no tensor table (the 'tensors (...)' section of `afinar info`)")
    tied = "output.weight" not in tensors
    total = 0
    for name, (_, nbytes) in tensors.items():
        if "token_embd" in name and not (tied and name == "token_embd.weight"):
            continue  # an embedding lookup reads one row
        total += nbytes
    head = "token_embd.weight (tied)" if tied else "output.weight"
    ht = tensors.get("token_embd.weight" if tied else "output.weight", ("?", 0))[0]
    return {"bytes_per_token": total, "lm_head": f"{head}, {ht}", "tensors": len(tensors)}


# --- report ----------------------------------------------------------------------------------

def load_json(path):
    """(object, None) or (None, reason)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, f"no {os.path.basename(path)}"
    except (OSError, ValueError) as e:
        return None, f"{os.path.basename(path)} unreadable: {e}"


def read_parts(path):
    """parts.tsv -> {part: {"status", "seconds", "note"}}; malformed lines are named and skipped."""
    parts = {}
    for n, line in enumerate(thread_scaling.read(path).splitlines(), 1):
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) < 3 or f[0] not in PARTS:
            print(f"cpu_suite: {path}:{n}: malformed line skipped: {line!r}", file=sys.stderr)
            continue
        try:
            secs = float(f[2])
        except ValueError:
            secs = None
        parts[f[0]] = {"status": f[1], "seconds": secs, "note": f[3] if len(f) > 3 else ""}
    return parts


def fmt(x, nd=1, unit=""):
    return "—" if x is None else f"{x:.{nd}f}{unit}"


def llama_build(system_info, isa_):
    """'native' or 'portable (...)': a portable llama.cpp (scripts/setup_llamacpp.sh NATIVE=0: no
    llamafile sgemm, no weight repacking, no AVX-512 where the CPU has it) understates llama.cpp."""
    why = []
    if "LLAMAFILE = 1" not in system_info:
        why.append("no LLAMAFILE")
    if "REPACK = 1" not in system_info:
        why.append("no REPACK")
    if isa_["avx512"] and "AVX512 = 1" not in system_info:
        why.append("no AVX512 although the CPU has it")
    return "native" if not why else "portable (" + ", ".join(why) + ")"


class Rows:
    def __init__(self):
        self.rows = []

    def add(self, part, what, afinar, peer, value, key, pct=False, note="", caveat=""):
        """One measurement; value is the ratio (or fraction) judged against TARGETS[key]; caveat
        (e.g. "portable peer") is printed beside the verdict."""
        v = verdict(key, value) if key else None
        self.rows.append({"part": part, "measure": what, "afinar": afinar, "peer": peer, "caveat": caveat,
                          "value": value, "value_text": fmt(100 * value, 0, "%") if pct and value is not None
                          else fmt(value, 2, "x"), "target_key": key,
                          "target": target_text(key, pct) if key else "— (reported)",
                          "verdict": v or ("not measured" if key else "—"), "note": note})

    def missing(self, part, what, why, key=None, pct=False):
        self.rows.append({"part": part, "measure": what, "afinar": "—", "peer": "—", "value": None, "caveat": "",
                          "value_text": "—", "target_key": key,
                          "target": target_text(key, pct) if key else "— (reported)",
                          "verdict": "not measured", "note": why})


def part_reason(parts, name, fallback):
    p = parts.get(name)
    if p is None:
        return "not run (no record)"
    if p["status"] != "ran":
        return f"{p['status']}: {p['note']}" if p["note"] else p["status"]
    return fallback


def decode_rows(R, work, parts, fx, meta):
    d, why = load_json(os.path.join(work, "decode", "decode.json"))
    if d is None:
        why = part_reason(parts, "decode", why)
        for what, key in (("decode tok/s vs llama.cpp", "decode_vs_llamacpp"),
                          ("prompt tok/s vs llama.cpp", "prompt_vs_llamacpp")):
            R.missing("decode", what, why, key)
        R.missing("decode", "decode, % of the weight-bandwidth floor", why)
        return {}
    info, af, la = d.get("info", {}), d.get("afinar", {}), d.get("llama_cpp", {})
    peer_note, caveat = "", ""
    if "system_info" in info:
        kind = llama_build(info["system_info"], fx["isa"])
        peer_note = (f"llama-bench ({info['llama_bench']}), {kind} build" if "llama_bench" in info
                     else f"llama-cpp-python {info.get('llama_cpp_python', '?')}, {kind} build")
        if kind != "native":
            peer_note += ": llama.cpp is slower than it can be here, the ratio is not a target figure"
            caveat = "portable peer"
    else:
        peer_note = "llama.cpp not run: " + (parts.get("decode", {}).get("note") or "no llama-cpp-python (LLAMA_VENV)")
    ratio = d.get("ratio_afinar_over_llama", {})
    for phase, key in (("decode", "decode_vs_llamacpp"), ("prompt", "prompt_vs_llamacpp")):
        a, p = af.get(f"median_{phase}_tps"), la.get(f"median_{phase}_tps")
        R.add("decode", f"{phase} tok/s vs llama.cpp", fmt(a), fmt(p), ratio.get(f"{phase}_tps"), key,
              note=peer_note, caveat=caveat)
    # weight-bandwidth floor
    out = {}
    why = []
    s, swhy = load_json(os.path.join(work, "stream.json"))
    if s is None:
        why.append("bandwidth: " + part_reason(parts, "stream", swhy))
    try:
        wb = weight_bytes(thread_scaling.read(os.path.join(work, "model_info.txt")))
    except ValueError as e:
        wb = None
        why.append(f"model_info.txt: {e}")
    if why:
        R.missing("decode", "decode, % of the weight-bandwidth floor", "; ".join(why))
        return out
    thr = int(info.get("threads") or 0)
    runs = s.get("runs") or []
    run = next((r for r in runs if r.get("threads") == thr), None) or (max(runs, key=lambda r: r.get("gbps", 0))
                                                                      if runs else None)
    if run is None or not run.get("gbps"):
        R.missing("decode", "decode, % of the weight-bandwidth floor", "stream.json has no runs")
        return out
    floor = run["gbps"] * 1e9 / wb["bytes_per_token"]
    a, p = af.get("median_decode_tps"), la.get("median_decode_tps")
    out = {"bytes_per_token": wb["bytes_per_token"], "lm_head": wb["lm_head"], "bandwidth_gbps": run["gbps"],
           "bandwidth_threads": run["threads"], "floor_tok_s": floor}
    R.add("decode", "decode, % of the weight-bandwidth floor", fmt(100 * a / floor, 0, "%") if a else "—",
          fmt(100 * p / floor, 0, "%") if p else "—", a / floor if a else None, None, pct=True,
          note=f"floor {floor:.0f} tok/s = {run['gbps']:.1f} GB/s read ({run['threads']} threads) / "
               f"{wb['bytes_per_token'] / 1e6:.1f} MB of weights per token (LM head {wb['lm_head']}); "
               f"buffer {s.get('buffer_bytes', 0) / 2**20:.0f} MiB, L3 {s.get('l3_bytes', 0) / 2**20:.0f} MiB")
    return out


# what each MFU denominator measured (bench/peak_flops.c)
peak_name = {"f32": "f32 FMA", "bf16_amx_peak": "bf16 AMX TDPBF16PS", "bf16_avx512_peak": "bf16 VDPBF16PS"}


def train_rows(R, work, parts):
    t, why = load_json(os.path.join(work, "train", "train_vs_peft.json"))
    if t is None:
        why = part_reason(parts, "train", why)
        R.missing("train", "classification training vs PyTorch f32", why, "train_vs_torch")
        R.missing("train", "classification training MFU (f32)", why, "train_mfu", pct=True)
        return {}
    groups = {}
    for r in t.get("runs", []):
        groups.setdefault((r.get("seq"), r.get("targets_set")), {})[r.get("config")] = r
    ok = lambda g, k: k in g and "failed" not in g[k]  # noqa: E731
    bk = bf16_peak_key(t.get("peak_flops", {}))  # the bf16 MFU's denominator
    for (S, tg), g in groups.items():
        label = f"seq {S}, {tg}"
        for prec, a_k, t_k in (("f32", "afinar-q4", "torch-f32"), ("bf16", "afinar-q4-bf16", "torch-bf16")):
            what = (f"classification training {prec} ({label}) vs PyTorch {prec}"
                    + (" autocast" if prec == "bf16" else ""))
            if a_k not in g and t_k not in g:
                continue
            if not (ok(g, a_k) and ok(g, t_k)):
                why = next((g[k]["failed"] for k in (a_k, t_k) if k in g and "failed" in g[k]),
                           "not run: " + (t_k if a_k in g else a_k) + " missing")
                R.missing("train", what, why, "train_vs_torch")
                continue
            a, p = g[a_k], g[t_k]
            R.add("train", what, f"{a['samples_per_s']:.3f} samples/s", f"{p['samples_per_s']:.3f} samples/s",
                  a["samples_per_s"] / p["samples_per_s"], "train_vs_torch",
                  note=f"peak RSS {a['peak_rss_kib'] / 1024:.0f} vs {p['peak_rss_kib'] / 1024:.0f} MiB")
            if prec == "bf16" and ok(g, "afinar-q4") and ok(g, "torch-f32"):
                # what a user gets without flags: the automatic recipe takes bf16 frozen products for
                # classification where they run faster than f32 (afinar train --frozen-precision auto)
                d = a if a["samples_per_s"] > g["afinar-q4"]["samples_per_s"] else g["afinar-q4"]
                R.add("train", f"classification training, afinar's default ({'bf16' if d is a else 'f32'} "
                      f"products chosen by the recipe; {label}) vs PyTorch f32",
                      f"{d['samples_per_s']:.3f} samples/s", f"{g['torch-f32']['samples_per_s']:.3f} samples/s",
                      d["samples_per_s"] / g["torch-f32"]["samples_per_s"], "train_vs_torch")
            mk = "mfu_bf16" if prec == "bf16" else "mfu_f32"
            if a.get(mk) is not None:
                R.add("train", f"classification training MFU {prec} ({label})", fmt(100 * a[mk], 0, "%"),
                      fmt(100 * p.get(mk, p.get("mfu_f32")), 0, "%") if p.get(mk, p.get("mfu_f32")) is not None
                      else "—", a[mk], "train_mfu", pct=True,
                      note=f"of the measured {peak_name[bk if prec == 'bf16' else 'f32']} peak")
        if "afinar-q4-int8" in g and ok(g, "torch-f32"):  # --frozen-precision int8 (AVX512_VNNI)
            what = f"classification training, int8 frozen products ({label}) vs PyTorch f32"
            if not ok(g, "afinar-q4-int8"):
                R.missing("train", what, g["afinar-q4-int8"]["failed"], "train_vs_torch")
            else:
                a, p = g["afinar-q4-int8"], g["torch-f32"]
                R.add("train", what, f"{a['samples_per_s']:.3f} samples/s", f"{p['samples_per_s']:.3f} samples/s",
                      a["samples_per_s"] / p["samples_per_s"], "train_vs_torch",
                      note="opt-in (--frozen-precision int8), not the default; quality: docs/RECIPE.md")
    pk = t.get("peak_flops", {})
    return {k: pk[k] for k in ("f32_avx512_peak", "f32_avx2_peak", "bf16_avx512_peak", "bf16_amx_peak") if k in pk}


def sft_rows(R, work, parts):
    s, why = load_json(os.path.join(work, "sft", "sft_vs_peft.json"))
    if s is None or "ratios" not in s:
        if s is not None:
            why = "; ".join(f"{k}: {v['failed']}" for k, v in (("afinar", s.get("afinar", {})),
                            ("PyTorch", s.get("pytorch_f32", {}))) if "failed" in v) or "no ratios"
        why = part_reason(parts, "sft", why)
        R.missing("sft", "causal-LM SFT tokens/s vs PyTorch f32", why, "sft_vs_torch")
        R.missing("sft", "causal-LM SFT peak RSS vs PyTorch f32", why, "sft_rss_vs_torch")
        return
    a, p, q = s["afinar"], s["pytorch_f32"], s["ratios"]
    R.add("sft", "causal-LM SFT tokens/s vs PyTorch f32", fmt(a.get("tokens_per_s")), fmt(p.get("tokens_per_s")),
          q.get("tokens_per_s_afinar_over_torch"), "sft_vs_torch")
    R.add("sft", "causal-LM SFT peak RSS vs PyTorch f32", fmt(a.get("peak_rss_kib", 0) / 1024, 0, " MiB"),
          fmt(p.get("peak_rss_kib", 0) / 1024, 0, " MiB"), q.get("peak_rss_afinar_over_torch"), "sft_rss_vs_torch")
    b, pb = s.get("afinar_bf16", {}), s.get("pytorch_bf16", {})
    if "tokens_per_s_afinar_bf16_over_torch_bf16" in q:
        R.add("sft", "causal-LM SFT tokens/s, bf16 vs PyTorch bf16 autocast", fmt(b.get("tokens_per_s")),
              fmt(pb.get("tokens_per_s")), q["tokens_per_s_afinar_bf16_over_torch_bf16"], "sft_vs_torch")
    d = s.get("afinar_default", {})
    if "tokens_per_s_afinar_default_over_torch" in q:
        R.add("sft", f"causal-LM SFT tokens/s, afinar's default ({d.get('frozen_precision') or '?'} products chosen "
              "by the recipe) vs PyTorch f32", fmt(d.get("tokens_per_s")), fmt(p.get("tokens_per_s")),
              q["tokens_per_s_afinar_default_over_torch"], "sft_vs_torch")


def thread_rows(R, work, parts):
    t, why = load_json(os.path.join(work, "threads", "threads-compete.json"))
    if t is None:
        R.missing("threads", "2 threads vs 1, one competing process", part_reason(parts, "threads", why),
                  "two_threads_compete")
        return
    tab = t.get("table", {})
    for ph, key in (("prompt", "prompt_tok_s"), ("decode", "decode_tok_s"), ("train", "train_samples_per_s")):
        v = (t.get("two_threads_not_slower") or {}).get(ph)
        if v is None:
            continue
        one, two = tab.get("1", {}).get(key), tab.get("2", {}).get(key)
        R.add("threads", f"{ph}: 2 threads vs 1, one competing process", fmt(two, 2 if ph == "train" else 1),
              fmt(one, 2 if ph == "train" else 1), v.get("ratio_2_to_1"), "two_threads_compete",
              note="afinar alone: the 'afinar' column is 2 threads, the 'peer' column 1 thread")


def peer_versions(work):
    """The peers' versions as recorded by the parts' own reports (absent parts give nothing)."""
    out = []
    d, _ = load_json(os.path.join(work, "decode", "decode.json"))
    if d and "llama_cpp_python" in d.get("info", {}):
        out.append(f"llama-cpp-python {d['info']['llama_cpp_python']} ({d['info'].get('system_info', '?')[:160]})")
    elif d and "llama_bench" in d.get("info", {}):
        out.append(f"llama.cpp's llama-bench {d['info']['llama_bench']} ({d['info'].get('system_info', '?')[:160]})")
    v = None
    t, _ = load_json(os.path.join(work, "train", "train_vs_peft.json"))
    if t:
        v = next((r["versions"] for r in t.get("runs", []) if "versions" in r), None)
    if v is None:
        f, _ = load_json(os.path.join(work, "sft", "sft_vs_peft.json"))
        v = (f or {}).get("pytorch_f32", {}).get("versions")
    if v:
        out.append(", ".join(f"{k} {v[k]}" for k in ("torch", "transformers", "peft", "cpu_capability") if k in v))
    return out


def report(a):
    meta = dict(kv.split("=", 1) for kv in (a.meta or []) if "=" in kv)
    fx = facts(a.cpuinfo, a.meminfo, a.cores or cores_default())
    parts = read_parts(os.path.join(a.work, "parts.tsv"))
    R = Rows()
    floor = decode_rows(R, a.work, parts, fx, meta)
    peaks = train_rows(R, a.work, parts)
    sft_rows(R, a.work, parts)
    thread_rows(R, a.work, parts)
    if all(r["verdict"] == "not measured" for r in R.rows):
        raise SystemExit(f"cpu_suite: no part left a result under {a.work} (see its *.log files)")
    met = sum(r["verdict"] == "met" for r in R.rows)
    missed = sum(r["verdict"] == "missed" for r in R.rows)
    unmeasured = sum(r["verdict"] == "not measured" for r in R.rows)
    res = {"benchmark": "cpu_suite", "slug": fx["slug"], "machine": fx, "meta": meta, "parts": parts,
           "targets": {k: {"op": v[0], "threshold": v[1], "what": v[2]} for k, v in TARGETS.items()},
           "rows": R.rows, "decode_floor": floor, "peak_gflops": peaks,
           "summary": {"met": met, "missed": missed, "not_measured": unmeasured}}

    L = [f"# afinar on {fx['model_name']} ({fx['slug']})", ""]
    L.append(f"- CPU: {fx['model_name']}, {fx['vendor']} family {fx['family']} model {fx['model']} stepping "
             f"{fx['stepping']} ({fx['uarch']}), {fx['cores']} cores used, memory "
             f"{fmt(fx['mem_gib'], 1, ' GiB')}; {isa_text(fx['isa'])}")
    if peaks:
        L.append("- measured peak, the MFU denominators (bench/peak_flops.c: max(all threads, threads x 1 "
                 "thread)): " + ", ".join(f"{k.replace('_peak', '').replace('_', ' ')} {v:.0f} GFLOP/s"
                                          for k, v in peaks.items()))
    if floor:
        L.append(f"- read bandwidth (bench/stream_read.c, {floor['bandwidth_threads']} threads): "
                 f"{floor['bandwidth_gbps']:.1f} GB/s; decode reads {floor['bytes_per_token'] / 1e6:.1f} MB of "
                 f"weights per token: floor {floor['floor_tok_s']:.0f} tok/s")
    peers = peer_versions(a.work)
    if peers:
        L.append("- peers: " + "; ".join(peers))
    for k in ("date_start", "date_end", "git", "threads", "quick", "model", "load_before", "load_after"):
        if k in meta:
            L.append(f"- {k.replace('_', ' ')}: {meta[k]}")
    if meta.get("quick") == "1":
        L.append("- **QUICK=1: smallest settings, a smoke run; not speed figures.**")
    L += ["", f"Targets: {met} met, {missed} missed, {unmeasured} not measured.", "",
          "| part | measurement | afinar | peer | ratio | target | verdict | note |",
          "|---|---|---:|---:|---:|---|---|---|"]
    for r in R.rows:
        v = f"**{r['verdict']}**" if r["verdict"] in ("met", "missed") else r["verdict"]
        if r.get("caveat") and r["verdict"] in ("met", "missed"):
            v += f" ({r['caveat']})"
        L.append(f"| {r['part']} | {r['measure']} | {r['afinar']} | {r['peer']} | {r['value_text']} | "
                 f"{r['target']} | {v} | {r['note']} |")
    L += ["", "## Parts", "", "| part | status | seconds | note |", "|---|---|---:|---|"]
    for name in PARTS:
        p = parts.get(name, {"status": "no record", "seconds": None, "note": ""})
        L.append(f"| {name} | {p['status']} | {fmt(p['seconds'], 0)} | {p['note']} |")
    L += ["", "Peers: llama.cpp through its own llama-bench or llama-cpp-python (bench/run_decode.sh), PyTorch + transformers + PEFT "
          "(bench/train_vs_peft, bench/sft_vs_peft.sh); the thread rows are afinar's alone "
          "(bench/thread_scaling.sh COMPETE=1). Each part's own report lies beside this file's sources in "
          f"{meta.get('work', a.work)}. Definitions: bench/README.md, \"One run per CPU kind\"."]
    md = "\n".join(L) + "\n"

    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, "cpu-" + fx["slug"])
    for ext, text in ((".md", md), (".json", json.dumps(res, indent=1) + "\n")):
        with open(base + ext + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(base + ext + ".tmp", base + ext)
    print(md)
    print(f"cpu_suite: wrote {base}.md and {base}.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("slug", "facts", "report"):
        p = sub.add_parser(name)
        p.add_argument("--cpuinfo", default="/proc/cpuinfo")
        p.add_argument("--meminfo", default="/proc/meminfo")
        p.add_argument("--cores", type=int, default=0, help="cores used (default: this process's CPUs)")
        if name == "report":
            p.add_argument("--work", required=True)
            p.add_argument("--out", required=True)
            p.add_argument("--meta", action="append", help="KEY=VALUE recorded in the report")
    w = sub.add_parser("weight-bytes")
    w.add_argument("info")
    a = ap.parse_args()
    if a.cmd == "weight-bytes":
        try:
            print(json.dumps(weight_bytes(thread_scaling.read(a.info))))
        except ValueError as e:
            raise SystemExit(f"cpu_suite: {a.info}: {e}")
        return 0
    if a.cmd == "report":
        report(a)
        return 0
    fx = facts(a.cpuinfo, a.meminfo, a.cores or cores_default())
    print(fx["slug"] if a.cmd == "slug" else json.dumps(fx, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
