// Jobs: filter by status, queue, task, schedule and text (a part of the id, task or idempotency
// key); pages by cursor; lookup by id. Errors are the attempts' (the attempts page, a job's page).
// The first page refreshes in place when the live stream reports a change.

import { get, query, rows } from "../api.js";
import { empty, failure, h, loading, replace, status, table, when } from "../ui.js";

const STATUSES = ["", "waiting", "queued", "leased", "succeeded", "dead", "cancelled"];
const FILTERS = ["status", "queue", "task", "schedule", "q"];

export async function render({ root, route }) {
  const p = route.params;
  const list = h("div", { id: "job-list" }, loading());
  const field = (name, label, el) => h("label", {}, label, el);
  const inputs = {
    status: h("select", { name: "status", "aria-label": "status" }, STATUSES.map((s) => h("option", { value: s, selected: s === (p.status || "") }, s || "any"))),
    queue: h("input", { name: "queue", value: p.queue || "", size: 10 }),
    task: h("input", { name: "task", value: p.task || "", size: 14 }),
    schedule: h("input", { name: "schedule", value: p.schedule || "", size: 10 }),
    // What GET /jobs?q= matches: a part of the id, the task or the idempotency key.
    q: h("input", { name: "q", type: "search", value: p.q || "", size: 16, placeholder: "id, task or idempotency key" }),
  };
  const form = h("form", { class: "filters", id: "job-filters", onsubmit: (ev) => {
    ev.preventDefault();
    const next = {};
    for (const k of FILTERS) next[k] = inputs[k].value.trim();
    location.hash = `#/jobs${query(next)}`;
  } },
  field("status", "status", inputs.status), field("queue", "queue", inputs.queue), field("task", "task", inputs.task),
  field("schedule", "schedule", inputs.schedule), field("q", "search", inputs.q), h("button", { class: "primary" }, "Filter"),
  h("a", { href: "#/jobs" }, "clear"));
  inputs.status.addEventListener("change", () => form.requestSubmit());
  replace(root, h("h1", {}, "Jobs"), form, list);

  let inflight = false;
  let again = false;
  let shown = null;  // the rows on screen, to skip redrawing an unchanged page
  let disposed = false;
  async function load() {
    if (inflight) { again = true; return; }
    inflight = true;
    try {
      const params = { limit: 50 };
      for (const k of FILTERS) if (p[k]) params[k] = p[k];
      if (p.cursor) params.cursor = p.cursor;
      const data = await get(`/jobs${query(params)}`);
      if (disposed) return;
      const jobs = rows(data, "jobs");
      const next = data?.next_cursor ?? data?.next ?? null;
      const partial = data?.partial === true;  // the server stopped looking before the page filled
      const filtered = FILTERS.some((k) => p[k]);
      const key = JSON.stringify([jobs, next, partial]);
      if (key === shown) return;
      shown = key;
      const selected = list.querySelector("tr.selected")?.dataset.href;
      replace(list,
        table([
          { label: "id", cell: (j) => h("a", { href: `#/jobs/${j.id}` }, `#${j.id}`) },
          { label: "task", cell: (j) => j.task },
          { label: "queue", cell: (j) => h("a", { href: `#/queues/${encodeURIComponent(j.queue)}` }, j.queue) },
          { label: "status", cell: (j) => status(j.status) },
          { label: "attempts", num: true, narrow: true, cell: (j) => `${j.attempts}/${j.max_attempts}` },
          { label: "created", narrow: true, cell: (j) => when(j.created_at) },
          { label: "finished", narrow: true, cell: (j) => when(j.finished_at) },
        ], jobs, {
          rowLink: (j) => `#/jobs/${j.id}`,
          empty: partial ? empty("No match among the jobs looked at so far.", "Each request looks at up to 5,000 jobs; follow “older »” to keep looking.")
            : filtered ? empty("No job matches these filters.", "Clear a filter, or check the queue and task names.")
            : empty("No jobs yet.", "Enqueue one: jobrun enqueue TASK '{\"some\": \"payload\"}' --queue default"),
        }),
        partial && jobs.length ? h("p", { class: "legend", id: "partial-page" }, "Fewer than a page: this request stopped after looking at 5,000 jobs. Older matches may follow.") : null,
        h("div", { class: "pager" },
          p.cursor ? h("a", { href: `#/jobs${query({ ...p, cursor: "" })}` }, "« newest") : null,
          next !== null && next !== undefined ? h("a", { href: `#/jobs${query({ ...p, cursor: next })}`, id: "next-page" }, "older »") : null));
      if (selected) list.querySelector(`tr[data-href="${CSS.escape(selected)}"]`)?.classList.add("selected");
    } catch (err) {
      if (!disposed) replace(list, failure(err, "Could not list jobs"));
    } finally {
      inflight = false;
      if (again && !disposed) { again = false; load(); }
    }
  }
  await load();
  return {
    // Newer jobs appear, and statuses move, only on the first page; older pages stay put.
    live(frame) { if (!p.cursor && !frame.error) load(); },
    dispose() { disposed = true; },
  };
}
