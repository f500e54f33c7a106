// The Looopy web page: plain JS, no build step. It speaks the host's own
// A2A 1.0 JSON-RPC (POST ./) and its event stream (GET ./events/{contextId}),
// with the API key (when auth is on) kept in sessionStorage and sent as a
// bearer token. Everything shown is set as text, never as HTML.
"use strict";

const EXT = "https://github.com/looopy-go/looopy/blob/main/docs/A2A_EXTENSION.md#v1";
const $ = (id) => document.getElementById(id);

// stats is read by the browser tests (and is handy in the console).
const stats = { frames: 0, duplicates: 0, reconnects: 0, lastEventId: 0, rereads: 0 };
window.looopyStats = stats;

const state = {
  contextId: "",
  events: null,     // AbortController of the open event stream
  lastId: 0,        // last event id seen on it
  turns: new Map(), // taskId -> turn view
  sent: new Map(),  // taskId -> text the user sent from this page
};

function key() { return sessionStorage.getItem("looopy.apiKey") || ""; }
function adminToken() { return sessionStorage.getItem("looopy.adminToken") || ""; }

function authHeaders(token) {
  const h = {};
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function showError(msg) {
  const e = $("error");
  if (!msg) { e.hidden = true; e.textContent = ""; return; }
  e.hidden = false;
  e.textContent = msg;
}

function setConn(s, text) {
  const c = $("conn");
  c.dataset.state = s;
  c.textContent = text || s;
}

function randomId(prefix) {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return prefix + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// ---- JSON-RPC ----

let rpcSeq = 0;

async function rpc(method, params) {
  const res = await fetch("./", {
    method: "POST",
    headers: Object.assign({ "Content-Type": "application/json" }, authHeaders(key())),
    body: JSON.stringify({ jsonrpc: "2.0", id: ++rpcSeq, method, params }),
  });
  let body;
  try { body = await res.json(); } catch (e) { throw new Error(method + ": HTTP " + res.status); }
  if (body.error) throw new Error(method + ": " + body.error.message + (body.error.data ? " " + JSON.stringify(body.error.data) : ""));
  return body.result;
}

// readSSE reads a text/event-stream response, calling onFrame with each
// frame ({id, event, data}) until the stream ends.
async function readSSE(res, onFrame) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const raw = buf.slice(0, i);
      buf = buf.slice(i + (buf[i] === "\r" ? 4 : 2));
      const f = { id: "", event: "", data: "" };
      let data = [];
      for (const line of raw.split(/\r?\n/)) {
        if (line === "" || line[0] === ":") continue;
        const c = line.indexOf(":");
        const name = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v[0] === " ") v = v.slice(1);
        if (name === "data") data.push(v);
        else if (name === "id") f.id = v;
        else if (name === "event") f.event = v;
      }
      if (data.length === 0) continue;
      f.data = data.join("\n");
      onFrame(f);
    }
  }
}

// send starts a turn (or answers a paused task, with taskId) with
// SendStreamingMessage; the turn itself is drawn from the event stream.
async function sendMessage(parts, taskId, userText) {
  showError("");
  if (!state.contextId) selectContext(randomId("web-"), true);
  const contextId = state.contextId;
  const message = { messageId: randomId("m-"), role: "ROLE_USER", contextId, parts };
  if (taskId) message.taskId = taskId;
  const headers = Object.assign({ "Content-Type": "application/json", Accept: "text/event-stream" }, authHeaders(key()));
  if (!userText) headers["A2A-Extensions"] = EXT;
  const res = await fetch("./", {
    method: "POST", headers,
    body: JSON.stringify({ jsonrpc: "2.0", id: ++rpcSeq, method: "SendStreamingMessage", params: { message } }),
  });
  const type = res.headers.get("Content-Type") || "";
  if (!type.startsWith("text/event-stream")) {
    let msg = "HTTP " + res.status;
    try { const b = await res.json(); if (b.error) msg = b.error.message || JSON.stringify(b.error); } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  let opened = false;
  await readSSE(res, (f) => {
    let b;
    try { b = JSON.parse(f.data); } catch (e) { return; }
    if (b.error) { showError(b.error.message); return; }
    const r = b.result || {};
    const id = (r.task && r.task.id) || (r.statusUpdate && r.statusUpdate.taskId) || (r.artifactUpdate && r.artifactUpdate.taskId);
    if (id && userText && !state.sent.has(id)) {
      state.sent.set(id, userText);
      const t = state.turns.get(id);
      if (t) t.user.textContent = userText;
    }
    if (!opened && contextId === state.contextId) {
      opened = true;
      if (!state.events) openEvents(contextId);
      loadContexts();
    }
  });
}

// ---- the event stream ----

function openEvents(contextId) {
  closeEvents();
  const ctl = new AbortController();
  state.events = ctl;
  (async () => {
    let delay = 250;
    while (!ctl.signal.aborted) {
      const headers = authHeaders(key());
      if (state.lastId > 0) headers["Last-Event-ID"] = String(state.lastId);
      try {
        // Every thought is fetched; the verbosity switch shows those of its
        // level (the page's CSS), so switching needs no new stream.
        // no-store: a refused resume (410, cacheable by default) must not
        // answer the read from the start that follows it.
        const res = await fetch("events/" + encodeURIComponent(contextId) + "?verbosity=detailed", { headers, signal: ctl.signal, cache: "no-store" });
        if (res.status === 404) { setConn("idle", "no events yet"); state.events = null; return; }
        if (res.status === 410 && state.lastId > 0) {
          // The events after the last one shown have expired: resuming
          // would skip them, so the conversation is drawn again from what
          // the host still keeps (a read with no Last-Event-ID is never
          // refused this way).
          await res.body?.cancel().catch(() => {});
          stats.rereads++;
          state.lastId = 0;
          stats.lastEventId = 0;
          state.turns = new Map();
          $("transcript").replaceChildren();
          showError("Some events of this conversation expired while the page was away; it shows what the host still keeps.");
          continue;
        }
        if (res.status === 401 || res.status === 403) {
          const b = await res.json().catch(() => ({}));
          setConn("error", "unauthorized");
          showError("The host refused the key: " + (b.error || res.status) + ". Paste an API key above.");
          state.events = null;
          return;
        }
        if (!res.ok) throw new Error("HTTP " + res.status);
        setConn("live", "live");
        delay = 250;
        await readSSE(res, (f) => onEventFrame(contextId, f));
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      if (ctl.signal.aborted) return;
      stats.reconnects++;
      setConn("reconnecting", "reconnecting…");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 4000);
    }
  })();
}

function closeEvents() {
  if (state.events) state.events.abort();
  state.events = null;
}

function onEventFrame(contextId, f) {
  if (contextId !== state.contextId) return;
  stats.frames++;
  const id = parseInt(f.id, 10);
  if (id > 0) {
    if (id <= state.lastId) { stats.duplicates++; return; }
    state.lastId = id;
    stats.lastEventId = id;
  }
  let ev;
  try { ev = JSON.parse(f.data); } catch (e) { return; }
  const tr = $("transcript");
  const atEnd = tr.scrollHeight - tr.scrollTop - tr.clientHeight < 40;
  render(f.event || ev.kind, ev);
  if (atEnd) tr.scrollTop = tr.scrollHeight;
}

// ---- drawing a conversation ----

function turnOf(ev) {
  let t = state.turns.get(ev.taskId);
  if (t) return t;
  const box = el("div", "turn");
  box.dataset.taskId = ev.taskId;
  const head = el("div", "turn-head");
  const status = el("span", "status", "submitted");
  status.dataset.status = "submitted";
  const cancel = el("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.onclick = () => rpc("CancelTask", { id: ev.taskId }).catch((e) => showError(e.message));
  head.append(el("span", "task-id", ev.taskId), status, cancel);
  const user = el("div", "user", state.sent.get(ev.taskId) || "");
  const body = el("div", "body");
  box.append(head, user, body);
  t = { box, status, cancel, user, body, text: null, tools: new Map(), thoughts: new Map(), artifacts: new Map() };
  state.turns.set(ev.taskId, t);
  const parent = ev.parentTaskId && state.turns.get(ev.parentTaskId);
  if (parent) {
    // A sub-agent's task: canceled with its parent's, its work drawn in
    // the parent's turn.
    box.classList.add("subtask");
    cancel.hidden = true;
    status.textContent = "sub-agent";
    parent.body.append(box);
  }
  else $("transcript").append(box);
  if (!parent && !state.sent.has(ev.taskId)) fillUserText(ev.taskId, t);
  return t;
}

// fillUserText shows what the user said to start a turn sent elsewhere (or
// before the page was loaded).
async function fillUserText(taskId, t) {
  try {
    const task = await rpc("GetTask", { id: taskId, historyLength: 100 });
    for (const m of (task && task.history) || []) {
      if (m.role !== "ROLE_USER") continue;
      const txt = (m.parts || []).filter((p) => typeof p.text === "string").map((p) => p.text).join("");
      if (txt && !t.user.textContent) t.user.textContent = txt;
      return;
    }
  } catch (e) { /* the turn is drawn without it */ }
}

function setStatus(t, s, message) {
  t.status.textContent = s + (message ? ": " + message : "");
  t.status.dataset.status = s;
  const done = ["completed", "failed", "canceled", "rejected"].includes(s);
  t.cancel.hidden = done;
  t.box.dataset.status = s;
}

function textSegment(t) {
  if (!t.text) { t.text = el("div", "text"); t.body.append(t.text); }
  return t.text;
}

// responseSegment is the text of one model response (by its iteration).
function responseSegment(t, ev) {
  t.responses = t.responses || new Map();
  const key = ev.iteration || 0;
  let seg = t.responses.get(key);
  if (!seg || !seg.isConnected) {
    seg = textSegment(t);
    t.responses.set(key, seg);
  }
  return seg;
}

function pretty(raw) {
  if (raw === undefined || raw === null || raw === "") return "";
  if (typeof raw !== "string") return JSON.stringify(raw, null, 2);
  try { return JSON.stringify(JSON.parse(raw), null, 2); } catch (e) { return raw; }
}

function render(kind, ev) {
  if (!ev.taskId) return;
  const t = turnOf(ev);
  switch (kind) {
    case "task-created":
      if (ev.initiator === "agent") t.box.classList.add("subtask");
      break;
    case "task-status":
      // A paused task's next turn counts its responses anew.
      if (ev.status === "working" && (t.status.dataset.status || "").startsWith("waiting")) t.responses = new Map();
      setStatus(t, ev.status, ev.message);
      // A pause lists what it waits for in its data (the extension's
      // requests): a form for each open one.
      if ((ev.status === "waiting-input" || ev.status === "waiting-auth") && ev.metadata && Array.isArray(ev.metadata.requests)) {
        for (const r of ev.metadata.requests) if (!r.answer) inputRequest(t, Object.assign({ taskId: ev.taskId }, r), true);
      }
      break;
    case "task-complete":
      setStatus(t, ev.status, ev.status === "completed" ? "" : (ev.reason || ""));
      if (ev.content && !t.body.querySelector(".text")) textSegment(t).textContent = ev.content;
      break;
    case "content-delta":
      responseSegment(t, ev).textContent += ev.delta;
      break;
    case "content-complete":
      // The whole text of the response replaces its deltas, wherever
      // thoughts or tools came between them.
      responseSegment(t, ev).textContent = ev.content;
      t.text = null;
      break;
    case "thought-stream": {
      // The chunks of one thought (the model's reasoning) share its id.
      let th = t.thoughts.get(ev.thoughtId);
      if (!th) {
        th = el("div", "thought");
        th.dataset.verbosity = ev.verbosity || "normal";
        th.dataset.type = ev.thoughtType || "";
        th.append(el("span", "thought-type", ev.thoughtType || "thought"), el("span", "thought-text"));
        t.thoughts.set(ev.thoughtId, th);
        t.body.append(th);
        t.text = null;
      }
      th.querySelector(".thought-text").textContent += ev.content;
      break;
    }
    case "tool-start": {
      t.text = null;
      const box = el("div", "tool");
      box.dataset.state = "running";
      box.dataset.tool = ev.toolName;
      box.append(el("div", "tool-name", "⚙ " + ev.toolName), el("pre", "args", pretty(ev.arguments)),
        el("div", "progress"), el("pre", "result"));
      t.tools.set(ev.toolCallId, box);
      t.body.append(box);
      break;
    }
    case "tool-progress": {
      const box = t.tools.get(ev.toolCallId);
      if (box) box.querySelector(".progress").textContent =
        (ev.progress ? Math.round(ev.progress * 100) + "% " : "") + (ev.message || "");
      break;
    }
    case "tool-complete": {
      const box = t.tools.get(ev.toolCallId);
      if (!box) break;
      box.dataset.state = ev.success ? "done" : "failed";
      box.querySelector(".result").textContent = ev.success ? "→ " + pretty(ev.result) : "✗ " + (ev.error || "failed");
      break;
    }
    case "file-write":
      artifact(t, ev, ev.name, ev.mimeType, ev.complete, ev.error);
      break;
    case "data-write": {
      const a = artifact(t, ev, ev.name, "application/json", ev.complete, ev.error);
      a.querySelector(".content").replaceChildren(el("pre", "", pretty(ev.data)));
      break;
    }
    case "dataset-write": {
      const a = artifact(t, ev, ev.name, "dataset", ev.complete, ev.error);
      datasetRows(a, ev);
      break;
    }
    case "subtask-created":
      t.body.append(el("div", "note", "sub-agent " + (ev.agentId || "") + ": " + (ev.prompt || "")));
      break;
    case "input-required":
      inputRequest(t, ev);
      break;
    case "input-received": {
      const r = t.body.querySelector('.request[data-input-id="' + CSS.escape(ev.inputId) + '"]');
      if (r) { r.dataset.answered = "true"; r.querySelectorAll("button").forEach((b) => { b.disabled = true; }); }
      break;
    }
    case "auth-required":
      t.body.append(el("div", "request", "authentication needed: " + (ev.prompt || ev.authType || "")));
      break;
    case "warning":
      t.body.append(el("div", "warning", "⚠ " + (ev.message || ev.code || "")));
      break;
  }
}

function artifact(t, ev, name, mime, complete, error) {
  let a = t.artifacts.get(ev.artifactId);
  if (!a) {
    a = el("div", "artifact");
    a.dataset.artifactId = ev.artifactId;
    const link = el("a", "download", "⬇ " + (name || ev.artifactId));
    link.onclick = () => download(ev.artifactId, name || ev.artifactId);
    a.append(link, el("span", "note"), el("div", "content"));
    t.artifacts.set(ev.artifactId, a);
    t.body.append(a);
    t.text = null;
  }
  if (name) a.querySelector(".download").textContent = "⬇ " + name;
  a.querySelector(".note").textContent = " " + (mime || "") + (error ? " failed: " + error : complete ? "" : " (writing…)");
  return a;
}

function datasetRows(a, ev) {
  let table = a.querySelector("table");
  if (!table) {
    table = el("table");
    a.querySelector(".content").append(table);
  }
  let cols = (ev.schema && ev.schema.columns || []).map((c) => c.name);
  if (!table.tHead) {
    if (!cols.length && ev.rows && ev.rows.length) cols = Object.keys(ev.rows[0]);
    const tr = table.createTHead().insertRow();
    for (const c of cols) tr.append(el("th", "", c));
  }
  cols = Array.from(table.tHead.rows[0].cells, (c) => c.textContent);
  const body = table.tBodies[0] || table.createTBody();
  for (const row of ev.rows || []) {
    if (body.rows.length >= 200) break;
    const tr = body.insertRow();
    for (const c of cols) {
      const v = row[c];
      tr.append(el("td", "", typeof v === "object" && v !== null ? JSON.stringify(v) : v));
    }
  }
}

// webAddress reports whether u is an absolute http or https URL.
function webAddress(u) {
  try {
    const p = new URL(String(u)).protocol;
    return p === "http:" || p === "https:";
  } catch (e) { return false; }
}

async function download(id, name) {
  try {
    const res = await fetch("artifacts/" + encodeURIComponent(id), { headers: authHeaders(key()) });
    if (!res.ok) throw new Error("artifact " + id + ": HTTP " + res.status);
    const url = URL.createObjectURL(await res.blob());
    const a = el("a");
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) { showError(e.message); }
}

// inputRequest draws a request of the humans-in-the-loop extension (from
// the pausing status's data, or its input-required event; once per
// request): its prompt, what it carries, and a form for its type that
// answers it with a data part.
function inputRequest(t, ev, fromStatus) {
  if (!ev.inputId) return;
  // The status's data is the request as the extension defines it; an
  // input-required event (which comes first) is drawn until it arrives.
  const old = t.body.querySelector('.request[data-input-id="' + CSS.escape(ev.inputId) + '"]');
  if (old && (!fromStatus || old.dataset.source === "status" || old.dataset.answered === "true")) return;
  const md = ev.metadata || {};
  const edits = ev.edits || md.edits;
  const resultSchema = ev.resultSchema || (ev.inputType === "client-tool" ? ev.schema : undefined);
  const type = ev.inputType || "";
  const r = el("div", "request");
  r.dataset.inputId = ev.inputId;
  r.dataset.inputType = type;
  r.dataset.source = fromStatus ? "status" : "event";
  r.append(el("div", "prompt", ev.prompt || "input needed"));
  const details = Object.assign({}, ev);
  for (const k of ["kind", "contextId", "taskId", "timestamp", "prompt", "parentTaskId"]) delete details[k];
  const more = el("details");
  more.append(el("summary", "", (type || "request") + (ev.call && ev.call.name ? ": " + ev.call.name : "")),
    el("pre", "request-data", JSON.stringify(details, null, 2)));
  r.append(more);
  if (ev.parentTaskId) {
    // A sub-agent's request: passed up to its parent task, whose own
    // request carries the form, or answered by the parent's model. The
    // host refuses an answer sent to the sub-task itself.
    r.append(el("div", "note", "Answered on the parent task " + ev.parentTaskId + "."));
    if (old) old.replaceWith(r);
    else t.body.append(r);
    t.text = null;
    return;
  }
  const answer = (resp) => {
    const parts = [{ data: { responses: [resp] }, metadata: { [EXT]: "responses" } }];
    sendMessage(parts, ev.taskId).catch((e) => showError(e.message));
  };
  const form = el("form", "answer");
  form.dataset.form = type || "json";
  const field = (label, input) => { const l = el("label", "", label + " "); l.append(input); form.append(l); return input; };
  const input = (type, name, value) => {
    const i = el(type === "textarea" ? "textarea" : "input");
    if (type !== "textarea") i.type = type;
    else i.rows = 3;
    i.name = name;
    if (value !== undefined) i.value = value;
    return i;
  };
  const submit = (text) => { const b = el("button", "", text); b.type = "submit"; form.append(b); return b; };
  const parseJSON = (what, text) => {
    try { return { ok: true, v: JSON.parse(text) }; } catch (err) { showError(what + " is not JSON: " + err.message); return { ok: false }; }
  };
  if (type === "approval" || type === "tool-execution" || type === "confirmation") {
    const reason = field("Reason (optional)", input("text", "reason"));
    let args = null;
    if (edits && edits.allowed && ev.call) {
      args = field("Arguments (edit to change the call)", input("textarea", "arguments", pretty(ev.call.arguments)));
    }
    const yes = el("button", "approve", "Approve");
    const no = el("button", "reject", "Reject");
    yes.type = no.type = "button";
    yes.onclick = () => {
      const resp = { inputId: ev.inputId, decision: "approve" };
      if (reason.value) resp.reason = reason.value;
      if (args && args.value.trim() !== pretty(ev.call.arguments).trim()) {
        const p = parseJSON("The arguments", args.value);
        if (!p.ok) return;
        resp.arguments = p.v;
      }
      answer(resp);
    };
    no.onclick = () => {
      const resp = { inputId: ev.inputId, decision: "reject" };
      if (reason.value) resp.reason = reason.value;
      answer(resp);
    };
    form.append(yes, no);
    form.onsubmit = (e) => { e.preventDefault(); };
  } else if (type === "client-tool") {
    // The client's own tool: the person (or the page) gives its result.
    const content = field("Result", input("textarea", "content"));
    const data = field("Data (JSON" + (resultSchema ? ", must match the tool's result schema" : ", optional") + ")",
      input("textarea", "data", resultSchema ? skeleton(resultSchema) : ""));
    const isError = input("checkbox", "isError");
    field("The tool failed", isError);
    submit("Send result");
    form.onsubmit = (e) => {
      e.preventDefault();
      const result = { content: content.value, isError: isError.checked };
      if (data.value.trim()) {
        const p = parseJSON("The data", data.value);
        if (!p.ok) return;
        result.data = p.v;
      }
      answer({ inputId: ev.inputId, result });
    };
  } else if (type === "text") {
    const text = field("Answer", input("text", "text"));
    submit("Send answer");
    form.onsubmit = (e) => {
      e.preventDefault();
      if (!text.value) { showError("The answer is empty."); return; }
      answer({ inputId: ev.inputId, text: text.value });
    };
  } else if (type === "auth") {
    const a = ev.auth || {};
    const what = [a.provider && "provider " + a.provider, a.authType && "type " + a.authType,
      a.scopes && a.scopes.length && "scopes " + a.scopes.join(" ")].filter(Boolean).join(", ");
    if (what) form.append(el("div", "note", what));
    // Only a web address becomes a link: a javascript: or data: URL from
    // a plugin or the model must not run on the page's origin.
    if (a.authUrl && webAddress(a.authUrl)) {
      const link = el("a", "auth-url", "Sign in at " + a.authUrl);
      link.href = a.authUrl;
      link.target = "_blank";
      link.rel = "noopener noreferrer";
      form.append(link);
    } else if (a.authUrl) {
      form.append(el("div", "note", "Sign in at " + a.authUrl + " (not a web address: not a link)"));
    }
    if (a.provider === "caller") {
      submit("Use my credentials");
      form.onsubmit = (e) => { e.preventDefault(); answer({ inputId: ev.inputId }); };
    } else {
      // The credential goes to the host in the answer and is never kept
      // by the page.
      const token = field("Token", input("password", "token"));
      token.autocomplete = "off";
      submit("Send credential");
      form.onsubmit = (e) => {
        e.preventDefault();
        if (!token.value) { showError("The token is empty."); return; }
        const resp = { inputId: ev.inputId, credential: { token: token.value, tokenType: "Bearer" } };
        token.value = "";
        answer(resp);
      };
    }
  } else {
    const area = field("Answer (JSON)", input("textarea", "json", JSON.stringify({ inputId: ev.inputId })));
    submit("Send answer");
    form.onsubmit = (e) => {
      e.preventDefault();
      const p = parseJSON("The answer", area.value);
      if (p.ok) answer(p.v);
    };
  }
  r.append(form);
  if (old) old.replaceWith(r);
  else t.body.append(r);
  t.text = null;
}

// skeleton is a JSON object with the properties a schema requires, as a
// starting point for a person to fill in.
function skeleton(schema) {
  const out = {};
  const props = (schema && schema.properties) || {};
  for (const k of (schema && schema.required) || Object.keys(props)) {
    const t = props[k] && props[k].type;
    out[k] = t === "number" || t === "integer" ? 0 : t === "boolean" ? false : t === "object" ? {} : t === "array" ? [] : "";
  }
  return JSON.stringify(out, null, 2);
}

// ---- contexts ----

function selectContext(id, fresh) {
  closeEvents();
  state.contextId = id;
  state.lastId = 0;
  stats.lastEventId = 0;
  state.turns = new Map();
  $("transcript").replaceChildren();
  $("context-title").textContent = id ? "Conversation " + id : "New conversation";
  for (const li of $("context-list").children) li.classList.toggle("current", li.dataset.contextId === id);
  if (id) location.hash = "#" + encodeURIComponent(id);
  else history.replaceState(null, "", location.pathname);
  if (id && !fresh) openEvents(id);
  if (!id) setConn("idle", "idle");
}

async function loadContexts() {
  try {
    const r = await rpc("ListTasks", { pageSize: 100 });
    const seen = new Map();
    for (const task of (r && r.tasks) || []) {
      const ts = (task.status && task.status.timestamp) || "";
      if (!seen.has(task.contextId) || seen.get(task.contextId) < ts) seen.set(task.contextId, ts);
    }
    if (state.contextId && !seen.has(state.contextId)) seen.set(state.contextId, "~");
    const list = $("context-list");
    list.replaceChildren();
    for (const [id] of [...seen].sort((a, b) => (a[1] < b[1] ? 1 : -1))) {
      const li = el("li", id === state.contextId ? "current" : "", id);
      li.dataset.contextId = id;
      li.title = id;
      li.onclick = () => selectContext(id);
      list.append(li);
    }
    $("contexts-note").textContent = seen.size ? "" : "No conversations yet.";
  } catch (e) {
    $("contexts-note").textContent = "Conversations not listed: " + e.message;
  }
}

// ---- plugins and the agent card ----

async function loadPlugins() {
  const note = $("plugins-note");
  const list = $("plugin-list");
  list.replaceChildren();
  const tok = adminToken();
  if (!tok) {
    note.textContent = "The plugin list comes from the admin API (/admin/plugins), which needs the admin token: paste it above to see the plugins, their grants and health.";
  } else {
    try {
      const res = await fetch("admin/plugins", { headers: authHeaders(tok) });
      const b = await res.json().catch(() => ({}));
      if (!res.ok) {
        note.textContent = "The admin API is not available to this page: " + (b.error || "HTTP " + res.status);
      } else {
        note.textContent = "";
        for (const p of b.plugins || []) list.append(pluginItem(p));
      }
    } catch (e) { note.textContent = "The admin API is not available to this page: " + e.message; }
  }
  try {
    const res = await fetch(".well-known/agent-card.json", { headers: authHeaders(key()) });
    const card = await res.json();
    $("agent-name").textContent = card.name || "";
    const skills = $("skill-list");
    skills.replaceChildren();
    for (const s of card.skills || []) skills.append(el("li", "", s.name + (s.description ? ": " + s.description : "")));
  } catch (e) { /* no card */ }
}

function pluginItem(p) {
  const li = el("li", "plugin");
  li.dataset.plugin = p.name;
  const h = el("span", "health", p.health || (p.healthy ? "ok" : "unhealthy"));
  h.dataset.health = p.health || (p.healthy ? "ok" : "failed");
  li.append(el("strong", "", p.name + (p.version ? " " + p.version : "")), document.createTextNode(" "), h);
  li.append(el("div", "note", (p.kind || "") + (p.sandboxed ? ", sandboxed" : ", NOT sandboxed") +
    (p.tools && p.tools.length ? "; tools: " + p.tools.join(", ") : "") + "; calls " + p.calls + ", failures " + p.failures));
  if (p.error) li.append(el("div", "warning", p.error));
  if (p.grant) li.append(el("pre", "grant", JSON.stringify(p.grant, null, 1)));
  return li;
}

// ---- wiring ----

$("key-form").onsubmit = (e) => {
  e.preventDefault();
  const k = $("api-key").value.trim();
  const a = $("admin-token").value.trim();
  if (k) sessionStorage.setItem("looopy.apiKey", k); else sessionStorage.removeItem("looopy.apiKey");
  if (a) sessionStorage.setItem("looopy.adminToken", a); else sessionStorage.removeItem("looopy.adminToken");
  $("api-key").value = "";
  $("admin-token").value = "";
  $("api-key").placeholder = k ? "key set for this tab" : "only when auth is on";
  showError("");
  loadContexts();
  loadPlugins();
  if (state.contextId) selectContext(state.contextId);
};

$("composer").onsubmit = (e) => {
  e.preventDefault();
  const text = $("prompt").value.trim();
  if (!text) return;
  $("prompt").value = "";
  sendMessage([{ text }], "", text).catch((err) => showError(err.message));
};

$("prompt").onkeydown = (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
};

$("new-context").onclick = () => selectContext("");
// The thoughts switch: how much of the agent's thinking is shown (the
// stream brings it all; the CSS hides what is more detailed).
function setVerbosity(v) {
  document.body.dataset.thoughts = v;
  $("thought-verbosity").value = v;
  sessionStorage.setItem("looopy.thoughts", v);
}
$("thought-verbosity").onchange = (e) => setVerbosity(e.target.value);
setVerbosity(sessionStorage.getItem("looopy.thoughts") || "normal");

if (key()) $("api-key").placeholder = "key set for this tab";
loadContexts();
loadPlugins();
if (location.hash.length > 1) selectContext(decodeURIComponent(location.hash.slice(1)));
