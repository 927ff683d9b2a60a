// aido Mission Control: plain JS, no build step, no dependency. Everything it shows comes from
// this server's /mc/api/ (and /events for the live tail), sent the bearer token as a header.
"use strict";

const TOKEN_KEY = "aido-mc-token";
const state = {
  token: null,
  target: null, // null: this runtime; a number: that peer of [fleet], through /mc/api/fleet/N/
  session: null,
  questionIds: null, // the ids shown, joined (null: nothing shown yet)
  tail: { after: 0, epoch: null, stop: null, lastId: null },
  vms: new Map(), // name -> {figure, img, url}
  live: { name: null, timer: null, url: null },
  timelineDue: false,
};

// --- small helpers -------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
const $ = (id) => document.getElementById(id);
const short = (s, n = 8) => (s || "").slice(0, n);
function clock(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  return d.toISOString().slice(11, 23);
}
function status(text) { $("status").textContent = text; }

function takeToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    // The fragment never reaches a server; take it out of the address bar and history too.
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function showLogin(why) {
  $("main").hidden = true;
  $("login").hidden = false;
  status(why || "a token is needed");
}

const base = () => (state.target === null ? "/mc/api/" : `/mc/api/fleet/${state.target}/`);

async function call(url, opts = {}) {
  const headers = { ...(opts.headers || {}), Authorization: `Bearer ${state.token}` };
  const r = await fetch(url, { ...opts, headers, cache: "no-store" });
  if (r.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("the token was refused");
    throw new Error("unauthorized");
  }
  return r;
}
async function getJson(url, opts) {
  const r = await call(url, opts);
  const v = await r.json();
  if (!r.ok) throw new Error(`${v.code || r.status}: ${v.message || ""}`);
  return v;
}

// --- runtimes ------------------------------------------------------------------------------
async function refreshFleet() {
  const fleet = await getJson("/mc/api/fleet");
  const box = $("runtimes");
  box.replaceChildren();
  for (const rt of fleet.runtimes) {
    const key = rt.self ? null : rt.peer;
    const card = el("div", {
      class: `card${key === state.target ? " selected" : ""}${rt.ok ? "" : " down"}`,
      "data-testid": "runtime-card",
      "data-instance": rt.instance || "",
      "data-ok": rt.ok ? "true" : "false",
      onclick: () => select(key),
    },
      el("div", { class: "title" }, rt.self ? "this runtime" : `peer ${rt.peer}`, " ",
        el("code", { "data-testid": "instance" }, rt.instance || "(no instance id)")),
      el("div", { class: "meta" }, rt.reached_at || rt.url || ""),
      rt.ok
        ? el("div", { class: "meta" },
          `aido ${rt.version} · ${rt.sessions ?? "?"} sessions · ${(rt.machines || []).length} machines · ${rt.questions ?? 0} waiting`)
        : el("div", { class: "meta deny" }, `${rt.code}: ${rt.message}`));
    box.append(card);
  }
  $("fleet-problems").textContent = (fleet.problems || []).map((p) => `${p.code}: ${p.message}`).join("; ");
  const me = fleet.runtimes[0];
  status(`this runtime ${short(me.instance, 12) || ""} · ${fleet.runtimes.length} runtime(s) · watching ${state.target === null ? "this runtime" : `peer ${state.target}`}`);
}

function select(key) {
  if (key === state.target) return;
  state.target = key;
  state.session = null;
  state.questionIds = null;
  $("question-list").replaceChildren();
  $("session-list").replaceChildren();
  $("timeline").hidden = true;
  for (const [, vm] of state.vms) { vm.figure.remove(); if (vm.url) URL.revokeObjectURL(vm.url); }
  state.vms.clear();
  $("tail-list").replaceChildren();
  startTail();
  refreshAll();
}

// --- questions -----------------------------------------------------------------------------
async function answer(id, body, box) {
  const note = box.querySelector(".result");
  try {
    body = { ...body, who: "mission_control" };
    const r = await call(`${base()}questions/${encodeURIComponent(id)}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const v = await r.json();
    if (!r.ok) { note.textContent = `${v.code}: ${v.message}`; note.className = "result deny"; return; }
    note.textContent = v.question.state === "accept" ? "answered: the agent has it" : "declined";
    note.className = "result allow";
    box.dataset.answered = "true";
    setTimeout(refreshQuestions, 800);
  } catch (e) { note.textContent = String(e); }
}

function questionCard(q) {
  const box = el("div", { class: "question", "data-testid": "question", "data-id": q.id });
  const kind = q.question.kind;
  box.append(
    el("div", { class: "q" }, q.question.question),
    el("div", { class: "meta" }, `${q.id} · session ${short(q.session, 12)} · seq ${q.seq} · asked ${clock(q.asked_ms)}`));
  const form = el("form", { onsubmit: (e) => e.preventDefault() });
  if (kind === "text") {
    const input = el("input", { type: "text", name: "answer", "data-testid": "answer-text", placeholder: "your answer" });
    form.append(input, " ", el("button", { type: "submit", "data-testid": "answer-send",
      onclick: () => answer(q.id, { answer: input.value }, box) }, "Answer"));
  } else if (kind === "confirm") {
    form.append(
      el("button", { type: "button", "data-testid": "answer-yes", onclick: () => answer(q.id, { approve: true }, box) }, "Yes"), " ",
      el("button", { type: "button", "data-testid": "answer-no", onclick: () => answer(q.id, { approve: false }, box) }, "No"));
  } else if (kind === "choice") {
    const choices = q.question.choices || [];
    if (q.question.multiple) {
      const boxes = choices.map((c) => el("input", { type: "checkbox", value: c }));
      form.append(...choices.map((c, i) => el("label", {}, boxes[i], c, " ")),
        el("button", { type: "button", "data-testid": "answer-send",
          onclick: () => answer(q.id, { choices: boxes.filter((b) => b.checked).map((b) => b.value) }, box) }, "Answer"));
    } else {
      form.append(...choices.map((c) => [el("button", { type: "button", "data-choice": c,
        onclick: () => answer(q.id, { choice: c }, box) }, c), " "]));
    }
  }
  form.append(" ", el("button", { type: "button", "data-testid": "answer-decline",
    onclick: () => answer(q.id, { decline: true }, box) }, "Decline"));
  box.append(form, el("div", { class: "result" }));
  return box;
}

async function refreshQuestions() {
  let list = [];
  try { list = (await getJson(`${base()}questions`)).questions; } catch (e) {
    $("question-count").textContent = String(e.message || e);
    return;
  }
  $("question-count").textContent = list.length ? `(${list.length})` : "(none)";
  const ids = list.map((q) => q.id).join(",");
  if (ids === state.questionIds) return; // keep what a person is typing
  state.questionIds = ids;
  $("question-list").replaceChildren(...list.map(questionCard));
}

// --- machines ------------------------------------------------------------------------------
async function screenUrl(name, width) {
  const q = width ? `?width=${width}` : "";
  const r = await call(`${base()}vms/${encodeURIComponent(name)}/screen.png${q}`);
  if (!r.ok) throw new Error(`screen of ${name}: ${r.status}`);
  return URL.createObjectURL(await r.blob());
}

async function refreshMachines() {
  let v;
  try { v = await getJson(`${base()}vms`); } catch (e) {
    $("vm-none").textContent = String(e.message || e);
    $("vm-none").hidden = false;
    return;
  }
  const pool = v.pool;
  $("pool").textContent = pool ? `(warm pool: ${pool.warm} of ${pool.size} warm, ${pool.acquired} handed out)` : "(warm pool not opened)";
  $("vm-none").textContent = "No machine is running.";
  $("vm-none").hidden = v.machines.length > 0;
  for (const [name, vm] of state.vms) {
    if (!v.machines.includes(name)) { vm.figure.remove(); if (vm.url) URL.revokeObjectURL(vm.url); state.vms.delete(name); }
  }
  for (const name of v.machines) {
    let vm = state.vms.get(name);
    if (!vm) {
      const img = el("img", { alt: `${name}'s screen`, "data-testid": "thumbnail", "data-vm": name });
      const figure = el("figure", { onclick: () => openLive(name) }, img, el("figcaption", {}, name));
      $("vm-grid").append(figure);
      vm = { figure, img, url: null };
      state.vms.set(name, vm);
    }
    try {
      const url = await screenUrl(name, 320);
      await new Promise((ok) => { vm.img.onload = vm.img.onerror = ok; vm.img.src = url; });
      if (vm.url) URL.revokeObjectURL(vm.url);
      vm.url = url;
    } catch (e) { vm.figure.querySelector("figcaption").textContent = `${name}: ${e.message}`; }
  }
}

// --- browsers and downstream servers ----------------------------------------------------------
async function refreshBrowsers() {
  let v;
  try { v = await getJson(`${base()}browsers`); } catch (e) {
    $("browser-none").textContent = String(e.message || e);
    $("browser-none").hidden = false;
    return;
  }
  $("browser-none").textContent = "No browser is open.";
  $("browser-none").hidden = v.browsers.length > 0;
  const figures = [];
  for (const b of v.browsers) {
    const current = (b.tabs || []).find((t) => t.current) || {};
    const caption = `${b.session.slice(0, 8)} · ${current.title || ""} ${current.url || (b.busy ? "(busy)" : "")}`;
    const img = el("img", { alt: `browser of session ${b.session}`, "data-testid": "browser-thumbnail", "data-session": b.session });
    figures.push(el("figure", {}, img, el("figcaption", {}, caption)));
    if (!b.busy) {
      call(`${base()}browsers/${encodeURIComponent(b.session)}/screen.png?width=320`)
        .then((r) => (r.ok ? r.blob() : null))
        .then((blob) => { if (blob) img.src = URL.createObjectURL(blob); })
        .catch(() => {});
    }
  }
  $("browser-grid").replaceChildren(...figures);
}

async function refreshDownstreams() {
  let v;
  try { v = await getJson(`${base()}downstreams`); } catch (e) {
    $("downstream-none").textContent = String(e.message || e);
    $("downstream-none").hidden = false;
    return;
  }
  $("downstream-none").hidden = v.servers.length > 0;
  $("downstream-list").replaceChildren(...v.servers.map((s) =>
    el("li", { "data-server": s.name }, `${s.name}: ${s.running ? "running" : "stopped"}, pid ${s.pid ?? "-"}, ${s.tools} tools`)));
}

function openLive(name) {
  state.live.name = name;
  $("live-name").textContent = name;
  $("live-note").textContent = "live, refreshed twice a second";
  $("live").showModal();
  const tick = async () => {
    if (state.live.name !== name) return;
    try {
      const url = await screenUrl(name, null);
      await new Promise((ok) => { const img = $("live-img"); img.onload = img.onerror = ok; img.src = url; });
      if (state.live.url) URL.revokeObjectURL(state.live.url);
      state.live.url = url;
    } catch (e) { $("live-note").textContent = String(e.message || e); }
    state.live.timer = setTimeout(tick, 500);
  };
  tick();
}
function closeLive() {
  state.live.name = null;
  clearTimeout(state.live.timer);
  $("live").close();
}

// --- sessions and timelines ----------------------------------------------------------------
async function refreshSessions() {
  const v = await getJson(`${base()}sessions`);
  const rows = v.sessions.map((s) => el("tr", {
    class: `session${s.id === state.session ? " selected" : ""}`, "data-testid": "session", "data-id": s.id,
    onclick: () => { state.session = s.id; refreshTimeline(); refreshSessions(); },
  },
    el("td", {}, el("code", {}, short(s.id, 12)), s.runtime ? " (runtime)" : ""),
    el("td", {}, s.client || ""),
    el("td", {}, String(s.records)),
    el("td", {}, `${s.ended ? "ended" : s.last || ""} ${clock(s.last_ms)}`)));
  $("session-list").replaceChildren(...rows);
}

function verdictCell(r) {
  if (!r.verdict) return el("td", {});
  return el("td", { class: r.verdict, title: r.why || "" }, r.verdict);
}

async function refreshTimeline() {
  if (!state.session) return;
  const v = await getJson(`${base()}sessions/${state.session}`);
  $("timeline").hidden = false;
  $("timeline-id").textContent = state.session;
  $("timeline-meta").textContent = `${v.records} records${v.branches ? `, ${v.branches} branch(es) abandoned by rewinds` : ""}${v.shown_from > 1 ? `, from #${v.shown_from}` : ""}`;
  const rows = v.rows.map((r) => {
    const done = r.done || {};
    const what = r.primitive ? [el("strong", {}, r.primitive), " ", el("span", { class: "mono count" }, r.arguments || "")] : [r.text || r.kind];
    if (r.answered_by) what.push(" ", el("span", { class: "count", "data-testid": "answered-by" }, `answered by ${r.answered_by}`));
    const result = r.done ? el("td", { class: done.status, title: done.text || "" }, done.status, done.code ? ` ${done.code}` : "") : el("td", { class: r.code ? "failed" : "" }, r.code || "");
    return el("tr", {
      class: `${r.abandoned_by_branch ? "abandoned" : ""} ${r.kind === "rewound" ? "rewound" : ""}`,
      "data-testid": "timeline-row", "data-seq": r.seq, "data-primitive": r.primitive || "",
      title: r.abandoned_by_branch ? `abandoned by the rewind that started branch ${r.abandoned_by_branch}` : "",
    },
      el("td", {}, `#${r.seq}${done.seq ? `–${done.seq}` : ""}`),
      el("td", {}, clock(r.time_ms)),
      el("td", {}, ...what),
      verdictCell(r),
      result,
      el("td", {}, done.duration_ms !== undefined ? `${done.duration_ms} ms` : ""),
      el("td", { class: "mono", title: `hash ${r.hash}\nprev ${r.prev}` }, short(r.hash, 10)));
  });
  $("timeline-rows").replaceChildren(...rows);
}

// --- the live tail -------------------------------------------------------------------------
function tailLine(rec) {
  const what = rec.action ? rec.action.type : rec.tool || rec.event;
  let verdict = "";
  if (rec.verdict) verdict = rec.verdict.verdict || "";
  if (rec.event === "action_completed") verdict = `completed in ${rec.duration_ms} ms`;
  if (rec.event === "action_failed") verdict = `failed ${rec.failure?.code || ""}`;
  const li = el("li", {
    "data-testid": "tail-item", "data-event": rec.event, "data-primitive": rec.action?.type || rec.tool || "",
    "data-session": rec.session, title: rec.hash,
  }, `${clock(rec.time_ms)} ${short(rec.session)} #${rec.seq} ${rec.event} ${what === rec.event ? "" : what} ${verdict}`);
  const list = $("tail-list");
  list.prepend(li);
  while (list.children.length > 300) list.lastChild.remove();
  if (rec.session === state.session && !state.timelineDue) {
    state.timelineDue = true;
    setTimeout(() => { state.timelineDue = false; refreshTimeline().catch(() => {}); }, 300);
  }
}

// /events read with fetch (EventSource cannot send a header), resumed by Last-Event-ID.
async function sseLoop(signal) {
  while (!signal.aborted) {
    try {
      const headers = { Accept: "text/event-stream" };
      if (state.tail.lastId) headers["Last-Event-ID"] = state.tail.lastId;
      const r = await call("/events", { headers, signal });
      if (!r.ok) throw new Error(`/events: ${r.status}`);
      $("tail").dataset.connected = "true";
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let id = null, event = "message", data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("id:")) id = line.slice(3).trim();
            else if (line.startsWith("event:")) event = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
          }
          if (id) state.tail.lastId = id;
          if (event === "record") { try { tailLine(JSON.parse(data)); } catch (_) { /* not a record */ } }
          else if (event === "gap") $("tail-list").prepend(el("li", { class: "confirm" }, "some records were missed (gap)"));
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      $("tail").dataset.connected = "false";
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

// A peer's tail: polled through this server (one stream per page, whatever the fleet).
async function pollLoop(signal, peer) {
  while (!signal.aborted && state.target === peer) {
    try {
      const v = await getJson(`${base()}recent?after=${state.tail.after}`);
      if (state.tail.epoch !== v.epoch) { state.tail.epoch = v.epoch; }
      for (const e of v.entries) { tailLine(e.record); state.tail.after = e.n; }
      $("tail").dataset.connected = "true";
    } catch (_) { $("tail").dataset.connected = "false"; }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

function startTail() {
  if (state.tail.stop) state.tail.stop.abort();
  const stop = new AbortController();
  state.tail = { after: 0, epoch: null, stop, lastId: null };
  if (state.target === null) sseLoop(stop.signal);
  else pollLoop(stop.signal, state.target);
}

// --- the loop ------------------------------------------------------------------------------
async function refreshAll() {
  const parts = [refreshFleet, refreshQuestions, refreshSessions, refreshMachines, refreshBrowsers, refreshDownstreams, refreshTimeline];
  await Promise.all(parts.map((f) => f().catch((e) => { if (String(e).includes("unauthorized")) throw e; console.warn(f.name, e); })));
}

async function start() {
  $("main").hidden = false;
  $("login").hidden = true;
  startTail();
  for (;;) {
    try { await refreshAll(); } catch (e) { if (String(e).includes("unauthorized")) return; }
    await new Promise((ok) => setTimeout(ok, 2000));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("live-close").addEventListener("click", closeLive);
  $("live").addEventListener("close", () => { state.live.name = null; clearTimeout(state.live.timer); });
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const t = $("login-token").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    state.token = t;
    start();
  });
  state.token = takeToken();
  if (state.token) start(); else showLogin();
});
