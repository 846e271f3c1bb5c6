// baton's chat UI. Plain ES module, no framework: it talks to the API of
// docs/api.md and renders every piece of model output either as sanitised
// markdown (marked, then DOMPurify) or as plain text (textContent), never as
// raw HTML.
import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const $ = (id) => document.getElementById(id);

const KEY_STORE = "baton.key";
const APP_STORE = "baton.app";
const DEFAULT_APP = "default";
const DEV_LOG_MAX = 500;

// ?app=NAME picks the app (tenant) in dev mode; it is kept for the tab.
const appParam = new URLSearchParams(location.search).get("app");
if (appParam) sessionStorage.setItem(APP_STORE, appParam);

const state = {
  key: sessionStorage.getItem(KEY_STORE) || "",
  app: sessionStorage.getItem(APP_STORE) || DEFAULT_APP,
  workflows: [],
  chat: null, // {id, workflow}
};

// STATUS_WORDS says each chat status in words; the raw name stays in the
// pill's data-status (and title) for styling and for developers.
const STATUS_WORDS = {
  running: "Working",
  waiting_input: "Waiting for your answer",
  waiting_ui_tool: "Waiting for your response",
  waiting_secret: "Waiting for your secrets",
  completed: "Complete",
  failed: "Stopped by an error",
  cancelled: "Stopped",
};

function statusWords(status) {
  return STATUS_WORDS[status] || String(status || "").replaceAll("_", " ");
}

// paintPill shows status on a pill: in words, with the raw name kept.
function paintPill(pill, status) {
  pill.textContent = statusWords(status);
  pill.className = `status-pill s-${status}`;
  pill.dataset.status = status;
  pill.title = status;
  return pill;
}

// ---------- small DOM helpers ----------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function escapeHTML(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

// Raw HTML in model text is shown as the text it is, never as markup.
marked.use({
  renderer: {
    html(token) {
      return escapeHTML(token.text ?? token.raw ?? "");
    },
  },
});

// renderMarkdown turns model text into sanitised HTML inside a container:
// marked's output (raw HTML escaped) goes through DOMPurify before the DOM.
function renderMarkdown(container, text) {
  const html = marked.parse(String(text ?? ""), { async: false, gfm: true, breaks: true });
  container.innerHTML = DOMPurify.sanitize(html, { USE_PROFILES: { html: true } });
  for (const a of container.querySelectorAll("a[href]")) {
    a.setAttribute("rel", "noopener noreferrer");
    a.setAttribute("target", "_blank");
  }
}

// ---------- HTTP ----------

class HTTPError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = null;
  }
  if (!res.ok) {
    const err = data && data.error ? data.error : {};
    throw new HTTPError(res.status, err.code || "http_" + res.status, err.message || res.statusText);
  }
  return data;
}

const enc = encodeURIComponent;

// ---------- banner ----------

let bannerTimer = null;

// showBanner shows a message above the chat; an error about something the
// person did goes away by itself after a while.
function showBanner(text, kind = "info", ttl = 0) {
  const b = $("banner");
  b.textContent = text;
  b.dataset.kind = kind;
  b.hidden = false;
  clearTimeout(bannerTimer);
  if (ttl > 0) bannerTimer = setTimeout(hideBanner, ttl);
}

function hideBanner() {
  clearTimeout(bannerTimer);
  const b = $("banner");
  b.hidden = true;
  b.textContent = "";
  delete b.dataset.kind;
}

// ---------- authentication ----------

function askForKey(message) {
  const dlg = $("auth-dialog");
  $("auth-error").textContent = message || "";
  if (!dlg.open) dlg.showModal();
  $("auth-key").focus();
}

// The dialog asks only for the key: the server says which app and user it
// belongs to (GET /api/me).
$("auth-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const key = $("auth-key").value.trim();
  if (!key) return;
  state.key = key;
  sessionStorage.setItem(KEY_STORE, key);
  $("auth-key").value = "";
  $("auth-dialog").close();
  boot();
});

$("signout").addEventListener("click", () => {
  sessionStorage.removeItem(KEY_STORE);
  state.key = "";
  closeChat();
  askForKey("");
});

// ---------- workflows and chats ----------

async function loadWorkflows() {
  const data = await api("GET", "/api/workflows");
  state.workflows = data.workflows || [];
  const sel = $("workflow-select");
  sel.replaceChildren();
  for (const wf of state.workflows) {
    sel.append(el("option", { value: wf.name, text: wf.name }));
  }
  const first = state.workflows[0];
  sel.title = first ? first.description || "" : "";
}

$("workflow-select").addEventListener("change", () => {
  const wf = state.workflows.find((w) => w.name === $("workflow-select").value);
  $("workflow-select").title = wf ? wf.description || "" : "";
});

async function loadChats() {
  const list = $("chat-list");
  let data;
  try {
    data = await api("GET", `/api/chats/${enc(state.app)}?limit=50`);
  } catch (err) {
    list.replaceChildren(el("li", { class: "muted", text: `Could not list chats: ${err.message}` }));
    return;
  }
  list.replaceChildren();
  const chats = data.chats || [];
  if (chats.length === 0) list.append(el("li", { class: "muted", text: "No chats yet." }));
  for (const c of chats) {
    const when = new Date(c.updated_at || c.created_at);
    const current = state.chat && state.chat.id === c.chat_id;
    list.append(
      el(
        "li",
        {},
        el(
          "button",
          {
            type: "button",
            class: "chat-item",
            "aria-current": current ? "true" : null,
            dataset: { chatId: c.chat_id },
            onclick: () => openChat(c.chat_id, c.workflow),
          },
          el("span", { class: "chat-item-name", text: c.workflow }),
          paintPill(el("span"), c.status),
          el("time", { datetime: when.toISOString(), class: "muted small", text: when.toLocaleString() }),
        ),
      ),
    );
  }
}

$("refresh-chats").addEventListener("click", loadChats);

$("chats-toggle").addEventListener("click", () => {
  const open = document.body.classList.toggle("sidebar-open");
  $("chats-toggle").setAttribute("aria-expanded", String(open));
});

async function startChat(workflow) {
  const btn = $("start-button");
  btn.disabled = true;
  try {
    const data = await api("POST", `/api/chats/${enc(state.app)}/${enc(workflow)}/start`, {});
    await openChat(data.chat_id, data.workflow || workflow);
    loadChats();
  } catch (err) {
    showBanner(`Could not start a chat: ${err.message}`, "error");
  } finally {
    btn.disabled = false;
  }
}

$("start-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const wf = $("workflow-select").value;
  if (wf) startChat(wf);
});

// ---------- the chat view ----------

// view holds the rendering state of the open chat.
let view = null;

function newView(id, workflow) {
  return {
    id,
    workflow,
    lastSeq: 0,
    streams: new Map(), // message_id -> {node, body, agent, text}
    settled: new Set(), // agent_message_ids recorded
    thinking: null, // {node, agent}
    notice: null, // the status line of a recovery in progress (chat.notice)
    components: new Map(), // ui_event_id -> {node, done, kind}
    structured: new Set(), // agents whose text is structured output
    tokens: 0,
    cost: 0,
    socket: null,
    retry: 0,
    timer: null,
    closed: false,
    status: "",
    metrics: undefined, // true: /metrics/perf/chats answers; false: it does not
    metricsTimer: null,
    retryButton: null, // the Retry of the last error, while it is current
    syntheticSeq: 0, // the sequence of the last synthetic select_speaker (a speaker change shown with a text)
  };
}

function closeChat() {
  if (!view) return;
  view.closed = true;
  clearTimeout(view.timer);
  clearTimeout(view.metricsTimer);
  if (view.socket) view.socket.close(1000, "chat closed");
  view = null;
  $("export-button").hidden = true;
}

async function openChat(id, workflow) {
  closeChat();
  state.chat = { id, workflow };
  view = newView(id, workflow);
  if (location.hash !== `#chat=${id}`) history.replaceState(null, "", `#chat=${id}`);
  $("messages").replaceChildren();
  $("artifact-panel").hidden = true;
  $("artifact-body").replaceChildren();
  $("dev-log").replaceChildren();
  updateUsage();
  $("dev-usage-note").textContent = "";
  if (!$("dev-panel").hidden) refreshMetrics();
  $("chat-title").textContent = workflow ? `${workflow} chat` : "Chat";
  $("chat-title").title = id;
  $("export-button").hidden = false;
  setStatus("");
  hideBanner();
  setInput(false);
  document.body.classList.remove("sidebar-open");
  for (const b of document.querySelectorAll(".chat-item")) {
    if (b.dataset.chatId === id) b.setAttribute("aria-current", "true");
    else b.removeAttribute("aria-current");
  }
  if (!workflow) {
    try {
      const c = await api("GET", `/api/chats/${enc(state.app)}/${enc(id)}`);
      if (view && view.id === id) {
        view.workflow = c.workflow;
        $("chat-title").textContent = `${c.workflow} chat`;
      }
    } catch (err) {
      showBanner(`Could not open the chat: ${err.message}`, "error");
      return;
    }
  }
  if (state.workflows.some((w) => w.name === view.workflow)) $("workflow-select").value = view.workflow;
  connect(view);
}

// setStatus shows the open chat's status (a ChatStatus name) in words, and
// the Stop button while it runs.
function setStatus(status) {
  const pill = $("chat-status");
  paintPill(pill, status);
  pill.hidden = !status;
  $("stop-button").hidden = status !== "running";
  if (!view) return;
  view.status = status;
  const input = $("composer-input");
  if (status === "running" && input.disabled) {
    if (canQueue()) {
      // The person may write while the agents work: the server keeps the
      // message and the run takes it at its next input point.
      input.disabled = false;
      $("send-button").disabled = false;
    }
    input.placeholder = idlePlaceholder();
  }
  const item = document.querySelector(`.chat-item[data-chat-id="${CSS.escape(view.id)}"] .status-pill`);
  if (item && status) paintPill(item, status);
}

// idlePlaceholder says why the composer is disabled when nothing more
// precise was said.
function idlePlaceholder() {
  if (!view) return "Start a chat or open one to write";
  if (view.status === "running" && canQueue()) {
    return policyOf() === "interrupt"
      ? "The agents are working: a message interrupts them, or press Stop"
      : "The agents are working: write to add a message, or press Stop";
  }
  if (view.status === "running") return "The agents are working: press Stop to interrupt them";
  return "The agent has not asked for input yet";
}

// policyOf is the open chat's workflow's double_texting policy: what the
// server does with a message sent while a run goes.
function policyOf() {
  const wf = view && state.workflows.find((w) => w.name === view.workflow);
  return (wf && wf.double_texting) || "enqueue";
}

// canQueue: a message may be sent while the chat's run goes (the server
// keeps it for the run, or stops the run for it); "reject" refuses it.
function canQueue() {
  return !!view && policyOf() !== "reject";
}

function setInput(enabled, prompt) {
  const input = $("composer-input");
  input.disabled = !enabled;
  $("send-button").disabled = !enabled;
  input.placeholder = enabled ? prompt || "Type your message" : prompt || idlePlaceholder();
  if (enabled) input.focus();
}

function scrollDown() {
  const m = $("messages");
  m.scrollTop = m.scrollHeight;
}

function append(node) {
  $("messages").append(node);
  scrollDown();
  return node;
}

// ---------- thinking bubble: at most one, never orphaned ----------

function showThinking(agent) {
  removeThinking();
  const node = el(
    "div",
    { class: "msg thinking", role: "status", dataset: { agent } },
    el("span", { class: "who", text: agent }),
    el("span", { class: "dots", "aria-hidden": "true" }, el("i"), el("i"), el("i")),
    el("span", { class: "visually-hidden", text: `${agent} is thinking` }),
  );
  view.thinking = { node, agent };
  append(node);
}

function removeThinking(agent) {
  if (!view || !view.thinking) return;
  if (agent !== undefined && view.thinking.agent !== agent) return;
  view.thinking.node.remove();
  view.thinking = null;
}

// ---------- messages ----------

function messageNode(agent, role) {
  const body = el("div", { class: "body" });
  const node = el("article", { class: `msg ${role}`, dataset: { agent } }, el("span", { class: "who", text: role === "user" ? "You" : agent }), body);
  return { node, body };
}

function onStreamText(d) {
  const id = d.message_id;
  if (!id || view.settled.has(id)) return;
  if (view.structured.has(d.agent)) return; // raw JSON; the component shows it
  let s = view.streams.get(id);
  if (!s) {
    const { node, body } = messageNode(d.agent, "agent");
    node.classList.add("streaming");
    node.dataset.messageId = id;
    node.setAttribute("aria-busy", "true");
    s = { node, body, agent: d.agent, text: "" };
    view.streams.set(id, s);
  }
  s.text += d.delta || "";
  // A lone word such as a hidden control token ("NEXT") is not shown until
  // more comes: the recorded text decides whether it is shown at all.
  if (!s.node.isConnected) {
    if (!/\s/.test(s.text) && s.text.length < 24) return;
    removeThinking(d.agent);
    append(s.node);
  }
  s.body.textContent = s.text;
  scrollDown();
}

// stream.error: nothing of the failed attempt was recorded, so its deltas
// are void and its bubble goes; a retry (will_retry) streams under a new
// message id, and meanwhile the agent is shown working.
function onStreamError(d) {
  const id = d.message_id;
  if (!id) return;
  const s = view.streams.get(id);
  if (s) s.node.remove();
  view.streams.delete(id);
  view.settled.add(id); // a late delta of it starts no bubble
  if (d.will_retry && d.agent && !view.structured.has(d.agent)) showThinking(d.agent);
}

// A chat.notice is a transient status line ("the model is slow; retrying
// (2/4)"): it stands until the chat moves on (see handle).
function showNotice(d) {
  removeNotice();
  view.notice = append(el("p", { class: "notice", role: "status", text: d.message || "Recovering…" }));
}

function removeNotice() {
  if (!view || !view.notice) return;
  view.notice.remove();
  view.notice = null;
}

function dropStreams() {
  for (const s of view.streams.values()) s.node.remove();
  view.streams.clear();
}

function onText(d, env) {
  const agent = d.agent || "";
  removeThinking(agent);
  const id = d.agent_message_id;
  let s = id ? view.streams.get(id) : null;
  if (id) {
    view.settled.add(id);
    view.streams.delete(id);
  }
  // A text hidden only after it streamed names the streamed message: drop its bubble.
  const retracted = d.retract_message_id ? view.streams.get(d.retract_message_id) : null;
  if (retracted) {
    retracted.node.remove();
    view.streams.delete(d.retract_message_id);
  }
  if (d.retract_message_id) view.settled.add(d.retract_message_id);
  if (d.ui_hidden || d.tool_only || (!d.content && d.has_tool_calls)) {
    if (s) s.node.remove();
    return;
  }
  if (agent === "user") {
    // The recorded echo replaces the bubble shown while the message was
    // queued (accepted and kept by the server, not yet taken by the run).
    const queued = [...document.querySelectorAll("#messages .msg.user.queued")].find((q) => q.dataset.content === (d.content || ""));
    if (queued) queued.remove();
    const { node, body } = messageNode(agent, "user");
    body.textContent = d.content || "";
    node.dataset.seq = d.sequence;
    // Edit and resend forks the chat before this message: before the
    // speaker change shown with it, when there is one.
    let at = d.sequence - 1;
    if (view.syntheticSeq === at) at -= 1;
    if (at >= 1 && !d.ui_hidden) addEditResend(node, body, at, d.content || "");
    append(node);
    setInput(false);
    return;
  }
  if (!s || !s.node.isConnected) {
    const m = messageNode(agent, agent === "system" ? "system" : "agent");
    s = { node: m.node, body: m.body };
    if (id) s.node.dataset.messageId = id;
    append(s.node);
  }
  s.node.classList.remove("streaming");
  s.node.removeAttribute("aria-busy");
  s.node.dataset.seq = d.sequence;
  renderMarkdown(s.body, d.content);
  scrollDown();
  void env;
}

// addEditResend puts an "Edit" button on a person's message: the edited
// text is sent in a fork of the chat made at sequence at (the chat as it
// stood before the message), which then opens. The original is kept.
function addEditResend(node, body, at, content) {
  const edit = el("button", { type: "button", class: "link edit-resend", text: "Edit", title: "Edit and resend: a new chat from this point" });
  node.append(edit);
  edit.addEventListener("click", () => {
    const box = el("textarea", { class: "edit-box", rows: "3", "aria-label": "Edited message" });
    box.value = content;
    const resend = el("button", { type: "button", class: "resend", text: "Resend" });
    const cancel = el("button", { type: "button", class: "secondary", text: "Cancel" });
    const form = el("div", { class: "edit-form" }, box, el("div", { class: "buttons" }, resend, cancel));
    body.hidden = true;
    edit.hidden = true;
    node.append(form);
    box.focus();
    cancel.addEventListener("click", () => {
      form.remove();
      body.hidden = false;
      edit.hidden = false;
    });
    resend.addEventListener("click", async () => {
      const text = box.value.trim();
      if (!text) return;
      resend.disabled = true;
      const from = view.id;
      const workflow = view.workflow;
      try {
        const f = await api("POST", `/api/chats/${enc(state.app)}/${enc(from)}/fork`, { at_sequence: at });
        await api("POST", "/api/input/submit", { app: state.app, chat_id: f.chat_id, content: text });
        await openChat(f.chat_id, f.workflow || workflow);
        loadChats();
      } catch (err) {
        resend.disabled = false;
        showBanner(`Could not edit and resend: ${err.message}`, "error");
      }
    });
  });
}

// exportChat downloads the open chat's recorded events (GET …/export) as a
// file: fetched with the key, since a plain link would not send it.
async function exportChat() {
  if (!view) return;
  const id = view.id;
  const headers = {};
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  try {
    const res = await fetch(`/api/chats/${enc(state.app)}/${enc(id)}/export`, { headers });
    if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
    const url = URL.createObjectURL(await res.blob());
    const a = el("a", { href: url, download: `chat-${id}.jsonl` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  } catch (err) {
    showBanner(`Could not export the chat: ${err.message}`, "error");
  }
}

$("export-button").addEventListener("click", exportChat);

// RESULT_PREVIEW is how much of a tool's result is shown before "Show all".
const RESULT_PREVIEW = 400;

// prettyJSON shows a JSON value (or a string holding one) indented; any
// other string as it is.
function prettyJSON(v) {
  if (typeof v === "string") {
    try {
      return JSON.stringify(JSON.parse(v), null, 2);
    } catch {
      return v;
    }
  }
  return JSON.stringify(v ?? null, null, 2);
}

// toolCallDetails shows a tool call as a collapsed <details>: its summary
// names the agent and the tool, and opens onto the arguments and, once it
// comes, the result (onToolResponse). All of it is text, never markup.
function toolCallDetails(d) {
  const args = d.arguments === undefined || d.arguments === null ? "" : prettyJSON(d.arguments);
  const result = el("div", { class: "tool-result" }, el("p", { class: "muted small", text: "Running…" }));
  const node = el(
    "details",
    { class: "msg tool tool-call", dataset: { toolCallId: d.tool_call_id || "", agent: d.agent || "" } },
    el("summary", {}, el("span", { class: "tool-summary", text: `${d.agent} called ${d.tool_name}` }), el("span", { class: "tool-state muted small", text: "running" })),
    el("h4", { text: "Arguments" }),
    el("pre", { class: "tool-args", text: args || "(none)" }),
    el("h4", { text: "Result" }),
    result,
  );
  return append(node);
}

// showToolResult fills a tool call's details with its result: the first
// RESULT_PREVIEW characters, and a button that shows the rest.
function showToolResult(node, d, failed) {
  const text = prettyJSON(d.content ?? "");
  const pre = el("pre", { class: "tool-output", text: text.length > RESULT_PREVIEW ? text.slice(0, RESULT_PREVIEW) + "…" : text });
  const box = node.querySelector(".tool-result");
  box.replaceChildren(pre);
  if (text.length > RESULT_PREVIEW) {
    const more = el("button", { type: "button", class: "secondary small show-all", text: `Show all (${text.length} characters)` });
    more.addEventListener("click", () => {
      pre.textContent = text;
      more.remove();
    });
    box.append(more);
  }
  const stateNode = node.querySelector(".tool-state");
  stateNode.textContent = failed ? "failed" : "done";
  node.classList.toggle("error", failed);
}

function toolLine(text, kind) {
  return append(el("div", { class: `msg tool ${kind || ""}`, role: kind === "error" ? "alert" : null, text }));
}

// flattenPayload applies the two stages of spec/auto-tool-execution.md:
// an auto-tool's tool_args are spread over the payload, and a nested key
// named like the component (the structured output's model) is promoted.
export function flattenPayload(payload, componentType) {
  let base = payload && typeof payload === "object" ? { ...payload } : {};
  if (base.interaction_type === "auto_tool" && base.tool_args && typeof base.tool_args === "object") {
    const { tool_args: args, ...rest } = base;
    const nestedKey = Object.keys(args).find((k) => k === componentType && args[k] && typeof args[k] === "object" && !Array.isArray(args[k]));
    if (nestedKey) {
      const { [nestedKey]: nested, ...others } = args;
      base = { ...rest, ...nested, ...others };
    } else {
      base = { ...rest, ...args };
    }
  }
  return base;
}

function onToolCall(d) {
  const uid = d.ui_event_id;
  const ct = d.component_type;
  const answerable = uid && (d.awaiting_response || d.interaction_type === "auto_tool" || d.pending_kind);
  if (d.transfer) return; // a hand-over, not something to show
  if (d.pending_kind === "client_tool") {
    clientToolCall(d);
    return;
  }
  if (!ct && !answerable) {
    toolCallDetails(d);
    return;
  }
  if (!uid) {
    toolLine(`${d.agent} showed ${ct || d.tool_name}`, "info");
    return;
  }
  if (view.components.has(uid)) return;
  removeThinking();
  const payload = flattenPayload(d.payload || {}, ct);
  const secret = d.pending_kind === "secret" || ct === "SecretsInput" || payload.masked === true;
  let comp;
  setStatus(secret ? "waiting_secret" : "waiting_ui_tool");
  setInput(
    false,
    secret ? "Fill in the secret form above to go on" : ct === "ActionPlan" ? "Review the plan in the artifact panel to go on" : "Answer the form above to go on",
  );
  if (secret) comp = secretForm(d, payload);
  else if (ct === "ActionPlan") comp = actionPlan(d, payload);
  else comp = inlineForm(d, payload);
  view.components.set(uid, comp);
}

// clientToolCall shows the call of a tool the client application offered
// (over AG-UI or Chat Completions): that application runs it and sends the
// result, never this page, so the chat shows what it waits for and the
// composer stays closed until the result comes.
function clientToolCall(d) {
  const uid = d.ui_event_id;
  if (view.components.has(uid)) return;
  removeThinking();
  const details = toolCallDetails(d);
  const line = toolLine(`Waiting for the client application to run ${d.tool_name}`, "info client-tool");
  setStatus("waiting_ui_tool");
  setInput(false, "The chat waits for the client application's result");
  view.components.set(uid, {
    finish(r) {
      const failed = r.success === false || (r.status && !["ok", "success"].includes(r.status));
      line.textContent = `The client application answered ${d.tool_name}`;
      showToolResult(details, r, failed);
    },
  });
}

function onToolResponse(d) {
  const uid = d.ui_event_id;
  const comp = uid ? view.components.get(uid) : null;
  if (comp) {
    comp.finish(d);
    setStatus("running");
    setInput(false);
  }
  const failed = d.success === false || (d.status && !["ok", "success"].includes(d.status));
  const details = !comp && !d.ui_hidden && d.tool_call_id ? document.querySelector(`#messages details.tool-call[data-tool-call-id="${CSS.escape(d.tool_call_id)}"]`) : null;
  if (details) {
    showToolResult(details, d, failed);
    return;
  }
  if (failed) {
    toolLine(`${d.tool_name || "tool"} failed: ${typeof d.content === "string" ? d.content : JSON.stringify(d.content)}`, "error");
  }
  // A successful auto-tool (or any successful UI) response is not shown.
}

// messageId returns a fresh id for a client message. The server takes a
// message's id as its idempotency key (a message sent again with the same id
// is recorded once), so ids must never repeat in a chat — not even after a
// reload, which a per-page counter would.
function messageId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16)); // randomUUID needs a secure context
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// send sends a client message over the chat's WebSocket.
function send(msg) {
  if (!view || !view.socket || view.socket.readyState !== WebSocket.OPEN) {
    showBanner("Not connected: wait for the connection to come back, then try again.", "error", 5000);
    return false;
  }
  const id = messageId();
  view.socket.send(JSON.stringify({ ...msg, id }));
  // Only the type and the ui_event_id go to the developer panel: a secret
  // form's values must never be shown.
  devLog(`→ ${msg.type}${msg.ui_event_id ? " " + msg.ui_event_id : ""} (${id})`, "out");
  return true;
}

function respond(uid, data, status = "success") {
  return send({ type: "ui.tool.response", ui_event_id: uid, status, data });
}

// secretForm is the masked form of a secret-collecting tool. Its values go
// straight into the response and are cleared from the inputs at once.
function secretForm(d, payload) {
  const uid = d.ui_event_id;
  const keys = Array.isArray(payload.keys) ? payload.keys : [];
  const form = el("form", { class: "component secret-form", "aria-label": "Enter secret values", dataset: { uiEventId: uid } });
  form.append(el("p", { class: "component-title", text: payload.agent_message || payload.prompt || "This workflow needs these secrets. They are never shown again." }));
  const inputs = [];
  keys.forEach((k, i) => {
    const name = String(k.name || `secret_${i}`);
    const inputId = `secret-${uid}-${i}`;
    const input = el("input", { id: inputId, type: "password", name, autocomplete: "new-password", spellcheck: "false", required: true });
    inputs.push(input);
    form.append(el("label", { for: inputId, text: k.label || name }), input);
  });
  const err = el("p", { class: "error-text", role: "alert" });
  const submit = el("button", { type: "submit", text: "Save secrets" });
  const cancel = el("button", { type: "button", class: "secondary", text: "Cancel" });
  form.append(err, el("div", { class: "buttons" }, submit, cancel));
  const node = append(el("div", { class: "msg component-wrap", dataset: { agent: d.agent } }, el("span", { class: "who", text: d.agent }), form));
  const done = (text) => {
    for (const i of inputs) i.value = "";
    form.replaceChildren(el("p", { class: "component-done", text }));
  };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const data = {};
    for (const i of inputs) data[i.name] = i.value;
    if (inputs.some((i) => !i.value)) {
      err.textContent = "Fill in every value.";
      return;
    }
    if (respond(uid, data)) done("Secrets sent.");
    for (const i of inputs) i.value = "";
  });
  cancel.addEventListener("click", () => {
    if (respond(uid, {}, "cancelled")) done("Cancelled.");
  });
  if (inputs[0]) inputs[0].focus();
  return {
    node,
    finish(r) {
      if (form.isConnected && form.querySelector("input")) {
        done(r && r.status === "cancelled" ? "Cancelled." : "Secrets sent.");
      }
    },
  };
}

// actionPlan renders the ActionPlan artifact in the side panel, with a card
// in the conversation pointing at it.
function actionPlan(d, payload) {
  const uid = d.ui_event_id;
  const wf = payload.workflow && typeof payload.workflow === "object" ? payload.workflow : payload;
  const panel = $("artifact-panel");
  const body = $("artifact-body");
  const art = el("article", { class: "action-plan", dataset: { uiEventId: uid } });
  art.append(el("h3", { text: wf.name || "Action plan" }));
  if (wf.description) art.append(el("p", { text: wf.description }));
  const facts = el("dl", { class: "facts" });
  if (wf.trigger) facts.append(el("dt", { text: "Trigger" }), el("dd", { text: wf.trigger }));
  if (Array.isArray(wf.integrations) && wf.integrations.length) {
    facts.append(el("dt", { text: "Integrations" }), el("dd", { text: wf.integrations.join(", ") }));
  }
  if (wf.estimated_minutes_saved !== undefined) {
    facts.append(el("dt", { text: "Minutes saved" }), el("dd", { text: String(wf.estimated_minutes_saved) }));
  }
  art.append(facts);
  if (Array.isArray(wf.phases)) {
    const ol = el("ol", { class: "phases" });
    for (const p of wf.phases) {
      ol.append(
        el(
          "li",
          {},
          el("strong", { text: p.name || "Phase" }),
          p.description ? el("p", { text: p.description }) : null,
          Array.isArray(p.agents) && p.agents.length ? el("p", { class: "muted small", text: `Agents: ${p.agents.join(", ")}` }) : null,
          p.approval ? el("p", { class: "muted small", text: `Approval: ${p.approval}` }) : null,
        ),
      );
    }
    art.append(ol);
  }
  const fbId = `revise-${uid}`;
  const feedback = el("textarea", { id: fbId, rows: "2", name: "feedback" });
  const approve = el("button", { type: "button", class: "approve", text: "Approve" });
  const revise = el("button", { type: "button", class: "secondary revise", text: "Request changes" });
  const controls = el(
    "div",
    { class: "artifact-controls" },
    el("label", { for: fbId, text: "Changes you want (for Request changes)" }),
    feedback,
    el("div", { class: "buttons" }, approve, revise),
  );
  art.append(controls);
  body.replaceChildren(art);
  panel.hidden = false;
  const card = append(
    el(
      "div",
      { class: "msg agent artifact-card", dataset: { agent: d.agent } },
      el("span", { class: "who", text: d.agent }),
      el("p", { text: payload.agent_message || "An action plan is ready for your review." }),
      el("button", { type: "button", class: "secondary", text: "Review the plan", onclick: () => approve.isConnected ? approve.focus() : art.focus() }),
    ),
  );
  const done = (text, kind) => {
    controls.replaceChildren(el("p", { class: `component-done ${kind || ""}`, text }));
  };
  approve.addEventListener("click", () => {
    if (respond(uid, { action: "approve" })) done("Approved.");
  });
  revise.addEventListener("click", () => {
    const text = feedback.value.trim();
    if (!text) {
      feedback.focus();
      return;
    }
    if (respond(uid, { action: "revise", feedback: text })) done("Changes requested.");
  });
  art.tabIndex = -1;
  approve.focus({ preventScroll: true });
  return {
    node: card,
    finish(r) {
      if (approve.isConnected) {
        const a = r && r.payload && r.payload.data && r.payload.data.action;
        if (r && r.success === false) done("Not applied: the response failed.", "failed");
        else done(a === "revise" ? "Changes requested." : a === "approve" ? "Approved." : "Answered.");
      }
    },
  };
}

// inlineForm is the generic component of any other UI tool: what it shows
// (as text) and a free-form answer.
function inlineForm(d, payload) {
  const uid = d.ui_event_id;
  const form = el("form", { class: "component inline-form", "aria-label": `${d.tool_name} form`, dataset: { uiEventId: uid } });
  const title = [payload.question, payload.agent_message, payload.prompt, payload.message].find((v) => typeof v === "string" && v);
  const titleNode = el("p", { class: "component-title", text: title || `${d.agent} asks (${d.component_type || d.tool_name})` });
  form.append(titleNode);
  const shown = { ...payload };
  for (const k of ["question", "agent_message", "prompt", "message"]) if (shown[k] === title) delete shown[k];
  delete shown.interaction_type;
  if (Object.keys(shown).length) form.append(el("pre", { class: "payload", text: JSON.stringify(shown, null, 2) }));
  const inputId = `answer-${uid}`;
  const input = el("input", { id: inputId, type: "text", name: "response", autocomplete: "off" });
  const submit = el("button", { type: "submit", text: "Submit" });
  const cancel = el("button", { type: "button", class: "secondary", text: "Cancel" });
  form.append(el("label", { for: inputId, text: "Your answer" }), input, el("div", { class: "buttons" }, submit, cancel));
  const node = append(el("div", { class: "msg component-wrap", dataset: { agent: d.agent } }, el("span", { class: "who", text: d.agent }), form));
  const done = (text) => form.replaceChildren(titleNode, el("p", { class: "component-done", text }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (respond(uid, { response: input.value })) done("Answered.");
  });
  cancel.addEventListener("click", () => {
    if (respond(uid, {}, "cancelled")) done("Cancelled.");
  });
  input.focus();
  return {
    node,
    finish() {
      if (input.isConnected) done("Answered.");
    },
  };
}

function onInputRequest(d) {
  removeThinking();
  setStatus("waiting_input");
  if (d.tool_call_id && d.prompt) {
    // A tool's question (a remote agent's, through an a2a tool): nobody
    // said it in the chat, so it is shown as a message, and the person's
    // next message answers it. Plain text: the remote agent wrote it.
    const { node, body } = messageNode(d.agent || "", "agent");
    node.classList.add("tool-question");
    node.dataset.seq = d.sequence;
    body.textContent = d.prompt;
    if (d.tool_name) body.append(el("div", { class: "via", text: `asked through ${d.tool_name}` }));
    append(node);
    setInput(true, "Your answer");
    return;
  }
  setInput(true, d.prompt);
}

// onCancelled shows a run the person stopped: the chat can go on, by Retry
// (resume) or by a message.
function onCancelled() {
  removeThinking();
  dropStreams();
  setStatus("cancelled");
  setInput(true, "Stopped. Write to go on, or press Retry");
  const retry = el("button", { type: "button", class: "retry", text: "Retry" });
  view.retryButton = retry;
  retry.addEventListener("click", () => resumeChat(retry));
  append(el("div", { class: "msg badge stopped", role: "status" }, el("span", { text: "Stopped" }), retry));
}

// resumeChat asks the server to go on with the chat (POST resume): after an
// error or a Stop.
async function resumeChat(retry) {
  retry.disabled = true;
  if (view.retryButton === retry) view.retryButton = null;
  try {
    await api("POST", `/api/chats/${enc(state.app)}/${enc(view.id)}/resume`, {});
    retry.replaceWith(el("p", { class: "muted small", text: "Retrying…" }));
  } catch (err) {
    retry.disabled = false;
    showBanner(`Retry failed: ${err.message}`, "error");
  }
}

// stopRun asks the server to stop the run in progress (POST cancel); the
// recorded end (chat.run_complete, status cancelled) updates the page.
async function stopRun() {
  if (!view) return;
  const btn = $("stop-button");
  btn.disabled = true;
  try {
    await api("POST", `/api/chats/${enc(state.app)}/${enc(view.id)}/cancel`);
  } catch (err) {
    showBanner(`Could not stop: ${err.message}`, "error", 5000);
  } finally {
    btn.disabled = false;
  }
}

$("stop-button").addEventListener("click", stopRun);

function onRunComplete(d) {
  if (d.status === "cancelled") {
    onCancelled();
    return;
  }
  removeThinking();
  dropStreams();
  setInput(false, "This chat is complete");
  setStatus("completed");
  const again = el("button", { type: "button", class: "start-new", text: "Start new chat", onclick: () => startChat(view ? view.workflow : $("workflow-select").value) });
  append(
    el(
      "div",
      { class: "msg badge", role: "status" },
      el("span", { class: "badge-mark", "aria-hidden": "true", text: "✓" }),
      el("span", { text: d.status === "max_turns" ? "Chat ended: turn limit reached" : "Chat complete" }),
      again,
    ),
  );
  again.focus();
}

function onError(d) {
  removeThinking();
  dropStreams();
  setInput(false, "The chat stopped with an error: retry it");
  setStatus("failed");
  const retry = el("button", { type: "button", text: "Retry" });
  view.retryButton = retry;
  const box = el(
    "div",
    { class: "msg error", role: "alert" },
    el("strong", { text: "Something went wrong" }),
    el("p", { text: d.message || "The chat stopped with an error." }),
    el("p", { class: "muted small", text: [d.agent && `agent ${d.agent}`, d.code && `code ${d.code}`].filter(Boolean).join(" · ") }),
    retry,
  );
  retry.addEventListener("click", () => resumeChat(retry));
  append(box);
}

function updateUsage() {
  $("dev-seq").textContent = String(view ? view.lastSeq : 0);
  if (view && view.metrics) return; // the metrics endpoint's totals are shown
  $("dev-tokens").textContent = String(view ? view.tokens : 0);
  $("dev-cost").textContent = view ? view.cost.toFixed(6) : "0";
}

function devLog(text, kind, seq) {
  const log = $("dev-log");
  const li = el("li", { class: `dev-${kind}` }, seq !== undefined ? el("span", { class: "seq", text: `#${seq} ` }) : null, el("code", { text }));
  log.append(li);
  while (log.childElementCount > DEV_LOG_MAX) log.firstElementChild.remove();
  if (!$("dev-panel").hidden) log.scrollTop = log.scrollHeight;
}

// handle applies one envelope to the view. Recorded envelopes carry a
// sequence; one at or below the last seen is a duplicate and is dropped.
function handle(env) {
  const d = env.data || {};
  if (typeof d.sequence === "number") {
    if (d.sequence <= view.lastSeq) return;
    view.lastSeq = d.sequence;
  }
  if (env.type.startsWith("chat.") || env.type.startsWith("stream.")) {
    devLog(JSON.stringify(env), env.type.startsWith("stream.") ? "stream" : "event", d.sequence);
  }
  if (d.is_structured_capable && d.agent) view.structured.add(d.agent);
  // The chat went on after an error (retried elsewhere, or by a message):
  // its Retry button has nothing left to do.
  if (view.retryButton && typeof d.sequence === "number" && env.type !== "chat.error" && !(env.type === "chat.run_complete" && d.status === "cancelled")) {
    view.retryButton.replaceWith(el("p", { class: "muted small", text: "The chat went on." }));
    view.retryButton = null;
  }
  // A notice stands until the next event of the chat, but for the retry's
  // own stream.start and the stream.error before it.
  if (view.notice && env.type !== "chat.notice" && env.type !== "stream.start" && env.type !== "stream.error") removeNotice();
  if (env.type === "chat.select_speaker" && d.source === "synthetic") view.syntheticSeq = d.sequence;
  switch (env.type) {
    case "stream.start":
      if (d.message_id && view.streams.has(d.message_id)) {
        const s = view.streams.get(d.message_id);
        s.text = "";
        s.body.textContent = "";
      }
      break;
    case "stream.text":
      onStreamText(d);
      break;
    case "stream.error":
      onStreamError(d);
      break;
    case "chat.notice":
      showNotice(d);
      break;
    case "chat.select_speaker":
      showThinking(d.agent || "agent");
      if (view.status !== "running") setStatus("running");
      break;
    case "chat.text":
      onText(d, env);
      break;
    case "chat.tool_call":
      onToolCall(d);
      break;
    case "chat.tool_response":
      onToolResponse(d);
      break;
    case "chat.input_request":
      onInputRequest(d);
      break;
    case "chat.run_complete":
      onRunComplete(d);
      break;
    case "chat.error":
      onError(d);
      break;
    case "chat.workflow_resumed":
      setStatus("running");
      break;
    case "chat.usage_summary":
      view.tokens += Number(d.total_tokens) || 0;
      view.cost += Number(d.cost) || 0;
      if (view.metrics) {
        clearTimeout(view.metricsTimer);
        view.metricsTimer = setTimeout(refreshMetrics, 300);
      }
      break;
    default:
      break;
  }
  updateUsage();
}

// ---------- WebSocket with replay ----------

function connect(v) {
  if (v.closed) return;
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  // With a key the first message authenticates; ?auth=message says so, which
  // --dev mode needs to wait for it (else a chat the dev user does not have
  // is closed with 4404 at once).
  const url = `${proto}//${location.host}/ws/${enc(state.app)}/${enc(v.id)}?last_sequence=${v.lastSeq}${state.key ? "&auth=message" : ""}`;
  const ws = new WebSocket(url);
  v.socket = ws;
  let pinger = null;
  ws.addEventListener("open", () => {
    if (state.key) ws.send(JSON.stringify({ type: "auth", token: state.key }));
    // A ping now and then keeps idle proxies and NATs from dropping the
    // connection while the chat waits for the person.
    pinger = setInterval(() => {
      if (ws.readyState === WebSocket.OPEN) ws.send('{"type":"ping"}');
    }, 30000);
    hideBanner();
    devLog(`connected, replay after ${v.lastSeq}`, "info");
  });
  ws.addEventListener("message", (ev) => {
    if (v !== view) return;
    v.retry = 0; // the connection works: the next drop starts the backoff over
    let env;
    try {
      env = JSON.parse(ev.data);
    } catch {
      return;
    }
    if (env.type === "ack") return;
    if (env.type === "error") {
      const e = env.data || {};
      devLog(`error ${e.code}: ${e.message}`, "error");
      showBanner(`The server refused that: ${e.message}`, "error", 10000);
      return;
    }
    if (env.type === "pong") return;
    handle(env);
  });
  ws.addEventListener("close", (ev) => {
    clearInterval(pinger);
    if (v.socket !== ws || v.closed) return;
    v.socket = null;
    devLog(`closed ${ev.code} ${ev.reason || ""}`, "info");
    if (ev.code === 4404) {
      showBanner("This chat does not exist or was deleted.", "error");
      setInput(false);
      return;
    }
    if (ev.code === 4401) {
      askForKey("The key was refused.");
      return;
    }
    if (ev.code === 4429) {
      showBanner("Too many open chats for this key: close another tab, then reload this one.", "error");
      setInput(false);
      return;
    }
    if (ev.code === 1008 || ev.code === 1009) {
      showBanner(`The server closed the connection: ${ev.reason || ev.code}. Reload the page to try again.`, "error");
      return;
    }
    // Streams that had not been recorded yet are dropped: the replay brings
    // their recorded text.
    dropStreams();
    const delay = Math.min(5000, 300 * 2 ** v.retry);
    v.retry += 1;
    showBanner(`Connection lost — reconnecting… (attempt ${v.retry})`, "warn");
    v.timer = setTimeout(() => connect(v), delay);
  });
}

// ---------- composer ----------

$("composer").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = $("composer-input");
  const content = input.value.trim();
  if (!content || input.disabled) return;
  if (send({ type: "user.input.submit", content })) {
    input.value = "";
    if (!(view && view.status === "running" && canQueue())) setInput(false);
    // Shown as sent at once: the server keeps it before it acknowledges
    // it, and the run takes it at its next input point; the recorded echo
    // (chat.text of the user) replaces this bubble.
    const { node, body } = messageNode("user", "user");
    node.classList.add("queued");
    node.dataset.content = content;
    node.title = "Sent — waiting for the agent to take it";
    body.textContent = content;
    append(node);
  }
});

$("composer-input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $("composer").requestSubmit();
  }
});

// ---------- developer panel ----------

$("dev-toggle").addEventListener("click", () => {
  const panel = $("dev-panel");
  panel.hidden = !panel.hidden;
  $("dev-toggle").setAttribute("aria-expanded", String(!panel.hidden));
  if (!panel.hidden) {
    $("dev-log").scrollTop = $("dev-log").scrollHeight;
    refreshMetrics();
  }
});

// refreshMetrics asks the metrics endpoint for the chat's totals, when the
// server has one; otherwise the panel shows the sum of the usage summaries
// the page has seen (the visible agents').
// The endpoint is asked once per chat; when it is missing (404) the sum is
// kept and it is not asked again.
async function refreshMetrics() {
  const note = $("dev-usage-note");
  const v = view;
  if (!v) return;
  if (v.metrics === false) return;
  try {
    const res = await fetch(`/metrics/perf/chats/${enc(v.id)}?app=${enc(state.app)}`, { headers: state.key ? { Authorization: `Bearer ${state.key}` } : {} });
    if (!res.ok) throw new Error(res.statusText);
    const m = await res.json();
    if (typeof m.total_tokens !== "number" || v !== view) throw new Error("no totals");
    v.metrics = true;
    $("dev-tokens").textContent = String(m.total_tokens);
    $("dev-cost").textContent = Number(m.total_cost || 0).toFixed(6);
    note.textContent = "Totals of every agent, from /metrics/perf/chats.";
  } catch {
    v.metrics = false;
    note.textContent = "Sum of the chat.usage_summary events of the visible agents.";
    updateUsage();
  }
}

// ---------- start ----------

// whoAmI asks the server for the key's app and user (in dev mode without a
// key: the dev user of the page's app).
async function whoAmI() {
  const me = await api("GET", state.key ? "/api/me" : `/api/me?app=${enc(state.app)}`);
  state.app = me.app;
  $("app-label").textContent = `app: ${me.app} · user: ${me.user}`;
}

async function boot() {
  $("signout").hidden = !state.key;
  try {
    await whoAmI();
    await loadWorkflows();
  } catch (err) {
    if (err.status === 401) {
      askForKey(state.key ? "That key was refused." : "");
      return;
    }
    showBanner(`Could not load workflows: ${err.message}`, "error");
    return;
  }
  await loadChats();
  const m = /^#chat=([\w.-]+)$/.exec(location.hash);
  if (m && (!view || view.id !== m[1])) openChat(m[1]);
}

boot();
