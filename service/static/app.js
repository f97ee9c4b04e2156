// The agent sessions page: the list (polled), one session (its events over SSE), and the
// actions. No build step: plain DOM. Every text from the server goes in through
// textContent, never as HTML.
"use strict";

const $ = (selector) => document.querySelector(selector);
const EVENT_TYPES = ["status", "turn", "tool_call", "tool_result", "approval", "decision",
  "sleeping", "waiting_event", "event_received", "answered", "user_message", "message_delivered",
  "limit_reached", "limit_raised", "continued", "end", "delta", "thinking_delta"];
const FINAL = ["completed", "stopped", "failed", "cancelled"];
let me = null;
let listTimer = null;
let current = null; // the open session's view state

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

// The API with the page's cookie; changes are JSON (the server refuses anything else).
async function api(path, options = {}) {
  const init = { method: options.method || "GET", credentials: "same-origin", headers: {} };
  if (init.method !== "GET") {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body || {});
  }
  const response = await fetch(path, init);
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) {
    const error = new Error((data && data.error && data.error.message) || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

const tokens = (usage) => usage ? usage.input_tokens + usage.output_tokens +
  usage.cache_read_input_tokens + usage.cache_creation_input_tokens : 0;
const cost = (value) => value == null ? "–" : `$${value.toFixed(4)}`;
const ms = (value) => value == null ? "" : value < 1000 ? `${value} ms` : `${(value / 1000).toFixed(1)} s`;

// ---- the list ------------------------------------------------------------------------

const LIST_PAGE = 50;  // rows a page of the list holds; "Load more" adds one more page
let listPages = 1;

// The pages of the list loaded so far, read again in turn (each page's token comes from the one before).
async function refreshList() {
  const status = $("#status-filter").value;
  const filter = status ? `&status=${encodeURIComponent(status)}` : "";
  try {
    const rows = [];
    let token = null;
    for (let page = 0; page < listPages; page += 1) {
      const next = token ? `&page_token=${encodeURIComponent(token)}` : "";
      const answered = await api(`/v1/sessions?limit=${LIST_PAGE}${filter}${next}`);
      rows.push(...answered.sessions);
      token = answered.next_page_token;
      if (!token) break;
    }
    const seen = new Set();
    $("#sessions tbody").replaceChildren(...rows.filter((s) => !seen.has(s.session_id) && seen.add(s.session_id))
      .map(sessionRow));
    $("#more").hidden = !token;
    $("#list-error").textContent = "";
  } catch (error) {
    $("#list-error").textContent = `Could not load the sessions: ${error.message}`;
  }
}

// A row; one read from the index alone (its session not replayable here) shows when its figures were indexed.
function sessionRow(s) {
  const asOf = s.unavailable ? ` (as of ${s.as_of ? new Date(s.as_of).toLocaleTimeString() : "?"})` : "";
  return el("tr", { "data-session": s.session_id, ...(s.unavailable ? { title: s.unavailable } : {}) },
    el("td", {}, el("a", { href: `#/s/${encodeURIComponent(s.session_id)}`, text: s.session_id })),
    el("td", {}, el("span", { class: `badge ${s.status}`, text: s.status })),
    el("td", { text: s.agent || "default" }),
    el("td", { text: `${s.steps}${asOf}` }),
    el("td", { text: (s.usage ? tokens(s.usage).toLocaleString() : String(s.tokens ?? "–")) + asOf }),
    el("td", { text: cost(s.cost_usd) }),
    el("td", { text: s.temporal_actions == null ? "–" : s.temporal_actions.toLocaleString() }),
    el("td", { text: String(s.pending_approvals.length) }),
    el("td", { text: new Date(s.started_at).toLocaleString() }));
}

function loadMore() {
  listPages += 1;
  refreshList();
}

function filterChanged() {
  listPages = 1;
  refreshList();
}

async function startSession(event) {
  event.preventDefault();
  const body = { goal: $("#goal").value, chat: $("#chat").checked };
  if ($("#agent").value) body.agent = $("#agent").value;
  $("#start").disabled = true;
  try {
    const started = await api("/v1/sessions", { method: "POST", body });
    $("#goal").value = "";
    $("#start-error").textContent = "";
    location.hash = `#/s/${encodeURIComponent(started.session_id)}`;
  } catch (error) {
    $("#start-error").textContent = error.message;
  } finally {
    $("#start").disabled = false;
  }
}

// ---- one session ---------------------------------------------------------------------

function openSession(id) {
  closeSession();
  current = { id, lastId: -1, source: null, ended: false, retry: 1000, pendingKey: "", limitKey: "",
    refreshing: null, delivered: {}, unmatched: null, modeChosen: false };
  $("#session-title").textContent = id;
  $("#conversation").replaceChildren();
  $("#approvals").replaceChildren();
  $("#limit").replaceChildren();
  $("#final").replaceChildren();
  $("#message-error").textContent = "";
  $("#session-error").textContent = "";
  if (me) $("#temporal-link").href = `${me.temporal_ui_url}/namespaces/${encodeURIComponent(me.namespace)}/workflows/${encodeURIComponent(id)}`;
  showGoal(current);
  refreshStatus();
  connect(current);
}

function closeSession() {
  if (current && current.source) current.source.close();
  current = null;
}

async function showGoal(view) {
  try {
    const history = await api(`/v1/sessions/${encodeURIComponent(view.id)}/history`);
    const goal = history.messages[0].content.map((b) => b.text || "").join("");
    if (view === current) $("#conversation").prepend(userMessage(goal, "goal"));
    takeTurnActions(view, history.trace);
  } catch (error) { /* the status refresh reports what went wrong */ }
}

// Each step's billable actions come from the trace (a history query): read when the page
// opens a session and once more when it ends, not on every event, as each query is billed.
function takeTurnActions(view, trace) {
  if (view !== current) return;
  view.turnActions = Object.fromEntries(trace.map((turn) => [turn.step, turn.temporal_actions]));
  for (const step of Object.keys(view.turnActions)) labelTurnActions(view, Number(step));
}

function labelTurnActions(view, step) {
  const block = document.getElementById(`turn-${step}`);
  const actions = (view.turnActions || {})[step];
  if (!block || actions == null) return;
  let label = block.querySelector(".turn-actions");
  if (!label) {
    label = el("span", { class: "turn-actions muted" });
    block.querySelector(".who").after(label);
  }
  label.textContent = `${actions.toLocaleString()} Temporal actions`;
}

// EventSource resumes by itself with Last-Event-ID; when the server is gone long enough
// for it to give up, a new one resumes with ?after=. Ids already shown are skipped. Text
// deltas have no id (they are read live, not from the stream): the first one of a call
// after each (re)connection is the text so far, which replaces what the page had.
function connect(view) {
  if (view !== current || view.ended) return;
  const source = new EventSource(`/v1/sessions/${encodeURIComponent(view.id)}/events?after=${view.lastId}`);
  view.source = source;
  source.onopen = () => { view.retry = 1000; view.connection = (view.connection || 0) + 1; $("#connection").textContent = "live"; };
  source.onerror = () => {
    if (view.ended) return;
    $("#connection").textContent = "reconnecting…";
    if (source.readyState === EventSource.CLOSED) {
      // Closed for good (the server was away, or said 204): go on unless the session is over.
      setTimeout(() => nothingMore(view).then((over) => {
        if (over) { view.ended = true; $("#connection").textContent = ""; refreshStatus(); } else connect(view);
      }), view.retry);
      view.retry = Math.min(view.retry * 2, 10000);
    }
  };
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (message) => {
      if (view !== current) return;
      if (type === "delta" || type === "thinking_delta") return show(view, type, JSON.parse(message.data));
      const id = Number(message.lastEventId);
      if (id <= view.lastId) return;
      view.lastId = id;
      show(view, type, JSON.parse(message.data));
    });
  }
}

// The server answers 204 when nothing can follow this offset (a session that ended without an
// `end` event, e.g. terminated): then stop instead of reconnecting forever.
async function nothingMore(view) {
  const abort = new AbortController();
  try {
    const response = await fetch(`/v1/sessions/${encodeURIComponent(view.id)}/events?after=${view.lastId}`,
      { credentials: "same-origin", signal: abort.signal });
    return response.status === 204;
  } catch (error) {
    return false;
  } finally {
    abort.abort();
  }
}

function show(view, type, event) {
  const handlers = {
    delta: () => streamText(view, event.step, event.attempt, event.text, ".text"),
    thinking_delta: () => streamText(view, event.step, event.attempt, event.text, ".thinking"),
    turn: () => finishTurn(event),
    tool_call: () => toolCall(event),
    tool_result: () => toolResult(event),
    approval: () => { markCall(event.tool_use_id, "waiting_approval", "waiting for approval"); refreshStatus(); },
    decision: () => decision(event),
    sleeping: () => { note(`sleeping until ${when(event.until)}${event.reason ? `: ${event.reason}` : ""}`); refreshStatus(); },
    waiting_event: () => { note(`waiting for the event ${event.name} until ${when(event.until)}`); refreshStatus(); },
    event_received: () => note(`event ${event.name} received`),
    user_message: () => $("#conversation").append(userMessage(event.text, `message ${event.turn}`)),
    message_delivered: () => delivered(view, event),
    limit_reached: () => {
      note(`${event.name} reached: ${number(event.name, event.used)} used of ${number(event.name, event.limit)}; waiting for a raise or a decline`);
      refreshStatus();
    },
    limit_raised: () => {
      note(`${event.name} raised to ${number(event.name, event.value)}${event.decided_by ? ` by ${event.decided_by}` : ""}`);
      refreshStatus();
    },
    answered: () => refreshStatus(),
    continued: () => $("#conversation").append(el("p", { class: "muted", text: `continued as new (run ${event.run})` })),
    status: () => refreshStatus(),
    end: () => ended(view, event),
  };
  (handlers[type] || (() => {}))();
}

function note(text) {
  $("#conversation").append(el("p", { class: "muted wait", text }));
}

function when(iso) {
  return new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function userMessage(text, who) {
  return el("div", { class: "message user" }, el("div", { class: "who", text: who }), el("div", { class: "text", text }));
}

const number = (name, value) => name === "cost_budget" ? `$${Number(value).toFixed(4)}` : Number(value).toLocaleString();

// A steer or an interrupt the page sends: shown at once, and marked when the model gets it
// (`message_delivered`). Its id comes with the send's answer while it is pending; one the
// model got before that answer takes the id of the next delivery (`view.unmatched`).
function sentMessage(text, mode) {
  const block = userMessage(text, "");
  block.classList.add("sent");
  block.dataset.mode = mode;
  labelSent(block, null, null);
  return block;
}

function labelSent(block, id, step) {
  const got = step != null ? `the model got it at step ${step}` : id != null ? "waiting for the model" : "sending…";
  block.querySelector(".who").textContent = `${id != null ? `message ${id}` : "your message"} · ${block.dataset.mode} · ${got}`;
}

function delivered(view, event) {
  view.delivered[event.id] = event.step;
  let block = document.getElementById(`message-${event.id}`);
  if (!block && view.unmatched) {
    block = view.unmatched;
    view.unmatched = null;
    block.id = `message-${event.id}`;
  }
  if (!block) {
    note(`message ${event.id} went to the model at step ${event.step}`);
  } else {
    labelSent(block, event.id, event.step);
    const turn = document.getElementById(`turn-${event.step}`);
    if (turn && !turn.dataset.done) {
      // An interrupt cut this step's call short: its text is gone, and the step starts again after the message.
      turn.querySelector(".text").textContent = "";
      turn.querySelector(".thinking").textContent = "";
      delete turn.dataset.attempt;
      turn.before(block);
    }
  }
  refreshStatus();
}

function turnBlock(step) {
  let block = document.getElementById(`turn-${step}`);
  if (!block) {
    block = el("div", { class: "message model", id: `turn-${step}` },
      el("div", { class: "who", text: `step ${step}` }), el("div", { class: "thinking", hidden: "" }),
      el("div", { class: "text" }), el("div", { class: "tools" }));
    $("#conversation").append(block);
  }
  return block;
}

// The model's text, or its thinking (shown dimmed above the text, as it came: the recorded
// turn keeps the text only), while the call runs.
function streamText(view, step, attempt, text, part) {
  const block = turnBlock(step);
  if (block.dataset.done) return; // the turn has the whole text
  const connection = String(view.connection || 0);
  // A retried attempt replaces the partial text and thinking; so does a call's first delta
  // on a new connection (the thinking so far, then the text so far, follow it).
  if (block.dataset.attempt !== String(attempt) || block.dataset.connection !== connection) {
    block.dataset.attempt = String(attempt);
    block.dataset.connection = connection;
    block.querySelector(".text").textContent = "";
    block.querySelector(".thinking").textContent = "";
  }
  const target = block.querySelector(part);
  target.hidden = false;
  target.textContent += text;
}

function finishTurn(event) {
  const block = turnBlock(event.step);
  block.dataset.done = "1";
  block.querySelector(".text").textContent = event.text;
  block.querySelector(".who").textContent = `step ${event.step} · ${event.stop_reason || ""} · ${tokens(event.usage).toLocaleString()} tokens`;
  if (current) labelTurnActions(current, event.step);
}

function toolCall(event) {
  const blocks = document.querySelectorAll("#conversation .message.model");
  const block = blocks.length ? blocks[blocks.length - 1] : turnBlock(0);
  const card = el("div", { class: "tool running", id: `call-${event.tool_use_id}` },
    el("strong", { text: event.name }), " ", el("span", { class: "call-status muted", text: "running" }),
    el("pre", { class: "input", text: JSON.stringify(event.input, null, 2) }), el("pre", { class: "output", hidden: "" }));
  block.querySelector(".tools").append(card);
}

function markCall(toolUseId, status, label) {
  const card = document.getElementById(`call-${toolUseId}`);
  if (!card) return null;
  card.className = `tool ${status}`;
  card.querySelector(".call-status").textContent = label;
  return card;
}

function toolResult(event) {
  const card = markCall(event.tool_use_id, event.status, `${event.status} ${ms(event.duration_ms)}`);
  if (!card) return;
  const output = card.querySelector(".output");
  output.hidden = event.output == null;
  output.textContent = event.output || "";
}

function decision(event) {
  const who = event.decided_by ? ` by ${event.decided_by}` : "";
  const label = event.approved ? `approved${who}${event.input ? " (edited)" : ""}` : `denied${who}: ${event.reason || ""}`;
  const card = markCall(event.tool_use_id, event.approved ? "running" : "denied", label);
  if (card && event.input) card.querySelector(".input").textContent = JSON.stringify(event.input, null, 2);
  refreshStatus();
}

function ended(view, event) {
  view.ended = true;
  if (view.source) view.source.close();
  $("#connection").textContent = "";
  const text = `${event.status}${event.stop_reason ? ` (${event.stop_reason})` : ""}${event.error ? `: ${event.error}` : ""}`;
  $("#final").replaceChildren(el("div", { class: `final ${event.status}`, id: "final-status" },
    el("strong", { text }), el("div", { class: "text", text: event.answer || "" })));
  refreshStatus();
  api(`/v1/sessions/${encodeURIComponent(view.id)}/history`)
    .then((history) => takeTurnActions(view, history.trace))
    .catch(() => { /* the totals still show the session's actions */ });
}

// The status gives the totals, the pending approvals and which actions make sense.
function refreshStatus() {
  const view = current;
  if (!view || view.refreshing) { if (view) view.again = true; return; }
  view.refreshing = api(`/v1/sessions/${encodeURIComponent(view.id)}`)
    .then((status) => { if (view === current) renderStatus(view, status); })
    .catch((error) => { if (view === current) $("#session-error").textContent = error.message; })
    .finally(() => {
      view.refreshing = null;
      if (view.again) { view.again = false; refreshStatus(); }
    });
}

function renderStatus(view, status) {
  // Answers can arrive out of order (an action's answer after the end's refresh): keep the newest.
  const at = Date.parse(status.updated_at);
  if (view.updatedAt && at < view.updatedAt) return;
  view.updatedAt = at;
  const badge = $("#session-status");
  badge.textContent = status.status;
  badge.className = `badge ${status.status}`;
  const waits = (status.wake_at ? `sleeping until ${when(status.wake_at)} · ` : "") +
    (status.waiting_for ? `waiting for the event ${status.waiting_for.name} until ${when(status.waiting_for.until)} · ` : "");
  $("#totals").textContent = `${waits}${status.steps} steps · ${tokens(status.usage).toLocaleString()} tokens ` +
    `(in ${status.usage.input_tokens} · out ${status.usage.output_tokens}) · ${cost(status.cost_usd)} · ` +
    `${(status.worked_seconds || 0).toFixed(1)} s worked · ${status.temporal_actions.toLocaleString()} Temporal actions`;
  const over = FINAL.includes(status.status);
  $("#pause").disabled = over || status.status === "paused";
  $("#resume").disabled = status.status !== "paused";
  $("#cancel").disabled = over;
  $("#message-form").hidden = over;
  $("#close-chat").hidden = !status.chat;
  // A chat queues by default, another session steers; queue needs a chat.
  $("#message-mode option[value=queue]").disabled = !status.chat;
  if (!view.modeChosen) $("#message-mode").value = status.chat ? "queue" : "steer";
  renderApprovals(view, over ? [] : status.pending_approvals);
  renderLimit(view, over || status.status !== "waiting_budget" ? null : status.limit_reached);
}

// The limit a session waits at (on_limit "ask"): raise it, or decline.
function renderLimit(view, reached) {
  const key = reached ? `${reached.name}@${reached.at}` : "";
  if (key === view.limitKey) return; // keep what the person is typing
  view.limitKey = key;
  $("#limit").replaceChildren(...(reached ? [limitBanner(view, reached)] : []));
}

function limitBanner(view, reached) {
  const money = reached.name === "cost_budget";
  const value = el("input", { type: "number", class: "value", min: "0", step: money ? "0.01" : "1",
    "aria-label": `new ${reached.name}` });
  const doubled = Math.max(reached.limit * 2, reached.used + (money ? 0.01 : 1));
  value.value = money ? doubled.toFixed(2) : String(Math.ceil(doubled));
  const reason = el("input", { class: "reason", placeholder: "reason (for a decline)" });
  const error = el("p", { class: "error", role: "alert" });
  const raise = el("button", { type: "button", class: "raise", text: "Raise" });
  const decline = el("button", { type: "button", class: "decline danger", text: "Decline" });
  raise.onclick = () => decide(view, "limits", { name: reached.name, value: Number(value.value) }, error);
  decline.onclick = () => decide(view, "limits", { decline: true, reason: reason.value || null }, error);
  const deadline = reached.deadline ? ` · it stops at ${when(reached.deadline)} without an answer` : "";
  return el("div", { class: "approval limit", "data-limit": reached.name },
    el("h3", { text: `Limit reached: ${reached.name}` }),
    el("p", { class: "used", text: `${number(reached.name, reached.used)} used of ${number(reached.name, reached.limit)}${deadline}` }),
    el("label", { text: "New limit (above what is used)" }), value,
    el("div", { class: "row" }, raise, reason, decline), error);
}

function renderApprovals(view, pending) {
  const key = pending.map((p) => p.tool_use_id).join(",");
  if (key === view.pendingKey) return; // keep what the person is typing
  view.pendingKey = key;
  $("#approvals").replaceChildren(...pending.map((p) => approvalBanner(view, p)));
}

function approvalBanner(view, pending) {
  const input = el("textarea", { class: "json", rows: "6", "aria-label": "tool input (JSON)" });
  input.value = JSON.stringify(pending.input, null, 2);
  const reason = el("input", { class: "reason", placeholder: "reason (for a denial)" });
  const error = el("p", { class: "error", role: "alert" });
  const approve = el("button", { type: "button", class: "approve", text: "Approve" });
  const deny = el("button", { type: "button", class: "deny danger", text: "Deny" });
  approve.onclick = () => {
    let edited;
    try { edited = JSON.parse(input.value); } catch (e) { error.textContent = `Not valid JSON: ${e.message}`; return; }
    const body = { tool_use_id: pending.tool_use_id };
    if (JSON.stringify(edited) !== JSON.stringify(pending.input)) body.input = edited;
    decide(view, "approve", body, error);
  };
  deny.onclick = () => decide(view, "deny", { tool_use_id: pending.tool_use_id, reason: reason.value || null }, error);
  return el("div", { class: "approval", "data-tool-use-id": pending.tool_use_id },
    el("h3", { text: `Approval needed: ${pending.name}` }),
    el("label", { text: "Input (edit before approving if needed)" }), input,
    el("div", { class: "row" }, approve, reason, deny), error);
}

async function decide(view, action, body, errorNode) {
  try {
    const status = await api(`/v1/sessions/${encodeURIComponent(view.id)}/${action}`, { method: "POST", body });
    errorNode.textContent = "";
    if (view === current) { view.pendingKey = null; view.limitKey = null; renderStatus(view, status); }
  } catch (error) {
    errorNode.textContent = error.message;
  }
}

async function control(action, body) {
  const view = current;
  try {
    const status = await api(`/v1/sessions/${encodeURIComponent(view.id)}/${action}`, { method: "POST", body });
    $("#session-error").textContent = "";
    if (view === current) renderStatus(view, status);
  } catch (error) {
    $("#session-error").textContent = error.message;
  }
}

async function sendMessage(event) {
  event.preventDefault();
  const view = current;
  const text = $("#message").value;
  const mode = $("#message-mode").value;
  if (!view || !text.trim()) return;
  $("#send").disabled = true;
  // A queued message shows when the chat takes it (`user_message`); a steer or an interrupt, now.
  const block = mode === "queue" ? null : sentMessage(text, mode);
  if (block) { $("#conversation").append(block); view.unmatched = block; }
  try {
    const status = await api(`/v1/sessions/${encodeURIComponent(view.id)}/messages`,
      { method: "POST", body: { text, mode } });
    $("#message").value = "";
    $("#message-error").textContent = "";
    if (view !== current || !block || view.unmatched !== block) return renderStatus(view, status);
    const mine = status.pending_messages.filter((m) => m.mode === mode).map((m) => m.id);
    if (mine.length) { // still pending: its id is the newest of its mode
      const id = Math.max(...mine);
      block.id = `message-${id}`;
      view.unmatched = null;
      labelSent(block, id, view.delivered[id]);
    }
    renderStatus(view, status);
  } catch (error) {
    if (block) { block.remove(); if (view.unmatched === block) view.unmatched = null; }
    $("#message-error").textContent = error.message;
  } finally {
    $("#send").disabled = false;
  }
}

// ---- memories ------------------------------------------------------------------------

async function showMemories(event) {
  if (event) event.preventDefault();
  const agent = $("#memory-agent").value.trim();
  const scope = agent ? `?agent=${encodeURIComponent(agent)}` : "";
  try {
    const found = await api(`/v1/memory${scope}`);
    renderMemories(found, scope);
    $("#memory-error").textContent = "";
  } catch (error) {
    $("#memory-error").textContent = error.message;
  }
}

function renderMemories(found, scope) {
  $("#memory-empty").hidden = found.memories.length > 0;
  $("#memories").replaceChildren(...found.memories.map((m) => {
    const forget = el("button", { type: "button", class: "forget danger", text: "Forget" });
    forget.onclick = async () => {
      try {
        renderMemories(await api(`/v1/memory/${encodeURIComponent(m.key)}${scope}`, { method: "DELETE" }), scope);
        $("#memory-error").textContent = "";
      } catch (error) {
        $("#memory-error").textContent = error.message;
      }
    };
    return el("div", { class: "memory card", "data-key": m.key },
      el("div", { class: "row" }, el("strong", { text: m.key }),
        el("span", { class: "muted", text: `${new Date(m.at).toLocaleString()}${m.session_id ? ` · from ${m.session_id}` : ""}` }),
        forget),
      el("div", { class: "text", text: m.text }));
  }));
}

// ---- routing -------------------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/s\/(.+)$/);
  const memory = location.hash === "#/memory";
  clearInterval(listTimer);
  $("#list-view").hidden = Boolean(match) || memory;
  $("#session-view").hidden = !match;
  $("#memory-view").hidden = !memory;
  if (match) {
    openSession(decodeURIComponent(match[1]));
  } else if (memory) {
    closeSession();
    showMemories();
  } else {
    closeSession();
    refreshList();
    listTimer = setInterval(refreshList, 3000);
  }
}

// The agents this user may start, as a list; the definitions' default chosen. Without a
// default, the first choice is a start without an agent, which has no tools.
async function listAgents() {
  const select = $("#agent");
  try {
    const { agents } = await api("/v1/agents");
    const choices = agents.some((a) => a.default) ? [] : [el("option", { value: "", text: "none (no tools)" })];
    for (const a of agents) {
      const option = el("option", { value: a.name, text: a.name, title: a.description });
      option.selected = a.default;
      choices.push(option);
    }
    select.replaceChildren(...choices);
  } catch (error) {
    $("#start-error").textContent = error.message;
  }
}

async function init() {
  try {
    me = await api("/v1/me");
    $("#me").textContent = `${me.user}${me.operator ? " (operator)" : ""}`;
  } catch (error) {
    $("#me").textContent = error.message;
  }
  listAgents();
  $("#start-form").addEventListener("submit", startSession);
  $("#status-filter").addEventListener("change", filterChanged);
  $("#more").addEventListener("click", loadMore);
  $("#pause").onclick = () => control("pause");
  $("#resume").onclick = () => control("resume");
  $("#cancel").onclick = () => {
    const reason = prompt("Cancel this session? Reason (optional):");
    if (reason !== null) control("cancel", { reason: reason || null });
  };
  $("#message-form").addEventListener("submit", sendMessage);
  $("#message-mode").addEventListener("change", () => { if (current) current.modeChosen = true; });
  $("#memory-form").addEventListener("submit", showMemories);
  $("#close-chat").onclick = () => control("close");
  window.addEventListener("hashchange", route);
  route();
}

init();
