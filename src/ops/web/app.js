// icepack's operator page: plain DOM, no dependencies, served from the binary. Every value from
// the service is set as text (never as HTML). Pages, filters and sorting are the server's.
"use strict";

const PAGE_SIZE = 50;
const REFRESH_MS = 10000;
const ui = { token: sessionStorage.getItem("icepack-token") || "", mutations: "token", timer: null };

// ---- small helpers ---------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

function svg(tag, attrs, ...children) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) element.setAttribute(name, String(value));
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = Number(value);
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) { n /= 1024; unit += 1; }
  return (unit === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + " " + units[unit];
}

function count(value) {
  return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
}

function span(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) return s + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return Math.round(s / 86400) + " d";
}

function relative(iso, now) {
  if (!iso) return "–";
  const seconds = (Date.parse(iso) - now) / 1000;
  return seconds >= 0 ? "in " + span(seconds) : span(-seconds) + " ago";
}

function pill(text, kind, title) {
  return h("span", { class: "pill " + (kind || ""), title }, text);
}

function tableLink(name) {
  return h("a", { href: "#/table/" + encodeURIComponent(name) }, name);
}

class ApiError extends Error {}

async function api(path, options) {
  const init = Object.assign({ headers: {} }, options || {});
  if (init.method === "POST" && ui.token) init.headers.Authorization = "Bearer " + ui.token;
  const response = await fetch(path, init);
  const text = await response.text();
  let body;
  try { body = text ? JSON.parse(text) : {}; } catch (_) { body = { error: text }; }
  if (!response.ok && path !== "/readyz") {
    throw new ApiError((body && body.error) || response.status + " " + response.statusText);
  }
  return body;
}

function parseHash() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  return { path, params: new URLSearchParams(query || "") };
}

function go(path, params) {
  const query = params && params.toString();
  location.hash = path + (query ? "?" + query : "");
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes.filter((node) => node !== null && node !== undefined));
}

function failure(error) {
  return h("div", { class: "notice bad" }, String(error.message || error));
}

// ---- header: readiness and the token -----------------------------------------------------------

async function renderHealth() {
  const box = document.getElementById("health");
  try {
    const ready = await api("/readyz");
    if (ready.ready) {
      box.replaceChildren(pill("ready", "ok"));
    } else {
      const problems = ready.problems || [];
      box.replaceChildren(h("span", {},
        pill("not ready", "bad", problems.join("\n")),
        h("span", { class: "muted" }, problems[0] || ""),
        problems.length > 1 ? h("span", { class: "muted" }, ` (+${problems.length - 1} more)`) : null,
      ));
    }
  } catch (error) {
    box.replaceChildren(pill("unreachable", "bad", String(error.message)));
  }
}

function mayMutate() {
  return ui.mutations === "open" || (ui.mutations === "token" && ui.token !== "");
}

function mutationHint() {
  if (ui.mutations === "refused") return "mutating calls are off: ICEPACK_API_TOKEN is not set on a non-loopback listener";
  if (ui.mutations === "token" && !ui.token) return "enter the API token above";
  return null;
}

// ---- the overview --------------------------------------------------------------------------------

const COLUMNS = [
  { key: "name", label: "Table", sort: "name" },
  { key: "tenant", label: "Tenant", sort: "tenant" },
  { key: "pending_files", label: "Pending files", sort: "pending_files", num: true },
  { key: "pending_bytes", label: "Pending bytes", sort: "pending_bytes", num: true },
  { key: "due", label: "Due / nearest threshold", sort: "due" },
  { key: "run", label: "Run in flight" },
  { key: "last", label: "Last run", sort: "last_run" },
  { key: "failures", label: "Failures", sort: "failures", num: true },
  { key: "next", label: "Next attempt" },
];

// Which rule holds a due table back, in words: the settle window, or (pacing = "cost") the run's
// worth; either ends at `until` at the latest.
function waitingText(waiting, now) {
  const latest = relative(waiting.until, now);
  if (waiting.kind === "settling") return `settling until ${latest} (files still landing)`;
  if (waiting.kind === "files")
    return `waiting for cost: ${count(waiting.fixable)} of ${count(waiting.worth_files)} files' worth, at the latest ${latest}`;
  return `waiting for cost: ${waiting.waited_file_hours.toFixed(2)} of ${waiting.worth_file_hours.toFixed(2)} file-hours' worth, at the latest ${latest}`;
}

function dueCell(table) {
  if (table.due) return pill("due · " + (table.due_reason || ""), "warn");
  const explain = table.explain || {};
  if (explain.waiting) return pill(waitingText(explain.waiting, Date.now()), "", explain.waiting.text);
  if (table.nothing_to_rewrite) return pill("nothing to rewrite");
  const nearest = explain.nearest;
  if (!nearest) return h("span", { class: "muted" }, "–");
  const reached = explain[nearest] ? explain[nearest].reached : 0;
  return h("span", {}, `${nearest} ${Math.round(reached * 100)}%`,
    h("span", { class: "bar" }, h("i", { style: `width:${Math.round(reached * 100)}%` })));
}

function runCell(table, now) {
  const run = table.in_flight_run;
  if (!run) return h("span", { class: "muted" }, "–");
  const elapsed = (now - Date.parse(run.started_at)) / 1000;
  return pill(`${run.trigger} · ${span(elapsed)}`, "run", `${run.run_id}: ${count(run.claimed_files)} files`);
}

// A successful run's step after its commit that failed: an amber pill with its class and excerpt.
function maintenanceFailed(run) {
  const failed = run.maintenance_failed;
  if (!failed) return null;
  return h("span", {}, " ", pill(`${failed.step} failed`, "warn", `${failed.class}: ${failed.excerpt}`),
    h("div", { class: "error-text" }, failed.excerpt.slice(0, 80)));
}

// Partitions a successful run was asked for and did not rewrite, with why: the run left the
// table due, and says so.
function leftDue(run) {
  const left = run.left || [];
  if (!left.length) return null;
  const line = (entry) => (entry.partition === undefined || entry.partition === null ? "" : (entry.partition || "(unpartitioned)") + ": ") + entry.reason;
  return h("span", { class: "left-due" }, " ", pill(`${left.length} left due`, "warn", left.map(line).join("\n")),
    h("div", { class: "error-text" }, line(left[0]).slice(0, 120)));
}

function lastCell(run) {
  if (!run) return h("span", { class: "muted" }, "never");
  if (run.outcome === "success") return h("span", {}, pill(run.task === "rewrite_data_files" ? "success" : run.task, "ok", run.finished_at), maintenanceFailed(run), leftDue(run));
  // Statistics that could not be computed are a note: the run before them committed.
  if (run.task === "compute_statistics") return maintenanceFailed({ maintenance_failed: { step: run.task, class: run.failure_class || "failure", excerpt: run.error || "" } });
  return h("span", {}, pill(run.failure_class || "failure", "bad", run.error || ""), " ",
    h("span", { class: "error-text" }, run.error ? run.error.slice(0, 80) : ""));
}

function sortHeader(column, params) {
  if (!column.sort) return h("th", { class: column.num ? "num" : "" }, column.label);
  const current = params.get("sort") || "name";
  const defaultDesc = !["name", "tenant"].includes(column.sort);
  const order = params.get("order") || (["name", "tenant"].includes(current) ? "asc" : "desc");
  const classes = ["sortable", column.num ? "num" : "", current === column.sort ? "sorted " + order : ""];
  return h("th", {
    class: classes.join(" "),
    onclick: () => {
      const next = new URLSearchParams(params);
      const flip = current === column.sort ? (order === "asc" ? "desc" : "asc") : (defaultDesc ? "desc" : "asc");
      next.set("sort", column.sort);
      next.set("order", flip);
      next.delete("page");
      go("/", next);
    },
  }, column.label);
}

function filterBar(params, tenants) {
  const q = h("input", { type: "search", placeholder: "table name contains…", value: params.get("q") || "", "aria-label": "filter by name" });
  const tenant = h("select", { "aria-label": "tenant" }, h("option", { value: "" }, "all tenants"),
    tenants.map((t) => h("option", { value: t.tenant, selected: params.get("tenant") === t.tenant }, t.tenant)));
  const state = h("select", { "aria-label": "state" },
    [["all", "every table"], ["due", "due"], ["failing", "failing"], ["running", "running"], ["pending", "with pending files"]]
      .map(([value, label]) => h("option", { value, selected: (params.get("state") || "all") === value }, label)));
  const apply = () => {
    const next = new URLSearchParams(params);
    for (const [name, input] of [["q", q], ["tenant", tenant], ["state", state]]) {
      if (input.value && input.value !== "all") next.set(name, input.value); else next.delete(name);
    }
    next.delete("page");
    go("/", next);
  };
  q.addEventListener("keydown", (event) => { if (event.key === "Enter") apply(); });
  tenant.addEventListener("change", apply);
  state.addEventListener("change", apply);
  return h("div", { class: "filters" }, q, tenant, state, h("button", { onclick: apply }, "Filter"));
}

function tenantCards(tenants) {
  return h("div", { class: "cards" }, tenants.map((t) => h("div", { class: "card" },
    h("div", { class: "label" }, "tenant ", h("a", { href: "#/?tenant=" + encodeURIComponent(t.tenant) }, t.tenant)),
    h("div", { class: "big" }, count(t.pending_files), h("span", { class: "muted" }, " files")),
    h("div", { class: "label" }, `${count(t.tables)} tables · ${t.due_tables} due · ${t.tables_failing} failing · ${t.runs_in_flight}/${t.max_concurrent_runs ?? "∞"} running`),
  )));
}

function healthCards(listing) {
  const cards = [];
  const engine = listing.engine;
  if (engine) {
    const state = engine.answering === true ? pill("answering", "ok") : engine.answering === false ? pill("not answering", "bad", engine.error || "") : pill("not probed yet");
    cards.push(h("div", { class: "card" }, h("div", { class: "label" }, "engine"), h("div", { class: "mono" }, engine.engine), state));
  }
  for (const queue of listing.queues || []) {
    const state = queue.problem ? pill("problem", "bad", queue.problem) : pill("receiving", "ok");
    cards.push(h("div", { class: "card" }, h("div", { class: "label" }, "queue" + (queue.tenant ? " · " + queue.tenant : "")),
      h("div", { class: "mono", title: queue.queue }, queue.queue.split("/").pop()), state,
      h("div", { class: "label" }, `${count(queue.messages_received)} received · ${count(queue.messages_deleted)} deleted · ${count(queue.messages_invalid)} invalid`)));
  }
  return cards.length ? h("div", { class: "cards" }, cards) : null;
}

async function overview(params) {
  const page = Math.max(0, Number(params.get("page") || 0));
  const query = new URLSearchParams();
  for (const name of ["tenant", "q", "state", "order"]) if (params.get(name)) query.set(name, params.get(name));
  query.set("sort", params.get("sort") || "name");
  query.set("offset", String(page * PAGE_SIZE));
  query.set("limit", String(PAGE_SIZE));
  const [listing, tenants] = await Promise.all([api("/v1/tables?" + query), api("/v1/tenants")]);
  const now = Date.parse(listing.now);
  const rows = listing.tables.map((table) => h("tr", { class: table.consecutive_failures > 0 ? "failing" : "", "data-table": table.table },
    h("td", {}, tableLink(table.table)),
    h("td", {}, table.tenant),
    h("td", { class: "num" }, count(table.pending_files)),
    h("td", { class: "num" }, bytes(table.pending_bytes)),
    h("td", {}, dueCell(table)),
    h("td", {}, runCell(table, now)),
    h("td", {}, lastCell(table.last_run)),
    h("td", { class: "num" }, table.consecutive_failures ? pill(String(table.consecutive_failures), "bad") : "0"),
    h("td", {}, table.next_attempt_time ? relative(table.next_attempt_time, now) : h("span", { class: "muted" }, "–")),
  ));
  const pages = Math.max(1, Math.ceil(listing.matched / PAGE_SIZE));
  const turn = (to) => { const next = new URLSearchParams(params); next.set("page", String(to)); go("/", next); };
  const removed = (listing.removed || []);
  show(
    h("h1", {}, "Tables ", h("span", { class: "muted" }, `${count(listing.matched)} of ${count(listing.total)}`)),
    healthCards(listing),
    tenantCards(tenants.tenants || []),
    filterBar(params, tenants.tenants || []),
    h("table", { class: "grid", id: "tables" },
      h("thead", {}, h("tr", {}, COLUMNS.map((column) => sortHeader(column, params)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: COLUMNS.length, class: "muted" }, "No table matches.")))),
    h("div", { class: "pager" },
      h("button", { disabled: page === 0, onclick: () => turn(page - 1) }, "← Previous"),
      h("span", { class: "muted" }, `page ${page + 1} of ${pages}`),
      h("button", { disabled: page + 1 >= pages, onclick: () => turn(page + 1) }, "Next →")),
    removed.length ? h("div", {},
      h("h2", {}, "Removed from the configuration (state kept until forgotten)"),
      h("table", { class: "grid" }, h("tbody", {}, removed.map((name) => h("tr", {},
        h("td", { class: "mono" }, name),
        h("td", {}, actionButton("Forget", "danger", `/v1/tables/${encodeURIComponent(name)}/forget`,
          `Forget everything icepack stored about ${name}?`)))))))
      : null,
  );
}

// ---- mutating calls -----------------------------------------------------------------------------

function actionButton(label, kind, path, confirmText) {
  const result = h("span", { class: "muted" });
  const button = h("button", {
    class: kind, disabled: !mayMutate(), title: mutationHint(), "data-action": label,
    onclick: async () => {
      if (confirmText && !window.confirm(confirmText)) return;
      button.disabled = true;
      try {
        const body = await api(path, { method: "POST" });
        result.replaceChildren(pill(body.accepted ? "accepted" : "done", "ok"));
        setTimeout(refresh, 1200);
      } catch (error) {
        result.replaceChildren(pill("refused", "bad"), " ", h("span", { class: "error-text" }, error.message));
      } finally {
        button.disabled = !mayMutate();
      }
    },
  }, label);
  return h("span", {}, button, " ", result);
}

// ---- a table -------------------------------------------------------------------------------------

function chart(series, runs, now) {
  const points = series.points.map((p) => ({ t: Date.parse(p.at), files: p.files, peak: Math.max(p.peak_files || 0, p.files) }));
  const width = 900, height = 200, left = 44, right = 10, top = 12, bottom = 24;
  const day = 24 * 3600 * 1000;
  // From the first point (at least the last 10 minutes), at most 7 days back.
  const start = points.length ? Math.min(points[0].t, now - 600 * 1000) : now - 3600 * 1000;
  const from = Math.max(start, now - 7 * day);
  const max = Math.max(1, ...points.map((p) => p.peak));
  const x = (t) => left + ((t - from) / Math.max(1, now - from)) * (width - left - right);
  const y = (files) => top + (1 - files / max) * (height - top - bottom);
  // A step line: each level holds until the next point; before the first point nothing is known.
  let path = "";
  let level = null;
  let first = null;
  for (const point of points) {
    if (point.t < from) { level = point.files; continue; }
    const at = x(point.t).toFixed(1);
    if (level === null) {
      path = `M${at},${y(0).toFixed(1)}`;
      first = point.t;
    } else {
      if (first === null) { path = `M${x(from).toFixed(1)},${y(level).toFixed(1)}`; first = from; }
      path += ` L${at},${y(level).toFixed(1)}`;
    }
    // Up to the most files within the point's minute, then to where it ended.
    path += ` L${at},${y(point.peak).toFixed(1)} L${at},${y(point.files).toFixed(1)}`;
    level = point.files;
  }
  if (first === null) { first = from; path = `M${x(from).toFixed(1)},${y(level || 0).toFixed(1)}`; }
  path += ` L${x(now).toFixed(1)},${y(level || 0).toFixed(1)}`;
  const area = path + ` L${x(now).toFixed(1)},${y(0).toFixed(1)} L${x(first).toFixed(1)},${y(0).toFixed(1)} Z`;
  // At the minute it ended: the series' points are minutes too.
  const marks = runs.filter((run) => Date.parse(run.finished_at) >= from).map((run) => {
    const at = x(Math.floor(Date.parse(run.finished_at) / 60000) * 60000);
    return svg("line", { class: run.outcome === "success" ? "run-ok" : "run-bad", x1: at, x2: at, y1: top, y2: height - bottom, "data-run": run.run_id },
      svg("title", {}, `${run.task} ${run.outcome}${run.failure_class ? " (" + run.failure_class + ")" : ""} at ${run.finished_at}`));
  });
  const label = (t) => new Date(t).toISOString().slice(5, 16).replace("T", " ");
  return h("div", { class: "chart", id: "chart" },
    svg("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img", "aria-label": "small files waiting over time, runs marked" },
      svg("line", { class: "axis", x1: left, x2: width - right, y1: y(0), y2: y(0) }),
      svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: y(0) }),
      svg("path", { class: "area", d: area }),
      svg("path", { class: "line", d: path }),
      marks,
      svg("text", { x: 4, y: top + 8 }, count(max)),
      svg("text", { x: 4, y: y(0) }, "0"),
      svg("text", { x: left, y: height - 6 }, label(from) + " UTC"),
      svg("text", { x: width - right, y: height - 6, "text-anchor": "end" }, "now")),
    h("div", { class: "muted" }, "Small files waiting (pending and claimed by a run); ",
      h("span", { style: "color:var(--ok)" }, "┆ successful run"), ", ", h("span", { style: "color:var(--bad)" }, "│ failed run"),
      `. ${series.points.length} point${series.points.length === 1 ? "" : "s"}: one a minute where it changed for ${series.minutes_kept / 60} h, each hour's highest for ${series.hours_kept / 24} days.`));
}

function runsTable(runs) {
  if (!runs.length) return h("p", { class: "muted" }, "No run yet.");
  return h("table", { class: "grid", id: "runs" },
    h("thead", {}, h("tr", {}, ["Finished", "Task", "Trigger", "Engine", "Outcome", "Duration", "Files before → after", "Bytes rewritten", "Partitions"].map((label) => h("th", {}, label)))),
    h("tbody", {}, runs.map((run) => h("tr", { class: run.outcome === "success" ? "" : "failing" },
      h("td", { title: run.run_id }, run.finished_at.replace("T", " ").slice(0, 19)),
      h("td", {}, run.task, run.strategy && run.task === "rewrite_data_files" ? h("span", { class: "muted" }, " · " + run.strategy) : null),
      h("td", {}, run.trigger),
      h("td", { title: run.engine_detail || "" }, run.engine || "–"),
      h("td", {}, run.outcome === "success" ? h("span", {}, pill("success", "ok"), maintenanceFailed(run), leftDue(run)) : h("span", {}, pill(run.failure_class || "failure", "bad"), h("div", { class: "error-text" }, run.error || ""))),
      h("td", { class: "num" }, span(run.duration_ms / 1000)),
      h("td", { class: "num" }, run.rewritten_data_files !== null && run.rewritten_data_files !== undefined
        ? `${count(run.rewritten_data_files)} → ${count(run.added_data_files)}`
        : run.manifests_before !== null && run.manifests_before !== undefined ? `${count(run.manifests_before)} → ${count(run.manifests_after)} manifests`
        : run.orphan_files !== null && run.orphan_files !== undefined ? `${count(run.orphan_files)} orphans${run.dry_run ? " (dry run)" : ""}`
        : run.statistics_files !== null && run.statistics_files !== undefined ? `${count(run.statistics_files)} statistics files`
        : `${count(run.claimed_files)} claimed`),
      h("td", { class: "num" }, bytes(run.rewritten_bytes)),
      h("td", { class: "mono" }, run.partitions && run.partitions.length ? run.partitions.slice(0, 3).join(", ") + (run.partitions.length > 3 ? ` +${run.partitions.length - 3}` : "") : "whole table"),
    ))));
}

// ---- the next run's plan ------------------------------------------------------------------------

// A plan reads the table's catalog: asked at most once a minute while the table's page is open.
const PLAN_MAX_AGE_MS = 60000;
const plans = {};

async function planOf(base, name, inFlight) {
  if (inFlight) return null;
  const cached = plans[name];
  if (cached && Date.now() - cached.at < PLAN_MAX_AGE_MS) return cached;
  let entry;
  try {
    entry = { at: Date.now(), body: await api(base + "/plan") };
  } catch (error) {
    entry = { at: Date.now(), error: error.message };
  }
  plans[name] = entry;
  return entry;
}

function planSection(entry) {
  if (!entry) return h("p", { id: "plan", class: "muted" }, "A run is in flight: its plan is the run's.");
  if (entry.error) return h("p", { id: "plan", class: "error-text" }, "No plan: " + entry.error);
  const p = entry.body;
  const parts = [h("p", {}, `${p.task} run (${p.trigger})`, p.due ? ", due now" : h("span", { class: "muted" }, " — not due: what Compact now would do"),
    ", on ", h("strong", {}, p.engine), p.engine_detail ? h("span", { class: "muted" }, ` (${p.engine_detail})`) : null,
    p.partitions.length ? h("span", { class: "mono" }, " · " + p.partitions.slice(0, 3).join(", ") + (p.partitions.length > 3 ? ` +${p.partitions.length - 3}` : "")) : " · whole table")];
  if (!p.plan) {
    parts.push(h("p", { class: "muted" }, "Not planned: " + (p.unplanned || "")));
  } else {
    const duration = p.expected_duration_millis === null || p.expected_duration_millis === undefined
      ? "duration unknown (no measured run on this engine yet)"
      : `about ${span(p.expected_duration_millis / 1000)} (${p.expected_duration_basis})`;
    parts.push(h("p", {}, `${count(p.input_files)} files, ${bytes(p.input_bytes)} in → about ${count(p.expected_output_files)} out; ${duration}`));
    if (p.plan.groups.length) {
      parts.push(h("table", { class: "grid" },
        h("thead", {}, h("tr", {}, h("th", {}, "Group"), h("th", { class: "num" }, "Files"), h("th", { class: "num" }, "Bytes"), h("th", { class: "num" }, "Files out"), h("th", { class: "num" }, "Position deletes"))),
        h("tbody", {}, p.plan.groups.slice(0, 50).map((g) => h("tr", {},
          h("td", { class: "mono" }, g.partition || "(unpartitioned)"), h("td", { class: "num" }, count(g.files)), h("td", { class: "num" }, bytes(g.bytes)),
          h("td", { class: "num" }, "~" + count(g.expected_output_files)), h("td", { class: "num" }, count(g.position_deletes_applied)))))));
    }
    for (const left of p.plan.left.slice(0, 20)) {
      parts.push(h("div", { class: "left-due" }, pill("left", "warn"), " ", (left.partition === undefined || left.partition === null ? "" : (left.partition || "(unpartitioned)") + ": ") + left.reason));
    }
  }
  return h("div", { id: "plan" }, ...parts);
}

async function tablePage(name) {
  const base = "/v1/tables/" + encodeURIComponent(name);
  const [table, history, series] = await Promise.all([api(base), api(base + "/runs"), api(base + "/series")]);
  const now = Date.parse(series.now);
  const plan = await planOf(base, name, Boolean(table.in_flight_run));
  const facts = [
    ["tenant", h("a", { href: "#/?tenant=" + encodeURIComponent(table.tenant) }, table.tenant)],
    ["pending", `${count(table.pending_files)} files, ${bytes(table.pending_bytes)}`],
    ["oldest pending", table.oldest_pending_event_time ? relative(table.oldest_pending_event_time, now) : "–"],
    ["due", dueCell(table)],
    ["run in flight", runCell(table, now)],
    ["last run", lastCell(table.last_run)],
    ["engine", table.engine || "–"],
    ["unconfirmed", table.unconfirmed_files ? `${count(table.unconfirmed_files)} files announced, not in the table (yet)` : "–"],
    ["consecutive failures", String(table.consecutive_failures)],
    ["next attempt", table.next_attempt_time ? relative(table.next_attempt_time, now) : "–"],
    ["strategy", table.strategy + (table.table_sort_order ? ` (table order: ${table.table_sort_order})` : "")],
    ["manifests", count(table.manifests) + (table.max_manifests ? ` of ${count(table.max_manifests)}` : "")],
    ["compacted so far", count(table.compacted_files) + " files"],
    ["queue position", table.queue_position === null || table.queue_position === undefined ? "–" : String(table.queue_position)],
  ];
  const partitions = table.partitions || [];
  show(
    h("h1", {}, h("a", { href: "#/" }, "Tables"), " / ", h("span", { class: "mono" }, table.table)),
    h("div", { class: "actions" },
      actionButton("Compact now", "", base + "/compact"),
      mutationHint() ? h("span", { class: "muted" }, mutationHint()) : null),
    chart(series, history.runs, now),
    h("div", { class: "two" },
      h("div", {}, h("h2", {}, "State"), h("dl", { class: "facts" }, facts.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]))),
      h("div", {}, h("h2", {}, `Partitions with small files (${partitions.length})`),
        partitions.length ? h("table", { class: "grid", id: "partitions" },
          h("thead", {}, h("tr", {}, h("th", {}, "Partition"), h("th", { class: "num" }, "Files"), h("th", { class: "num" }, "Bytes"), h("th", { class: "num" }, "From events / metadata"))),
          h("tbody", {}, partitions.slice(0, 200).map((p) => h("tr", {},
            h("td", { class: "mono" }, p.partition || "(unpartitioned)"), h("td", { class: "num" }, count(p.files)),
            h("td", { class: "num" }, bytes(p.bytes)), h("td", { class: "num" }, `${count(p.from_events)} / ${count(p.from_metadata)}`)))))
          : h("p", { class: "muted" }, "None pending."))),
    h("h2", {}, "Next run"),
    planSection(plan),
    h("h2", {}, `Runs (last ${history.runs.length})`),
    runsTable(history.runs),
  );
}

// ---- tenants -------------------------------------------------------------------------------------

async function tenantsPage() {
  const body = await api("/v1/tenants");
  show(
    h("h1", {}, "Tenants"),
    h("table", { class: "grid", id: "tenants" },
      h("thead", {}, h("tr", {}, ["Tenant", "Tables", "Pending files", "Pending bytes", "Due", "Failing", "Runs in flight", "Waiting", "Weight", "Recent failures"].map((label) => h("th", {}, label)))),
      h("tbody", {}, (body.tenants || []).map((t) => h("tr", { class: t.tables_failing ? "failing" : "" },
        h("td", {}, h("a", { href: "#/?tenant=" + encodeURIComponent(t.tenant) }, t.tenant)),
        h("td", { class: "num" }, count(t.tables)),
        h("td", { class: "num" }, count(t.pending_files)),
        h("td", { class: "num" }, bytes(t.pending_bytes)),
        h("td", { class: "num" }, count(t.due_tables)),
        h("td", { class: "num" }, t.tables_failing ? pill(String(t.tables_failing), "bad") : "0"),
        h("td", { class: "num" }, `${t.runs_in_flight} / ${t.max_concurrent_runs ?? "∞"}`),
        h("td", { class: "num" }, count(t.runs_waiting)),
        h("td", { class: "num" }, String(t.weight)),
        h("td", {}, t.recent_failures.length ? t.recent_failures.slice(0, 5).map((f) => h("div", {},
          tableLink(f.table), " ", pill(f.class, "bad"), h("span", { class: "muted" }, " " + f.finished_at.slice(0, 19).replace("T", " ")))) : h("span", { class: "muted" }, "none")),
      )))),
  );
}

// ---- routing and refresh -------------------------------------------------------------------------

async function refresh() {
  clearTimeout(ui.timer);
  const { path, params } = parseHash();
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", (link.dataset.nav === "tenants") === path.startsWith("/tenants"));
  }
  renderHealth();
  try {
    if (path.startsWith("/table/")) await tablePage(decodeURIComponent(path.slice("/table/".length)));
    else if (path.startsWith("/tenants")) await tenantsPage();
    else await overview(params);
    document.body.dataset.loaded = "true";
  } catch (error) {
    show(failure(error));
    document.body.dataset.loaded = "error";
  }
  // No refresh while someone types in a field.
  ui.timer = setTimeout(() => {
    if (document.activeElement && ["INPUT", "SELECT"].includes(document.activeElement.tagName)) ui.timer = setTimeout(refresh, REFRESH_MS);
    else refresh();
  }, REFRESH_MS);
}

async function start() {
  const input = document.getElementById("token");
  input.value = ui.token;
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    ui.token = input.value.trim();
    if (ui.token) sessionStorage.setItem("icepack-token", ui.token); else sessionStorage.removeItem("icepack-token");
    refresh();
  });
  try {
    ui.mutations = (await api("/v1/ui")).mutations;
  } catch (_) {
    ui.mutations = "token";
  }
  window.addEventListener("hashchange", refresh);
  refresh();
}

start();
