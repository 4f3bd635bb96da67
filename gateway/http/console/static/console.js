// The Waystation console: polls the admin API (/admin/api/v1) with the operator's login.
// Every value from the node is put in the page as text (never as HTML).
"use strict";

const API = "/admin/api/v1";
const POLL_MS = 2000;
const QUEUE_PAGE = 1000; // the API's largest page
const state = { auth: null, tab: "overview", browsing: null, last: null, timer: null };
const $ = (id) => document.getElementById(id);

function say(text, ok) {
  $("status").textContent = text || "";
  $("status").className = ok ? "ok" : "";
}

// A change is always sent as JSON (an empty object when there is nothing to say): the API
// refuses any other body, which is what keeps other sites' forms out (docs/security.md).
async function api(method, path, body) {
  const headers = {};
  if (state.auth) headers.Authorization = "Basic " + state.auth;
  if (method !== "GET" && body === undefined) body = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(API + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit", cache: "no-store",
  });
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (r.status === 401) {
    showLogin(state.auth ? (data && data.error) || "login refused" : "");
    throw new Error("401");
  }
  if (!r.ok) throw new Error((data && data.error) || r.status + " " + r.statusText);
  return data;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function button(text, onclick, cls) {
  const b = el("button", text, cls);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try { await onclick(); } catch (e) { if (e.message !== "401") say(e.message); }
    finally { b.disabled = false; }
  });
  return b;
}

function row(cells, numeric) {
  const tr = document.createElement("tr");
  cells.forEach((c, i) => {
    const td = el("td", c instanceof Node ? undefined : c, numeric.includes(i) ? "num" : "");
    if (c instanceof Node) td.appendChild(c);
    tr.appendChild(td);
  });
  return tr;
}

function fill(table, rows) {
  const body = $(table).querySelector("tbody");
  body.replaceChildren(...rows);
}

function duration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

// -- views -------------------------------------------------------------------------------
async function overview() {
  const o = await api("GET", "/overview");
  $("node").textContent = o.node;
  $("ov-uptime").textContent = duration(o.uptime);
  $("ov-connections").textContent = o.connections;
  $("ov-queues").textContent = o.queues;
  $("ov-messages").textContent = o.messages;
  $("ov-bridges").textContent = o.bridges;
  const prev = state.last;
  if (prev) {
    const dt = Math.max(o.time - prev.time, 0.001);
    $("ov-in-rate").textContent = Math.max(0, (o.enqueued - prev.enqueued) / dt).toFixed(1);
    $("ov-ack-rate").textContent = Math.max(0, (o.acked - prev.acked) / dt).toFixed(1);
  }
  state.last = o;
  $("ov-protocols").textContent = Object.entries(o.by_protocol)
    .map(([p, n]) => `${p}: ${n}`).join("  ·  ");
}

async function queues() {
  const { queues, total } = await api("GET", `/queues?limit=${QUEUE_PAGE}`);
  $("queue-more").textContent = total > queues.length
    ? `first ${queues.length} of ${total} queues (by name) shown` : "";
  queues.sort((a, b) => a.name.localeCompare(b.name));
  fill("queue-table", queues.map((q) => {
    const actions = el("span");
    actions.append(
      button("Browse", () => browse(q.name)),
      button(q.paused ? "Resume" : "Pause",
        () => api("POST", `/queues/${enc(q.name)}/${q.paused ? "resume" : "pause"}`).then(() => refresh())),
    );
    const tr = row([q.name, q.address, q.routing, q.depth, q.in_flight, q.consumers, q.enqueued,
      q.acked, q.paused ? "paused" : "active", actions], [3, 4, 5, 6, 7]);
    tr.dataset.queue = q.name;
    if (q.name === state.browsing) tr.className = "selected";
    return tr;
  }));
}

const enc = encodeURIComponent;

async function browse(name) {
  state.browsing = name;
  $("browser").hidden = false;
  $("browse-name").textContent = name;
  const { messages, depth } = await api("GET", `/queues/${enc(name)}/messages?limit=100`);
  const box = $("messages");
  if (!messages.length) { box.replaceChildren(el("p", "No waiting messages.")); return; }
  box.replaceChildren(...messages.map((m) => message(name, m)),
    ...(depth > messages.length ? [el("p", `first ${messages.length} of ${depth} shown`)] : []));
  for (const tr of $("queue-table").querySelectorAll("tbody tr")) {
    tr.className = tr.dataset.queue === name ? "selected" : "";
  }
}

function message(queue, m) {
  const div = el("div", undefined, "msg");
  div.dataset.id = m.id_text;
  const meta = el("div", `#${m.id_text}  ·  ${m.address}  ·  ${m.size} bytes  ·  priority ${m.priority}`
    + (m.durable ? "  ·  durable" : ""), "meta");
  div.appendChild(meta);
  if (m.dead_letter_reason) {
    div.appendChild(el("div", `dead letter: ${m.dead_letter_reason}`
      + (m.dead_letter_detail ? ` (${m.dead_letter_detail})` : "")
      + (m.original_address ? ` — from ${m.original_address}` : ""), "dl"));
  }
  div.appendChild(el("pre", m.body !== null ? m.body : `(binary) ${m.body_base64}`));
  const props = Object.entries(m.properties);
  if (props.length) {
    div.appendChild(el("div", props.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("  "), "meta"));
  }
  const actions = el("div");
  if (m.original_address) {
    actions.appendChild(button("Retry", async () => {
      const r = await api("POST", `/queues/${enc(queue)}/retry`, { ids: [m.id_text] });
      say(`retried ${r.retried} to ${m.original_address}`, true);
      await refresh();
    }));
  }
  actions.appendChild(button("Move", async () => {
    const target = $("move-target").value.trim();
    if (!target) { say("type the address to move to first"); return; }
    const r = await api("POST", `/queues/${enc(queue)}/move`, { ids: [m.id_text], target });
    say(`moved ${r.moved} to ${target}`, true);
    await refresh();
  }));
  actions.appendChild(button("Delete", async () => {
    await api("DELETE", `/queues/${enc(queue)}/messages/${m.id_text}`);
    say(`deleted message ${m.id_text}`, true);
    await refresh();
  }, "danger"));
  div.appendChild(actions);
  return div;
}

async function connections() {
  const { connections } = await api("GET", "/connections");
  fill("connection-table", connections.map((c) => row([c.id, c.protocol, c.user, c.remote,
    new Date(c.since * 1000).toLocaleTimeString(), c.messages_in, c.messages_out, c.consumers,
    button("Close", async () => {
      await api("DELETE", `/connections/${enc(c.id)}`);
      say(`closed ${c.id}`, true);
      await refresh();
    }, "danger")], [5, 6, 7])));
}

async function bridges() {
  const { bridges } = await api("GET", "/bridges");
  fill("bridge-table", bridges.map((b) => {
    const tr = row([b.name, b.remote_node || b.url || "", b.paused ? "paused" : b.state,
      b.waiting, b.in_flight, b.forwarded, b.last_error || "",
      button(b.paused ? "Resume" : "Pause", () =>
        api("POST", `/bridges/${enc(b.name)}/${b.paused ? "resume" : "pause"}`).then(() => refresh()))],
    [3, 4, 5]);
    tr.dataset.bridge = b.name;
    return tr;
  }));
}

const VIEWS = { overview, queues, connections, bridges };

// The poll leaves the open message list alone: each browse is an audited action, so it is
// read again only after a change made here or on "Refresh".
async function refresh(messagesToo = true) {
  try {
    await overview();
    if (state.tab !== "overview") await VIEWS[state.tab]();
    if (messagesToo && state.tab === "queues" && state.browsing) await browse(state.browsing);
    document.body.dataset.loaded = String(Date.now());
  } catch (e) {
    if (e.message !== "401") say(e.message);
  }
}

// -- login and tabs ------------------------------------------------------------------------
function showLogin(why) {
  state.auth = null;
  sessionStorage.removeItem("waystation-auth");
  clearInterval(state.timer);
  $("login").hidden = false;
  $("tabs").hidden = true;
  for (const s of document.querySelectorAll(".tab")) s.hidden = true;
  say(why || "");
}

function showConsole() {
  $("login").hidden = true;
  $("tabs").hidden = false;
  switchTab(state.tab);
  clearInterval(state.timer);
  state.timer = setInterval(() => refresh(false), POLL_MS);
}

function switchTab(tab) {
  state.tab = tab;
  for (const s of document.querySelectorAll(".tab")) s.hidden = s.id !== tab;
  for (const b of document.querySelectorAll("nav button[data-tab]")) {
    b.className = b.dataset.tab === tab ? "on" : "";
  }
  refresh(false);
}

async function start() {
  $("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const auth = btoa(unescape(encodeURIComponent($("user").value + ":" + $("password").value)));
    state.auth = auth;
    try {
      await api("GET", "/overview");
    } catch (e) {
      if (e.message !== "401") say(e.message);
      return;
    }
    sessionStorage.setItem("waystation-auth", auth);
    say("", true);
    showConsole();
  });
  for (const b of document.querySelectorAll("nav button[data-tab]")) {
    b.addEventListener("click", () => switchTab(b.dataset.tab));
  }
  $("logout").addEventListener("click", () => showLogin("logged out"));
  $("browse-refresh").addEventListener("click", () => state.browsing && browse(state.browsing));
  $("retry-all").addEventListener("click", async () => {
    try {
      const r = await api("POST", `/queues/${enc(state.browsing)}/retry`, {});
      say(`retried ${r.retried}, skipped ${r.skipped}`, true);
      await refresh();
    } catch (e) { if (e.message !== "401") say(e.message); }
  });
  state.auth = sessionStorage.getItem("waystation-auth");
  try {  // with security off (this host only) no login is needed
    await api("GET", "/overview");
    showConsole();
  } catch (e) {
    if (e.message !== "401") showLogin(e.message);
  }
}

document.addEventListener("DOMContentLoaded", start);
