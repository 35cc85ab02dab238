/* superbiz web application: ask, diagnosis, history. No framework, no external origin.
 * Every datum is untrusted and is rendered as a text node (textContent), never as markup. */
"use strict";

const KEY_STORE = "superbiz.api_key";
const SVG_NS = "http://www.w3.org/2000/svg";
const CONFIRMED = ["direct_observation", "reasonable_inference"];
const LABEL_WORDS = {
  direct_observation: "confirmed: stated in the evidence",
  reasonable_inference: "inference from the evidence",
  overstated: "overstated: stronger than the evidence",
  unsupported: "unsupported: no evidence gathered",
  external_unknown: "external knowledge: cannot be checked here",
  contradicted: "contradicted by the evidence",
  unchecked: "not checked",
};
const HISTORY_THREADS = 25;
/* How each tool's entries are shown, by tool name: {role, arrays: [{name, source_type, kind,
 * fields, within}]}, served by /assets/tools.json from the tool registry. The page draws entries
 * by display kind (log, alert, series, document, table) and knows no tool by name. */
let TOOL_DISPLAY = {};

/* ---------------------------------------------------------------- DOM helpers */

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.setAttribute("class", value);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function fmtNumber(value) {
  if (typeof value !== "number" || !Number.isFinite(value)) return text(value);
  return String(Math.round(value * 1e6) / 1e6);
}

function score(value) {
  return typeof value === "number" ? value.toFixed(2) : "n/a";
}

function badge(verdict, value) {
  const word = verdict || "no verdict";
  return h("span", { class: `badge verdict-${word}`, "data-verdict": word },
    value === undefined ? word : `${word} · ${score(value)}`);
}

function section(title, id, ...children) {
  return h("section", { id, "aria-labelledby": `${id}-h` }, h("h2", { id: `${id}-h` }, title), children);
}

function main() {
  return document.getElementById("main");
}

function show(...children) {
  const el = main();
  el.replaceChildren();
  append(el, children);
}

/* ---------------------------------------------------------------- access */

function takeKeyFromFragment() {
  const hash = window.location.hash;
  if (!hash.startsWith("#key=")) return;
  const key = decodeURIComponent(hash.slice(5));
  if (key) sessionStorage.setItem(KEY_STORE, key);
  history.replaceState(null, "", window.location.pathname + window.location.search);
}

function apiKey() {
  return sessionStorage.getItem(KEY_STORE);
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function authHeaders() {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Accept: "application/json", ...authHeaders(), ...(options.headers || {}) },
  });
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try {
      message = (await response.json()).error || message;
    } catch (_) { /* not JSON */ }
    throw new ApiError(response.status, message);
  }
  return response;
}

async function getJson(path) {
  return (await api(path)).json();
}

function renderAccess() {
  const box = document.getElementById("access");
  box.replaceChildren();
  if (apiKey()) {
    box.append(h("span", { class: "muted" }, "API key set for this browser session "),
      h("button", { type: "button", class: "plain", id: "forget-key", onclick: () => {
        sessionStorage.removeItem(KEY_STORE);
        window.location.reload();
      } }, "Forget key"));
  }
}

function keyForm(reason) {
  const input = h("input", { id: "api-key", type: "password", autocomplete: "off", required: true,
    size: 32 });
  const form = h("form", { class: "ask", id: "key-form", onsubmit: (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_STORE, input.value.trim());
    window.location.reload();
  } },
  h("h1", {}, "API key"),
  h("p", { class: "error", role: "alert" }, reason),
  h("p", {}, "Enter the API key you use with the HTTP API. It is kept in this browser session only ",
    "(a link may also carry it as #key=... after the address; it is then moved out of the address)."),
  h("label", { for: "api-key" }, "API key"), input,
  h("div", {}, h("button", { type: "submit" }, "Use this key")));
  show(form);
  input.focus();
}

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    keyForm(error.message);
    return;
  }
  show(h("p", { class: "error", role: "alert", id: "page-error" }, error.message));
}

/* ---------------------------------------------------------------- ask */

function stageText(event) {
  const round = event.round ? ` (round ${event.round})` : "";
  switch (event.stage) {
    case "intake": return `Intake: diagnosis ${text(event.diagnosis_id)} started${event.offline ? " (offline rules)" : ""}`;
    case "planner": return `Planner${round}: planning the evidence to gather`;
    case "tool": return `Tool call ${text(event.invocation_id)} ${text(event.tool)}: ${text(event.status)}`;
    case "executor": return `Executor${round}: ${text(event.tool_calls_used)} tool call(s) so far`;
    case "evidence": return `Evidence${round}: parsed, trace summary and rule evaluation`;
    case "gatekeeper": return `Gatekeeper${round}: checking every binding against the evidence`;
    case "verifier": return `Verifier${round}: checking the claims`;
    case "verdict": return `Verdict${round}: ${text(event.verdict)}, groundedness ${score(event.score)}`;
    case "retry": return `Retry: a second evidence round after ${text(event.previous_verdict)}`;
    case "composer": return `Composer${round}: writing the answer (${text(event.mode)})`;
    case "done": return `Done: ${text(event.verdict)}`;
    default: return `${text(event.stage)}${round}`;
  }
}

function parseSse(buffer, onEvent) {
  let rest = buffer;
  let cut;
  while ((cut = rest.indexOf("\n\n")) >= 0) {
    const block = rest.slice(0, cut);
    rest = rest.slice(cut + 2);
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (data.length) onEvent(name, JSON.parse(data.join("\n")));
  }
  return rest;
}

function renderAsk() {
  document.title = "Ask · superbiz";
  const question = h("textarea", { id: "question", name: "question", required: true,
    placeholder: "order-service 为什么报 500 错误？ / Why does order-service return 500 errors?" });
  const language = h("select", { id: "language", name: "language" },
    h("option", { value: "" }, "server default"), h("option", { value: "zh" }, "中文 (zh)"),
    h("option", { value: "en" }, "English (en)"));
  const thread = h("input", { id: "thread", name: "thread", size: 30,
    placeholder: "new thread", value: sessionStorage.getItem("superbiz.thread") || "" });
  const button = h("button", { type: "submit", id: "ask-button" }, "Ask");
  const continuing = h("p", { class: "muted", id: "thread-note", "aria-live": "polite" });
  const fresh = h("button", { type: "button", id: "new-conversation", onclick: () => {
    sessionStorage.removeItem("superbiz.thread");
    thread.value = "";
    sayThread(thread, continuing);
    question.focus();
  } }, "New conversation");
  thread.addEventListener("input", () => sayThread(thread, continuing));
  const stages = h("ol", { class: "stages", id: "stages", "aria-live": "polite" });
  const result = h("div", { id: "result", "aria-live": "polite" });
  const form = h("form", { class: "ask", id: "ask-form", onsubmit: (event) => {
    event.preventDefault();
    ask(question.value, language.value, thread.value.trim(), stages, result, button);
  } },
  h("h1", {}, "Ask about an incident"),
  h("label", { for: "question" }, "Question"), question,
  h("div", { class: "row" },
    h("div", {}, h("label", { for: "language" }, "Language"), language),
    h("div", {}, h("label", { for: "thread" }, "Thread (optional: continue a conversation)"), thread),
    h("div", {}, button, " ", fresh)),
  continuing);
  sayThread(thread, continuing);
  show(form, section("Progress", "progress", stages), result);
  question.focus();
}

/* Says whether the next question continues a thread (its earlier questions and answers are
   part of the conversation) or starts a new one. */
function sayThread(thread, note) {
  const id = thread.value.trim();
  note.textContent = id
    ? `Continues thread ${id}: the question follows its earlier questions and answers. `
      + "New conversation starts afresh."
    : "Starts a new conversation.";
  note.dataset.thread = id;
}

async function ask(question, language, thread, stages, result, button) {
  stages.replaceChildren();
  result.replaceChildren();
  button.disabled = true;
  const body = { question };
  if (language) body.language = language;
  if (thread) body.thread_id = thread;
  try {
    const response = await api("/api/chat_stream", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
    });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer = parseSse(buffer + decoder.decode(value, { stream: true }), (name, data) => {
        if (name === "stage") {
          stages.append(h("li", { class: `stage-${text(data.stage)}`, "data-stage": text(data.stage) },
            stageText(data)));
        } else if (name === "answer") {
          showAnswer(result, data);
        } else if (name === "error") {
          result.append(h("p", { class: "error", role: "alert", id: "ask-error" }, text(data.error)));
        }
      });
    }
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) keyForm(error.message);
    else result.append(h("p", { class: "error", role: "alert", id: "ask-error" }, error.message));
  } finally {
    button.disabled = false;
  }
}

function showAnswer(result, data) {
  sessionStorage.setItem("superbiz.thread", text(data.thread_id));
  const thread = document.getElementById("thread");
  if (thread) thread.value = text(data.thread_id);
  const note = document.getElementById("thread-note");
  if (thread && note) sayThread(thread, note);
  result.replaceChildren(section("Answer", "answer-section",
    h("p", {}, badge(data.verdict, data.groundedness_score), " ",
      h("a", { href: `/diagnoses/${encodeURIComponent(text(data.diagnosis_id))}`, id: "diagnosis-link" },
        "See why: claims and evidence"),
      h("span", { class: "muted" }, ` · thread ${text(data.thread_id)}`)),
    data.root_cause ? h("p", { id: "root-cause" }, h("strong", {}, "Most likely root cause (inferred): "),
      text(data.root_cause.service), ": ", text(data.root_cause.mechanism)) : null,
    answerView(text(data.answer))));
}

/* The composed answer, its sections and lists rendered (headings "## Title" and "【标题】",
   items "- ..."), every piece of it as text; the conclusion ("Answer" / "回答") comes first. */
function answerView(answer) {
  const box = h("div", { class: "answer rendered", id: "answer" });
  let list = null;
  let first = true;
  for (const raw of String(answer || "").split("\n")) {
    const line = raw.trimEnd();
    const heading = /^#{1,3}\s+(.+)$/.exec(line) || /^【(.+)】$/.exec(line);
    if (heading) {
      list = null;
      const title = heading[1];
      const isConclusion = first && (title === "Answer" || title === "回答");
      box.append(h("h3", isConclusion ? { id: "conclusion-heading" } : {}, title));
      first = false;
      continue;
    }
    if (line.startsWith("- ")) {
      if (!list) {
        list = h("ul", {});
        box.append(list);
      }
      list.append(h("li", {}, line.slice(2)));
      continue;
    }
    list = null;
    if (line.trim()) box.append(h("p", {}, line));
  }
  const heading = box.querySelector("#conclusion-heading");
  if (heading && heading.nextElementSibling) heading.nextElementSibling.id = "conclusion";
  return box;
}

/* ---------------------------------------------------------------- diagnosis */

function verdictReasons(ve, record) {
  const reasons = [];
  const model = ve.model_verdict;
  if (ve.verifier_mode === "offline") {
    reasons.push(`Offline mode: the deterministic claim checker (no model) gave ${model || "no verdict"}.`);
  } else {
    reasons.push(model ? `The Verifier model said ${model}.`
      : "The Verifier model gave no verdict (its reply could not be used).");
  }
  if (ve.derived_verdict) {
    reasons.push(`The claim checks give ${ve.derived_verdict} (groundedness ${score(ve.groundedness_score)}, computed from the claim labels).`);
  }
  const caps = [];
  const parse = ve.executor_output_parse_status || {};
  if (parse.status && parse.status !== "valid") {
    caps.push(["LOW_CONFID", `the executor's output was ${parse.status}, not one valid JSON object`]);
  }
  const gate = ve.gatekeeper_result || {};
  const rules = (gate.failed_rules || []).join(", ");
  if (gate.severity === "reject") caps.push(["REJECT", `the Gatekeeper failed a reject rule (${rules})`]);
  if (gate.severity === "low_confid") caps.push(["LOW_CONFID", `the Gatekeeper failed a rule (${rules})`]);
  if (ve.verifier_mode === "fallback") {
    caps.push(["LOW_CONFID", "the Verifier's reply could not be parsed, so the deterministic claim checker was used"]);
  }
  const coverage = ve.question_coverage || {};
  if (coverage.status === "unanswered") {
    caps.push(["LOW_CONFID", `no confirmed claim answers the question (unanswered: ${(coverage.unanswered || []).join(", ") || "none"})`]);
  }
  const conclusion = ve.conclusion || {};
  if (conclusion.status === "does_not_follow") {
    caps.push(["LOW_CONFID", `the answer's conclusion does not follow from its claims (${text(conclusion.reason)})`]);
  }
  for (const [cap, why] of caps) reasons.push(`Capped at ${cap}: ${why}.`);
  if (!caps.length) reasons.push("No cap applied (output valid, Gatekeeper passed, question answered).");
  reasons.push(`The verdict is the strictest of these: ${record.verdict || "none"}.`);
  const rounds = ve.rounds || [];
  if (rounds.length > 1) {
    const first = rounds[0];
    reasons.push(`Round 1 ended ${first.verdict} with groundedness ${score(first.groundedness_score)}, so a second evidence round ran; this is round ${rounds.length}.`);
  }
  return reasons;
}

function highlighted(refText, excerpt) {
  const full = text(refText);
  const needle = text(excerpt).trim();
  if (!needle) return [full];
  let at = full.indexOf(needle);
  if (at < 0) at = full.toLowerCase().indexOf(needle.toLowerCase());
  if (at < 0) return [full];
  return [full.slice(0, at), h("mark", {}, full.slice(at, at + needle.length)), full.slice(at + needle.length)];
}

function refOf(invocation, rawPath) {
  if (!invocation) return null;
  const refs = (invocation.retrieval_details || {}).evidence_refs || [];
  return refs.find((ref) => ref.raw_path === rawPath) || null;
}

async function loadToolDisplay() {
  try {
    const response = await fetch("/assets/tools.json", { headers: { Accept: "application/json" } });
    if (response.ok) TOOL_DISPLAY = (await response.json()).tools || {};
  } catch (_) { /* without it the claims and their refs are still shown */ }
}

function displayArrays(invocation, kind) {
  const tool = invocation ? TOOL_DISPLAY[text(invocation.tool_name)] : null;
  const arrays = (tool && Array.isArray(tool.arrays)) ? tool.arrays : [];
  return kind ? arrays.filter((array) => array.kind === kind) : arrays;
}

function entriesIn(invocation, array) {
  const list = ((invocation && invocation.output) || {})[array.name];
  return Array.isArray(list) ? list : [];
}

function entryOf(invocation, rawPath) {
  const match = /^(\w+)\[(\d+)\]$/.exec(text(rawPath));
  if (!invocation || !match || !invocation.output) return null;
  const list = invocation.output[match[1]];
  return Array.isArray(list) ? list[Number(match[2])] || null : null;
}

function arrayAt(invocation, rawPath) {
  const match = /^(\w+)\[\d+\]$/.exec(text(rawPath));
  return match ? displayArrays(invocation).find((array) => array.name === match[1]) || null : null;
}

function thresholdFor(invocation, series) {
  const alerts = displayArrays(invocation, "alert").flatMap((array) => entriesIn(invocation, array));
  const service = (series.labels || {}).service;
  const candidates = alerts.filter((a) => typeof a.threshold === "number"
    && (service === undefined || a.service === service));
  const same = candidates.filter((a) => typeof a.value === "number" && typeof series.last === "number"
    && Math.abs(a.value - series.last) <= Math.abs(series.last) * 1e-6 + 1e-12);
  if (same.length) return same[0];
  return candidates.length === 1 ? candidates[0] : null;
}

function seriesName(series) {
  const labels = Object.entries(series.labels || {}).sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`).join(",");
  return `${text(series.metric)}{${labels}}`;
}

function isoTime(seconds) {
  return new Date(seconds * 1000).toISOString().replace(".000Z", "Z");
}

function chart(series, alert, caption) {
  const points = (series.points || []).filter((p) => Array.isArray(p) && p.length === 2);
  if (points.length < 1) return null;
  const unit = text(series.unit);
  const W = 320, H = 130, L = 8, R = 312, T = 16, B = 108;
  const times = points.map((p) => p[0]);
  const values = points.map((p) => p[1]);
  const t0 = Math.min(...times), t1 = Math.max(...times);
  const minV = Math.min(...values), maxV = Math.max(...values);
  const threshold = alert ? alert.threshold : null;
  const lo = Math.min(minV, threshold ?? minV), hi = Math.max(maxV, threshold ?? maxV);
  const x = (t) => (t1 === t0 ? (L + R) / 2 : L + ((t - t0) / (t1 - t0)) * (R - L));
  const y = (v) => (hi === lo ? (T + B) / 2 : B - ((v - lo) / (hi - lo)) * (B - T));
  const iMin = values.indexOf(minV), iMax = values.indexOf(maxV), iLast = values.length - 1;
  const description = `Line chart of ${seriesName(series)} from ${isoTime(t0)} to ${isoTime(t1)}, `
    + `${points.length} points: min ${fmtNumber(minV)}${unit}, max ${fmtNumber(maxV)}${unit}, `
    + `last ${fmtNumber(values[iLast])}${unit}`
    + (threshold !== null ? `; alert ${text(alert.alert_name)} threshold ${fmtNumber(threshold)}${unit}` : "")
    + ".";
  const mark = (i, cls, word) => {
    const px = x(points[i][0]), py = y(values[i]);
    const anchor = px > W - 60 ? "end" : px < 60 ? "start" : "middle";
    return [s("circle", { class: `dot dot-${cls}`, cx: px, cy: py, r: 2.5 }),
      s("text", { class: `chart-${cls}`, x: px, y: cls === "min" ? Math.min(py + 11, H - 12) : Math.max(py - 5, 9),
        "text-anchor": anchor }, `${word} ${fmtNumber(values[i])}${unit}`)];
  };
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": description,
    "data-points": points.length },
  s("title", {}, description),
  threshold !== null ? [
    s("line", { class: "threshold", x1: L, x2: R, y1: y(threshold), y2: y(threshold) }),
    s("text", { class: "threshold-label", x: R, y: y(threshold) - 3, "text-anchor": "end" },
      `threshold ${fmtNumber(threshold)}${unit}`)] : null,
  s("polyline", { class: "line", points: points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ") }),
  mark(iMax, "max", "max"), iMin !== iMax ? mark(iMin, "min", "min") : null,
  iLast !== iMax && iLast !== iMin ? mark(iLast, "last", "last") : null,
  s("text", { x: L, y: H - 2 }, isoTime(t0)), s("text", { x: R, y: H - 2, "text-anchor": "end" }, isoTime(t1)));
  return h("figure", { class: "chart" }, svg,
    h("figcaption", {}, caption, h("span", { class: "visually-hidden" }, ` ${description}`)),
    h("p", { class: "muted chart-values" },
      `min ${fmtNumber(minV)}${unit} · max ${fmtNumber(maxV)}${unit} · last ${fmtNumber(values[iLast])}${unit}`));
}

function logLine(entry, fields) {
  // A log display's fields: the time first, the message last, the others between.
  const head = fields.slice(0, -1).map((field) => entry[field])
    .filter((value) => value !== null && value !== undefined && value !== "").map(text);
  return `${head.join(" ")}: ${text(entry[fields[fields.length - 1]])}`;
}

function timeline(invocation, array, citedIndexes) {
  const logs = entriesIn(invocation, array);
  const fields = Array.isArray(array.fields) && array.fields.length > 1 ? array.fields : ["timestamp", "message"];
  const times = logs.map((entry) => Date.parse(entry[fields[0]]));
  const output = invocation.output || {};
  const known = times.filter((t) => !Number.isNaN(t));
  let start = Date.parse(output.window_start || invocation.arguments?.start || "");
  let end = Date.parse(output.window_end || invocation.arguments?.end || "");
  if (Number.isNaN(start)) start = Math.min(...known);
  if (Number.isNaN(end)) end = Math.max(...known);
  const W = 400, H = 46, L = 6, R = 394;
  const x = (t) => (end <= start ? (L + R) / 2 : L + ((t - start) / (end - start)) * (R - L));
  const description = `Timeline of ${logs.length} log line(s) from ${new Date(start).toISOString()} `
    + `to ${new Date(end).toISOString()}; ${citedIndexes.size} cited by a claim (marked red, taller).`;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": description },
    s("title", {}, description),
    s("line", { x1: L, x2: R, y1: 30, y2: 30, class: "tick" }),
    times.map((t, i) => Number.isNaN(t) ? null : s("line", {
      class: citedIndexes.has(i) ? "tick cited" : "tick", x1: x(t), x2: x(t),
      y1: citedIndexes.has(i) ? 6 : 18, y2: 30 })),
    s("text", { x: L, y: H - 3 }, new Date(start).toISOString()),
    s("text", { x: R, y: H - 3, "text-anchor": "end" }, new Date(end).toISOString()));
  const lines = h("ol", { class: "loglines", start: 0 }, logs.map((entry, i) => h("li", {
    class: citedIndexes.has(i) ? "cited" : null, "data-path": `${array.name}[${i}]` },
  logLine(entry, fields),
  citedIndexes.has(i) ? h("strong", {}, " ← cited") : null)));
  return h("div", { class: "timeline" }, svg, lines);
}

function invocationLine(inv) {
  if (!inv) return h("span", { class: "error" }, "no such invocation in this diagnosis");
  return h("span", { class: "muted" },
    `${text(inv.tool_name)} · round ${text(inv.round)} · status ${text(inv.status)} · `
    + `${text(inv.started_at)} · ${fmtNumber(inv.duration_ms)} ms · arguments `,
    h("code", {}, JSON.stringify(inv.arguments ?? {})), inv.error ? h("span", { class: "error" }, ` · ${text(inv.error)}`) : null);
}

function claimsTable(ve, invocations) {
  const claims = ((ve.executor_structured_output || {}).claims) || [];
  const checks = new Map((ve.claim_checks || []).map((c) => [text(c.claim_id), c]));
  const gate = ve.gatekeeper_result || {};
  const verified = gate.verified_excerpts || {};
  const findings = [...(gate.errors || []).map((f) => ({ ...f, kind: "error" })),
    ...(gate.warnings || []).map((f) => ({ ...f, kind: "warning" }))];
  if (!claims.length) return h("p", { class: "muted", id: "no-claims" }, "The executor stated no claims.");
  const rows = claims.map((claim, index) => {
    const id = text(claim.claim_id);
    const check = checks.get(id);
    const label = check ? text(check.verification) : "unchecked";
    const confirmed = CONFIRMED.includes(label);
    const mine = findings.filter((f) => text(f.target) === `claims[${index}]`
      || text(f.target).startsWith(`claims[${index}].`));
    const verifiedBindings = new Set((verified[id] || []).map((v) => v.binding));
    const bindings = (claim.evidence_bindings || []).map((binding, j) => {
      const invId = text(binding.source_invocation_id || (binding.source_invocation_ids || [])[0]);
      const inv = invocations.get(invId);
      const ref = refOf(inv, binding.raw_path);
      const entry = entryOf(inv, binding.raw_path);
      const ok = verifiedBindings.has(j);
      const bindingFindings = mine.filter((f) => text(f.target).startsWith(`claims[${index}].evidence_bindings[${j}]`));
      return h("div", { class: `binding ${ok ? "verified" : "unverified"}`, "data-binding": j },
        h("div", {}, h("strong", {}, `${invId || "no invocation"} ${text(binding.raw_path) || "(no raw_path)"}`),
          ` ${ok ? "verified by the Gatekeeper" : "not verified"}`),
        h("div", {}, invocationLine(inv)),
        ref ? h("div", { class: "ref" }, highlighted(ref.text, binding.evidence_excerpt))
          : h("div", { class: "muted" }, "no evidence ref at this path"),
        h("div", { class: "muted" }, "excerpt: ", h("q", {}, text(binding.evidence_excerpt))),
        bindingFindings.map((f) => h("div", { class: `finding ${f.kind}` }, `${f.kind} ${text(f.rule_id)}: ${text(f.message)}`)),
        entry && (arrayAt(inv, binding.raw_path) || {}).kind === "series" && Array.isArray(entry.points) && entry.points.length
          ? chart(entry, thresholdFor(inv, entry), `${seriesName(entry)} (${invId} ${text(binding.raw_path)})`) : null);
    });
    const claimFindings = mine.filter((f) => !text(f.target).includes(".evidence_bindings["));
    return h("tr", { class: confirmed ? "confirmed" : "unconfirmed", "data-claim": id },
      h("td", {}, h("strong", {}, id), " ", h("span", { class: "muted" }, `${text(claim.claim_type)}, ${text(claim.support_level)}`),
        h("div", { class: "text claim-text" }, text(claim.claim_text))),
      h("td", {}, h("span", { class: `label label-${label}`, "data-label": label }, LABEL_WORDS[label] || label),
        confirmed ? null : h("span", { class: "unconfirmed-mark" }, "Not shown as confirmed"),
        check && check.detail ? h("div", { class: "muted text" }, text(check.detail)) : null,
        claimFindings.map((f) => h("div", { class: `finding ${f.kind}` }, `${f.kind} ${text(f.rule_id)}: ${text(f.message)}`))),
      h("td", {}, bindings.length ? bindings : h("span", { class: "muted" }, "no bindings")));
  });
  return h("div", { class: "scroll" }, h("table", { class: "claims", id: "claims" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Claim"), h("th", { scope: "col" }, "Label"),
      h("th", { scope: "col" }, "Evidence (invocation, cited ref with the excerpt highlighted)"))),
    h("tbody", {}, rows)));
}

function citedPaths(ve) {
  const cited = new Map();
  for (const claim of ((ve.executor_structured_output || {}).claims) || []) {
    for (const b of claim.evidence_bindings || []) {
      const key = `${text(b.source_invocation_id)} ${text(b.raw_path)}`;
      cited.set(key, [...(cited.get(key) || []), text(claim.claim_id)]);
    }
  }
  return cited;
}

function metricsSection(ve, list) {
  const cited = citedPaths(ve);
  const figures = [];
  for (const inv of list) {
    for (const array of displayArrays(inv, "series")) {
      entriesIn(inv, array).forEach((entry, i) => {
        const path = `${array.name}[${i}]`;
        const by = cited.get(`${inv.invocation_id} ${path}`);
        const figure = chart(entry, thresholdFor(inv, entry),
          `${seriesName(entry)} (${inv.invocation_id} ${path})${by ? `, cited by ${by.join(", ")}` : ""}`);
        if (figure) figures.push(figure);
      });
    }
  }
  return figures.length ? section("Metric series", "metrics", figures) : null;
}

function logsSection(ve, list) {
  const cited = citedPaths(ve);
  const parts = [];
  for (const inv of list) {
    for (const array of displayArrays(inv, "log")) {
      const logs = entriesIn(inv, array);
      if (!logs.length) continue;
      const indexes = new Set();
      logs.forEach((_, i) => { if (cited.has(`${inv.invocation_id} ${array.name}[${i}]`)) indexes.add(i); });
      parts.push(h("h3", {}, `${inv.invocation_id} ${text(inv.tool_name)} `, h("code", {}, JSON.stringify(inv.arguments ?? {}))),
        timeline(inv, array, indexes));
    }
  }
  return parts.length ? section("Log timeline", "logs", parts) : null;
}

function entriesSection(ve, list) {
  // Entry arrays shown as a table of their display fields (tools without a drawing of their own).
  const cited = citedPaths(ve);
  const parts = [];
  for (const inv of list) {
    for (const array of displayArrays(inv, "table")) {
      const entries = entriesIn(inv, array);
      if (!entries.length) continue;
      const fields = Array.isArray(array.fields) ? array.fields : [];
      parts.push(h("h3", {}, `${inv.invocation_id} ${text(inv.tool_name)} ${text(array.name)}`),
        h("div", { class: "scroll" }, h("table", { class: "entries", "data-array": `${inv.invocation_id} ${text(array.name)}` },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "ref"), fields.map((f) => h("th", { scope: "col" }, text(f))))),
          h("tbody", {}, entries.map((entry, i) => {
            const path = `${array.name}[${i}]`;
            const by = cited.get(`${inv.invocation_id} ${path}`);
            return h("tr", { class: by ? "cited" : null, "data-path": path },
              h("td", {}, path, by ? h("strong", {}, ` ← cited by ${by.join(", ")}`) : null),
              fields.map((f) => h("td", { class: "text" }, text((entry || {})[f]))));
          })))));
    }
  }
  return parts.length ? section("Tool entries", "entries", parts) : null;
}

function callGraph(inv, array, cited) {
  // The service call graph of a trace invocation: services in columns by call depth, an arrow
  // per caller -> callee edge labelled with its calls, errors and p99; cited edges in red.
  const edges = entriesIn(inv, array);
  const services = [...new Set(edges.flatMap((e) => [text(e.caller), text(e.callee)]))];
  const depth = new Map(services.map((name) => [name, 0]));
  for (let pass = 0; pass < services.length; pass += 1) {
    for (const e of edges) {
      const next = (depth.get(text(e.caller)) || 0) + 1;
      if (next > (depth.get(text(e.callee)) || 0) && next < services.length) depth.set(text(e.callee), next);
    }
  }
  const columns = new Map();
  services.forEach((name) => columns.set(depth.get(name), [...(columns.get(depth.get(name)) || []), name]));
  const BW = 120, BH = 24, GX = 150, GY = 22;
  const place = new Map();
  for (const [col, names] of columns) names.forEach((name, row) => place.set(name, [8 + col * (BW + GX), 8 + row * (BH + GY)]));
  const W = 16 + (Math.max(...columns.keys()) + 1) * (BW + GX) - GX;
  const H = 16 + Math.max(...[...columns.values()].map((names) => names.length)) * (BH + GY) - GY;
  const label = (e) => `${fmtNumber(e.count)} calls · ${fmtNumber(e.errors)} err · p99 ${fmtNumber(e.p99_ms)}ms`;
  const description = `Call graph of ${inv.invocation_id}: ${edges.map((e) => `${text(e.caller)} calls ${text(e.callee)} (${label(e)})`).join("; ")}.`;
  const arrows = edges.map((e, i) => {
    const [x1, y1] = place.get(text(e.caller)), [x2, y2] = place.get(text(e.callee));
    const by = cited.get(`${inv.invocation_id} ${array.name}[${i}]`);
    const classes = ["edge", Number(e.errors) > 0 ? "failing" : "", by ? "cited" : ""].filter(Boolean).join(" ");
    const ax = x1 + BW, ay = y1 + BH / 2, bx = x2, by2 = y2 + BH / 2;
    return s("g", { class: classes, "data-path": `${array.name}[${i}]` },
      s("line", { x1: ax, y1: ay, x2: bx - 4, y2: by2, "marker-end": "url(#arrow)" }),
      s("text", { x: (ax + bx) / 2, y: (ay + by2) / 2 - 4, "text-anchor": "middle" },
        `${fmtNumber(e.count)}× · ${fmtNumber(e.errors)} err · p99 ${fmtNumber(e.p99_ms)}ms`));
  });
  const boxes = services.map((name) => {
    const [x, y] = place.get(name);
    return s("g", { class: "service" }, s("rect", { x, y, width: BW, height: BH, rx: 4 }),
      s("text", { x: x + BW / 2, y: y + BH / 2 + 4, "text-anchor": "middle" }, name));
  });
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": description },
    s("title", {}, description),
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" },
      s("path", { d: "M0,0 L8,4 L0,8 z", class: "arrowhead" }))),
    arrows, boxes);
  const items = h("ul", { class: "edges" }, edges.map((e, i) => {
    const path = `${array.name}[${i}]`;
    const by = cited.get(`${inv.invocation_id} ${path}`);
    return h("li", { class: by ? "cited" : null, "data-path": path }, `${path}: ${text(e.caller)} → ${text(e.callee)}, ${label(e)}`,
      by ? h("strong", {}, ` ← cited by ${by.join(", ")}`) : null);
  }));
  return h("figure", { class: "callgraph", "data-invocation": text(inv.invocation_id) }, svg,
    h("figcaption", {}, `Call graph (${inv.invocation_id} ${text(array.name)})`), items);
}

function spanTree(inv, array, cited, trace, index) {
  // One example trace as a waterfall: a row per span, indented by depth, its bar placed by its
  // start and sized by its duration within the trace; failed spans and cited spans marked.
  const spans = Array.isArray(trace.spans) ? trace.spans : [];
  const starts = spans.map((span) => Date.parse(text(span.start)));
  const t0 = Math.min(...starts.filter((t) => !Number.isNaN(t)));
  const total = Math.max(Number(trace.duration_ms) || 0, ...spans.map((span, i) => (starts[i] - t0) + (Number(span.duration_ms) || 0)));
  const W = 520, ROW = 18, LABEL = 230, L = LABEL + 4, R = W - 58;
  const x = (ms) => (total > 0 ? L + (ms / total) * (R - L) : L);
  const base = `${array.name}[${index}]`;
  const description = `Span tree of trace ${text(trace.trace_id)} (${inv.invocation_id} ${base}): ${spans.length} span(s) over ${fmtNumber(total)} ms.`;
  const rows = spans.map((span, j) => {
    const path = `${base}.spans[${j}]`;
    const by = cited.get(`${inv.invocation_id} ${path}`);
    const offset = Number.isNaN(starts[j]) ? 0 : starts[j] - t0;
    const y = 4 + j * ROW;
    const classes = ["span", span.status === "error" ? "failing" : "", by ? "cited" : ""].filter(Boolean).join(" ");
    return s("g", { class: classes, "data-path": path },
      s("text", { x: 4 + Math.min(Number(span.depth) || 0, 8) * 10, y: y + 12 }, `${text(span.service)} ${text(span.operation)}`),
      s("rect", { x: x(offset), y: y + 3, width: Math.max(1.5, x(offset + (Number(span.duration_ms) || 0)) - x(offset)), height: ROW - 6 }),
      s("text", { class: "duration", x: W - 4, y: y + 12, "text-anchor": "end" }, `${fmtNumber(span.duration_ms)} ms`));
  });
  const svg = s("svg", { viewBox: `0 0 ${W} ${8 + spans.length * ROW}`, role: "img", "aria-label": description },
    s("title", {}, description), rows);
  const items = h("ol", { class: "spans", start: 0 }, spans.map((span, j) => {
    const path = `${base}.spans[${j}]`;
    const by = cited.get(`${inv.invocation_id} ${path}`);
    return h("li", { class: by ? "cited" : null, "data-path": path },
      `${"· ".repeat(Number(span.depth) || 0)}${text(span.service)} ${text(span.operation)} ${fmtNumber(span.duration_ms)} ms ${text(span.status)}`
      + (span.status_message ? `: ${text(span.status_message)}` : ""),
      by ? h("strong", {}, ` ← cited by ${by.join(", ")}`) : null);
  }));
  const omitted = Number(trace.spans_omitted) > 0 ? h("p", { class: "muted" }, `${fmtNumber(trace.spans_omitted)} more span(s) not shown`) : null;
  return h("figure", { class: "spantree", "data-path": base }, svg,
    h("figcaption", {}, `Trace ${text(trace.trace_id)} (${text(trace.example)}, ${inv.invocation_id} ${base})`), items, omitted);
}

function tracesSection(ve, list) {
  // Drawn for each trace invocation a claim cites: its call graph and its example span trees.
  const cited = citedPaths(ve);
  const citedIds = new Set([...cited.keys()].map((key) => key.split(" ")[0]));
  const parts = [];
  for (const inv of list) {
    if (!citedIds.has(text(inv.invocation_id))) continue;
    const graphs = displayArrays(inv, "callgraph").filter((array) => entriesIn(inv, array).length);
    const trees = displayArrays(inv, "spantree");
    const figures = [
      ...graphs.map((array) => callGraph(inv, array, cited)),
      ...trees.flatMap((array) => entriesIn(inv, array).map((trace, i) => (trace && Array.isArray(trace.spans) && trace.spans.length
        ? spanTree(inv, array, cited, trace, i) : null))),
    ].filter(Boolean);
    if (figures.length) parts.push(h("h3", {}, `${inv.invocation_id} ${text(inv.tool_name)} `, h("code", {}, JSON.stringify(inv.arguments ?? {}))), figures);
  }
  return parts.length ? section("Traces", "traces", parts) : null;
}

function tableOf(id, headers, rows) {
  return h("div", { class: "scroll" }, h("table", { id },
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell)))))));
}

function rootCauseSection(record) {
  const channels = record.self_evaluation || {};
  const root = channels.root_cause;
  const suspects = (channels.suspects || {}).suspects || [];
  if (!root && !suspects.length) return null;
  const head = root
    ? h("p", { id: "root-cause" }, h("strong", {}, "Most likely root cause (inferred): "), text(root.service),
      ": ", text(root.mechanism), h("span", { class: "muted" }, ` · claims ${(root.claim_ids || []).map(text).join(", ")}`))
    : h("p", { id: "root-cause", class: "muted" }, "No single root cause is stated: the evidence does not single one out.");
  const ranked = suspects.length
    ? tableOf("suspects", ["rank", "service", "score", "onset", "mechanism"],
      suspects.map((s) => [text(s.rank), text(s.service), text(s.score), text(s.onset), text(s.mechanism)]))
    : null;
  return section("Root cause", "root-cause-section", head, ranked);
}

async function renderDiagnosis(id) {
  document.title = `Diagnosis ${id} · superbiz`;
  const [record] = await Promise.all([getJson(`/api/diagnoses/${encodeURIComponent(id)}`), loadToolDisplay()]);
  const ve = ((record.self_evaluation || {}).verifier_evaluation) || {};
  const list = record.invocations || [];
  const invocations = new Map(list.map((inv) => [text(inv.invocation_id), inv]));
  const gate = ve.gatekeeper_result || {};
  const coverage = ve.question_coverage || {};
  const findings = [...(gate.errors || []).map((f) => ["error", f]), ...(gate.warnings || []).map((f) => ["warning", f])];
  const rounds = ve.rounds || [];
  show(
    h("h1", {}, "Diagnosis ", h("span", { class: "mono" }, text(record.id))),
    h("p", { class: "text", id: "question" }, h("strong", {}, "Question: "), text(record.question)),
    h("p", {}, badge(record.verdict, record.score), " ",
      h("span", { class: "muted" }, `status ${text(record.status)} · ${text(record.rounds)} round(s) · thread ${text(record.thread_id)} · ${text(record.created_at)}`)),
    rootCauseSection(record),
    section("Why this verdict", "why", h("ul", { id: "reasons" }, verdictReasons(ve, record).map((r) => h("li", {}, r)))),
    section("Answer", "answer-section", record.final_answer ? answerView(text(record.final_answer)) : h("div", { class: "answer", id: "answer" }, "(no answer recorded)")),
    section(`Claims (round ${rounds.length || 1})`, "claims-section", claimsTable(ve, invocations)),
    metricsSection(ve, list),
    logsSection(ve, list),
    tracesSection(ve, list),
    entriesSection(ve, list),
    section("Gatekeeper", "gatekeeper",
      h("p", {}, `status ${text(gate.status)} · severity ${text(gate.severity)} · ${text(gate.checked_bindings)} binding(s) checked · failed rules: ${(gate.failed_rules || []).join(", ") || "none"}`),
      findings.length ? h("ul", { id: "findings" }, findings.map(([kind, f]) => h("li", { class: `finding ${kind}` },
        `${kind} ${text(f.rule_id)} at ${text(f.target)}: ${text(f.message)}`))) : h("p", { class: "muted" }, "no findings")),
    section("Question coverage", "coverage",
      h("p", {}, `status ${text(coverage.status) || "not recorded"} · asked: ${(coverage.asked || []).join(", ") || "none"} · unanswered: ${(coverage.unanswered || []).join(", ") || "none"}`)),
    section("Trace summary", "trace", tableOf("trace-table",
      ["ref", "tool", "round", "evidence", "input", "output", "invocations"],
      (ve.tool_trace_summary || []).map((t) => [text(t.trace_ref), text(t.tool_name), text(t.round), text(t.evidence_level),
        h("span", { class: "text" }, text(t.input_summary)), h("span", { class: "text" }, text(t.output_summary)),
        (t.source_invocation_ids || []).join(", ")]))),
    section("Rounds", "rounds", tableOf("rounds-table",
      ["round", "verdict", "model", "derived", "groundedness", "parse", "gatekeeper", "failed rules", "claims"],
      rounds.map((r) => [text(r.round), badge(r.verdict), text(r.model_verdict), text(r.derived_verdict), score(r.groundedness_score),
        text(r.executor_output_parse_status), `${text(r.gatekeeper_status)} / ${text(r.gatekeeper_severity)}`,
        (r.failed_rules || []).join(", ") || "none", text(r.claims)])),
    ve.retry_context ? h("div", {}, h("h3", {}, "What round 2 was asked to find"),
      h("pre", { class: "ref", id: "retry-context" }, JSON.stringify(ve.retry_context, null, 2))) : null,
    h("h3", {}, "Invocations of both rounds"),
    tableOf("invocations-table", ["id", "round", "tool", "arguments", "status", "started", "ms", "error"],
      list.map((inv) => [text(inv.invocation_id), text(inv.round), text(inv.tool_name),
        h("code", {}, JSON.stringify(inv.arguments ?? {})), text(inv.status), text(inv.started_at),
        fmtNumber(inv.duration_ms), text(inv.error)]))));
  document.getElementById("main").focus();
}

/* ---------------------------------------------------------------- history */

function servicesOf(diagnosis) {
  const ve = ((diagnosis.self_evaluation || {}).verifier_evaluation) || {};
  const found = new Set();
  for (const item of ve.tool_trace_summary || []) {
    for (const match of text(item.input_summary).matchAll(/(?:^|\s)service=(\S+)/g)) found.add(match[1]);
  }
  return [...found];
}

async function alertInvestigations() {
  try {
    const body = await getJson("/api/alerts");
    const items = Array.isArray(body) ? body : body.alerts || body.investigations || [];
    return Array.isArray(items) ? items : [];
  } catch (error) {
    if (error instanceof ApiError && (error.status === 404 || error.status === 405)) return [];
    throw error;
  }
}

function alertServices(a) {
  // GET /api/alerts names each alert's service (docs/contracts.md section 11).
  const found = Array.isArray(a.alerts) ? a.alerts.map((x) => x && x.service).filter(Boolean) : [];
  if (Array.isArray(a.services)) found.push(...a.services);
  else if (a.service) found.push(a.service);
  return [...new Set(found.map(text))];
}

async function renderHistory() {
  document.title = "History · superbiz";
  const [threads, alerts] = await Promise.all([getJson("/api/threads"), alertInvestigations()]);
  const entries = [];
  // Newest threads first, a bounded number of them: one request per thread counts against the
  // key's rate limit.
  const all = [...(threads.threads || [])].reverse();
  const recent = all.slice(0, HISTORY_THREADS);
  for (const thread of recent) {
    const body = await getJson(`/api/threads/${encodeURIComponent(text(thread.thread_id))}/diagnoses`);
    for (const d of body.diagnoses || []) {
      entries.push({ id: text(d.id), thread: text(d.thread_id), question: text(d.question), verdict: d.verdict,
        score: d.score, status: text(d.status), created: text(d.created_at), services: servicesOf(d), alert: false });
    }
  }
  for (const a of alerts) {
    const id = text(a.diagnosis_id);
    const known = entries.find((e) => e.id === id);
    const names = Array.isArray(a.alerts) ? a.alerts.map((x) => text(x.alertname || x.alert_name || x)).join(", ")
      : text(a.alertname || a.alert_name || a.group_key);
    if (known) { known.alert = names || true; continue; }
    entries.push({ id, thread: text(a.thread_id), question: text(a.question) || names, verdict: a.verdict,
      score: a.score ?? a.groundedness_score, status: text(a.status), created: text(a.created_at || a.received_at),
      services: alertServices(a), alert: names || true });
  }
  entries.sort((a, b) => (a.created < b.created ? 1 : a.created > b.created ? -1 : 0));
  const services = [...new Set(entries.flatMap((e) => e.services))].sort();
  const verdict = h("select", { id: "filter-verdict" }, h("option", { value: "" }, "any verdict"),
    ["PASS", "LOW_CONFID", "REJECT"].map((v) => h("option", { value: v }, v)));
  const service = h("select", { id: "filter-service" }, h("option", { value: "" }, "any service"),
    services.map((v) => h("option", { value: v }, v)));
  const listing = h("ul", { class: "history", id: "history", "aria-live": "polite" });
  const draw = () => {
    const shown = entries.filter((e) => (!verdict.value || e.verdict === verdict.value)
      && (!service.value || e.services.includes(service.value)));
    listing.replaceChildren(...shown.map((e) => h("li", { "data-verdict": text(e.verdict), "data-id": e.id },
      badge(e.verdict, e.score ?? undefined), " ",
      e.id ? h("a", { href: `/diagnoses/${encodeURIComponent(e.id)}` }, e.question || e.id) : e.question,
      e.alert ? h("span", { class: "label" }, ` alert investigation${typeof e.alert === "string" ? `: ${e.alert}` : ""}`) : null,
      h("div", { class: "muted" }, `${e.created} · ${e.status} · thread ${e.thread}${e.services.length ? ` · ${e.services.join(", ")}` : ""}`))));
    if (!shown.length) listing.append(h("li", { class: "muted" }, "nothing to show"));
  };
  verdict.addEventListener("change", draw);
  service.addEventListener("change", draw);
  show(h("h1", {}, "History"),
    h("div", { class: "row" }, h("div", {}, h("label", { for: "filter-verdict" }, "Verdict"), verdict),
      h("div", {}, h("label", { for: "filter-service" }, "Service"), service)),
    threads.unowned
      ? h("p", { class: "muted", id: "history-unowned" }, `${threads.unowned} thread(s) in this database were started from the command line (superbiz diagnose); they belong to no identity of this page, so it does not list them: see them with superbiz sessions list.`)
      : null,
    all.length > recent.length
      ? h("p", { class: "muted", id: "history-bound" }, `Showing the ${recent.length} most recent of ${all.length} threads; older ones are listed by GET /api/threads.`)
      : null,
    listing);
  draw();
}

/* ---------------------------------------------------------------- start */

async function start() {
  takeKeyFromFragment();
  renderAccess();
  const path = window.location.pathname;
  try {
    const match = /^\/diagnoses\/([^/]+)$/.exec(path);
    if (match) await renderDiagnosis(decodeURIComponent(match[1]));
    else if (path === "/history") await renderHistory();
    else {
      await getJson("/api/threads"); // a key the API refuses is asked for before the question
      renderAsk();
    }
  } catch (error) {
    showError(error);
  }
  document.body.setAttribute("data-ready", "true");
}

document.addEventListener("DOMContentLoaded", start);
