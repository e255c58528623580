#!/usr/bin/env python3
"""The web page of `afinar serve` in a real browser (headless Chromium through selenium + chromedriver,
both from Debian/PyPI via scripts/setup.sh), against a server on 127.0.0.1 only.

Checks: the page loads without JavaScript errors; a chat round-trip streams the text the API gives
for the same request; side by side shows two different answers for the base model and a LoRA adapter
trained just before (3 causal-LM steps); adapters are loaded and unloaded from the page; a run's chart
gains points while a short classification run writes metrics.jsonl; the finished run's best/ loads as
an adapter with one click and classifies with probability bars; the last evaluation's confusion matrix
is shown; an API error appears as a message; runs outside --runs (a symbolic link out, '..') are refused.
Screenshots of each view go to --shots (CI artefacts). Prints "RESULT web_ui passed=P failed=F skipped=S".
Bounded: every wait has a timeout; the server and the training run are killed at the end."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

PASSED = FAILED = 0


def check(ok, what):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print("ok   " + what)
    else:
        FAILED += 1
        print("FAIL " + what)
    sys.stdout.flush()


def http(base, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode() or "null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "null")


def wait_for(fn, timeout, step=0.25):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            v = fn()
            if v:
                return v
        except Exception:  # element not there yet
            pass
        time.sleep(step)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--afinar", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="data/bbc/train.jsonl")
    ap.add_argument("--labels", default="data/bbc/labels.txt")
    ap.add_argument("--shots", default="build/web-ui")
    ap.add_argument("--threads", default="2")
    a = ap.parse_args()

    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    os.makedirs(a.shots, exist_ok=True)
    work = tempfile.mkdtemp(prefix="afinar-web-")
    runs = os.path.join(work, "runs")
    os.makedirs(runs)
    procs = []
    driver = None
    try:
        # small data: 48 training and 16 validation articles, 12 headline examples
        with open(a.data) as f:
            lines = [next(f) for _ in range(64)]
        open(os.path.join(work, "train.jsonl"), "w").writelines(lines[:48])
        open(os.path.join(work, "val.jsonl"), "w").writelines(lines[48:])
        # prompt/completion pairs: the headline (first line) of each article as the completion
        lm = [json.dumps({"prompt": "Write a news headline.", "completion": json.loads(x)["input"].split("\n")[0]}) + "\n"
              for x in lines[:16]]
        open(os.path.join(work, "lm.jsonl"), "w").writelines(lm)
        common = ["-m", a.model, "-t", a.threads, "--overwrite"]
        # a causal-LM adapter with a large learning rate: its answers differ from the base model's
        sft = os.path.join(work, "sft")
        r = subprocess.run([a.afinar, "train", "--task", "causal-lm", "--train", os.path.join(work, "lm.jsonl"), "-o", sft,
                            "--max-steps", "3", "--lr", "4e-3", "--batch", "4", "--grad-accum", "1", "--max-seq-len", "48",
                            "--recipe", "fixed"] + common, capture_output=True, text=True, timeout=900)
        check(r.returncode == 0 and os.path.isdir(os.path.join(sft, "final")), "causal-LM adapter trained (rc %d)" % r.returncode)
        if r.returncode:
            print(r.stderr[-2000:])
            return
        os.symlink("/etc", os.path.join(runs, "outside"))  # a link out of --runs: must be refused

        log = open(os.path.join(work, "serve.log"), "w")
        srv = subprocess.Popen([a.afinar, "serve", "-m", a.model, "--port", "0", "-t", a.threads, "--runs", runs,
                                "-a", "tuned=" + os.path.join(sft, "final")], stdout=log, stderr=subprocess.STDOUT)
        procs.append(srv)
        port = wait_for(lambda: re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log.name).read()).group(1), 120)
        check(port is not None, "server listening")
        if not port:
            print(open(log.name).read()[-2000:])
            return
        base = "http://127.0.0.1:%s" % port

        # path checks of the runs API (a browser can read nothing outside --runs)
        st, _ = http(base, "/api/runs/outside")
        check(st == 404, "a symbolic link out of --runs is refused (%d)" % st)
        st, _ = http(base, "/api/runs/..%2F..%2Fetc")
        check(st == 404, "'..' in a run name is refused (%d)" % st)
        st, j = http(base, "/api/runs")
        check(st == 200 and j["runs"] == [], "no runs listed yet (the link is not a run)")

        opts = webdriver.ChromeOptions()
        for o in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
            opts.add_argument(o)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
        driver = webdriver.Chrome(options=opts, service=service)
        driver.set_page_load_timeout(60)
        driver.get(base + "/")
        check(wait_for(lambda: driver.find_element(By.ID, "base-model").text, 30) == "SmolLM2-135M-Instruct.Q4_1",
              "page loads and names the base model")
        models = [o.get_attribute("value") for o in Select(driver.find_element(By.ID, "model-a")).options]
        check(models == ["SmolLM2-135M-Instruct.Q4_1", "tuned"], "model list: base and the adapter (%s)" % models)

        def settings(temp="0", seed="7", mx="20"):
            for i, v in (("temperature", temp), ("seed", seed), ("max-tokens", mx)):
                e = driver.find_element(By.ID, i)
                e.clear()
                e.send_keys(v)

        def send(text):
            p = driver.find_element(By.ID, "prompt")
            p.send_keys(text)
            driver.find_element(By.ID, "send").click()
            return wait_for(lambda: not driver.find_element(By.ID, "send").get_attribute("disabled") and
                            driver.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done]"), 300)

        def answers(col):
            return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#msgs-%s .msg.assistant .text" % col)]

        question = "Write a headline about a football match."
        settings()
        check(send(question), "chat answer streamed")
        ui_a = answers("a")[-1]
        st, j = http(base, "/v1/chat/completions", {"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [
            {"role": "user", "content": question}], "temperature": 0, "seed": 7, "max_tokens": 20})
        api_a = j["choices"][0]["message"]["content"] if st == 200 else None
        check(ui_a == api_a and ui_a, "streamed text equals the API's answer (%r vs %r)" % (ui_a, api_a))
        driver.save_screenshot(os.path.join(a.shots, "playground.png"))

        # side by side: base vs the adapter
        driver.find_element(By.ID, "reset").click()
        driver.find_element(By.ID, "side-by-side").click()
        Select(driver.find_element(By.ID, "model-b")).select_by_value("tuned")
        check(send(question) and wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done]")) == 2, 300),
              "side by side: both answers streamed")
        la, lb = answers("a")[-1], answers("b")[-1]
        st, j = http(base, "/v1/chat/completions", {"model": "tuned", "messages": [{"role": "user", "content": question}],
                                                    "temperature": 0, "seed": 7, "max_tokens": 20})
        api_b = j["choices"][0]["message"]["content"] if st == 200 else None
        check(la == api_a and lb == api_b, "side by side: each column equals the API for its model")
        check(la != lb and lb.strip(), "side by side: base and adapter answers differ (%r | %r)" % (la, lb))
        driver.save_screenshot(os.path.join(a.shots, "side-by-side.png"))

        # adapters: load, then unload from the page
        driver.find_element(By.ID, "tab-adapters").click()
        check(wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#adapters-table tr[data-name=tuned]"), 20),
              "adapters view lists the served adapter")
        driver.find_element(By.ID, "load-name").send_keys("again")
        driver.find_element(By.ID, "load-path").send_keys(os.path.join(sft, "final"))
        driver.find_element(By.CSS_SELECTOR, "#load-form button").click()
        check(wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#adapters-table tr[data-name=again]"), 60),
              "an adapter loaded from the page appears")
        driver.save_screenshot(os.path.join(a.shots, "adapters.png"))
        driver.find_element(By.CSS_SELECTOR, "#adapters-table tr[data-name=again] button.unload").click()
        check(wait_for(lambda: not driver.find_elements(By.CSS_SELECTOR, "#adapters-table tr[data-name=again]"), 30),
              "an adapter unloaded from the page disappears")
        st, j = http(base, "/lora-adapters")
        check(st == 200 and [x["name"] for x in j] == ["tuned"], "the server agrees: only 'tuned' is loaded")
        # an API error is shown as a message
        driver.find_element(By.ID, "load-name").send_keys("bad")
        driver.find_element(By.ID, "load-path").send_keys(os.path.join(work, "nonexistent"))
        driver.find_element(By.CSS_SELECTOR, "#load-form button").click()
        err = wait_for(lambda: driver.find_element(By.ID, "error-text").text if driver.find_element(By.ID, "error").is_displayed() else None, 30)
        check(err and "nonexistent" in err, "an API error is shown as a message (%r)" % err)
        driver.find_element(By.ID, "error-close").click()

        # runs: a short classification run writes metrics while the page watches
        live = os.path.join(runs, "live")
        tr = subprocess.Popen([a.afinar, "train", "--train", os.path.join(work, "train.jsonl"), "--val", os.path.join(work, "val.jsonl"),
                               "--labels", a.labels, "-o", live, "--max-steps", "6", "--eval-every", "3", "--batch", "4",
                               "--grad-accum", "1", "--max-seq-len", "32", "--recipe", "fixed"] + common,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(tr)
        wait_for(lambda: os.path.exists(os.path.join(live, "run.json")), 300)
        driver.find_element(By.ID, "tab-runs").click()
        check(wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#runs-list li[data-run=live]"), 30), "runs view lists the live run")
        driver.find_element(By.CSS_SELECTOR, "#runs-list li[data-run=live]").click()
        pts = lambda: int(driver.find_element(By.ID, "chart-loss").get_attribute("data-points") or 0)
        first = wait_for(lambda: pts() or None, 600)
        check(first is not None, "the loss chart shows the run's first points (%s)" % first)
        grown = wait_for(lambda: pts() > (first or 0), 600, 0.5)
        check(grown, "the loss chart updates while the run writes metrics (%s -> %s points)" % (first, pts()))
        tr.wait(timeout=900)
        check(tr.returncode == 0, "the live run ended (rc %s)" % tr.returncode)
        check(wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#run-confusion tr"), 60),
              "the last evaluation's confusion matrix is shown")
        check(len(driver.find_elements(By.CSS_SELECTOR, "#run-per-class tr")) == 6, "per-class table: 5 labels + header")
        check(wait_for(lambda: int(driver.find_element(By.ID, "chart-eval").get_attribute("data-points") or 0) >= 4, 30),
              "evaluation chart: 2 evaluations x 2 metrics")
        driver.save_screenshot(os.path.join(a.shots, "runs.png"))
        driver.find_element(By.ID, "run-load-best").click()
        msg = wait_for(lambda: driver.find_element(By.ID, "run-load-msg").text, 60)
        check(msg and "live-best" in msg, "best/ loaded with one click (%r)" % msg)

        # the loaded classifier in the playground: label and probability bars
        driver.find_element(By.ID, "tab-playground").click()
        wait_for(lambda: "live-best" in [o.get_attribute("value") for o in Select(driver.find_element(By.ID, "model-a")).options], 30)
        Select(driver.find_element(By.ID, "model-a")).select_by_value("live-best")
        check(driver.find_element(By.ID, "classify-panel").is_displayed(), "a classifier shows the classification box")
        driver.find_element(By.ID, "classify-text").send_keys("The striker scored twice as the club won the cup final.")
        driver.find_element(By.ID, "classify-btn").click()
        bars = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#classify-result .barrow"), 120)
        check(bars and len(bars) == 5, "five probability bars")
        st, j = http(base, "/v1/classify", {"model": "live-best", "input": "The striker scored twice as the club won the cup final."})
        lab = driver.find_element(By.CSS_SELECTOR, "#classify-result p").text
        check(st == 200 and lab == "label: " + j["data"][0]["label"], "the page's label equals the API's (%r)" % lab)
        driver.save_screenshot(os.path.join(a.shots, "classify.png"))

        # no JavaScript errors (failed fetches of the error test above are the server's 4xx answers)
        logs = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]
        for e in logs:
            print("console:", e["message"])
        check(not logs, "no JavaScript errors in the console")
    finally:
        if driver:
            driver.quit()
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:  # a failed step: counted, with its traceback
        import traceback
        traceback.print_exc()
        FAILED += 1
    print("RESULT web_ui passed=%d failed=%d skipped=0" % (PASSED, FAILED))
    sys.exit(1 if FAILED else 0)
