#!/usr/bin/env python3
"""prompt_cache.py — time to first token of `afinar generate` on a long prompt (bench/prompt_long.txt,
~1,400 SmolLM2 tokens) without and with `--prompt-cache FILE` (the prompt's keys and values saved by
an earlier run and loaded, checked and reused: only the last few tokens are evaluated again).
Runs, interleaved, REPS times: no cache; a cache hit (the file written by a first run). Time to
first token = the prompt phase of --timings (loading and checking the cache file included). Also
checks that the generated text is the same with and without the cache. Writes OUT.json / OUT.md.
  python3 bench/prompt_cache.py [--reps 3] [--out bench/results/prompt_cache]"""
import argparse, json, os, re, statistics, subprocess, tempfile, time


def run(a, extra):
    cmd = [a.afinar, "generate", "-m", a.model, "-f", a.prompt, "-n", "8", "--temp", "0", "--timings", "-t", a.threads] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    m = re.search(r"prompt (\d+) tokens ([0-9.]+) s", r.stderr)
    if r.returncode != 0 or not m:
        raise SystemExit(f"generate failed: {r.stderr[-1000:]}")
    return int(m.group(1)), float(m.group(2)), r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--prompt", default="bench/prompt_long.txt")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="bench/results/prompt_cache")
    a = ap.parse_args()
    cache = os.path.join(tempfile.mkdtemp(prefix="af_pc_"), "prompt.kv")
    n, _, first_text = run(a, ["--prompt-cache", cache])  # writes the cache
    cold, warm, same = [], [], True
    load0 = os.getloadavg()[0]
    for _ in range(a.reps):
        _, t, txt = run(a, [])
        cold.append(t)
        _, t2, txt2 = run(a, ["--prompt-cache", cache])
        warm.append(t2)
        same = same and txt == txt2 == first_text
    size = os.path.getsize(cache)
    os.remove(cache)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu, "threads": int(a.threads),
           "loadavg_before": round(load0, 2), "loadavg_after": round(os.getloadavg()[0], 2), "prompt_tokens": n,
           "cache_bytes": size, "ttft_no_cache_s": cold, "ttft_cache_s": warm,
           "median_no_cache_s": statistics.median(cold), "median_cache_s": statistics.median(warm),
           "speedup": round(statistics.median(cold) / statistics.median(warm), 1), "same_text": same}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump(res, open(a.out + ".json", "w"), indent=2)
    md = (f"# Prompt cache: time to first token ({res['date']})\n\n"
          f"CPU {cpu}, {a.threads} threads, load average {res['loadavg_before']} -> {res['loadavg_after']}; "
          f"`afinar generate -f {a.prompt}` ({n} prompt tokens), SmolLM2-135M Q4_1, {a.reps} interleaved runs each.\n\n"
          f"| | median time to first token (s) | runs (s) |\n|---|---:|---|\n"
          f"| no cache | {res['median_no_cache_s']:.3f} | {', '.join(f'{x:.3f}' for x in cold)} |\n"
          f"| `--prompt-cache` hit | {res['median_cache_s']:.3f} | {', '.join(f'{x:.3f}' for x in warm)} |\n\n"
          f"Speedup **{res['speedup']}x**; cache file {size / 2**20:.1f} MiB; same generated text with and without "
          f"the cache: {same}.\n")
    open(a.out + ".md", "w").write(md)
    print(md)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
