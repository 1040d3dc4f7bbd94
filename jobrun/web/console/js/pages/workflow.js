// One workflow: its jobs drawn as a graph (each column a step further from the jobs that wait
// for nothing; an edge from each parent to its dependent), each node coloured by its live
// status and linked to its job; cancel every member not finished.

import { get, post } from "../api.js";
import { failure, h, loading, replace, status } from "../ui.js";

const SVG = "http://www.w3.org/2000/svg";
const COL = 170, ROW = 46, W = 140, H = 30;

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// Each job's column: 0 for jobs that wait for no member, else one more than its deepest parent
// (jobs come in id order, and a parent always has a smaller id than its dependents).
export function layout(jobs) {
  const col = new Map(), rows = [];
  for (const j of jobs) {
    const parents = j.after.filter((p) => col.has(p));
    const c = parents.length ? Math.max(...parents.map((p) => col.get(p))) + 1 : 0;
    col.set(j.id, c);
    rows[c] = (rows[c] || 0) + 1;
  }
  const seen = [], at = new Map();
  for (const j of jobs) {
    const c = col.get(j.id);
    seen[c] = (seen[c] || 0) + 1;
    at.set(j.id, { x: 10 + c * COL, y: 10 + (seen[c] - 1) * ROW });
  }
  return { at, width: 20 + (rows.length - 1) * COL + W, height: 20 + Math.max(...rows) * ROW };
}

function graph(flow) {
  const { at, width, height } = layout(flow.jobs);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `workflow ${flow.id}`, class: "workflow-graph" });
  for (const j of flow.jobs) {
    for (const p of j.after) {
      if (!at.has(p)) continue;
      const a = at.get(p), b = at.get(j.id);
      svg.append(s("line", { x1: a.x + W, y1: a.y + H / 2, x2: b.x, y2: b.y + H / 2, class: "edge" }));
    }
  }
  for (const j of flow.jobs) {
    const { x, y } = at.get(j.id);
    const node = s("a", { href: `#/jobs/${j.id}`, class: `node status ${j.status}`, "data-job": j.id },
      s("title", {}, `${j.task} #${j.id}: ${j.status}${j.cancel_reason ? ` (${j.cancel_reason})` : ""}`),
      s("rect", { x, y, width: W, height: H, rx: 4 }),
      s("text", { x: x + 8, y: y + 19 }, `#${j.id} ${j.task}`.slice(0, 20)));
    svg.append(node);
  }
  return svg;
}

export async function render({ root, route }) {
  const id = route.id;
  let flow = null, disposed = false;
  const notice = h("div", { id: "workflow-notice", "aria-live": "polite" });
  const body = h("div", { id: "workflow-body" }, loading());
  replace(root, h("h1", {}, `Workflow #${id}`), notice, body);

  function draw() {
    const open = flow.status === "running";
    replace(body,
      h("div", { class: "actions" },
        h("button", { id: "cancel-workflow", class: "danger", disabled: !open, onclick: cancel, title: open ? "Cancel every member not finished" : "Every member has finished" }, "Cancel workflow")),
      h("p", {}, `${flow.shape} · `, status(flow.status), ` · ${flow.jobs.length} jobs`),
      h("div", { class: "graph-scroll" }, graph(flow)));
  }

  async function cancel() {
    try {
      const done = await post(`/workflows/${encodeURIComponent(id)}/cancel`);
      replace(notice, h("div", { class: "notice ok", role: "status" }, `Cancelled ${done.cancelled.length} members.`));
    } catch (err) {
      replace(notice, failure(err, "Could not cancel"));
    }
    await refresh();
  }

  async function refresh() {
    try {
      const fresh = await get(`/workflows/${encodeURIComponent(id)}`);
      if (disposed) return;
      const key = (f) => f.jobs.map((j) => j.status).join();
      const changed = !flow || key(fresh) !== key(flow);
      flow = fresh;
      if (changed) draw();
    } catch (err) {
      if (!disposed) replace(body, failure(err, `Could not load workflow #${id}`));
    }
  }

  await refresh();
  return {
    live(frame) { if (!frame.error && flow && flow.status === "running") refresh(); },
    dispose() { disposed = true; },
  };
}
