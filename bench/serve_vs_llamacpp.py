#!/usr/bin/env python3
"""serve_vs_llamacpp.py — `afinar serve` against llama.cpp's OpenAI-compatible server
(llama-cpp-python's `python -m llama_cpp.server`) on the same GGUF, the same threads, on 127.0.0.1,
with one bounded load script (Python standard library only on the client side).

For each server, each adapter mode and each client count, C concurrent clients send the same
--requests streamed completions between them (every phase the same prompts, so phases compare;
POST /v1/completions, "stream": true, greedy,
max_tokens --max-tokens) of prompts of mixed lengths (--min-prompt .. --max-prompt tokens, about
log-uniform, the same list for both servers). Adapter modes: "none" (the base model) and "mixed"
(requests alternate between two LoRA adapters A and B; afinar batches them together unmerged;
llama_cpp.server takes one model entry per adapter from its config file, as its API allows: one
request at a time, the model re-created when the next request names the other adapter).
Peers: "llama-server" (llama.cpp's own C++ server, built by scripts/setup_llama_server.sh: continuous
batching over --parallel slots; both adapters loaded with --lora and --lora-init-without-apply, a
request names its adapter with llama.cpp's per-request "lora" field [{"id", "scale"}], which batches
only requests with the same adapter set) and "llamacpp" (llama-cpp-python's Python server, one
request at a time). Each phase (adapter mode x client count) has its own prompts, the same for
every server, so no phase is served from an earlier phase's prompt cache.
Measured per phase: requests, errors, output tokens/s (streamed content chunks / wall time),
time to first token and inter-token latency p50 / p99, and the machine (CPU, cores, load average).
Everything is bounded: a fixed number of requests, each with --timeout seconds; the servers get
SIGTERM at the end. Writes OUT.json and OUT.md; exit status 1 on any error.

The adapters: --adapter-a / --adapter-b (afinar adapter directories), else two 2-step causal-LM
adapters are trained here (lr 1e-4: they cost what any rank-8 adapter costs but barely change the
text, so generations do not end early). llama.cpp gets
them as LoRA GGUF files written by `afinar export`.

  python3 bench/serve_vs_llamacpp.py --afinar build/afinar --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --llama-server .llama-server/bin/llama-server --clients 1,4,8,16 --out bench/results/serve_vs_llamacpp
(bench/serve_vs_llamacpp.sh builds llama-server — and, with SERVERS naming llamacpp, the
llama-cpp-python venv with its server extra — and runs this.)
"""
import argparse
import http.client
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from bench_common import cpu_model, pct

WORDS = ("the market rose after the central bank kept interest rates on hold while analysts said inflation "
         "would ease slowly over the coming year and the government promised new spending on schools roads "
         "and hospitals in the north of the country").split()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def prompts(n, lo, hi, seed):
    """n prompts of about lo..hi tokens (log-uniform; ~1.3 tokens per word of WORDS)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        toks = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        words = max(4, int(toks / 1.3))
        off = rng.randrange(len(WORDS))
        body = " ".join(WORDS[(off + k) % len(WORDS)] for k in range(words))
        out.append(f"News report.\n\n{body}. In other news,")  # a continuation: no early end token
    return out


def wait_ready(port, path, proc, timeout):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def one_request(port, prompt, model, max_tokens, timeout):
    """A streamed completion: (error or None, [arrival times of content chunks], t0). model: None,
    a model name (str) or a dict of extra request fields (llama-server's "lora" list)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if isinstance(model, dict):
        body.update(model)
    elif model:
        body["model"] = model
    t0 = time.time()
    times = []
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return f"HTTP {r.status}: {r.read()[:200]!r}", times, t0
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            ch = ev.get("choices") or []
            if ch and ch[0].get("text"):
                times.append(time.time())
        c.close()
    except (OSError, ValueError, http.client.HTTPException) as e:
        return f"{type(e).__name__}: {e}", times, t0
    if time.time() - t0 > timeout:
        return "timeout", times, t0
    return None, times, t0


def phase(port, clients, n, plist, models, max_tokens, timeout):
    res = [None] * n
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                if i >= n:
                    return
                nxt[0] += 1
            res[i] = one_request(port, plist[i % len(plist)], models[i % len(models)], max_tokens, timeout)

    t0 = time.time()
    th = [threading.Thread(target=worker) for _ in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.time() - t0
    errs = [r[0] or ("no token streamed" if not r[1] else None) for r in res]
    errs = [e for e in errs if e]
    ttft = [r[1][0] - r[2] for r in res if not r[0] and r[1]]  # arrival of the first content chunk
    itl = [b - a for r in res if not r[0] for a, b in zip(r[1], r[1][1:])]
    toks = sum(len(r[1]) for r in res if not r[0])
    return {"clients": clients, "requests": n, "errors": len(errs), "first_error": errs[0] if errs else None,
            "output_tokens": toks, "wall_s": round(wall, 2), "tok_s": round(toks / wall, 2) if wall > 0 else 0,
            "ttft_p50_s": round(pct(ttft, 50), 3), "ttft_p99_s": round(pct(ttft, 99), 3),
            "itl_p50_ms": round(1e3 * pct(itl, 50), 1), "itl_p99_ms": round(1e3 * pct(itl, 99), 1)}


def train_adapter(a, tmp, name, seed):
    data = os.path.join(tmp, f"{name}.jsonl")
    with open(data, "w") as f:
        for i in range(16):
            f.write(json.dumps({"prompt": f"Write a headline about item {i + seed}.", "completion": f" Item {i} news"}) + "\n")
    out = os.path.join(tmp, name)
    cmd = [a.afinar, "train", "-m", a.model, "--task", "causal-lm", "--train", data, "--lr", "1e-4", "--max-steps", "2",
           "--batch", "2", "--grad-accum", "1", "--max-seq-len", "32", "--no-plot", "--overwrite", "-t", a.threads,
           "--lora-r", "8", "--seed", str(seed), "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"serve_vs_llamacpp: training adapter {name} failed:\n{r.stderr[-2000:]}")
    return os.path.join(out, "final")


def export_gguf(a, d, out):
    r = subprocess.run([a.afinar, "export", "-m", a.model, "-a", d, "-o", out, "--overwrite"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"serve_vs_llamacpp: afinar export {d} failed:\n{r.stderr[-2000:]}")
    return out


def start_afinar(a, port, ad, logf):
    cmd = [a.afinar, "serve", "-m", a.model, "--port", str(port), "-t", a.threads, "--parallel", str(a.parallel),
           "--ctx", str(a.ctx), "--queue", "1000", "--timeout", str(int(a.timeout)),
           "--adapter", f"A={ad[0]}", "--adapter", f"B={ad[1]}"] + a.afinar_args.split()
    return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), "/health"


def start_llamacpp(a, port, ggufs, tmp, logf):
    entry = {"model": a.model, "n_ctx": a.ctx, "n_threads": int(a.threads), "n_threads_batch": int(a.threads),
             "verbose": False}
    # interrupt_requests false: by default llama_cpp.server cuts a running stream when a new request comes
    cfg = {"host": "127.0.0.1", "port": port, "interrupt_requests": False,
           "models": [dict(entry, model_alias="base"), dict(entry, model_alias="A", lora_path=ggufs[0]),
                      dict(entry, model_alias="B", lora_path=ggufs[1])]}
    path = os.path.join(tmp, "llamacpp.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    cmd = [a.llamacpp_python, "-m", "llama_cpp.server", "--config_file", path]
    return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), "/v1/models"


def start_llama_server(a, port, ggufs, logf):
    cmd = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-t", a.threads, "-tb", a.threads,
           "-np", str(a.parallel), "-c", str(a.ctx * a.parallel), "--no-webui", "--timeout", str(int(a.timeout))]
    for g in ggufs:
        cmd += ["--lora", g]
    if ggufs:
        cmd.append("--lora-init-without-apply")  # scale 0 unless a request names the adapter
    return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), "/health"


def request_models(srv, mode):
    """What each request of a phase names, in turn: the base model, or adapters A and B alternating."""
    if srv == "afinar":
        return [None] if mode == "none" else ["A", "B"]
    if srv == "llama-server":
        return [None] if mode == "none" else [{"lora": [{"id": 0, "scale": 1.0}]}, {"lora": [{"id": 1, "scale": 1.0}]}]
    return ["base"] if mode == "none" else ["A", "B"]


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def write_md(out, meta, rows):
    L = [f"# afinar serve vs llama.cpp's server ({meta['date']})", "",
         f"CPU: {meta['cpu']}, {meta['cores']} cores; threads {meta['threads']}; model {meta['model']}; "
         f"prompts {meta['min_prompt']}-{meta['max_prompt']} tokens (log-uniform), max_tokens {meta['max_tokens']}, "
         f"greedy, streamed; afinar --parallel {meta['parallel']} {meta['afinar_args']}; load average before {meta['load_before']}, "
         f"after {meta['load_after']}.", "",
         "| server | adapters | clients | requests | errors | output tok/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['server']} | {r['adapters']} | {r['clients']} | {r['requests']} | {r['errors']} | {r['tok_s']} | "
                 f"{r['ttft_p50_s']} | {r['ttft_p99_s']} | {r['itl_p50_ms']} | {r['itl_p99_ms']} |")
    key = {(r["server"], r["adapters"], r["clients"]): r for r in rows}
    for peer in ("llama-server", "llamacpp"):
        ratio = []
        for (srv, ad, c), r in sorted(key.items()):
            o = key.get((peer, ad, c))
            if srv == "afinar" and o and o["tok_s"] > 0 and o["ttft_p99_s"] > 0:
                ratio.append(f"| {ad} | {c} | {r['tok_s'] / o['tok_s']:.2f} | {r['ttft_p99_s'] / o['ttft_p99_s']:.2f} |")
        if ratio:
            L += ["", f"| adapters | clients | afinar / {peer} output tok/s | afinar / {peer} TTFT p99 |",
                  "|---|---:|---:|---:|"] + ratio
    with open(out + ".md", "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--llamacpp-python", default=".venv-llamacpp/bin/python",
                    help="a Python with llama_cpp and its server extra (bench/requirements-server.txt)")
    ap.add_argument("--llama-server", default=".llama-server/bin/llama-server",
                    help="llama.cpp's llama-server binary (scripts/setup_llama_server.sh)")
    ap.add_argument("--servers", default="afinar,llama-server",
                    help="afinar, llama-server (llama.cpp's C++ server), llamacpp (llama-cpp-python's server)")
    ap.add_argument("--adapters", default="none,mixed", help="adapter modes: none, mixed")
    ap.add_argument("--adapter-a", help="afinar adapter directory A (default: a 2-step adapter trained here)")
    ap.add_argument("--adapter-b", help="afinar adapter directory B")
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--requests", type=int, default=32, help="requests of every phase (the same prompts)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--min-prompt", type=int, default=32)
    ap.add_argument("--max-prompt", type=int, default=1024)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--parallel", type=int, default=8, help="afinar serve --parallel and llama-server -np")
    ap.add_argument("--afinar-args", default="", help="more options of afinar serve (e.g. \"--batch-tokens 64\")")
    ap.add_argument("--ctx", type=int, default=2048, help="positions per sequence (both servers)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per request")
    ap.add_argument("--out", default="bench/results/serve_vs_llamacpp")
    a = ap.parse_args()
    clients = [int(c) for c in a.clients.split(",")]
    modes = a.adapters.split(",")
    servers = a.servers.split(",")
    if any(m not in ("none", "mixed") for m in modes) or any(s not in ("afinar", "llama-server", "llamacpp") for s in servers):
        sys.exit("serve_vs_llamacpp: --adapters takes none,mixed and --servers afinar,llama-server,llamacpp")
    if a.max_prompt + a.max_tokens + 16 > a.ctx:
        sys.exit(f"serve_vs_llamacpp: --max-prompt {a.max_prompt} + --max-tokens {a.max_tokens} do not fit --ctx {a.ctx}")
    tmp = tempfile.mkdtemp(prefix="serve_vs_llamacpp.")
    ad = [a.adapter_a or train_adapter(a, tmp, "A", 1), a.adapter_b or train_adapter(a, tmp, "B", 2)]
    ggufs = [export_gguf(a, d, os.path.join(tmp, f"{n}.gguf")) for d, n in zip(ad, "AB")] if set(servers) - {"afinar"} else []
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(), "cores": os.cpu_count(),
            "threads": a.threads, "model": os.path.basename(a.model), "max_tokens": a.max_tokens,
            "min_prompt": a.min_prompt, "max_prompt": a.max_prompt, "parallel": a.parallel, "afinar_args": a.afinar_args,
            "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    rows, failed = [], False
    for srv in servers:
        port = free_port()
        logp = os.path.join(tmp, f"{srv}.log")
        with open(logp, "w") as logf:
            if srv == "afinar":
                proc, ready = start_afinar(a, port, ad, logf)
            elif srv == "llama-server":
                proc, ready = start_llama_server(a, port, ggufs, logf)
            else:
                proc, ready = start_llamacpp(a, port, ggufs, tmp, logf)
            if not wait_ready(port, ready, proc, 600):
                stop(proc)
                sys.exit(f"serve_vs_llamacpp: {srv} did not start; its log:\n" + open(logp).read()[-3000:])
            for mi, mode in enumerate(modes):
                models = request_models(srv, mode)
                warm = prompts(1, a.min_prompt, a.min_prompt, 1)[0]
                for m in models:  # warm-up, not measured (llama_cpp.server loads a model entry on first use)
                    one_request(port, warm, m, 4, a.timeout)
                for c in clients:
                    plist = prompts(a.requests, a.min_prompt, a.max_prompt, 7 + 1000 * mi + c)  # per phase
                    r = phase(port, c, a.requests, plist, models, a.max_tokens, a.timeout)
                    r.update(server=srv, adapters=mode)
                    rows.append(r)
                    failed |= r["errors"] > 0
                    print(json.dumps(r), flush=True)
            rc = stop(proc)
            if srv != "llamacpp" and rc != 0:
                print(f"serve_vs_llamacpp: {srv} exited {rc}", file=sys.stderr)
                failed = True
    meta["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    write_md(a.out, meta, rows)
    print(f"serve_vs_llamacpp: wrote {a.out}.json and {a.out}.md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
