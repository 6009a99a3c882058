// slotpoller dashboard. Plain JavaScript, no library: it reads the node's
// own API every few seconds (only what the page on screen shows) and acts
// through the same API routes as any client. Charts are hand-written SVG.
"use strict";

const REFRESH_MS = 5000;
const CSRF = document.querySelector('meta[name="slotpoller-csrf"]').content;
const PALETTE = ["#2f5bd3", "#e07b00", "#1f8a4c", "#a23bb5", "#c4312b", "#0a8f8f", "#7a5c1e", "#d1478b", "#5566a8", "#6f9a1a"];
const RETRYABLE = ["dead", "failed", "cancelled", "missed"];
const STATES = ["ready", "retrying", "running", "done", "failed", "dead", "cancelled", "missed"];

// el builds an element: attributes (on* are listeners) and children
// (strings become text, never HTML).
function el(tag, attrs, ...children) {
  const e = document.createElementNS(tag === "svg" || attrs?.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "svg" || v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    // Through the CSSOM: the page's Content-Security-Policy refuses style
    // attributes written as markup.
    else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}
const svg = (tag, attrs, ...children) => el(tag, { ...attrs, svg: true }, ...children);

async function api(path, opts = {}) {
  const init = { credentials: "same-origin", headers: { Accept: "application/json" } };
  if (opts.post) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.headers["X-Slotpoller-Csrf"] = CSRF;
    init.body = JSON.stringify(opts.body || {});
  }
  const res = await fetch(path, init);
  let body = null;
  try { body = await res.json(); } catch (_) { /* not JSON */ }
  if (res.status === 401) { location.href = "/login"; throw new Error("signed out"); }
  if (!res.ok) throw new Error(body?.error?.message || `${res.status} ${res.statusText}`);
  return body;
}

let flashTimer = null;
function flash(msg, isError) {
  const f = document.getElementById("flash");
  f.textContent = msg;
  f.className = "flash" + (isError ? " error" : "");
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => f.classList.add("hidden"), isError ? 8000 : 4000);
}

// act runs an action and refreshes the page; errors show as they are.
async function act(path, body, done) {
  try {
    const r = await api(path, { post: true, body });
    flash(typeof done === "function" ? done(r) : done);
  } catch (e) {
    flash(e.message, true);
  }
  refreshNow();
}

// armedUntil keeps, by key, when an armed confirm button disarms: the
// page redraws its rows every few seconds, and a button armed before a
// redraw must still take the confirming click after it.
const armedUntil = new Map();

// confirmButton needs a second click within 4 s; key names what it acts
// on, across redraws.
function confirmButton(label, cls, attrs, key, onConfirm) {
  const b = el("button", { type: "button", class: cls, ...attrs }, label);
  const show = (on) => { b.textContent = on ? "Click again to confirm" : label; b.classList.toggle("confirm", on); };
  const armed = () => (armedUntil.get(key) || 0) > Date.now();
  const left = (armedUntil.get(key) || 0) - Date.now();
  if (left > 0) {
    show(true);
    setTimeout(() => show(armed()), left);
  }
  b.addEventListener("click", () => {
    if (!armed()) {
      armedUntil.set(key, Date.now() + 4000);
      show(true);
      setTimeout(() => show(armed()), 4000);
      return;
    }
    armedUntil.delete(key);
    b.disabled = true;
    onConfirm();
  });
  return b;
}

const pad = (n) => String(n).padStart(2, "0");
function fmtTime(s) {
  if (!s) return "–";
  const d = new Date(s);
  if (isNaN(d) || d.getUTCFullYear() < 2000) return "–";
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
}
function fmtAgo(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7200000) return `${Math.round(ms / 60000)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}
function fmtMS(ms) {
  const a = Math.abs(ms);
  if (a < 1) return `${ms.toFixed(3)} ms`;
  if (a < 1000) return `${ms.toFixed(1)} ms`;
  return `${(ms / 1000).toFixed(2)} s`;
}
const badge = (text, cls) => el("span", { class: "badge " + (cls || text) }, text);
function jobState(j) { return j.retrying ? "retrying" : j.state; }

// Node colours follow the names, sorted, so every view agrees.
let nodeColours = {};
function colourNodes(names) {
  const sorted = [...new Set(names)].sort();
  nodeColours = {};
  sorted.forEach((n, i) => { nodeColours[n] = PALETTE[i % PALETTE.length]; });
}
const colour = (name) => nodeColours[name] || "#98a0b0";

// ---- pages ----

const pages = {
  farm: { title: "Farm", mount: mountFarm },
  jobs: { title: "Jobs", mount: mountJobs },
  search: { title: "Search", mount: mountSearch },
  job: { title: "Job", mount: mountJob },
  schedules: { title: "Schedules", mount: mountSchedules },
  queues: { title: "Queues", mount: mountQueues },
  tasks: { title: "Tasks", mount: mountTasks },
  throughput: { title: "Throughput", mount: mountThroughput },
  audit: { title: "Audit", mount: mountAudit },
};

let current = null; // { refresh } of the page on screen
let timer = null;

function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "farm";
  const [path, qs] = hash.split("?");
  const parts = path.split("/");
  let name = parts[0];
  const params = new URLSearchParams(qs || "");
  if (name === "jobs" && parts[1]) { name = "job"; params.set("id", parts[1]); }
  if (!pages[name]) name = "farm";
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === (name === "job" ? "jobs" : name)));
  document.title = `${pages[name].title} · slotpoller`;
  const main = document.getElementById("main");
  document.getElementById("flash").classList.add("hidden");
  main.replaceChildren();
  current = pages[name].mount(main, params);
  refreshNow();
}

async function refreshNow() {
  clearTimeout(timer);
  const page = current;
  const live = document.getElementById("live");
  try {
    if (page) await page.refresh();
    live.classList.remove("stale");
    // In UTC like every other time on the pages: the browser's own zone
    // and 12-hour clock beside them misled.
    document.getElementById("updated").textContent = "updated " + fmtTime(new Date()) + " UTC";
  } catch (e) {
    live.classList.add("stale");
    document.getElementById("updated").textContent = e.message;
  }
  // Polling pauses while the tab is hidden: a dashboard left open in the
  // background costs the database nothing.
  if (!document.hidden) timer = setTimeout(refreshNow, REFRESH_MS);
}
document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshNow(); else clearTimeout(timer); });
window.addEventListener("hashchange", route);
document.getElementById("signout").addEventListener("click", async () => {
  await fetch("/logout", { method: "POST", credentials: "same-origin", headers: { "X-Slotpoller-Csrf": CSRF } });
  location.href = "/login";
});

function stat(k, v, s, attrs) {
  return el("div", { class: "stat", ...attrs }, el("div", { class: "k" }, k), el("div", { class: "v" }, v), s ? el("div", { class: "s" }, s) : null);
}

// ---- Farm ----

function mountFarm(main) {
  const stats = el("div", { class: "grid" });
  const rotation = el("div", { class: "card" });
  const nodes = el("div", { class: "card" });
  main.append(el("h1", {}, "Farm"), stats, rotation, nodes);
  return {
    async refresh() {
      const f = await api("/api/v1/farm");
      colourNodes(f.nodes.map((n) => n.name));
      const counts = f.jobs || {};
      const capped = (s) => (counts[s] >= f.jobs_count_cap ? `${f.jobs_count_cap}+` : String(counts[s] || 0));
      stats.replaceChildren(
        stat("Slot now", String(f.slot), `${f.slot_ms} ms per slot`, { id: "slot-now" }),
        stat("Owner", f.owner || "none", f.backlog ? "backlog: rotation widened" : "one poller per slot", { id: "owner" }),
        stat("Live nodes", String(f.live), `${f.nodes.length - f.live} not live`),
        stat("Capacity", `${f.free} / ${f.capacity}`, "free / total calls"),
        stat("Ready", capped("ready"), `${capped("retrying")} retrying, ${capped("running")} running`),
        stat("Dead / failed", `${capped("dead")} / ${capped("failed")}`, `${capped("done")} done`),
        stat("Database", f.driver, f.dsn, { title: "database time " + fmtTime(f.database_time) + " UTC" }),
      );
      // The current slot and the next owners.
      const row = el("div", { class: "owner-row" },
        el("span", { class: "muted" }, "Now and next:"),
        el("span", { class: "slotbox now", style: `border-color:${colour(f.owner)}` }, el("span", { class: "dot", style: `background:${colour(f.owner)}` }), `${f.slot} · ${f.owner || "none"}`),
        (f.next || []).map((s) => el("span", { class: "slotbox" }, el("span", { class: "dot", style: `background:${colour(s.owner)}` }), `${s.slot} · ${s.owner}`)));
      const strip = el("div", { class: "strip", id: "strip" });
      let gaps = 0, many = 0;
      for (const s of f.strip) {
        const cls = ["cell"];
        if (s.pollers.length) cls.push("polled");
        else if (s.before) cls.push("before");
        else if (s.pending) cls.push("pending");
        else gaps++;
        if (s.pollers.length > 1) { cls.push("many"); many++; }
        const title = `slot ${s.slot}: ` + (s.pollers.length ? "polled by " + s.pollers.join(", ") : s.before ? "before the live nodes started" : s.pending ? "not reported yet" : "nobody polled") + ` (owner ${s.owner || "none"})`;
        strip.append(el("div", { class: cls.join(" "), title, "data-slot": s.slot, "data-owner": s.owner || "", "data-pollers": s.pollers.join(" ") },
          s.pollers.map((p) => el("div", { class: "part", style: `background:${colour(p)}` }))));
      }
      rotation.replaceChildren(
        el("h2", {}, "Rotation"), row, strip,
        el("div", { class: "strip-axis" }, el("span", {}, `slot ${f.strip[0]?.slot}`), el("span", {}, "60 slots, oldest left"), el("span", {}, `slot ${f.slot} (now)`)),
        el("div", { class: "legend" },
          f.nodes.filter((n) => n.live).map((n) => el("span", {}, el("span", { class: "sw", style: `background:${colour(n.name)}` }), n.name)),
          el("span", {}, el("span", { class: "sw", style: "border:1px dashed #c4312b" }), `gap (${gaps})`),
          el("span", {}, el("span", { class: "sw", style: "outline:2px solid #b76e00;outline-offset:-2px;background:#fff" }), `more than one poller (${many})`),
          el("span", {}, el("span", { class: "sw", style: "background:#eef0f4;border:1px dashed #98a0b0" }), "not reported yet"),
          el("span", {}, el("span", { class: "sw", style: "background:#e9ebf0" }), "before the live nodes started")));
      const table = el("table", { id: "nodes" },
        el("thead", {}, el("tr", {}, ["Node", "State", "Capacity", "Free", "Offset to DB clock", "± error", "Last seen", "Tasks", "Turns shown"].map((h, i) => el("th", { class: i >= 2 ? "num" : "" }, h)))),
        el("tbody", {}, f.nodes.map((n) => el("tr", { "data-node": n.name },
          el("td", {}, el("span", { class: "dot", style: `background:${colour(n.name)}` }), el("strong", {}, n.name), n.backlog ? " " : null, n.backlog ? badge("backlog", "retrying") : null),
          el("td", {}, badge(n.live ? "live" : n.state === "left" ? "left" : "dead", n.live ? "live" : "left")),
          el("td", { class: "num" }, n.capacity),
          el("td", { class: "num" }, n.live ? n.free : "–"),
          el("td", { class: "num mono" }, (n.offset_ms >= 0 ? "+" : "") + fmtMS(n.offset_ms)),
          el("td", { class: "num mono" }, fmtMS(n.offset_error_ms)),
          el("td", { class: "num" }, fmtAgo(n.last_seen_ago_ms) + " ago"),
          el("td", { class: "num" }, n.tasks),
          el("td", { class: "num" }, n.turns.length)))));
      nodes.replaceChildren(el("h2", {}, "Nodes"), f.nodes.length ? table : el("div", { class: "empty" }, "No node has checked in."));
    },
  };
}

// ---- Jobs ----

function mountJobs(main, params) {
  const filter = { state: params.get("state") || "", endpoint: params.get("endpoint") || "", since: params.get("since") || "", until: params.get("until") || "" };
  let cursor = "", cursors = [];
  const chips = el("div", { class: "chips", id: "counts" });
  const stateSel = el("select", { name: "state", id: "f-state" }, el("option", { value: "" }, "any state"), STATES.map((s) => el("option", { value: s }, s)));
  stateSel.value = filter.state;
  const endpoint = el("input", { name: "endpoint", id: "f-endpoint", placeholder: "/jobs/…", value: filter.endpoint });
  const since = el("select", { name: "since", id: "f-since" },
    [["", "any time"], ["15m", "last 15 min"], ["1h", "last hour"], ["24h", "last 24 h"], ["168h", "last 7 days"]].map(([v, t]) => el("option", { value: v }, t)));
  since.value = filter.since;
  // The range's upper end: created before this long ago.
  const until = el("select", { name: "until", id: "f-until" },
    [["", "now"], ["15m", "15 min ago"], ["1h", "1 hour ago"], ["24h", "24 h ago"], ["168h", "7 days ago"]].map(([v, t]) => el("option", { value: v }, t)));
  until.value = filter.until;
  const retryAll = el("span");
  const form = el("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); apply(); } },
    el("label", {}, "State", stateSel), el("label", {}, "Endpoint starts with", endpoint), el("label", {}, "Created from", since), el("label", {}, "to", until),
    el("button", { type: "submit", class: "primary" }, "Filter"), retryAll);
  const list = el("div", { class: "card" });
  const pager = el("div", { class: "pager" });
  main.append(el("h1", {}, "Jobs"), chips, el("div", { class: "card" }, form), list);
  function apply() {
    const q = new URLSearchParams();
    if (stateSel.value) q.set("state", stateSel.value);
    if (endpoint.value) q.set("endpoint", endpoint.value);
    if (since.value) q.set("since", since.value);
    if (until.value) q.set("until", until.value);
    location.hash = "#/jobs" + (q.toString() ? "?" + q : "");
  }
  function query() {
    const q = new URLSearchParams({ limit: "25" });
    if (filter.state) q.set("state", filter.state);
    if (filter.endpoint) q.set("endpoint", filter.endpoint);
    if (filter.since) q.set("since", filter.since);
    if (filter.until) q.set("until", filter.until);
    if (cursor) q.set("cursor", cursor);
    return q;
  }
  return {
    async refresh() {
      const [c, page] = await Promise.all([api("/api/v1/jobs/counts"), api("/api/v1/jobs?" + query())]);
      chips.replaceChildren(...STATES.map((s) => el("a", {
        class: "chip" + (filter.state === s ? " on" : ""), href: "#/jobs?state=" + s, "data-state": s,
      }, badge(s), el("strong", {}, c.counts[s] >= c.cap ? `${c.cap}+` : c.counts[s]))));
      const retryState = RETRYABLE.includes(filter.state) ? filter.state : "dead";
      retryAll.replaceChildren(confirmButton(`Retry all ${retryState} matching`, "danger", { id: "retry-all" }, "retry-all " + JSON.stringify(filter), () => {
        const body = { state: retryState };
        if (filter.endpoint) body.endpoint = filter.endpoint;
        if (filter.since) body.since = filter.since;
        if (filter.until) body.until = filter.until;
        act("/api/v1/jobs/retry", body, (r) => `${r.retried} job(s) retried` + (r.more ? "; there are more: press again" : ""));
      }));
      const rows = page.jobs.map((j) => el("tr", { "data-job": j.id, "data-state": jobState(j) },
        el("td", { class: "num" }, el("a", { href: "#/jobs/" + j.id }, "#" + j.id)),
        el("td", { class: "trunc mono", title: j.endpoint }, j.method + " " + j.endpoint),
        el("td", {}, badge(jobState(j))),
        el("td", { class: "num" }, `${j.attempt}/${j.max_attempts}`),
        el("td", { class: "nowrap" }, j.node || "–"),
        el("td", { class: "nowrap" }, fmtTime(j.run_at)),
        el("td", { class: "nowrap" }, fmtTime(j.finished)),
        el("td", { class: "trunc", title: j.last_error || "" }, j.last_status ? String(j.last_status) + " " : "", j.last_error || ""),
        el("td", {}, jobActions(j))));
      pager.replaceChildren(
        el("button", { type: "button", disabled: cursors.length === 0, onclick: () => { cursor = cursors.pop() || ""; refreshNow(); } }, "← Newer"),
        el("button", { type: "button", disabled: !page.next_cursor, onclick: () => { cursors.push(cursor); cursor = page.next_cursor; refreshNow(); } }, "Older →"));
      list.replaceChildren(page.jobs.length
        ? el("table", { id: "jobs" }, el("thead", {}, el("tr", {}, ["Job", "Endpoint", "State", "Attempt", "Node", "Run at (UTC)", "Finished", "Last result", ""].map((h, i) => el("th", { class: i === 0 || i === 3 ? "num" : "" }, h)))), el("tbody", {}, rows))
        : el("div", { class: "empty" }, "No job matches."), pager);
    },
  };
}

function jobActions(j) {
  const out = el("div", { class: "actions" });
  if (RETRYABLE.includes(j.state)) out.append(el("button", { type: "button", "data-action": "retry", onclick: () => act(`/api/v1/jobs/${j.id}/retry`, {}, `job #${j.id} retried`) }, "Retry"));
  // A running job's cancel is a request (202, "cancelling"): its node
  // stops the call at its next lease renewal and records it cancelled.
  if (j.state === "ready" || j.state === "running") out.append(el("button", { type: "button", class: "danger", "data-action": "cancel", onclick: () => act(`/api/v1/jobs/${j.id}/cancel`, {},
    (r) => r?.state === "cancelling" ? `job #${j.id}: cancel requested; its node stops the call within a third of its lease` : `job #${j.id} cancelled`) }, "Cancel"));
  return out;
}

function mountJob(main, params) {
  const id = params.get("id");
  const head = el("div");
  const body = el("div");
  main.append(el("p", {}, el("a", { href: "#/jobs" }, "← Jobs")), head, body);
  return {
    async refresh() {
      const j = await api("/api/v1/jobs/" + encodeURIComponent(id));
      head.replaceChildren(el("h1", {}, `Job #${j.id} `, badge(jobState(j)), " ", jobActions(j)));
      let payload = j.payload ?? (j.payload_base64 ? "(binary, base64) " + j.payload_base64 : "");
      try { if (j.payload) payload = JSON.stringify(JSON.parse(j.payload), null, 2); } catch (_) { /* not JSON */ }
      const shown = payload.length > 4096 ? payload.slice(0, 4096) + `\n… (${j.payload_bytes} bytes in all)` : payload;
      const kv = (pairs) => el("div", { class: "kv" }, pairs.flatMap(([k, v]) => [el("div", {}, k), el("div", {}, v ?? "–")]));
      const history = (j.history || []).slice().reverse();
      body.replaceChildren(
        el("div", { class: "two" },
          el("div", { class: "card" }, el("h2", {}, "Job"), kv([
            ["Endpoint", el("span", { class: "mono" }, `${j.method} ${j.endpoint}`)],
            ["State", badge(jobState(j))],
            ["Attempts", `${j.attempt} of ${j.max_attempts}`],
            ["Last status", j.last_status ? String(j.last_status) : "–"],
            ["Last error", j.last_error ? el("span", { class: "error-text" }, j.last_error) : "–"],
            ["Node", j.node || "–"],
            ["Run at", fmtTime(j.run_at) + " UTC"],
            ["Created", fmtTime(j.created)],
            ["Started", fmtTime(j.started)],
            ["Finished", fmtTime(j.finished)],
            ["Schedule", j.schedule ? `${j.schedule} (fire ${fmtTime(j.scheduled_for)})` : "–"],
            ["Unique key", j.unique_key || "–"],
            ["Idempotency-Key", el("span", { class: "mono" }, j.idempotency_key)],
          ])),
          el("div", { class: "card" }, el("h2", {}, `Payload (${j.payload_bytes} bytes)`), shown ? el("pre", { class: "payload" }, shown) : el("div", { class: "empty" }, "No payload."))),
        el("div", { class: "card" }, el("h2", {}, "Timeline"), history.length
          ? el("ul", { class: "timeline", id: "timeline" }, history.map((e) => el("li", {},
            el("span", { class: "mark " + e.outcome }),
            el("span", { class: "muted" }, fmtTime(e.ended) + " UTC"),
            el("span", {}, el("strong", {}, e.outcome), e.attempt ? ` · attempt ${e.attempt}` : "", e.node ? ` · ${e.node}` : "",
              e.started ? ` · ran ${fmtAgo(new Date(e.ended) - new Date(e.started))}` : "",
              e.status ? ` · HTTP ${e.status}` : "", e.error ? el("div", { class: "error-text" }, e.error) : null))))
          : el("div", { class: "empty" }, "No attempt yet.")));
    },
  };
}

// ---- Schedules ----

function mountSchedules(main) {
  const card = el("div", { class: "card" });
  main.append(el("h1", {}, "Schedules"), card);
  return {
    async refresh() {
      const { schedules } = await api("/api/v1/schedules");
      const path = (s, what) => `/api/v1/schedules/${encodeURIComponent(s.name)}/${what}`;
      card.replaceChildren(schedules.length ? el("table", { id: "schedules" },
        el("thead", {}, el("tr", {}, ["Schedule", "When", "Endpoint", "State", "Next fire (UTC)", "Last fire", "Last result", "Missed", "Policy", ""].map((h, i) => el("th", { class: i === 7 ? "num" : "", title: h === "Policy" ? "misfire · overlap · tolerance" : null }, h)))),
        el("tbody", {}, schedules.map((s) => el("tr", { "data-schedule": s.name, "data-enabled": String(s.enabled) },
          el("td", {}, el("strong", {}, s.name)),
          el("td", { class: "mono when" }, whenParts(s.when)),
          el("td", { class: "mono trunc", title: s.endpoint }, s.endpoint),
          el("td", {}, badge(s.enabled ? "enabled" : "paused")),
          el("td", {}, s.enabled ? stampParts(s.next_fire_at) : "–"),
          el("td", {}, stampParts(s.last_fire_at)),
          el("td", { title: s.last_error || "" }, s.last_result ? badge(s.last_result) : "–", s.last_status ? ` ${s.last_status}` : ""),
          el("td", { class: "num" }, s.missed),
          // One cell for the three policies: eleven columns did not fit a
          // 1360 px window, and the actions were cut off. It wraps between
          // them where the window is narrower.
          el("td", { title: `misfire ${s.misfire}, overlap ${s.overlap}, tolerance ${s.tolerance}` }, `${s.misfire} · ${s.overlap} · ${s.tolerance}`),
          el("td", {}, el("div", { class: "actions stack" },
            s.enabled
              ? el("button", { type: "button", "data-action": "pause", onclick: () => act(path(s, "pause"), {}, `schedule ${s.name} paused`) }, "Pause")
              : el("button", { type: "button", "data-action": "resume", onclick: () => act(path(s, "resume"), {}, `schedule ${s.name} resumed`) }, "Resume"),
            el("button", { type: "button", "data-action": "trigger", onclick: () => act(path(s, "trigger"), {}, (r) => `schedule ${s.name}: occurrence #${r.id} due now`) }, "Trigger now"))))))) : el("div", { class: "empty" }, "No schedule. Add one with slotpoller schedule add, or in config.yaml."));
    },
  };
}

// ---- Queues ----

function mountQueues(main) {
  const card = el("div", { class: "card" });
  main.append(el("h1", {}, "Queues"), card);
  return {
    async refresh() {
      const { queues } = await api("/api/v1/queues");
      const path = (q, what) => `/api/v1/queues/${encodeURIComponent(q.name)}/${what}`;
      const heads = ["Queue", "State", "Waiting", "Running", "Priority", "Limits", "Rate", "Start delay p50 / p99", "Paused by", "Paused at (UTC)", ""];
      const numeric = new Set(["Waiting", "Running", "Priority"]);
      card.replaceChildren(queues.length ? el("table", { id: "queues" },
        el("thead", {}, el("tr", {}, heads.map((h) => el("th", { class: numeric.has(h) ? "num" : "" }, h)))),
        el("tbody", {}, queues.map((q) => el("tr", { "data-queue": q.name, "data-paused": String(q.paused) },
          el("td", {}, el("strong", {}, q.name)),
          el("td", {}, q.paused ? badge("paused") : badge("active", "enabled")),
          el("td", { class: "num" }, q.waiting),
          el("td", { class: "num" }, q.running),
          el("td", { class: "num", "data-field": "priority" }, q.priority),
          el("td", { "data-field": "limits" }, queueLimits(q)),
          el("td", { "data-field": "rate", title: q.rate ? "starts in the current window of the database clock, of the most per window" : "" },
            q.rate ? `${q.rate.used} / ${q.rate.limit} per ${fmtPeriod(q.rate.period_ms)}` : "–"),
          el("td", { "data-field": "delay", title: q.start_delay.jobs ? `${q.start_delay.jobs} jobs: finished in the last ${fmtAgo(q.start_delay.within_ms)}, and running` : "no job started recently" },
            q.start_delay.jobs ? `${fmtMS(q.start_delay.p50_ms)} / ${fmtMS(q.start_delay.p99_ms)}` : "–"),
          el("td", {}, q.paused_by || "–"),
          el("td", {}, q.paused_at ? stampParts(q.paused_at) : "–"),
          el("td", {}, el("div", { class: "actions" },
            q.paused
              ? el("button", { type: "button", "data-action": "resume", onclick: () => act(path(q, "resume"), {}, `queue ${q.name} resumed`) }, "Resume")
              : el("button", { type: "button", "data-action": "pause", onclick: () => act(path(q, "pause"), {}, `queue ${q.name} paused: its jobs wait`) }, "Pause"),
            // Running calls only: its waiting jobs stay (the CLI's and the
            // API's -waiting cancel them too). Two clicks, as for a delete.
            q.running > 0 ? confirmButton("Cancel running", "danger", { "data-action": "cancel" }, "cancel queue " + q.name,
              () => act(path(q, "cancel"), { waiting: false }, (r) => `queue ${q.name}: cancel requested of ${r.requested} running; their nodes stop the calls at their next lease renewal`)) : null)))))) : el("div", { class: "empty" }, "No queue has jobs waiting or running, and none was paused. Pause one with slotpoller queue pause -name NAME."));
    },
  };
}

// ---- Search ----

// mountSearch finds jobs by id, unique or idempotency key (seeks), or by
// text in a payload or last error among the newest jobs (the API's scan).
function mountSearch(main, params) {
  const text = params.get("q") || "";
  const input = el("input", { name: "q", id: "f-q", placeholder: "a job id, a key, or text in a payload or error", value: text, size: 50 });
  const form = el("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    location.hash = "#/search" + (input.value ? "?" + new URLSearchParams({ q: input.value }) : "");
  } }, el("label", {}, "Find", input), el("button", { type: "submit", class: "primary" }, "Search"));
  const card = el("div", { class: "card" });
  main.append(el("h1", {}, "Search"), el("div", { class: "card" }, form), card);
  return {
    async refresh() {
      if (!text) {
        card.replaceChildren(el("div", { class: "empty" }, "Ids, unique keys and idempotency keys are found in any table; text in payloads and errors among the newest 10,000 jobs."));
        return;
      }
      const r = await api("/api/v1/jobs/search?" + new URLSearchParams({ q: text }));
      const heads = ["Job", "Found by", "Endpoint", "State", "Created (UTC)", "Last"];
      card.replaceChildren(r.hits.length ? el("table", { id: "search" },
        el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
        el("tbody", {}, r.hits.map(({ matched, job: j }) => el("tr", { "data-job": j.id, "data-matched": matched },
          el("td", { class: "num" }, el("a", { href: "#/jobs/" + j.id }, "#" + j.id)),
          el("td", {}, matched.replace("_", " ")),
          el("td", { class: "trunc mono", title: j.endpoint }, j.method + " " + j.endpoint),
          el("td", {}, badge(jobState(j))),
          el("td", { class: "nowrap" }, fmtTime(j.created)),
          el("td", { class: "trunc", title: j.last_error || "" }, j.last_status ? String(j.last_status) + " " : "", j.last_error || ""))))) : el("div", { class: "empty" }, "No job found."),
        r.from ? el("p", { class: "muted", id: "search-from" }, `Text was looked for in the newest jobs, from #${r.from} on.`) : null);
    },
  };
}

// ---- Audit ----

// mountAudit lists the operators' actions, newest first, 100 a page
// (older pages by the API's cursor).
function mountAudit(main) {
  const card = el("div", { class: "card" });
  main.append(el("h1", {}, "Audit"), card);
  let cursor = "";
  return {
    async refresh() {
      const { entries, next_cursor } = await api("/api/v1/audit?limit=100" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
      const heads = ["At (UTC)", "Actor", "From", "Action", "Target", "Detail"];
      card.replaceChildren(entries.length ? el("table", { id: "audit" },
        el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
        el("tbody", {}, entries.map((e) => el("tr", { "data-action": e.action, "data-target": e.target || "" },
          el("td", {}, stampParts(e.at)),
          el("td", {}, e.actor),
          el("td", { class: "mono" }, e.origin),
          el("td", {}, el("strong", {}, e.action)),
          el("td", { class: "mono trunc", title: e.target || "" }, e.target || "–"),
          el("td", { class: "mono trunc", title: e.detail || "" }, e.detail || "–"))))) : el("div", { class: "empty" }, "No action recorded yet. Retries, cancels, pauses, triggers and deletes appear here, from the CLI, the API and this dashboard."),
        el("div", { class: "actions" },
          cursor ? el("button", { type: "button", onclick: () => { cursor = ""; refreshNow(); } }, "Newest") : null,
          next_cursor ? el("button", { type: "button", "data-action": "older", onclick: () => { cursor = next_cursor; refreshNow(); } }, "Older") : null));
    },
  };
}

// fmtPeriod writes a rate period in its largest whole unit ("10 s", "1 min").
function fmtPeriod(ms) {
  for (const [unit, n] of [["h", 3600000], ["min", 60000], ["s", 1000]]) {
    if (ms % n === 0) return `${ms / n} ${unit}`;
  }
  return `${ms} ms`;
}

// queueLimits is a queue's limits on its running jobs: across the farm
// and on one node, "–" for none.
function queueLimits(q) {
  const parts = [];
  if (q.limit) parts.push(`${q.running} / ${q.limit} running`);
  if (q.node_limit) parts.push(`${q.node_limit} per node`);
  return parts.length ? parts.join(" · ") : "–";
}

// whenParts splits a schedule's "when" ("cron 0 2 * * 1-5 (Europe/Berlin)",
// "every 1s") into the rule, kept on one line (a cron field broken across
// lines reads as two), and its zone, which may go to the next.
function whenParts(when) {
  const m = /^(.*?)( \([^()]*\))?$/.exec(when || "");
  return [el("span", { class: "rule" }, m[1]), m[2] ? " " : null, m[2] ? el("span", { class: "zone" }, m[2].trim()) : null];
}

// stampParts is fmtTime's text as its date and its time, each kept on one
// line: a narrow column wraps between them, never inside the date.
function stampParts(s) {
  return fmtTime(s).split(" ").flatMap((part, i) => [i ? " " : null, el("span", { class: "nowrap" }, part)]);
}

// ---- Tasks ----

function mountTasks(main) {
  const card = el("div", { class: "card" });
  main.append(el("h1", {}, "Endless tasks"), card);
  return {
    async refresh() {
      const { tasks } = await api("/api/v1/tasks");
      colourNodes(tasks.map((t) => t.owner).filter(Boolean));
      card.replaceChildren(tasks.length ? el("table", { id: "tasks" },
        el("thead", {}, el("tr", {}, ["Task", "Endpoint", "Every", "State", "Owner", "Since (UTC)", "Calls", "Last result", "Token", ""].map((h, i) => el("th", { class: i === 6 || i === 8 ? "num" : "" }, h)))),
        el("tbody", {}, tasks.map((t) => el("tr", { "data-task": t.name },
          el("td", {}, el("strong", {}, t.name)),
          el("td", { class: "mono trunc", title: t.endpoint }, t.endpoint),
          el("td", {}, t.every),
          el("td", {}, badge(t.state)),
          el("td", {}, t.owner || "–"),
          el("td", {}, fmtTime(t.since)),
          el("td", { class: "num" }, t.calls),
          el("td", { class: "trunc", title: t.last_error || "" }, !t.last_call_at ? "–" : t.last_error ? el("span", { class: "error-text" }, `failed ×${t.failures}: ${t.last_error}`) : `ok ${t.last_status}`),
          el("td", { class: "num mono" }, t.token),
          el("td", {}, t.state === "deleted" || t.state === "deleting" ? "" : confirmButton("Delete", "danger", { "data-action": "delete" }, "delete task " + t.name,
            () => act(`/api/v1/tasks/${encodeURIComponent(t.name)}/delete`, {}, (r) => `task ${t.name}: ${r.state}`))))))) : el("div", { class: "empty" }, "No endless task. Add one with slotpoller task add."));
    },
  };
}

// ---- Throughput ----

function mountThroughput(main) {
  const stats = el("div", { class: "grid" });
  const jobsChart = el("div", { class: "card" });
  const delayChart = el("div", { class: "card" });
  main.append(el("h1", {}, "Throughput"), stats, jobsChart, delayChart);
  return {
    async refresh() {
      const t = await api("/api/v1/throughput");
      const m = t.minutes;
      const done = m.reduce((a, x) => a + x.done, 0), failed = m.reduce((a, x) => a + x.failed, 0);
      const last = m[m.length - 1] || { done: 0, failed: 0, avg_delay_ms: 0, max_delay_ms: 0 };
      const peak = Math.max(0, ...m.map((x) => x.max_delay_ms));
      stats.replaceChildren(
        stat("Done, last hour", String(done), t.capped ? `counted up to ${t.cap} jobs: older minutes short` : "done"),
        stat("Failed, last hour", String(failed), "failed or dead"),
        stat("Last minute", `${last.done} / ${last.failed}`, "done / failed"),
        stat("Start delay", fmtMS(last.avg_delay_ms), `last minute avg; peak in the hour ${fmtMS(peak)}`));
      jobsChart.replaceChildren(el("h2", {}, "Jobs finished per minute"), barChart(m), el("div", { class: "legend" },
        el("span", {}, el("span", { class: "sw", style: "background:#1f8a4c" }), "done"),
        el("span", {}, el("span", { class: "sw", style: "background:#c4312b" }), "failed or dead")));
      delayChart.replaceChildren(el("h2", {}, "Start delay (run time to start, jobs finished that minute)"), delayLines(m), el("div", { class: "legend" },
        el("span", {}, el("span", { class: "sw", style: "background:#2f5bd3" }), "average"),
        el("span", {}, el("span", { class: "sw", style: "background:#e07b00" }), "maximum")));
    },
  };
}

const CW = 1200, CH = 220, PADL = 56, PADB = 24, PADT = 10;

// niceMax rounds a chart's top up to 1, 2, 4 or 5 times a power of ten
// (4 and 5 parts give round ticks on the axis).
function niceMax(v) {
  if (v <= 0) return 4;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const f of [1, 2, 4, 5, 10]) if (f * p >= v) return f * p;
  return 10 * p;
}
const tickParts = (max) => (String(max)[0] === "4" || String(max)[0] === "2" ? 4 : 5);

function axes(max, fmt, n) {
  const out = [];
  const h = CH - PADB - PADT;
  const parts = tickParts(max);
  for (let i = 0; i <= parts; i++) {
    const y = PADT + h - (h * i) / parts;
    out.push(svg("line", { x1: PADL, x2: CW, y1: y, y2: y, stroke: "#e2e5eb" }));
    out.push(svg("text", { x: PADL - 6, y: y + 4, "text-anchor": "end" }, i === 0 ? "0" : fmt((max * i) / parts)));
  }
  const w = (CW - PADL) / n;
  for (const ago of [60, 45, 30, 15, 0]) {
    const x = PADL + (n - ago) * w - (ago === 0 ? 0 : 0);
    out.push(svg("text", { x: Math.min(x, CW - 2), y: CH - 6, "text-anchor": ago === 0 ? "end" : ago === 60 ? "start" : "middle" }, ago === 0 ? "now" : `−${ago} min`));
  }
  return out;
}

function barChart(m) {
  const n = m.length || 60;
  const max = niceMax(Math.max(...m.map((x) => x.done + x.failed), 0));
  const h = CH - PADB - PADT, w = (CW - PADL) / n;
  const bars = m.flatMap((x, i) => {
    const x0 = PADL + i * w + 1, bw = Math.max(1, w - 2);
    const hd = (h * x.done) / max, hf = (h * x.failed) / max;
    const title = `${x.ago === 0 ? "last minute" : x.ago + " min ago"}: ${x.done} done, ${x.failed} failed`;
    return [
      svg("rect", { x: x0, y: PADT + h - hd, width: bw, height: hd, fill: "#1f8a4c" }, svg("title", {}, title)),
      svg("rect", { x: x0, y: PADT + h - hd - hf, width: bw, height: hf, fill: "#c4312b" }, svg("title", {}, title)),
    ];
  });
  // The totals drawn, for a reader that cannot see the bars (and a test).
  const total = (k) => m.reduce((a, x) => a + x[k], 0);
  return svg("svg", { class: "chart", id: "chart-jobs", viewBox: `0 0 ${CW} ${CH}`, role: "img", "aria-label": "jobs finished per minute",
    "data-done-total": total("done"), "data-failed-total": total("failed") },
    axes(max, (v) => String(Math.round(v)), n), bars);
}

function delayLines(m) {
  const n = m.length || 60;
  const max = niceMax(Math.max(...m.map((x) => x.max_delay_ms), 0));
  const h = CH - PADB - PADT, w = (CW - PADL) / n;
  const line = (key, colour) => {
    const pts = m.map((x, i) => (x.done + x.failed ? `${PADL + i * w + w / 2},${PADT + h - (h * x[key]) / max}` : null));
    // Minutes without jobs break the line: no job, no delay to draw.
    const runs = [];
    let run = [];
    for (const p of pts) { if (p) run.push(p); else if (run.length) { runs.push(run); run = []; } }
    if (run.length) runs.push(run);
    return runs.map((r) => r.length === 1
      ? svg("circle", { cx: r[0].split(",")[0], cy: r[0].split(",")[1], r: 2.5, fill: colour })
      : svg("polyline", { points: r.join(" "), fill: "none", stroke: colour, "stroke-width": 2 }));
  };
  return svg("svg", { class: "chart", id: "chart-delay", viewBox: `0 0 ${CW} ${CH}`, role: "img", "aria-label": "start delay per minute",
    "data-minutes": m.filter((x) => x.done + x.failed).length, "data-max-delay-ms": Math.max(0, ...m.map((x) => x.max_delay_ms)) },
    axes(max, (v) => (v >= 1000 ? `${+(v / 1000).toFixed(2)} s` : `${+v.toFixed(1)} ms`), n), line("max_delay_ms", "#e07b00"), line("avg_delay_ms", "#2f5bd3"));
}

route();
