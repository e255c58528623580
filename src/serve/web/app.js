// The web page of `afinar serve`: playground (chat, side by side, classification), adapters, runs.
// Plain browser JavaScript, no framework and no build step: everything it uses is the server's own
// HTTP API (OpenAI routes, /lora-adapters, /api/runs).
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  models: [],          // /v1/models data
  base: "",
  history: { a: [], b: [] }, // chat messages per column (user turns are shared, answers differ)
  controllers: [],     // AbortControllers of streams in flight
  run: null,           // selected run name
  runNext: 0,          // metrics.jsonl byte offset read so far
  runLines: [],        // parsed metrics lines of the selected run
  runInfo: null,
  runTimer: null,
};
window.afinar = state; // read by the browser tests

// ---------- helpers ----------
function showError(msg) {
  $("error-text").textContent = msg;
  $("error").hidden = false;
}
$("error-close").onclick = () => { $("error").hidden = true; };

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = localStorage.getItem("afinar-api-key") || "";
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function errorOf(r) {
  let msg = r.status + " " + r.statusText;
  try {
    const j = await r.json();
    if (j && j.error && j.error.message) msg = j.error.message + " (HTTP " + r.status + ")";
  } catch (e) { /* not JSON */ }
  return new Error(msg);
}

async function api(path, body) {
  const opt = body === undefined ? { headers: headers(false) }
    : { method: "POST", headers: headers(true), body: JSON.stringify(body) };
  const r = await fetch(path, opt);
  if (!r.ok) throw await errorOf(r);
  return r.json();
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function fmt(x, d) {
  if (typeof x !== "number" || !isFinite(x)) return String(x);
  if (x !== 0 && (Math.abs(x) < 1e-3 || Math.abs(x) >= 1e5)) return x.toExponential(2);
  return x.toFixed(d === undefined ? 4 : d);
}

// ---------- views ----------
function showView(name) {
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.view === name);
  for (const v of ["playground", "adapters", "runs"]) $("view-" + v).hidden = v !== name;
  if (name === "adapters") refreshAdapters().catch((e) => showError(e.message));
  if (name === "runs") refreshRuns().catch((e) => showError(e.message));
  location.hash = name;
}
for (const b of document.querySelectorAll(".tab")) b.onclick = () => showView(b.dataset.view);

$("api-key").value = localStorage.getItem("afinar-api-key") || "";
$("api-key").onchange = () => {
  localStorage.setItem("afinar-api-key", $("api-key").value);
  refreshModels().catch((e) => showError(e.message));
};

// ---------- models ----------
async function refreshModels() {
  const j = await api("/v1/models");
  state.models = j.data || [];
  const base = state.models.find((m) => !m.parent);
  state.base = base ? base.id : "";
  $("base-model").textContent = state.base;
  for (const id of ["model-a", "model-b"]) {
    const sel = $(id), old = sel.value;
    sel.textContent = "";
    for (const m of state.models) {
      const label = m.parent ? m.id + (m.kind === "classifier" ? " (classifier)" : " (LoRA)") : m.id + " (base)";
      sel.append(el("option", { value: m.id, text: label }));
    }
    if (state.models.some((m) => m.id === old)) sel.value = old;
  }
  if (!$("model-b").value || $("model-b").value === $("model-a").value) {
    const other = state.models.find((m) => m.id !== $("model-a").value && m.kind !== "classifier");
    if (other) $("model-b").value = other.id;
  }
  onModelChange();
}

function kindOf(id) {
  const m = state.models.find((x) => x.id === id);
  return m && m.kind === "classifier" ? "classifier" : "chat";
}

function onModelChange() {
  const a = $("model-a").value, sbs = $("side-by-side").checked;
  $("model-b").disabled = !sbs;
  $("col-b").hidden = !sbs;
  $("col-a-title").textContent = a;
  $("col-b-title").textContent = $("model-b").value;
  const cls = kindOf(a) === "classifier";
  $("classify-panel").hidden = !cls;
  $("classify-model").textContent = a;
  $("chat-form").hidden = cls;
  $("chat-columns").hidden = cls;
}
$("model-a").onchange = onModelChange;
$("model-b").onchange = onModelChange;
$("side-by-side").onchange = onModelChange;

// ---------- chat ----------
function addMsg(col, role, text) {
  const d = el("div", { class: "msg " + role }, el("span", { class: "who", text: role }), el("span", { class: "text", text: text }));
  $("msgs-" + col).append(d);
  $("msgs-" + col).scrollTop = 1e9;
  return d.querySelector(".text");
}

function resetChat() {
  for (const c of state.controllers) c.abort();
  state.history = { a: [], b: [] };
  $("msgs-a").textContent = "";
  $("msgs-b").textContent = "";
}
function of_cols() { return $("side-by-side").checked ? ["a", "b"] : ["a"]; }
$("reset").onclick = resetChat;

async function streamChat(col, model, textNode) {
  const msgs = [];
  const sys = $("system").value.trim();
  if (sys) msgs.push({ role: "system", content: sys });
  msgs.push(...state.history[col]);
  const body = {
    model: model, messages: msgs, stream: true,
    temperature: Number($("temperature").value), top_p: Number($("top-p").value),
    max_tokens: Number($("max-tokens").value),
  };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  const ctl = new AbortController();
  state.controllers.push(ctl);
  let text = "";
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(true), body: JSON.stringify(body), signal: ctl.signal });
    if (!r.ok) throw await errorOf(r);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of ev.split("\n")) {
          if (!line.startsWith("data: ")) continue; // SSE comments (keep-alives)
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          const d = j.choices && j.choices[0] && j.choices[0].delta;
          if (d && d.content) { text += d.content; textNode.textContent = text; $("msgs-" + col).scrollTop = 1e9; }
        }
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") showError(model + ": " + e.message);
  } finally {
    state.history[col].push({ role: "assistant", content: text });
    textNode.parentNode.dataset.done = "1";
  }
}

async function send(ev) {
  if (ev) ev.preventDefault();
  const p = $("prompt").value;
  if (!p.trim()) return;
  $("prompt").value = "";
  $("send").disabled = true;
  $("stop").disabled = false;
  const jobs = [];
  const models = { a: $("model-a").value, b: $("model-b").value };
  for (const c of of_cols()) {
    state.history[c].push({ role: "user", content: p });
    addMsg(c, "user", p);
    const node = addMsg(c, "assistant", "");
    jobs.push(streamChat(c, models[c], node));
  }
  await Promise.all(jobs);
  state.controllers = [];
  $("send").disabled = false;
  $("stop").disabled = true;
}
$("chat-form").onsubmit = send;
$("prompt").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) send(e); };
$("stop").onclick = () => { for (const c of state.controllers) c.abort(); };

// ---------- classification ----------
$("classify-btn").onclick = async () => {
  const out = $("classify-result");
  out.textContent = "";
  try {
    const j = await api("/v1/classify", { model: $("model-a").value, input: $("classify-text").value });
    const r = j.data[0];
    const probs = Object.entries(r.probabilities).sort((x, y) => y[1] - x[1]);
    out.append(el("p", { text: "label: " + r.label }));
    for (const [lab, p] of probs) {
      const fill = el("div", { class: "fill" });
      fill.style.width = (100 * p).toFixed(1) + "%";
      out.append(el("div", { class: "barrow" + (lab === r.label ? " top" : "") }, el("span", { class: "lbl", text: lab }),
        el("div", { class: "track" }, fill), el("span", { class: "val", text: (100 * p).toFixed(1) + "%" })));
    }
  } catch (e) { showError(e.message); }
};

// ---------- adapters ----------
async function refreshAdapters() {
  const [list] = await Promise.all([api("/lora-adapters"), refreshModels()]);
  const tb = $("adapters-table").querySelector("tbody");
  tb.textContent = "";
  $("adapters-empty").hidden = list.length > 0;
  for (const a of list) {
    const m = state.models.find((x) => x.id === a.name);
    const scale = el("input", { type: "number", step: "0.1", value: String(a.scale), class: "scale", "data-id": String(a.id) });
    scale.style.width = "70px";
    scale.onchange = async () => {
      try {
        const body = list.map((x) => ({ id: x.id, scale: x.id === a.id ? Number(scale.value) : x.scale }));
        await api("/lora-adapters", body);
        await refreshAdapters();
      } catch (e) { showError(e.message); }
    };
    const unload = el("button", { type: "button", class: "secondary unload", text: "Unload" });
    unload.onclick = async () => {
      try { await api("/lora-adapters/unload", { id: a.id }); await refreshAdapters(); } catch (e) { showError(e.message); }
    };
    tb.append(el("tr", { "data-name": a.name }, el("td", { text: String(a.id) }), el("td", { text: a.name }),
      el("td", { text: m && m.kind === "classifier" ? "classifier" : "LoRA" }), el("td", { text: a.path }),
      el("td", {}, scale), el("td", {}, unload)));
  }
}
$("load-form").onsubmit = async (e) => {
  e.preventDefault();
  try {
    await api("/lora-adapters/load", { name: $("load-name").value, path: $("load-path").value });
    $("load-name").value = "";
    $("load-path").value = "";
    await refreshAdapters();
  } catch (err) { showError(err.message); }
};

// ---------- runs ----------
async function refreshRuns() {
  let j;
  try { j = await api("/api/runs"); } catch (e) {
    $("runs-empty").hidden = false;
    $("runs-empty").textContent = e.message;
    $("runs-list").textContent = "";
    return;
  }
  const ul = $("runs-list");
  ul.textContent = "";
  $("runs-empty").hidden = j.runs.length > 0;
  $("runs-empty").textContent = "No run directory under --runs yet.";
  j.runs.sort((x, y) => (y.modified || 0) - (x.modified || 0));
  for (const r of j.runs) {
    const li = el("li", { "data-run": r.name }, el("b", { text: r.name }),
      el("small", { text: r.task + " · step " + (r.step || 0) + (r.total_steps ? " / " + r.total_steps : "") }));
    if (r.name === state.run) li.classList.add("active");
    li.onclick = () => selectRun(r.name);
    ul.append(li);
  }
  if (!state.run && j.runs.length) selectRun(j.runs[0].name);
}

function selectRun(name) {
  state.run = name;
  state.runNext = 0;
  state.runLines = [];
  state.runInfo = null;
  for (const li of $("runs-list").children) li.classList.toggle("active", li.dataset.run === name);
  $("run-detail").hidden = false;
  $("run-title").textContent = name;
  $("run-load-msg").textContent = "";
  if (state.runTimer) clearInterval(state.runTimer);
  pollRun(true);
  state.runTimer = setInterval(() => pollRun(false), 2000);
}

let infoTick = 0;
async function pollRun(withInfo) {
  const name = state.run;
  if (!name || $("view-runs").hidden) return;
  try {
    const m = await api("/api/runs/" + encodeURIComponent(name) + "/metrics?from=" + state.runNext);
    if (name !== state.run) return;
    if (m.reset) state.runLines = [];
    state.runLines.push(...m.lines);
    state.runNext = m.next;
    if (withInfo || m.lines.length || ++infoTick % 5 === 0) {
      state.runInfo = await api("/api/runs/" + encodeURIComponent(name));
      renderRunInfo();
      if (!withInfo) await refreshRuns(); // steps of the other runs, new runs
    }
    renderRun();
  } catch (e) { showError(e.message); }
}

function renderRun() {
  const L = state.runLines, train = L.filter((x) => x.type === "train"), ev = L.filter((x) => x.type === "eval");
  const info = state.runInfo && state.runInfo.run;
  const total = info && info.total_steps ? info.total_steps : 0;
  const last = train[train.length - 1];
  const step = last ? last.step : 0;
  const pct = total ? Math.min(100, (100 * step) / total) : 0;
  $("run-bar").style.width = pct.toFixed(1) + "%";
  let eta = "";
  if (last && total && step < total && last.elapsed > 0) eta = " · ETA " + fmtTime((last.elapsed / step) * (total - step));
  $("run-progress").textContent = "step " + step + (total ? " / " + total : "") + (last ? " · loss " + fmt(last.loss) : "") + eta;
  $("run-load-best").disabled = !(state.runInfo && state.runInfo.has_best);
  $("run-load-final").disabled = !(state.runInfo && state.runInfo.has_final);
  drawChart($("chart-loss"), [{ name: "loss", pts: train.map((x) => [x.step, x.loss]) },
    { name: "eval loss", pts: ev.filter((x) => x.loss !== undefined || x.eval_loss !== undefined)
      .map((x) => [x.step, x.eval_loss !== undefined ? x.eval_loss : x.loss]).filter((p) => p[1] >= 0) }]);
  drawChart($("chart-lr"), [{ name: "learning rate", pts: train.map((x) => [x.step, x.lr !== undefined ? x.lr : x.learning_rate]) }]);
  const cls = ev.some((x) => x.accuracy !== undefined);
  $("chart-eval-title").textContent = cls ? "Validation accuracy / macro-F1" : "Validation token accuracy";
  drawChart($("chart-eval"), cls
    ? [{ name: "accuracy", pts: ev.map((x) => [x.step, x.accuracy]) }, { name: "macro-F1", pts: ev.map((x) => [x.step, x.macro_f1]) }]
    : [{ name: "token accuracy", pts: ev.map((x) => [x.step, x.eval_mean_token_accuracy]) }]);
  const spd = train.some((x) => x.samples_per_s !== undefined) ? "samples_per_s" : "tokens_per_s";
  $("chart-speed-title").textContent = "Throughput (" + spd.replace(/_/g, " ").replace(" per s", "/s") + ")";
  drawChart($("chart-speed"), [{ name: spd, pts: train.map((x) => [x.step, x[spd]]) }]);
}

function fmtTime(s) {
  if (!isFinite(s)) return "?";
  s = Math.round(s);
  return s >= 3600 ? Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0")
    : s >= 60 ? Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s" : s + "s";
}

function renderRunInfo() {
  const tb = $("run-settings").querySelector("tbody");
  tb.textContent = "";
  const run = state.runInfo && state.runInfo.run;
  if (run) {
    const rows = [];
    for (const [k, v] of Object.entries(run.config || {})) rows.push([k, typeof v === "object" ? JSON.stringify(v) : String(v)]);
    for (const k of ["n_train", "n_val", "num_classes", "total_steps", "steps_per_epoch", "warmup_steps", "trainable_parameters"])
      if (run[k] !== undefined) rows.push([k, String(run[k])]);
    if (run.recipe && typeof run.recipe === "object") {
      for (const [k, v] of Object.entries(run.recipe)) rows.push(["recipe." + k, typeof v === "object" ? JSON.stringify(v) : String(v)]);
    }
    for (const [k, v] of rows) tb.append(el("tr", {}, el("th", { text: k }), el("td", { text: v })));
  }
  const box = $("run-eval");
  box.textContent = "";
  const ev = state.runInfo && state.runInfo.eval;
  if (!ev) { box.textContent = "none yet"; box.className = "muted"; return; }
  box.className = "";
  box.append(el("p", { text: "step " + (ev.step !== undefined ? ev.step : "?") + " · accuracy " + fmt(ev.accuracy) + " · macro-F1 " + fmt(ev.macro_f1) + " · n " + ev.n }));
  const pc = el("table", { id: "run-per-class" }, el("tr", {}, ...["label", "precision", "recall", "F1", "support"].map((h) => el("th", { text: h }))));
  for (const c of ev.per_class || [])
    pc.append(el("tr", {}, el("td", { text: c.label }), el("td", { text: fmt(c.precision, 3) }), el("td", { text: fmt(c.recall, 3) }),
      el("td", { text: fmt(c.f1, 3) }), el("td", { text: String(c.support) })));
  box.append(pc);
  if (ev.confusion) {
    const labels = (ev.per_class || []).map((c) => c.label);
    const t = el("table", { class: "confusion", id: "run-confusion" }, el("tr", {}, el("th", { text: "gold \\ predicted" }), ...labels.map((l) => el("th", { text: l }))));
    ev.confusion.forEach((row, r) => t.append(el("tr", {}, el("th", { text: labels[r] }),
      ...row.map((v, c) => el("td", { class: r === c ? "diag" : "", text: String(v) })))));
    box.append(el("h3", { text: "Confusion matrix" }), t);
  }
}

async function loadRun(which) {
  try {
    const j = await api("/api/runs/" + encodeURIComponent(state.run) + "/load", { which: which });
    $("run-load-msg").textContent = "loaded as model '" + j.name + "' (id " + j.id + ")";
    await refreshModels();
  } catch (e) { showError(e.message); }
}
$("run-load-best").onclick = () => loadRun("best");
$("run-load-final").onclick = () => loadRun("final");

// ---------- a small line chart on a canvas ----------
const COLORS = ["#2f7fd1", "#e07b24", "#2a9d5b", "#b03a8f"];
function drawChart(cv, series) {
  const g = cv.getContext("2d"), W = cv.width, H = cv.height, L = 56, R = 10, T = 10, B = 26;
  g.clearRect(0, 0, W, H);
  const pts = series.flatMap((s) => s.pts).filter((p) => isFinite(p[0]) && isFinite(p[1]));
  cv.dataset.points = String(pts.length);
  g.font = "11px system-ui, sans-serif";
  if (!pts.length) { g.fillStyle = "#6b7785"; g.fillText("no data yet", W / 2 - 30, H / 2); return; }
  let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
  let y0 = Math.min(...pts.map((p) => p[1])), y1 = Math.max(...pts.map((p) => p[1]));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 += Math.abs(y1) * 0.05 || 1; y0 -= Math.abs(y0) * 0.05 || 1; }
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), Y = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  g.strokeStyle = "#c5ccd4"; g.fillStyle = "#44505c"; g.lineWidth = 1;
  g.beginPath(); g.moveTo(L, T); g.lineTo(L, H - B); g.lineTo(W - R, H - B); g.stroke();
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    g.fillText(fmt(y, 3), 2, Y(y) + 4);
  }
  g.fillText(String(x0), L, H - 8);
  g.fillText(String(x1) + " (step)", W - R - 60, H - 8);
  series.forEach((s, k) => {
    const p = s.pts.filter((q) => isFinite(q[0]) && isFinite(q[1]));
    g.strokeStyle = g.fillStyle = COLORS[k % COLORS.length];
    g.lineWidth = 1.5;
    g.beginPath();
    p.forEach((q, i) => (i ? g.lineTo(X(q[0]), Y(q[1])) : g.moveTo(X(q[0]), Y(q[1]))));
    g.stroke();
    if (p.length < 30) for (const q of p) g.fillRect(X(q[0]) - 2, Y(q[1]) - 2, 4, 4);
    if (series.length > 1) g.fillText(s.name, W - R - 90, T + 12 + 13 * k);
  });
}

// ---------- start ----------
refreshModels().catch((e) => showError(e.message));
const start = (location.hash || "#playground").slice(1);
showView(["playground", "adapters", "runs"].includes(start) ? start : "playground");
