#!/usr/bin/env python3
"""Side-by-side prompt-processing and decode speed: `afinar generate` vs llama.cpp.

Both engines run the same GGUF file, the same prompt, the same thread count, greedy
decoding. llama.cpp is driven through llama-cpp-python (built from source, see
bench/run_decode.sh). Each repetition runs llama.cpp in a fresh child process (so no
llama.cpp thread can spin while afinar runs) and then one `afinar generate`; the
repetitions are interleaved (llama, afinar, llama, afinar, ...) so slow drift of the
machine (turbo, neighbours) hits both alike. The median over repetitions is reported.

llama.cpp numbers: prompt = one llama_decode of all prompt tokens (n_batch 512, one
ubatch); decode = n_gen single-token llama_decode calls, each followed by a greedy argmax
over the last logits. Two timings are kept: wall clock around the Python loop, and
llama.cpp's own counters (llama_perf_context: t_p_eval_ms / t_eval_ms), which exclude the
Python overhead. The ratio uses the internal counters (the stricter comparison for afinar).
One untimed warm-up (prompt + 16 decode steps) precedes the timed pass in each child.

afinar numbers: parsed from the line the CLI prints on stderr with --timings:
  timings: prompt 128 tokens 0.123 s (1040.65 tok/s), decode 128 tokens 1.234 s (103.73 tok/s)
One untimed afinar run precedes the repetitions (page cache, CPU clocks).

Usage (normally through bench/run_decode.sh):
  python bench/decode_llamacpp.py [--model F] [--afinar build/afinar] [--threads 2]
         [--n-gen 128] [--reps 3] [--out bench/results] [--skip-afinar] [--skip-llama]
Writes OUT/decode.md and OUT/decode.json.
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

from bench_common import target_text, verdict

# The prompt: plain prose (no chat template) that SmolLM2's tokenizer cuts into exactly
# 128 tokens (checked at run time and reported). Plain continuation text keeps greedy
# decoding from stopping at an end-of-sequence token early.
PROMPT = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompt_128.txt"),
              encoding="utf-8").read()

TIMINGS_RE = re.compile(
    r"timings: prompt (\d+) tokens ([0-9.eE+-]+) s \(([0-9.eE+-]+) tok/s\), "
    r"decode (\d+) tokens ([0-9.eE+-]+) s \(([0-9.eE+-]+) tok/s\)")


def parse_timings(stderr_text):
    """Returns a dict from the last `timings:` line of afinar's stderr, or None."""
    m = None
    for m in TIMINGS_RE.finditer(stderr_text):
        pass
    if m is None:
        return None
    n_p, t_p, r_p, n_d, t_d, r_d = m.groups()
    return {"prompt_tokens": int(n_p), "prompt_s": float(t_p), "prompt_tps": float(r_p),
            "decode_tokens": int(n_d), "decode_s": float(t_d), "decode_tps": float(r_d)}


# ----------------------------------------------------------------------------- llama.cpp

def llama_child(model, threads, n_gen):
    """One llama.cpp repetition (runs in a child process); prints one JSON line."""
    import ctypes
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, logits_all=False, verbose=False)
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()
    toks = llm.tokenize(PROMPT.encode("utf-8"), add_bos=True, special=False)

    def argmax_last():
        p = llama_cpp.llama_get_logits_ith(ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)),
                                                   shape=(n_vocab,))))

    def run(n_steps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks)
        tok = argmax_last()
        t1 = time.perf_counter()
        out = [tok]
        for _ in range(n_steps):
            llm.eval([tok])
            tok = argmax_last()
            out.append(tok)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, out

    run(16)                                   # warm-up, untimed
    llama_cpp.llama_perf_context_reset(ctx)
    tp, td, out = run(n_gen)
    perf = llama_cpp.llama_perf_context(ctx)
    res = {
        "prompt_tokens": len(toks), "decode_tokens": n_gen,
        "prompt_s_wall": tp, "decode_s_wall": td,
        "prompt_tps_wall": len(toks) / tp, "decode_tps_wall": n_gen / td,
        "prompt_s": perf.t_p_eval_ms / 1e3, "decode_s": perf.t_eval_ms / 1e3,
        "perf_n_p_eval": perf.n_p_eval, "perf_n_eval": perf.n_eval,
        # generated text: the token picked after the prompt + the n_gen decode steps' picks
        "text": llm.detokenize(out[:n_gen]).decode("utf-8", errors="replace"),
    }
    res["prompt_tps"] = perf.n_p_eval / res["prompt_s"] if res["prompt_s"] > 0 else None
    res["decode_tps"] = perf.n_eval / res["decode_s"] if res["decode_s"] > 0 else None
    print(json.dumps(res))


def run_child(cmd, **kw):
    """subprocess.run that also returns the child's CPU share: (user+sys CPU s) / wall s.
    With T busy threads an undisturbed run shows about T; much less means the machine was
    busy (on few cores, spinning thread barriers then slow both engines badly)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return p, cpu / wall if wall > 0 else None


def run_llama_rep(args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child-llama", "--model", args.model,
           "--threads", str(args.threads), "--n-gen", str(args.n_gen)]
    p, share = run_child(cmd)
    if p.returncode != 0:
        raise RuntimeError(f"llama.cpp child failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["cpu_share"] = share
    return res


def llama_bench_build(path):
    """Build facts of a llama-bench binary from the CMakeCache.txt of its build tree (bin/.. or, for
    the copy scripts/setup_llama_server.sh puts in DIR/bin, DIR/build), in
    llama.cpp's system_info spelling for the flags bench/cpu_suite.py judges ('LLAMAFILE = 1',
    'REPACK = 1', 'AVX512 = 1' where a native build on an AVX-512 CPU has it)."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(path)))  # BUILD/bin/.. or DIR/bin/..
    cache = next((c for c in (os.path.join(top, "CMakeCache.txt"), os.path.join(top, "build", "CMakeCache.txt"))
                  if os.path.isfile(c)), os.path.join(top, "CMakeCache.txt"))
    kv = {}
    try:
        with open(cache) as f:
            for line in f:
                if ":" in line and "=" in line and not line.startswith(("#", "//")):
                    k, v = line.rstrip("\n").split("=", 1)
                    kv[k.split(":")[0]] = v
    except OSError:
        return "build facts unknown (no CMakeCache.txt beside " + path + ")"
    on = lambda k: kv.get(k, "OFF").upper() in ("ON", "1", "TRUE")
    avx512 = on("GGML_AVX512") or (on("GGML_NATIVE") and "avx512f" in open("/proc/cpuinfo").read())
    return (f"llama-bench, GGML_NATIVE={kv.get('GGML_NATIVE', '?')} OPENMP={kv.get('GGML_OPENMP', '?')} | "
            f"AVX512 = {int(avx512)} | LLAMAFILE = {int(on('GGML_LLAMAFILE'))} | REPACK = {int(on('GGML_CPU_REPACK'))}")


def run_llama_bench_rep(args, n_prompt):
    """One repetition with llama.cpp's own llama-bench (C++, no Python around it): the prompt as
    one batch of n_prompt tokens (`-p N -n 0`), then n_gen decode steps at a depth of n_prompt
    tokens of KV cache (`-p 0 -n G -d N`), i.e. the same work as afinar's prompt + decode. Each
    test runs once after llama-bench's own warm-up run; tok/s are its avg_ts."""
    res = {"prompt_tokens": n_prompt, "decode_tokens": args.n_gen}
    for key, extra in (("prompt", ["-p", str(n_prompt), "-n", "0"]),
                       ("decode", ["-p", "0", "-n", str(args.n_gen), "-d", str(n_prompt)])):
        cmd = [args.llama_bench, "-m", args.model, "-t", str(args.threads), "-r", "1", "-o", "json"] + extra
        p, share = run_child(cmd)
        if p.returncode != 0:
            raise RuntimeError(f"llama-bench failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
        row = json.loads(p.stdout)[0]
        res[key + "_tps"] = float(row["avg_ts"])
        res[key + "_s"] = float(row["avg_ns"]) / 1e9
        res[key + "_tps_wall"] = None
        if key == "decode":
            res["cpu_share"] = share
    res["text"] = ""
    return res


def llama_info():
    p = subprocess.run([sys.executable, "-c",
                        "import llama_cpp,sys; print(llama_cpp.__version__); "
                        "print(llama_cpp.llama_print_system_info().decode())"],
                       capture_output=True, text=True)
    lines = p.stdout.strip().splitlines() if p.returncode == 0 else ["?", ""]
    return {"llama_cpp_python": lines[0], "system_info": " ".join(lines[1:]).strip()}


# ----------------------------------------------------------------------------- afinar

def afinar_cmd(args):
    cmd = [args.afinar, "generate", "-m", args.model, "-p", PROMPT, "-n", str(args.n_gen),
           "--temp", "0", "--timings"]
    # Pass a thread flag only if the CLI documents one; OMP_NUM_THREADS is always set.
    try:
        h = subprocess.run([args.afinar, "generate", "--help"], capture_output=True, text=True,
                           timeout=30)
        helptext = h.stdout + h.stderr
    except OSError:
        helptext = ""
    if re.search(r"--threads\b", helptext):
        cmd += ["--threads", str(args.threads)]
    elif re.search(r"(^|\s)-t\b", helptext):
        cmd += ["-t", str(args.threads)]
    return cmd


def run_afinar_rep(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p, share = run_child(cmd, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"afinar failed (rc {p.returncode}): {' '.join(cmd[:4])} ...\n"
                           f"{p.stderr[-3000:]}")
    t = parse_timings(p.stderr)
    if t is None:
        raise RuntimeError("afinar: no 'timings: prompt N tokens T s (R tok/s), decode ...' line "
                           f"on stderr:\n{p.stderr[-2000:]}")
    out = p.stdout
    if out.startswith(PROMPT):  # if the CLI echoes the prompt, keep only the continuation
        out = out[len(PROMPT):]
    t["text"] = out
    t["cpu_share"] = share
    return t


def afinar_version(path):
    try:
        p = subprocess.run([path, "version"], capture_output=True, text=True, timeout=30)
        return p.stdout.strip().replace("\n", "; ")
    except OSError:
        return "?"


# ----------------------------------------------------------------------------- report

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def git_rev():
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "") if rev else "?"
    except OSError:
        return "?"


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description="afinar vs llama.cpp prompt/decode tok/s")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--skip-afinar", action="store_true")
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--wait-idle", type=float, default=0,
                    help="wait up to this many seconds for the 1-min load average to drop "
                         "below --idle-load before measuring")
    ap.add_argument("--idle-load", type=float, default=None, help="default 0.5")
    ap.add_argument("--llama-bench", default=None, metavar="PATH",
                    help="measure llama.cpp with its own llama-bench binary (e.g. "
                         ".llama-server/build/bin/llama-bench) instead of llama-cpp-python")
    ap.add_argument("--child-llama", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child_llama:
        llama_child(a.model, a.threads, a.n_gen)
        return 0
    if not os.path.isfile(a.model):
        sys.exit(f"decode bench: model {a.model} not found (scripts/fetch_models.sh)")
    do_afinar = not a.skip_afinar
    if do_afinar and not os.access(a.afinar, os.X_OK):
        print(f"decode bench: {a.afinar} not built: afinar half skipped (make cli)", file=sys.stderr)
        do_afinar = False
    do_llama = not a.skip_llama

    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(), "cores_online": os.cpu_count(), "threads": a.threads,
        "model": os.path.basename(a.model), "n_gen": a.n_gen, "reps": a.reps,
        "git": git_rev(), "nice": os.nice(0), "loadavg_before": os.getloadavg(),
        "prompt": PROMPT,
    }
    if do_llama and a.llama_bench:
        if not os.access(a.llama_bench, os.X_OK):
            sys.exit(f"decode bench: --llama-bench {a.llama_bench}: not an executable")
        info.update({"llama_bench": a.llama_bench, "system_info": llama_bench_build(a.llama_bench)})
    elif do_llama:
        info.update(llama_info())
    if a.wait_idle > 0:
        limit = a.idle_load if a.idle_load is not None else 0.5
        t_end = time.time() + a.wait_idle
        while os.getloadavg()[0] > limit and time.time() < t_end:
            print(f"decode bench: waiting for the machine to be idle (load "
                  f"{os.getloadavg()[0]:.2f} > {limit})", file=sys.stderr)
            time.sleep(15)
        info["loadavg_before"] = os.getloadavg()

    if do_afinar:
        info["afinar_version"] = afinar_version(a.afinar)
        acmd = afinar_cmd(a)
        info["afinar_cmd"] = " ".join(acmd[:5]) + " '<prompt>' " + " ".join(acmd[6:])
        print("decode bench: afinar warm-up run", file=sys.stderr)
        warm = run_afinar_rep(acmd, a.threads)

    L, A = [], []
    for r in range(a.reps):
        if do_llama:
            n_prompt = (warm.get("prompt_tokens") if do_afinar else None) or 128
            L.append(run_llama_bench_rep(a, n_prompt) if a.llama_bench else run_llama_rep(a))
            print(f"  rep {r + 1} llama.cpp: prompt {L[-1]['prompt_tps']:.1f} tok/s, "
                  f"decode {L[-1]['decode_tps']:.1f} tok/s "
                  f"(wall {fmt(L[-1]['prompt_tps_wall'])} / {fmt(L[-1]['decode_tps_wall'])})",
                  file=sys.stderr)
        if do_afinar:
            A.append(run_afinar_rep(acmd, a.threads))
            print(f"  rep {r + 1} afinar:    prompt {A[-1]['prompt_tps']:.1f} tok/s, "
                  f"decode {A[-1]['decode_tps']:.1f} tok/s", file=sys.stderr)

    info["loadavg_after"] = os.getloadavg()
    res = {"info": info, "llama_cpp": {"runs": [{k: v for k, v in x.items() if k != "text"}
                                                for x in L]},
           "afinar": {"runs": [{k: v for k, v in x.items() if k != "text"} for x in A]}}
    for name, runs, keys in (("llama_cpp", L, ("prompt_tps", "decode_tps", "prompt_tps_wall",
                                              "decode_tps_wall", "prompt_tokens", "decode_tokens",
                                              "cpu_share")),
                             ("afinar", A, ("prompt_tps", "decode_tps", "prompt_tokens",
                                           "decode_tokens", "cpu_share"))):
        for k in keys:
            res[name]["median_" + k] = med(runs, k)
    ratio = {}
    for k in ("prompt_tps", "decode_tps"):
        la, af = res["llama_cpp"].get("median_" + k), res["afinar"].get("median_" + k)
        ratio[k] = af / la if la and af else None
    res["ratio_afinar_over_llama"] = ratio
    if L and A and L[0]["text"]:
        res["greedy_text_common_prefix_chars"] = common_prefix(L[0]["text"], A[0]["text"])
    if L:
        res["llama_cpp"]["text"] = L[0]["text"]
    if A:
        res["afinar"]["text"] = A[0]["text"]

    lm, am = res["llama_cpp"], res["afinar"]
    ptok = lm.get("median_prompt_tokens") or am.get("median_prompt_tokens")
    md = [
        f"# Decode benchmark: afinar vs llama.cpp",
        "",
        f"- date: {info['date']}; git {info['git']}",
        f"- CPU: {info['cpu']}, {info['cores_online']} cores online; threads: {a.threads} (both)",
        f"- model: {info['model']}; prompt: {fmt(ptok, 0)} tokens (plain text, no chat template);"
        f" decode: {a.n_gen} tokens, greedy; median of {a.reps} interleaved runs",
        ("- llama.cpp: " + (f"llama-cpp-python {info['llama_cpp_python']} "
                            f"({info.get('system_info', '')[:200]})"
                            if "llama_cpp_python" in info else
                            f"{info['llama_bench']} ({info['system_info']})" if "llama_bench" in info
                            else "not run")),
        f"- afinar: {info.get('afinar_version', 'not run')}",
        f"- load average (1/5/15 min) before: {' '.join(f'{x:.2f}' for x in info['loadavg_before'])}"
        f", after: {' '.join(f'{x:.2f}' for x in info['loadavg_after'])}; nice {info['nice']}",
        "",
        "| phase | afinar tok/s | llama.cpp tok/s | ratio afinar/llama.cpp |",
        "|---|---:|---:|---:|",
        f"| prompt ({fmt(am.get('median_prompt_tokens') or ptok, 0)} tok) | "
        f"{fmt(am.get('median_prompt_tps'))} | {fmt(lm.get('median_prompt_tps'))} | "
        f"{fmt(ratio['prompt_tps'], 2)} |",
        f"| decode ({a.n_gen} tok) | {fmt(am.get('median_decode_tps'))} | "
        f"{fmt(lm.get('median_decode_tps'))} | {fmt(ratio['decode_tps'], 2)} |",
        "",
        ("llama.cpp tok/s are llama-bench's avg_ts: the prompt as one batch (`-p N -n 0`), the "
         f"decode steps at a depth of the prompt's tokens (`-p 0 -n {a.n_gen} -d N`; random token ids, "
         "so no greedy text to compare). " if "llama_bench" in info else
         "llama.cpp tok/s are its internal counters (llama_perf_context); measured around the "
         f"Python loop they are {fmt(lm.get('median_prompt_tps_wall'))} (prompt) and "
         f"{fmt(lm.get('median_decode_tps_wall'))} (decode) tok/s. ") +
        "afinar tok/s are from its `--timings` line.",
        "",
        f"CPU share (CPU s / wall s of each child; about {a.threads} when undisturbed): "
        f"llama.cpp {fmt(lm.get('median_cpu_share'), 2)}, afinar {fmt(am.get('median_cpu_share'), 2)}.",
    ]
    if info["loadavg_before"][0] > 0.5 * (os.cpu_count() or 1):
        md += ["", f"**Warning**: the machine was busy (load {info['loadavg_before'][0]:.1f} on "
                   f"{os.cpu_count()} cores) when the benchmark started; absolute numbers are "
                   "unreliable and so is the ratio (threads that spin in barriers suffer most)."]
    res["targets"] = {}
    for phase, key in (("decode", "decode_vs_llamacpp"), ("prompt", "prompt_vs_llamacpp")):
        r = ratio[phase + "_tps"]
        if r is not None:
            res["targets"][key] = {"target": target_text(key), "ratio": r, "verdict": verdict(key, r)}
            md += ["", f"Target {phase} {target_text(key)} llama.cpp: **{verdict(key, r)}** ({r:.2f}x)."]
    if "greedy_text_common_prefix_chars" in res:
        md += ["", f"Greedy outputs agree on the first {res['greedy_text_common_prefix_chars']} "
                   f"characters (of {len(L[0]['text'])} from llama.cpp)."]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "decode.json"), "w") as f:
        json.dump(res, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(a.out, "decode.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        sys.exit(f"decode bench: {e}")
