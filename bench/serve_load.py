#!/usr/bin/env python3
"""serve_load.py — a bounded load test of `afinar serve` on loopback (Python standard library only).

Starts `afinar serve` on a free loopback port, then runs two phases against it:
  1 client  sending --baseline requests one after the other (the latency of a request alone), and
  N clients (--clients) sending --requests chat completions in all, concurrently,
each a chat completion of a shared system prompt plus a varied question (so the prompt cache and
the batch are exercised), max_tokens --max-tokens, temperature 0.7 with its own seed. It stops by
itself after the fixed number of requests (each bounded by --timeout seconds), sends SIGTERM and
checks the server exits 0. Reports per phase: requests, errors (must be 0), latency p50 / p99 /
max, completion tokens, tokens/s (completion tokens / wall time of the phase), and the machine
(CPU model, cores, load average before and after). Writes OUT.json and OUT.md; exit status 1 on
any error.

  python3 bench/serve_load.py --afinar build/afinar --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --clients 8 --requests 64 --out bench/results/serve_load
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from bench_common import cpu_model

SYSTEM = ("You are a helpful assistant for a news website. Answer in one or two short sentences, "
          "plainly, without lists.")
QUESTIONS = ["What is inflation?", "Why do central banks raise interest rates?", "What is a general election?",
             "How does a football league table work?", "What does a film critic do?", "What is a smartphone?",
             "Why do share prices fall?", "What is a budget deficit?", "Who elects a prime minister?",
             "What is streaming music?", "What is a trade tariff?", "How do elections get counted?"]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))  # nearest rank
    return xs[k]


def one_request(port, i, max_tokens, timeout):
    body = json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                       "max_tokens": max_tokens, "temperature": 0.7, "seed": i})
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        dt = time.monotonic() - t0
        if r.status != 200:
            return dt, 0, f"HTTP {r.status}: {data[:200]!r}"
        js = json.loads(data)
        return dt, int(js["usage"]["completion_tokens"]), None
    except Exception as e:  # noqa: BLE001 (every failure is an error of the run)
        return time.monotonic() - t0, 0, repr(e)


def phase(port, clients, n_req, max_tokens, timeout, first):
    lock = threading.Lock()
    nxt = [0]
    res = []

    def worker():
        while True:
            with lock:
                if nxt[0] >= n_req:
                    return
                i = first + nxt[0]
                nxt[0] += 1
            r = one_request(port, i, max_tokens, timeout)
            with lock:
                res.append(r)

    t0 = time.monotonic()
    th = [threading.Thread(target=worker) for _ in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    lat = [r[0] for r in res if r[2] is None]
    toks = sum(r[1] for r in res)
    errs = [r[2] for r in res if r[2] is not None]
    return {"clients": clients, "requests": len(res), "errors": len(errs), "error_samples": errs[:5],
            "wall_s": round(wall, 3), "latency_p50_s": round(pct(lat, 50), 3), "latency_p99_s": round(pct(lat, 99), 3),
            "latency_max_s": round(max(lat), 3) if lat else None, "completion_tokens": toks,
            "tokens_per_s": round(toks / wall, 2) if wall > 0 else 0.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--baseline", type=int, default=8, help="requests of the 1-client phase (0: none)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--parallel", type=int, default=4, help="afinar serve --parallel")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default="bench/results/serve_load")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"SKIP serve load test: {a.model} absent")
        return 0
    tmp = tempfile.mkdtemp(prefix="af_serve_load_")
    log_path = os.path.join(tmp, "server.log")
    logf = open(log_path, "w")
    load0 = os.getloadavg()
    srv = subprocess.Popen([a.afinar, "serve", "-m", a.model, "--port", "0", "-t", a.threads, "--parallel",
                            str(a.parallel), "--queue", str(max(16, a.clients)), "--ctx", "1024"],
                           stderr=logf, stdout=subprocess.DEVNULL)
    port = None
    for _ in range(600):
        time.sleep(0.1)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
        if m:
            port = int(m.group(1))
            break
        if srv.poll() is not None:
            break
    if port is None:
        print("serve load test: the server did not start:\n" + open(log_path).read()[-2000:])
        srv.kill()
        return 1
    phases = []
    if a.baseline > 0:
        phases.append(phase(port, 1, a.baseline, a.max_tokens, a.timeout, 0))
    phases.append(phase(port, a.clients, a.requests, a.max_tokens, a.timeout, 1000))
    srv.send_signal(signal.SIGTERM)
    rc = srv.wait(timeout=300)
    logf.close()
    log = open(log_path).read()
    cached = [int(x) for x in re.findall(r"\((\d+) from the cache\)", log)]
    load1 = os.getloadavg()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "git": rev, "cpu": cpu_model(),
           "cores": os.cpu_count(), "threads": int(a.threads), "loadavg_before": [round(x, 2) for x in load0],
           "loadavg_after": [round(x, 2) for x in load1], "model": os.path.basename(a.model),
           "parallel": a.parallel, "max_tokens": a.max_tokens, "server_exit": rc,
           "prompt_tokens_from_cache_mean": round(sum(cached) / len(cached), 1) if cached else 0,
           "phases": phases}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(res, f, indent=2)
    lines = [f"# afinar serve load test ({res['date']})", "",
             f"CPU: {res['cpu']}, {res['cores']} cores, {a.threads} compute threads; load average before "
             f"{load0[0]:.2f}, after {load1[0]:.2f} (other work on the machine counts in these figures).",
             f"Model {res['model']}, `afinar serve --parallel {a.parallel}`, chat completions of a shared system "
             f"prompt + one of {len(QUESTIONS)} questions, max_tokens {a.max_tokens}, temperature 0.7, own seed each; "
             f"git {rev}. Prompt tokens reused from the cache per request: {res['prompt_tokens_from_cache_mean']} "
             f"on average. Server exit status after SIGTERM: {rc}.", "",
             "| clients | requests | errors | p50 latency (s) | p99 latency (s) | max (s) | completion tokens | tokens/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in phases:
        lines.append(f"| {p['clients']} | {p['requests']} | {p['errors']} | {p['latency_p50_s']} | {p['latency_p99_s']} | "
                     f"{p['latency_max_s']} | {p['completion_tokens']} | {p['tokens_per_s']} |")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    subprocess.run(["rm", "-rf", tmp])
    bad = rc != 0 or any(p["errors"] for p in phases)
    for p in phases:
        for e in p["error_samples"]:
            print("error:", e)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
