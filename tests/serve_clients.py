#!/usr/bin/env python3
"""serve_clients.py — `afinar serve` against real clients: the `openai` Python package and curl, on
SmolLM2-135M (run by tests/check_serve_clients.sh, which checks the prerequisites).

Starts `afinar serve` on a loopback port chosen free (--port 0, read from its "listening on" line),
with two adapters trained here for 2 steps (a causal-LM one on data/bbc_headlines and a classifier
on data/bbc, when those files exist), then checks:
  models list; chat (greedy and seeded sampling) and text completions equal to `afinar generate`
  with the same settings; streaming (deltas == the non-streamed text, usage chunk); per-request
  adapters (model id, llama.cpp "lora" field) equal to `afinar generate -a`; /lora-adapters GET and
  POST; adapter load/unload while serving; /v1/classify equal to `afinar predict`; errors through
  the client's exceptions (404 unknown model, 400 max_tokens beyond the context, 400 bad JSON);
  a streamed request whose client disconnects is cancelled (server log); SIGTERM with a request in
  flight: the request completes, exit status 0.
The OpenAI features (api_features): logprobs / top_logprobs (chat and completions, streamed too), n
choices (each == a request with seed + i; streamed per index), embeddings (float and the client's
default base64), response_format json_object and json_schema (the output parses and validates),
/metrics, and their bad values as openai.BadRequestError. With --gemma MODEL (Gemma 3 270M; skipped
with the fetch script's name when absent): a second server on it, chat == afinar generate --chat,
streaming, logprobs, json_schema, embeddings.
Prints one line per check and "RESULT check_serve_clients passed=P failed=F skipped=S".
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

P = F = S = 0


def check(cond, what, detail=""):
    global P, F
    if cond:
        P += 1
        print(f"ok   {what}")
    else:
        F += 1
        print(f"FAIL {what}" + (f"\n     {detail}" if detail else ""))
    return cond


def skip(what):
    global S
    S += 1
    print(f"SKIP: {what}")


def run(cmd, timeout=600):
    r = subprocess.run(cmd, capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def gen_text(afinar, model, prompt, n, temp, top_p, seed, chat=False, adapter=None):
    cmd = [afinar, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", str(temp), "--top-k", "0",
           "--top-p", str(top_p), "--seed", str(seed)]
    if chat:
        cmd.append("--chat")
    if adapter:
        cmd += ["-a", adapter]
    rc, out, err = run(cmd)
    check(rc == 0, f"afinar generate ran ({' '.join(cmd[3:])})", err)
    return out[:-1] if out.endswith("\n") else out


def start_server(afinar, model, threads, extra, log_path):
    logf = open(log_path, "w")
    srv = subprocess.Popen([afinar, "serve", "-m", model, "--port", "0", "-t", threads] + extra, stderr=logf,
                           stdout=subprocess.DEVNULL)
    port = None
    for _ in range(600):
        time.sleep(0.1)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
        if m:
            port = int(m.group(1))
            break
        if srv.poll() is not None:
            break
    return srv, logf, port


def api_features(openai, client, model_id, base, light=False):
    """n, logprobs, embeddings, response_format, /metrics through the openai client (light: the
    Gemma pass, fewer requests)."""
    msgs = [{"role": "user", "content": "Name a fruit."}]
    # logprobs: chat shape, top_logprobs, the stream carries the same numbers
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                       top_logprobs=3)
    c = r.choices[0].logprobs.content
    check(len(c) == r.usage.completion_tokens and all(len(x.top_logprobs) == 3 and x.logprob <= 0 for x in c) and
          all(abs(x.logprob - x.top_logprobs[0].logprob) < 1e-6 for x in c),
          "chat logprobs=True top_logprobs=3: one entry per token, greedy token == the best of its top 3",
          str(c[:2]))
    check("".join(bytes(x.bytes).decode("utf-8", "replace") for x in c) == r.choices[0].message.content or
          any(x.token.startswith("bytes:") for x in c), "the logprob tokens' bytes make the text")
    st = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                        top_logprobs=3, stream=True)
    sl = [x for ch in st if ch.choices and ch.choices[0].logprobs for x in ch.choices[0].logprobs.content]
    check([x.logprob for x in sl] == [x.logprob for x in c] and [x.token for x in sl] == [x.token for x in c],
          "streamed chat logprobs == non-streamed", f"{len(sl)} vs {len(c)}")
    if not light:
        r = client.completions.create(model=model_id, prompt="The sky is", max_tokens=6, temperature=0, logprobs=2)
        lp = r.choices[0].logprobs
        check(len(lp.tokens) == r.usage.completion_tokens and len(lp.top_logprobs) == len(lp.tokens) and
              all(len(t) <= 2 for t in lp.top_logprobs) and lp.text_offset[0] == 0 and "".join(lp.tokens) == r.choices[0].text,
              "completions logprobs=2: tokens, token_logprobs, top_logprobs, text_offset", str(lp)[:300])
    # n: choices; choice i == a request with seed + i; streamed per index
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=10, temperature=0.9, seed=5, n=3)
    texts = [ch.message.content for ch in sorted(r.choices, key=lambda x: x.index)]
    ok = len(texts) == 3
    for i in range(3 if not light else 2):
        one = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=10, temperature=0.9, seed=5 + i)
        ok = ok and one.choices[0].message.content == texts[i]
    check(ok, "n=3: three choices, choice i == the request with seed + i", str(texts))
    st = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=10, temperature=0.9, seed=5, n=3,
                                        stream=True)
    acc = ["", "", ""]
    for ch in st:
        for x in ch.choices:
            acc[x.index] += x.delta.content or ""
    check(acc == texts, "n=3 streamed: each index's deltas == its text", f"{acc} vs {texts}")
    # embeddings: the client's default (base64) and float
    e = client.embeddings.create(model=model_id, input=["a red apple", "the stock market"])
    f = client.embeddings.create(model=model_id, input="a red apple", encoding_format="float")
    v0, v1, w = e.data[0].embedding, e.data[1].embedding, f.data[0].embedding
    n0 = sum(x * x for x in v0)
    check(len(v0) == len(w) and abs(n0 - 1) < 1e-4 and max(abs(x - y) for x, y in zip(v0, w)) < 1e-6 and
          sum(x * y for x, y in zip(v0, v1)) < 0.9999 and e.usage.prompt_tokens > 0,
          f"embeddings: {len(v0)} floats of norm 1, base64 == float, two texts differ")
    # response_format
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "colour": {"enum": ["red", "green", "yellow"]},
                                               "sweet": {"type": "boolean"}},
              "required": ["name", "colour", "sweet"], "additionalProperties": False}
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Describe a fruit as JSON."}],
                                       max_tokens=80, temperature=0,
                                       response_format={"type": "json_schema", "json_schema": {"name": "fruit", "schema": schema,
                                                                                               "strict": True}})
    txt = r.choices[0].message.content
    try:
        d = json.loads(txt)
        valid = set(d) == {"name", "colour", "sweet"} and isinstance(d["name"], str) and \
            d["colour"] in ("red", "green", "yellow") and isinstance(d["sweet"], bool)
    except ValueError:
        valid = False
    check(r.choices[0].finish_reason == "stop" and valid, "json_schema: the output parses and validates", repr(txt))
    st = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Describe a fruit as JSON."}],
                                        max_tokens=80, temperature=0, stream=True,
                                        response_format={"type": "json_schema", "json_schema": {"name": "fruit", "schema": schema}})
    check("".join(ch.choices[0].delta.content or "" for ch in st if ch.choices) == txt, "json_schema streamed == non-streamed")
    # tools: a forced call (named, streamed too), then the conversation with its result
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "The current weather of a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                                                   "required": ["city"]}}}]
    wq = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=model_id, messages=wq, max_tokens=60, temperature=0, tools=tools,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    tc = r.choices[0].message.tool_calls
    try:
        args = json.loads(tc[0].function.arguments) if tc else None
    except ValueError:
        args = None
    check(r.choices[0].finish_reason == "tool_calls" and tc and tc[0].function.name == "get_weather" and tc[0].id and
          isinstance(args, dict) and isinstance(args.get("city"), str) and args.get("unit", "celsius") in ("celsius", "fahrenheit"),
          "tools, tool_choice named: tool_calls with valid JSON arguments, finish_reason tool_calls", str(r.choices[0]))
    # streamed: the deltas put together as OpenAI documents it (per index: id, type, name from the
    # first delta, the arguments concatenated) equal the non-streamed answer's tool_calls
    rq = client.chat.completions.create(model=model_id, messages=wq, max_tokens=60, temperature=0, tools=tools,
                                        tool_choice="required")
    st = client.chat.completions.create(model=model_id, messages=wq, max_tokens=60, temperature=0, tools=tools,
                                        tool_choice="required", stream=True)
    acc, fins, content = {}, [], ""
    for ch in st:
        for x in ch.choices:
            content += x.delta.content or ""
            for d in x.delta.tool_calls or []:
                a = acc.setdefault(d.index, {"id": d.id, "type": d.type, "name": d.function.name if d.function else None,
                                             "arguments": "", "pieces": 0})
                if d.function and d.function.arguments:
                    a["arguments"] += d.function.arguments
                    a["pieces"] += 1
            fins += [x.finish_reason] if x.finish_reason else []
    ref = [{"type": c.type, "name": c.function.name, "arguments": c.function.arguments} for c in rq.choices[0].message.tool_calls or []]
    got = [{"type": acc[k]["type"], "name": acc[k]["name"], "arguments": acc[k]["arguments"]} for k in sorted(acc)]
    check(ref and got == ref and all(acc[k]["id"] for k in acc) and fins == ["tool_calls"] and "<tool_call>" not in content,
          "tools, tool_choice required, streamed: the deltas put together == the non-streamed tool_calls", f"{got} vs {ref}")
    check(acc and acc[0]["pieces"] >= 2, "tools streamed: the arguments come in several deltas, token by token",
          str(acc.get(0)))
    if tc:
        follow = wq + [{"role": "assistant", "content": None, "tool_calls": [tc[0].model_dump()]},
                       {"role": "tool", "tool_call_id": tc[0].id, "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}]
        r = client.chat.completions.create(model=model_id, messages=follow, max_tokens=30, temperature=0, tools=tools)
        check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), "tools: the conversation goes on with the tool's result",
              str(r.choices[0].message))
    if not light:
        r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "List two colours as JSON."}],
                                           max_tokens=60, temperature=0, response_format={"type": "json_object"})
        txt = r.choices[0].message.content
        try:
            ok = isinstance(json.loads(txt), dict)
        except ValueError:
            ok = r.choices[0].finish_reason == "length" and txt.lstrip().startswith("{")
        check(ok, f"json_object: an object ({r.choices[0].finish_reason})", repr(txt))
        # bad values: OpenAI-shaped 400s through the client
        for kw, what in ((dict(n=0), "n"), (dict(top_logprobs=30, logprobs=True), "top_logprobs"),
                         (dict(response_format={"type": "json_schema", "json_schema": {"name": "x",
                                                "schema": {"type": "string", "pattern": "a"}}}), "response_format")):
            try:
                client.chat.completions.create(model=model_id, messages=msgs, max_tokens=2, **kw)
                check(False, f"bad {what} refused")
            except openai.BadRequestError as ex:
                check(ex.status_code == 400 and (ex.param or "").startswith(what),
                      f"bad {what}: openai.BadRequestError (400, param {ex.param})")
        try:
            client.embeddings.create(model=model_id, input="x", dimensions=8)
            check(False, "embeddings dimensions refused")
        except openai.BadRequestError:
            check(True, "embeddings dimensions: openai.BadRequestError (400)")
        rc, out, _ = run(["curl", "-s", base + "/metrics"])
        check(rc == 0 and re.search(r'^afinar_requests_total\{endpoint="embeddings",code="200"\} [1-9]', out, re.M) and
              re.search(r'^afinar_requests_total\{endpoint="chat",code="400"\} [1-9]', out, re.M) and
              "afinar_time_to_first_token_seconds{quantile=\"0.5\"}" in out,
              "curl GET /metrics: requests by endpoint and code, time to first token quantiles", out[:400])


def gemma_pass(openai, a):
    if not a.gemma or not os.path.exists(a.gemma):
        skip(f"Gemma 3 270M ({a.gemma or 'models/gemma-3-270m-Q4_K_M.gguf'}) absent: scripts/fetch_models.sh fetches it")
        return
    tmp = tempfile.mkdtemp(prefix="af_serve_gemma_")
    log_path = os.path.join(tmp, "server.log")
    srv, logf, port = start_server(a.afinar, a.gemma, a.threads, ["--parallel", "3", "--ctx", "512"], log_path)
    if not check(port is not None, "the server starts on Gemma 3 270M", open(log_path).read()[-2000:]):
        srv.kill()
        return
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=300)
    model_id = os.path.basename(a.gemma).removesuffix(".gguf")
    q = "What is the capital of France? Answer in one sentence."
    want = gen_text(a.afinar, a.gemma, q, 24, 0, 1, 1, chat=True)
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": q}], max_tokens=24, temperature=0)
    check(r.choices[0].message.content == want, "Gemma 3: chat == afinar generate --chat", f"{r.choices[0].message.content!r} vs {want!r}")
    st = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": q}], max_tokens=24,
                                        temperature=0, stream=True)
    check("".join(ch.choices[0].delta.content or "" for ch in st if ch.choices) == want, "Gemma 3: chat stream == the text")
    api_features(openai, client, model_id, f"http://127.0.0.1:{port}", light=True)
    srv.send_signal(signal.SIGTERM)
    check(srv.wait(timeout=300) == 0, "Gemma 3 server: SIGTERM, exit 0")
    logf.close()
    subprocess.run(["rm", "-rf", tmp])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--afinar", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="data")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--gemma", default=None, help="Gemma 3 270M GGUF for a second pass (skipped when absent)")
    a = ap.parse_args()
    import openai

    tmp = tempfile.mkdtemp(prefix="af_serve_clients_")
    adapters = []
    lm_dir = cls_dir = None
    hl = os.path.join(tmp, "lm.jsonl")  # short prompt/completion pairs: a 2-step adapter that changes the text
    with open(hl, "w") as f:
        for i, (t, h) in enumerate([("Shares fell sharply on Monday.", "Markets slide"), ("The team won the cup.", "Cup glory"),
                                    ("New phone sales doubled.", "Phone boom"), ("The minister resigned.", "Minister quits")] * 4):
            f.write(json.dumps({"prompt": f"Write the headline of this BBC News article.\n\n{t}", "completion": " " + h}) + "\n")
    bbc = os.path.join(a.data, "bbc", "train.jsonl")
    common = ["--max-steps", "2", "--batch", "2", "--grad-accum", "1", "--max-seq-len", "48", "--no-plot",
              "--overwrite", "-t", a.threads, "--lora-r", "4"]
    if True:
        rc, _, err = run([a.afinar, "train", "-m", a.model, "--task", "causal-lm", "--train", hl, "--lr", "2e-2",
                          "-o", os.path.join(tmp, "lm")] + common)
        if check(rc == 0, "trained a 2-step causal-LM adapter", err[-2000:]):
            lm_dir = os.path.join(tmp, "lm", "final")
            adapters += ["--adapter", f"headlines={lm_dir}"]
    if os.path.exists(bbc):
        rc, _, err = run([a.afinar, "train", "-m", a.model, "--train", bbc, "--labels",
                          os.path.join(a.data, "bbc", "labels.txt"), "-o", os.path.join(tmp, "cls")] + common)
        if check(rc == 0, "trained a 2-step classification adapter", err[-2000:]):
            cls_dir = os.path.join(tmp, "cls", "final")
            adapters += ["--adapter", f"news={cls_dir}"]
    else:
        skip(f"{bbc} absent: no classification adapter")

    log_path = os.path.join(tmp, "server.log")
    srv, logf, port = start_server(a.afinar, a.model, a.threads, ["--parallel", "4", "--ctx", "512"] + adapters, log_path)
    if not check(port is not None, "the server starts", open(log_path).read()[-2000:]):
        srv.kill()
        return
    base = f"http://127.0.0.1:{port}"
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=300)
    model_id = os.path.basename(a.model).removesuffix(".gguf")

    ids = [m.id for m in client.models.list().data]
    check(model_id in ids and (not lm_dir or "headlines" in ids) and (not cls_dir or "news" in ids),
          f"models.list(): {ids}")

    q = "What is the capital of France? Answer in one sentence."
    for temp, top_p, seed in ((0, 1, 1), (0.8, 0.9, 42)):
        want = gen_text(a.afinar, a.model, q, 32, temp, top_p, seed, chat=True)
        r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": q}], max_tokens=32,
                                           temperature=temp, top_p=top_p, seed=seed, extra_body={"top_k": 0})
        got = r.choices[0].message.content
        check(got == want, f"chat (temperature {temp}, seed {seed}) == afinar generate --chat", f"{got!r} vs {want!r}")
        check(r.usage.prompt_tokens > 10 and r.usage.completion_tokens >= 1 and
              r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"usage {r.usage}")
        st = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": q}], max_tokens=32,
                                            temperature=temp, top_p=top_p, seed=seed, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"top_k": 0})
        parts, usage, n = [], None, 0
        for ch in st:
            n += 1
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
            if ch.usage:
                usage = ch.usage
        check("".join(parts) == want and n >= 3 and usage and usage.completion_tokens == r.usage.completion_tokens,
              f"chat stream (temperature {temp}): {n} chunks, deltas == the text, usage chunk", repr("".join(parts)))

    p = "The three primary colours are"
    want = gen_text(a.afinar, a.model, p, 24, 0, 1, 1)
    r = client.completions.create(model=model_id, prompt=p, max_tokens=24, temperature=0, seed=1)
    check(r.choices[0].text == want, "completions (greedy) == afinar generate", f"{r.choices[0].text!r} vs {want!r}")
    r = client.completions.create(model=model_id, prompt=p, max_tokens=24, temperature=0, seed=1, stop=[","])
    check("," not in r.choices[0].text and want.startswith(r.choices[0].text) and r.choices[0].finish_reason == "stop",
          f"stop string: {r.choices[0].text!r} ({r.choices[0].finish_reason})")

    if lm_dir:
        hp = "Write the headline of this BBC News article.\n\nThe government announced new taxes on Monday."
        want = gen_text(a.afinar, a.model, hp, 20, 0, 1, 1, adapter=lm_dir)
        base_txt = gen_text(a.afinar, a.model, hp, 20, 0, 1, 1)
        r = client.completions.create(model="headlines", prompt=hp, max_tokens=20, temperature=0)
        check(r.choices[0].text == want, "adapter by model id == afinar generate -a", f"{r.choices[0].text!r} vs {want!r}")
        r2 = client.completions.create(model=model_id, prompt=hp, max_tokens=20, temperature=0,
                                       extra_body={"lora": [{"id": 0, "scale": 1.0}]})
        check(r2.choices[0].text == want, "adapter by the per-request lora field == afinar generate -a")
        r3 = client.completions.create(model=model_id, prompt=hp, max_tokens=20, temperature=0)
        check(r3.choices[0].text == base_txt, "the base model id without lora == afinar generate without -a")
        print(f"     (adapter changes the text: {want != base_txt})")
        rc, out, _ = run(["curl", "-s", base + "/lora-adapters"])
        la = json.loads(out)
        check(rc == 0 and any(x["id"] == 0 and x["name"] == "headlines" for x in la), f"curl GET /lora-adapters: {out}")
        rc, out, _ = run(["curl", "-s", base + "/lora-adapters/load", "-d",
                          json.dumps({"name": "headlines2", "path": lm_dir})])
        check(rc == 0 and '"id"' in out, f"curl POST /lora-adapters/load: {out}")
        r4 = client.completions.create(model="headlines2", prompt=hp, max_tokens=20, temperature=0)
        check(r4.choices[0].text == want, "an adapter loaded while serving == the same adapter loaded at start")
        rc, out, _ = run(["curl", "-s", base + "/lora-adapters/unload", "-d", json.dumps({"name": "headlines2"})])
        check(rc == 0 and "unloaded" in out, f"curl POST /lora-adapters/unload: {out}")
        try:
            client.completions.create(model="headlines2", prompt=hp, max_tokens=2)
            check(False, "an unloaded adapter is refused")
        except openai.NotFoundError:
            check(True, "an unloaded adapter: openai.NotFoundError (404)")
    if cls_dir:
        texts = ["The striker scored twice in the cup final.", "Shares fell after the bank cut its profit forecast."]
        rc, out, _ = run(["curl", "-s", base + "/v1/classify", "-H", "Content-Type: application/json", "-d",
                          json.dumps({"model": "news", "input": texts})])
        got = json.loads(out)["data"] if rc == 0 and out.startswith("{") else []
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w") as f:
            for t in texts:
                f.write(json.dumps({"input": t}) + "\n")
        rc2, pred, _ = run([a.afinar, "predict", "-m", a.model, "-a", cls_dir, "--input", inp, "-t", a.threads])
        pl = [json.loads(x) for x in pred.splitlines() if x.strip()]
        check(len(got) == 2 and len(pl) == 2 and all(g["label"] == p_["label"] and g["probs"] == p_["probs"]
                                                     for g, p_ in zip(got, pl)),
              "curl /v1/classify == afinar predict (labels and probabilities)", f"{got} vs {pl}")

    api_features(openai, client, model_id, base)

    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        check(False, "unknown model refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and "no-such-model" in str(e), "unknown model: openai.NotFoundError (404)")
    try:
        client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "x"}], max_tokens=100000)
        check(False, "max_tokens beyond the context refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "context" in str(e), "max_tokens beyond the context: openai.BadRequestError (400)")
    rc, out, _ = run(["curl", "-s", "-w", "\\n%{http_code}", base + "/v1/chat/completions", "-d", "{not json"])
    check(out.endswith("\n400") and '"error"' in out, f"curl malformed JSON: 400 ({out!r})")
    rc, out, _ = run(["curl", "-s", base + "/health"])
    check(out.strip() == '{"status":"ok"}', f"curl GET /health: {out}")

    # a streaming client that disconnects after two chunks: cancelled
    before = open(log_path).read().count("cancelled")
    st = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=300, temperature=0,
                                   stream=True)
    it = iter(st)
    next(it)
    next(it)
    st.close()
    seen = False
    for _ in range(200):
        time.sleep(0.1)
        if open(log_path).read().count("cancelled") > before:
            seen = True
            break
    check(seen, "a streaming client that disconnects: its request is cancelled (server log)",
          open(log_path).read()[-600:])

    # SIGTERM with a request in flight (a stream whose first chunk has arrived): it completes, exit 0
    st = client.completions.create(model=model_id, prompt=p, max_tokens=16, temperature=0, stream=True)
    it = iter(st)
    first = next(it)
    srv.send_signal(signal.SIGTERM)
    rest = list(it)
    text = "".join(c.choices[0].text for c in [first] + rest if c.choices)
    fin = [c.choices[0].finish_reason for c in rest if c.choices and c.choices[0].finish_reason]
    rc = srv.wait(timeout=300)
    check(rc == 0, f"SIGTERM: exit status {rc}")
    check(fin in (["length"], ["stop"]) and text, f"the stream in flight at SIGTERM completed: {text!r} {fin}")
    logf.close()
    log = open(log_path).read()
    check("stopping" in log and "stopped" in log, "the log says it drained and stopped")
    subprocess.run(["rm", "-rf", tmp])
    gemma_pass(openai, a)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        F += 1
    print(f"RESULT check_serve_clients passed={P} failed={F} skipped={S}")
    sys.exit(1 if F else 0)
