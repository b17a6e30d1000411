// Sana inspector: polls the API and draws what is submitted, what runs and what is shared.
// No build step: plain JavaScript and SVG. The user's selection and typed text survive refreshes.
"use strict";

const REFRESH_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";
const ui = { selected: null, sinks: {}, history: {} };

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

// With tokens configured (SANA_TOKENS_FILE) every call carries the token typed in the header; it is kept in
// sessionStorage (this tab only). In single-user mode no token is needed.
function api(path, options = {}) {
  const token = sessionStorage.getItem("sana-token");
  const headers = { accept: "application/json", ...(options.headers || {}) };
  if (token) headers.authorization = `Bearer ${token}`;
  return fetch(path, { ...options, headers });
}

function renderAuth(stats) {
  const state = $("auth-state");
  if (stats.status === 401) {
    state.textContent = sessionStorage.getItem("sana-token") ? "token refused" : "this service needs a token";
    state.className = "error";
  } else {
    state.textContent = sessionStorage.getItem("sana-token") ? "token in use" : "";
    state.className = "muted";
  }
}

async function getJson(path) {
  const response = await api(path);
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  return { status: response.status, ok: response.ok, body };
}

// ---- reuse summary -------------------------------------------------------

function renderStats(stats) {
  $("submitted-tasks").textContent = stats.submitted_tasks;
  $("running-tasks").textContent = stats.running_tasks;
  $("saving").textContent = `${stats.saving_percent}%`;
  const shares = stats.containment_shares || {};
  $("contained-count").textContent = stats.containment === false ? "off"
    : Object.values(shares).reduce((sum, count) => sum + count, 0);
  $("dataflow-count").textContent = stats.submitted_dataflows;
  $("dag-count").textContent = stats.running_dags;
  $("fragment-count").textContent = stats.fragments;
  const chart = $("histogram");
  chart.replaceChildren();
  const entries = Object.entries(stats.sharing_histogram || {}).map(([users, count]) => [Number(users), count]);
  if (!entries.length) {
    chart.append(svg("text", { x: 8, y: 20, class: "muted" }, "nothing runs"));
    return;
  }
  const width = chart.clientWidth || 400, height = chart.clientHeight || 140, bottom = 22, top = 14;
  const maxUsers = Math.max(...entries.map(([users]) => users));
  const maxCount = Math.max(...entries.map(([, count]) => count));
  const slot = (width - 20) / maxUsers;
  for (let users = 1; users <= maxUsers; users++) {
    const count = (entries.find(([u]) => u === users) || [users, 0])[1];
    const barHeight = ((height - bottom - top) * count) / maxCount;
    const x = 10 + (users - 1) * slot;
    chart.append(svg("rect", { x: x + 2, y: height - bottom - barHeight, width: Math.max(slot - 4, 2), height: barHeight, "data-users": users },
      svg("title", {}, `${count} task(s) used by ${users} dataflow(s)`)));
    if (count) chart.append(svg("text", { x: x + slot / 2, y: height - bottom - barHeight - 3, "text-anchor": "middle" }, count));
    chart.append(svg("text", { x: x + slot / 2, y: height - 6, "text-anchor": "middle" }, users));
  }
}

// ---- dataflows -------------------------------------------------------------

function costCell(cost, measured) {
  if (!cost || !measured) return el("td", { class: "cost muted", title: "nothing measured yet (dry run, or the first seconds)" }, "–");
  const kib = (bytes) => `${round(bytes / 1024, 1)} KiB`;
  const title = [
    `CPU ${round(cost.cost.cpu_cores, 3)} cores; alone ${round(cost.alone.cpu_cores, 3)}, sharing saves ${round(cost.saved_percent.cpu_cores, 1)} %`,
    `Kafka writes ${kib(cost.cost.kafka_bytes_per_s)}/s; alone ${kib(cost.alone.kafka_bytes_per_s)}/s`,
    `state ${kib(cost.cost.state_bytes)}; alone ${kib(cost.alone.state_bytes)}`,
  ].join("\n");
  return el("td", { class: "cost", title }, `${round(cost.cost.cpu_cores, 3)} cores`);
}

// A dataflow that failed at run time (its task quarantined) or waits for its query shows that, not a cost of 0.
function statusCell(flow) {
  if (flow.status === "failed" && flow.failure) {
    const f = flow.failure;
    const title = `task ${f.task} failed at run time and was taken out of its query; the others go on.\n` +
      `${f.error_class || ""} ${f.expression ? "in " + f.expression : ""}\n${f.error || ""}\nRemove it, fix it and submit it again.`;
    return el("td", { class: "cost status-failed", title }, `failed (${f.task})`);
  }
  if (flow.status === "stalled") {
    const restarts = (flow.stalled && flow.stalled.restarts) || 0;
    return el("td", { class: "cost status-stalled", title: `its Spark query is down or restarting (${restarts} restarts); it resumes from its checkpoint` }, "stalled");
  }
  return null;
}

// An id in a table cell: one line, ellipsized when long, the whole id in the title.
function idCell(id, attrs = {}) {
  return el("td", attrs, el("span", { class: "id", title: id }, id));
}

function renderDataflows(flows, costs) {
  const body = $("dataflow-rows");
  body.replaceChildren();
  if (ui.selected && !flows.some((flow) => flow.id === ui.selected)) ui.selected = null;
  for (const flow of flows) {
    const remove = el("button", { class: "remove", "data-id": flow.id, onclick: (event) => { event.stopPropagation(); removeDataflow(flow.id); } }, "remove");
    const row = el("tr", { "data-id": flow.id, class: flow.id === ui.selected ? "selected" : "", onclick: () => select(flow.id) },
      idCell(flow.id), el("td", { class: "text" }, flow.name), el("td", { class: "text" }, flow.owner || "–"),
      el("td", { class: "num" }, new Date(flow.submitted_at).toLocaleTimeString()), el("td", { class: "num" }, Object.keys(flow.tasks).length),
      statusCell(flow) || costCell(costs && costs.dataflows[flow.id], costs && costs.measured), el("td", {}, remove));
    body.append(row);
  }
  if (!flows.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No dataflow is submitted.")));
  renderSelection(costs);
}

async function select(id, toggle = true) {
  ui.selected = toggle && ui.selected === id ? null : id;
  if (ui.selected && !ui.sinks[ui.selected]) {
    const answer = await getJson(`/dataflows/${encodeURIComponent(ui.selected)}`);
    if (answer.ok) ui.sinks[ui.selected] = answer.body;
  }
  await refresh();
}

function renderSelection(costs) {
  const box = $("selection");
  const detail = ui.selected && ui.sinks[ui.selected];
  $("task-costs").replaceChildren();
  if (!detail) {
    box.textContent = "Select a dataflow to highlight its tasks.";
    return;
  }
  const sinks = Object.entries(detail.sinks).map(([sink, target]) => `${sink} → topic ${target.topic}`).join("; ");
  box.textContent = `${detail.id} (${detail.name}): ${Object.keys(detail.tasks).length} tasks; sinks: ${sinks}`;
  const cost = costs && costs.measured && costs.dataflows[detail.id];
  if (cost) renderTaskCosts(cost, Object.keys(detail.tasks));
}

// The selected dataflow's share of each task, named by the ids its owner submitted (the running id in the title),
// in the order of its document (``order``: the submitted ids).
function renderTaskCosts(cost, order) {
  const first = (row) => Math.min(...(row.submitted || []).map((task) => order.indexOf(task)));
  const table = $("task-costs");
  table.append(el("caption", {}, `${cost.id}: its share of each task (shared tasks cost each user 1/users)`),
    el("thead", {}, el("tr", {}, el("th", {}, "task"), ...["users", "CPU cores", "Kafka writes", "state"].map((h) => el("th", { class: "num" }, h)))));
  const kib = (bytes) => `${round(bytes / 1024, 1)} KiB`;
  const body = el("tbody");
  for (const row of [...cost.tasks].sort((a, b) => first(a) - first(b))) {
    body.append(el("tr", { "data-task": row.task },
      el("td", { class: "submitted text", title: `running task ${row.task}` }, (row.submitted || []).join(", ") || row.task),
      el("td", { class: "num" }, row.users ?? "–"), el("td", { class: "num" }, round(row.cpu_cores, 3)),
      el("td", { class: "num" }, `${kib(row.kafka_bytes_per_s)}/s`), el("td", { class: "num" }, kib(row.state_bytes))));
  }
  table.append(body);
}

async function removeDataflow(id) {
  const response = await api(`/dataflows/${encodeURIComponent(id)}`, { method: "DELETE" });
  const body = await response.json().catch(() => ({}));
  const box = $("submit-result");
  if (response.ok) {
    box.className = "success";
    box.textContent = `Removed ${id}; stopped ${body.terminated.length} running task(s).`;
  } else {
    box.className = "error";
    box.textContent = `${response.status}: ${body.detail || response.statusText}`;
  }
  if (ui.selected === id) ui.selected = null;
  await refresh();
}

async function submitDocument() {
  const text = $("document").value;
  const box = $("submit-result");
  const response = await api("/dataflows", { method: "POST", headers: { "content-type": "application/json" }, body: text });
  const body = await response.json().catch(() => ({ detail: response.statusText }));
  showDocumentTasks(text, response.ok ? null : (body.culprit || {}));
  if (response.ok) {
    box.className = "success";
    box.textContent = `Submitted ${body.id}: ${body.reused.length} task(s) reused, ${body.created.length} created.`;
    await select(body.id, false);
  } else {
    box.className = "error";
    box.textContent = `${response.status} ${body.code || ""}: ${body.detail}`;
    markCulprit(text, body.culprit || {});
  }
}

function showDocumentTasks(text, culprit) {
  const list = $("document-tasks");
  list.replaceChildren();
  let document_;
  try { document_ = JSON.parse(text); } catch (_) { return; }
  for (const task of (document_ && Array.isArray(document_.tasks)) ? document_.tasks : []) {
    const bad = culprit && culprit.task === task.id;
    list.append(el("li", { class: bad ? "culprit" : "", "data-task": task.id, title: bad ? `at fault: ${culprit.field || ""}` : task.type }, `${task.id}: ${task.type}`));
  }
}

function markCulprit(text, culprit) {
  if (!culprit.task) return;
  const area = $("document");
  const match = new RegExp(`"id"\\s*:\\s*"${culprit.task.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}"`).exec(text);
  if (match) {
    area.focus();
    area.setSelectionRange(match.index, match.index + match[0].length);
  }
}

// ---- running DAGs ----------------------------------------------------------

function summary(task) {
  const c = task.config || {};
  const cut = (text) => (text.length > 26 ? `${text.slice(0, 25)}…` : text);
  switch (task.type) {
    case "source": return cut(`topic ${c.topic}`);
    case "sink": return cut(`→ ${c.topic}`);
    case "filter": return cut(c.expr || "");
    case "select": return cut(Object.keys(c.columns || {}).join(", "));
    case "window_aggregate": return cut(`${c.window}${c.slide ? "/" + c.slide : ""} by ${(c.keys || []).join(",") || "all"}`);
    case "join": return cut(`on ${(c.on || []).join(",")}${c.window ? " ±" + c.window : ""}`);
    default: return cut(JSON.stringify(c));
  }
}

function shareColour(users) {
  const light = Math.max(35, 94 - (users - 1) * 12);
  return `hsl(218, 80%, ${light}%)`;
}

function fragmentColour(fragment) {
  let hash = 0;
  for (const ch of fragment) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0;
  return `hsl(${hash % 360}, 65%, 42%)`;
}

function layout(dag) {
  const byId = Object.fromEntries(dag.tasks.map((task) => [task.id, task]));
  const parents = Object.fromEntries(dag.tasks.map((task) => [task.id, []]));
  for (const stream of dag.streams) parents[stream.to].push(stream.from);
  const layer = {};
  const depth = (id) => {
    if (layer[id] !== undefined) return layer[id];
    layer[id] = 0;
    layer[id] = parents[id].length ? 1 + Math.max(...parents[id].map(depth)) : 0;
    return layer[id];
  };
  dag.tasks.forEach((task) => depth(task.id));
  const layers = [];
  for (const task of dag.tasks) (layers[layer[task.id]] ||= []).push(task.id);
  const row = {};
  layers.forEach((ids) => {
    ids.sort((a, b) => {
      const centre = (id) => (parents[id].length ? parents[id].reduce((sum, p) => sum + row[p], 0) / parents[id].length : 0);
      return centre(a) - centre(b) || byId[a].fragment.localeCompare(byId[b].fragment) || a.localeCompare(b);
    });
    ids.forEach((id, index) => { row[id] = index; });
  });
  return { layer, row, layers };
}

function renderDags(dags) {
  const box = $("dags");
  box.replaceChildren();
  if (!dags.length) {
    box.append(el("p", { class: "muted" }, "Nothing runs."));
    return;
  }
  const W = 168, H = 40, GX = 44, GY = 30;
  for (const dag of dags) {
    const { layer, row, layers } = layout(dag);
    const width = layers.length * (W + GX) + 20;
    const height = Math.max(...layers.map((ids) => ids.length)) * (H + GY) + 20;
    const picture = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "dag-svg", "data-dag": dag.id });
    picture.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#9ca3af" }))));
    const pos = (id) => ({ x: 10 + layer[id] * (W + GX), y: 10 + row[id] * (H + GY) });
    const mine = (task) => ui.selected && task.dataflows.includes(ui.selected);
    const tasks = Object.fromEntries(dag.tasks.map((task) => [task.id, task]));
    for (const stream of dag.streams) {
      const a = pos(stream.from), b = pos(stream.to);
      const lit = mine(tasks[stream.from]) && mine(tasks[stream.to]);
      picture.append(svg("path", { class: `edge${lit ? " highlight" : ""}`, d: `M ${a.x + W} ${a.y + H / 2} C ${a.x + W + GX / 2} ${a.y + H / 2}, ${b.x - GX / 2} ${b.y + H / 2}, ${b.x} ${b.y + H / 2}` },
        svg("title", {}, `port ${stream.port}`)));
    }
    for (const task of dag.tasks) {
      const { x, y } = pos(task.id);
      const users = task.dataflows.length;
      const classes = ["node", mine(task) ? "highlight" : "", ui.selected && !mine(task) ? "dim" : ""].join(" ").trim();
      const dark = users >= 5;
      const group = svg("g", { class: classes, "data-task": task.id, "data-type": task.type, "data-users": users, "data-fragment": task.fragment });
      group.append(svg("rect", { class: "frag", x: x - 3, y: y - 3, width: W + 6, height: H + 6, fill: "none", stroke: fragmentColour(task.fragment), "stroke-dasharray": "4 2", rx: 7 }));
      group.append(svg("rect", { class: "body", x, y, width: W, height: H, fill: shareColour(users) }));
      group.append(svg("text", { x: x + 6, y: y + 15, style: `font-weight:600;${dark ? "fill:#fff" : ""}` }, `${task.type} ×${users}`));
      group.append(svg("text", { x: x + 6, y: y + 31, style: dark ? "fill:#fff" : "" }, summary(task)));
      if (task.site) group.append(svg("text", { x: x + W - 4, y: y + H + 11, class: "site", "text-anchor": "end" }, `@${task.site}`));
      group.append(svg("title", {}, `${task.id}\nfragment ${task.fragment}\nsite ${task.site || "–"}\nused by ${task.dataflows.join(", ")}\n${JSON.stringify(task.config, null, 1)}`));
      picture.append(group);
    }
    const fragments = [...new Set(dag.tasks.map((task) => task.fragment))];
    const legend = el("div", { class: "legend" }, `fragments:`);
    for (const fragment of fragments) legend.append(el("i", { style: `border-color:${fragmentColour(fragment)};border-style:dashed` }), fragment);
    box.append(el("div", { class: "dag", "data-dag": dag.id }, el("h3", {}, `${dag.id}: ${dag.tasks.length} tasks, ${dag.dataflows.length} dataflow(s)`), legend, picture));
  }
}

// ---- optional panels (runtime, skew, WAN) ---------------------------------

function sparkline(values) {
  const width = 90, height = 20;
  const picture = svg("svg", { width, height });
  if (values.length < 2) return picture;
  const max = Math.max(...values, 1);
  const points = values.map((value, index) => `${(index * width) / (values.length - 1)},${height - (value * (height - 2)) / max - 1}`);
  picture.append(svg("polyline", { class: "spark", points: points.join(" ") }));
  return picture;
}

function totalLag(sourceLag) {
  let total = 0;
  for (const partitions of Object.values(sourceLag)) for (const rows of Object.values(partitions)) total += Number(rows) || 0;
  return total;
}

function lagTitle(sourceLag) {
  return Object.entries(sourceLag).map(([topic, parts]) => `${topic}: ${Object.entries(parts).map(([p, n]) => `p${p}=${n}`).join(" ")}`).join("\n");
}

// A query that is down measures no lag: its lag is unknown, not 0; nor is it before the query's first progress.
function lagCell(fragment) {
  const lag = fragment.source_lag || {};
  if (fragment.status !== "running") return el("td", { class: "num lag muted", title: "its query is down: no lag is measured" }, "—");
  if (!Object.keys(lag).length) return el("td", { class: "num lag muted", title: "no progress reported yet" }, "–");
  const held = Number(fragment.gather_s) || 0;
  if (!held) return el("td", { class: "num lag", title: lagTitle(lag) }, totalLag(lag));
  // records its query holds on purpose (its sinks' max_delay) are lag by count, not a query falling behind
  return el("td", { class: "num lag", title: `${lagTitle(lag)}\nits query holds records up to ${held} s for fewer, larger batches (its sinks' max_delay)` },
    totalLag(lag), el("span", { class: "held muted" }, ` held ≤${held} s`));
}

// Running; stalled (its query down or restarting, with Spark's error); or running with tasks quarantined at run time.
function fragmentStatusCell(fragment, failed) {
  if (fragment.status !== "running") {
    const restarts = fragment.restarts ? ` (${fragment.restarts} restarts)` : "";
    return el("td", { class: "status status-stalled", title: `its Spark query is down or restarting; it resumes from its checkpoint\n${fragment.error || ""}` },
      `stalled${restarts}`);
  }
  const quarantined = (fragment.tasks || []).filter((task) => failed[task]);
  if (!quarantined.length) return el("td", { class: "status" }, "running");
  const names = quarantined.map((task) => failed[task]).join(", ");
  return el("td", { class: "status status-failed", title: `taken out of the query at run time; the other tasks go on: ${names}` },
    `failed: ${names}`);
}

function round(value, digits = 1) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

// ``failed``: running task id -> the submitted tasks it served ("df-3/predict"), for the tasks quarantined at run time.
function renderFragments(answer, failed) {
  const box = $("fragment-body");
  box.replaceChildren();
  if (!answer.ok) { box.append("Runtime metrics are not available."); return; }
  const fragments = answer.body.fragments || [];
  if (answer.body.kind === "dry-run") { box.append("Dry run: nothing runs on Spark, so no fragment has metrics."); return; }
  if (!fragments.length) { box.append("No fragment runs."); return; }
  const headings = [["fragment"], ["query"], ["status"], ["rows/s", "num"], ["batch ms", "num"], ["lag", "num"], ["state rows", "num"], ["rows/s, last minutes"]];
  const table = el("table", {}, el("thead", {}, el("tr", {}, ...headings.map(([h, kind]) => el("th", kind ? { class: kind } : {}, h)))));
  const body = el("tbody");
  for (const fragment of fragments) {
    const history = (ui.history[fragment.fragment] ||= []);
    history.push(Number(fragment.input_rows_per_s || 0));
    if (history.length > 90) history.shift();
    body.append(el("tr", { "data-fragment": fragment.fragment, class: fragment.status === "running" ? "" : "degraded" },
      idCell(fragment.fragment), idCell(fragment.query), fragmentStatusCell(fragment, failed),
      el("td", { class: "num" }, round(fragment.input_rows_per_s)), el("td", { class: "num" }, round(fragment.batch_duration_ms, 0)),
      lagCell(fragment), el("td", { class: "num" }, fragment.state_rows ?? "–"), el("td", {}, sparkline(history))));
  }
  table.append(body);
  box.append(table);
}

function bars(values) {
  const width = 160, height = 36;
  const picture = svg("svg", { width, height, class: "workers" });
  const max = Math.max(...values, 1);
  const slot = width / Math.max(values.length, 1);
  values.forEach((value, index) => {
    const barHeight = ((height - 2) * value) / max;
    picture.append(svg("rect", { x: index * slot + 1, y: height - barHeight, width: Math.max(slot - 2, 1), height: barHeight, fill: "#2563eb" },
      svg("title", {}, `worker ${index}: ${value} rows`)));
  });
  return picture;
}

const WORKER_COLORS = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

// Rows each logical worker processed per micro-batch, one line per worker (the last HISTORY batches).
function loadChart(history, groups) {
  const width = 420, height = 120, pad = 4;  // drawn in these units, stretched to the card's width
  const picture = svg("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", class: "load-chart" });
  const workers = history.length ? history[0].length : 0;
  if (history.length < 2 || !workers) return picture;
  const max = Math.max(1, ...history.flat());
  const skewed = new Set(groups.map((group) => group.skewed));
  const helpers = new Set(groups.flatMap((group) => group.helpers.map((helper) => helper.worker)));
  for (let worker = 0; worker < workers; worker += 1) {
    const points = history.map((rows, batch) =>
      `${pad + (batch * (width - 2 * pad)) / (history.length - 1)},${height - pad - ((rows[worker] || 0) * (height - 2 * pad)) / max}`);
    const role = skewed.has(worker) ? "skewed" : helpers.has(worker) ? "helper" : "plain";
    picture.append(svg("polyline", { class: `worker ${role}`, "data-worker": worker, points: points.join(" "),
      stroke: WORKER_COLORS[worker % WORKER_COLORS.length], fill: "none", "stroke-width": role === "plain" ? 1 : 2.5 },
      svg("title", {}, `worker ${worker} (${role}): ${history[history.length - 1][worker]} rows in the last batch`)));
  }
  return picture;
}

// Below this many rows per worker on average, a min/max ratio measures where a handful of keys hashed, not skew.
const MIN_ROWS_PER_WORKER = 100;

// The balance of an operator's rows over its workers (least loaded / most loaded); "idle" without rows, "—" with too few.
function balance(loads) {
  const total = loads.reduce((sum, value) => sum + value, 0);
  if (!total) return { text: "idle", title: "no rows yet", measured: false };
  if (total < MIN_ROWS_PER_WORKER * loads.length) {
    return { text: "—", title: `${total} rows over ${loads.length} workers: too few to tell skew from chance`, measured: false };
  }
  return { text: (Math.min(...loads) / Math.max(...loads)).toFixed(2), title: "rows of the least loaded worker / the most loaded", measured: true };
}

function skewGroups(reshape, measured) {
  const list = el("ul", { class: "skew-groups" });
  for (const group of reshape.groups || []) {
    const helpers = group.helpers.map((helper) => `${helper.worker} (${(100 * helper.fraction).toFixed(1)}%)`).join(", ");
    const ratio = measured ? group.balance_ratio.toFixed(2) : "—";
    list.append(el("li", { class: "skew-group", "data-skewed": group.skewed },
      `worker ${group.skewed} → helpers ${helpers}: phase ${group.phase}, iteration ${group.iteration}, balance ratio ${ratio}`));
  }
  if (!(reshape.groups || []).length) list.append(el("li", { class: "muted" }, "no skewed worker"));
  return list;
}

// ``names``: running task id -> the submitted tasks it serves ("df-2/avg").
function renderSkew(answer, names) {
  const box = $("skew-body");
  box.replaceChildren();
  const operators = [];
  for (const fragment of (answer.ok ? answer.body.fragments || [] : [])) {
    for (const [task, metrics] of Object.entries(fragment.keyed_operators || {})) operators.push([task, metrics]);
  }
  if (!operators.length) { box.append("No keyed operator runs on Spark."); return; }
  box.append(el("p", { class: "muted" }, "Rows per logical worker and micro-batch (thick: a skewed worker and its helpers), total rows per worker, and Reshape's splits."));
  const cards = el("div", { class: "skew-ops" });
  for (const [task, metrics] of operators) {
    const loads = (metrics.workers && metrics.workers.total_rows) || [];
    const total = loads.reduce((sum, value) => sum + value, 0);
    const load = balance(loads);
    const reshape = metrics.reshape || { groups: [], load_history: [] };
    const state = reshape.enabled ? `Reshape on (split by ${reshape.split}; eta ${reshape.eta}, tau ${reshape.tau} in [${reshape.tau_range.join(", ")}])` : "Reshape off";
    cards.append(el("div", { class: "skew-op", "data-task": task },
      el("h3", { title: `running task ${task}` }, `${(names[task] || [task]).join(", ")} (${metrics.operator})`),
      el("div", {}, `${loads.length} workers, ${total} rows, min/max load `, el("span", { class: "balance", title: load.title }, load.text)),
      el("div", { class: "muted" }, `${state}; ${reshape.detections ?? 0} detection(s), ${reshape.iterations ?? 0} iteration(s), ${reshape.rollbacks ?? 0} rollback(s), ${metrics.moved_state_rows ?? 0} state rows moved`),
      skewGroups(reshape, load.measured), loadChart(reshape.load_history || [], reshape.groups || []), bars(loads)));
  }
  box.append(cards);
}

// ``answer`` is null when the service has no WAN configuration (``/stats`` says so): ``/wan`` is not asked then.
function renderWan(answer) {
  const box = $("wan-body");
  box.replaceChildren();
  if (!answer || !answer.ok) { box.append("No WAN configuration: every equivalent task is shared."); return; }
  const links = [...(answer.body.links || [])].sort((a, b) => (b.utilization || 0) - (a.utilization || 0));
  box.append(el("div", {}, `sites: ${(answer.body.sites || []).map((s) => s.name || s).join(", ")}`));
  const auto = answer.body.last_replacement;  // the service's own re-placement (``replacement`` configured)
  if (auto) {
    const when = new Date(auto.at * 1000).toLocaleTimeString();
    box.append(el("p", { class: auto.error ? "last-replacement error" : "last-replacement" }, auto.error
      ? `Automatic re-placement failed at ${when}, nothing changed: ${auto.error}`
      : `Automatic re-placement at ${when}: ${auto.dataflows.length} dataflow(s) re-planned, ` +
        `${auto.start.length} task(s) started, ${auto.stop.length} stopped.`));
  }
  if (ui.replaced && Date.now() - ui.replaced.at < 60000) {  // the last "Re-place now", for a minute
    box.append(el("p", { class: ui.replaced.ok ? "replace-result success" : "replace-result error" }, ui.replaced.text));
  }
  const busy = links.filter((link) => (link.load_mbps || 0) > 0);
  const table = el("table", {}, el("thead", {}, el("tr", {}, ...["link", "Mbps", "load", "used", "basis", "streams"].map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const link of busy) {
    body.append(el("tr", { "data-link": `${link.from}>${link.to}` }, el("td", {}, `${link.from} → ${link.to}`), el("td", {}, link.bandwidth_mbps),
      el("td", {}, round(link.load_mbps, 2)), el("td", {}, `${Math.round(100 * (link.utilization || 0))}%`),
      el("td", { class: "basis", title: `estimated: ${round(link.estimated_load_mbps || 0, 2)} Mbps` }, link.basis || "estimated"),
      el("td", { title: (link.streams || []).map((s) => s.producer).join("\n") }, (link.streams || []).length)));
  }
  table.append(body);
  box.append(table);
  box.append(el("p", { class: "muted" }, `${links.length - busy.length} more link(s) carry nothing.`));
  if (links.some((link) => (link.utilization || 0) >= REPLACE_AT)) renderReplacement(box, (wanGeneration += 1));
}

// While a link is hot, show what re-placement would move, with a button that carries it out (POST).
const REPLACE_AT = 0.95;
let wanGeneration = 0;

async function renderReplacement(box, generation) {
  const answer = await getJson(`/wan/replacement?utilization=${REPLACE_AT}`);
  if (!answer.ok || generation !== wanGeneration) return;  // a newer refresh redrew the panel meanwhile
  const moves = answer.body.dataflows.flatMap((flow) => flow.moves.map((move) => [flow, move]));
  const list = el("ul", { class: "replacement" });
  for (const [flow, move] of moves) {
    const how = move.from.shared && move.to.new ? " (stops sharing)" : "";
    list.append(el("li", { "data-task": `${flow.dataflow}/${move.task}` },
      `${flow.dataflow} (${flow.name}): ${move.task} ${move.from.site} → ${move.to.site}${how}`));
  }
  const plan = el("div", { class: "replacement-plan" },
    el("p", {}, `Re-placement at ${Math.round(100 * REPLACE_AT)}% utilization would re-plan ` +
      `${answer.body.dataflows.length} dataflow(s) over ${answer.body.hot_links.length} hot link(s): ${moves.length} task(s) would move.`),
    list);
  if (moves.length) {
    const button = el("button", { class: "replace-now", title: "POST /wan/replacement: the work is handed over at a cut" }, "Re-place now");
    button.addEventListener("click", () => replaceNow(button));
    plan.append(button);
  }
  box.append(plan);
}

async function replaceNow(button) {
  button.disabled = true;
  const response = await api(`/wan/replacement?utilization=${REPLACE_AT}`, { method: "POST" });
  const body = await response.json().catch(() => ({ detail: response.statusText }));
  ui.replaced = response.ok
    ? { ok: true, at: Date.now(), text: `Re-placed ${body.dataflows.length} dataflow(s): ${body.start.length} task(s) started, ${body.stop.length} stopped.` }
    : { ok: false, at: Date.now(), text: `Re-placement failed, nothing changed: ${response.status} ${body.code || ""}: ${body.detail}` };
  await refresh();
}

// ---- refresh loop ----------------------------------------------------------

// Running task id -> the submitted tasks it serves, as "df-2/avg": what their owners call it.
function taskNames(flows) {
  const names = {};
  for (const flow of flows) for (const [task, running] of Object.entries(flow.tasks)) (names[running] ||= []).push(`${flow.id}/${task}`);
  return names;
}

// Running task id -> its submitted names, for the tasks quarantined at run time (a failed dataflow names its task).
function failedTasks(flows, names) {
  const failed = {};
  for (const flow of flows) {
    if (flow.status === "failed" && flow.failure) failed[flow.failure.running_task] = names[flow.failure.running_task].join(", ");
  }
  return failed;
}

async function refresh() {
  try {
    const [health, stats, flows, running, fragments, costs] = await Promise.all([
      getJson("/healthz"), getJson("/stats"), getJson("/dataflows"), getJson("/running"),
      getJson("/runtime/fragments"), getJson("/costs"),
    ]);
    const wan = stats.ok && stats.body.wan_configured ? await getJson("/wan") : null;
    const listed = flows.ok ? flows.body.dataflows : [];
    const names = taskNames(listed);
    const badge = $("health");
    badge.textContent = health.body ? health.body.status : "unreachable";
    badge.className = `badge ${health.body ? health.body.status : "degraded"}`;
    badge.title = health.body ? JSON.stringify(health.body.components, null, 1) : "";
    renderAuth(stats);
    if (stats.ok) renderStats(stats.body);
    if (flows.ok) renderDataflows(flows.body.dataflows, costs.ok ? costs.body : null);
    if (running.ok) renderDags(running.body.dags);
    renderFragments(fragments, failedTasks(listed, names));
    renderSkew(fragments, names);
    renderWan(wan);
    $("refreshed").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    $("health").textContent = "unreachable";
    $("health").className = "badge degraded";
  }
}

$("submit").addEventListener("click", submitDocument);
$("auth").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  if (token) sessionStorage.setItem("sana-token", token);
  else sessionStorage.removeItem("sana-token");
  $("token").value = "";
  await refresh();
});
$("document").addEventListener("input", () => showDocumentTasks($("document").value, null));
$("upload").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  if (file) {
    $("document").value = await file.text();
    showDocumentTasks($("document").value, null);
  }
});
refresh();
setInterval(refresh, REFRESH_MS);
