// Attempts: every finished attempt across jobs, newest first (GET /api/v1/attempts), filtered
// by outcome, task and queue; pages by cursor. "failures" is the four outcomes that went wrong
// (as the overview's latest failures count them). The first page refreshes on a live frame.

import { get, query, rows } from "../api.js";
import { duration, empty, failure, firstLine, h, loading, replace, status, table, when } from "../ui.js";

const OUTCOMES = ["succeeded", "failed", "retry", "timeout", "worker_lost", "lease_expired", "cancelled", "released"];
const FAILURES = ["failed", "timeout", "worker_lost", "lease_expired"];
const FILTERS = ["outcome", "task", "queue"];

// The outcome filter as the API takes it: repeatable, any of them matches.
function outcomes(choice) {
  if (!choice) return [];
  return choice === "failures" ? FAILURES : [choice];
}

export async function render({ root, route }) {
  const p = route.params;
  const list = h("div", { id: "attempt-list" }, loading());
  const field = (label, el) => h("label", {}, label, el);
  const inputs = {
    outcome: h("select", { name: "outcome", "aria-label": "outcome" },
      h("option", { value: "", selected: !p.outcome }, "any"),
      h("option", { value: "failures", selected: p.outcome === "failures" }, "failures (failed, timeout, worker lost, lease expired)"),
      OUTCOMES.map((o) => h("option", { value: o, selected: o === p.outcome }, o))),
    task: h("input", { name: "task", value: p.task || "", size: 14 }),
    queue: h("input", { name: "queue", value: p.queue || "", size: 10 }),
  };
  const form = h("form", { class: "filters", id: "attempt-filters", onsubmit: (ev) => {
    ev.preventDefault();
    const next = {};
    for (const k of FILTERS) next[k] = inputs[k].value.trim();
    location.hash = `#/attempts${query(next)}`;
  } },
  field("outcome", inputs.outcome), field("task", inputs.task), field("queue", inputs.queue),
  h("button", { class: "primary" }, "Filter"), h("a", { href: "#/attempts" }, "clear"));
  inputs.outcome.addEventListener("change", () => form.requestSubmit());
  replace(root, h("h1", {}, "Attempts"), form, list);

  let inflight = false;
  let again = false;
  let shown = null;
  let disposed = false;
  async function load() {
    if (inflight) { again = true; return; }
    inflight = true;
    try {
      const params = new URLSearchParams({ limit: "50" });
      for (const o of outcomes(p.outcome)) params.append("outcome", o);
      for (const k of ["task", "queue", "cursor"]) if (p[k]) params.set(k, p[k]);
      const data = await get(`/attempts?${params}`);
      if (disposed) return;
      const items = rows(data, "attempts");
      const next = data?.next_cursor ?? null;
      const key = JSON.stringify([items, next]);
      if (key === shown) return;
      shown = key;
      const filtered = FILTERS.some((k) => p[k]);
      replace(list,
        table([
          { label: "job", cell: (a) => h("a", { href: `#/jobs/${a.job_id}` }, `#${a.job_id}`) },
          { label: "attempt", num: true, narrow: true, cell: (a) => String(a.attempt) },
          { label: "task", cell: (a) => h("a", { href: `#/attempts${query({ ...p, task: a.task, cursor: "" })}` }, a.task) },
          { label: "queue", narrow: true, cell: (a) => a.queue },
          { label: "outcome", cell: (a) => status(a.outcome) },
          { label: "finished", narrow: true, cell: (a) => when(a.finished_at) },
          { label: "ran", num: true, narrow: true, cell: (a) => (a.started_at ? duration((new Date(a.finished_at) - new Date(a.started_at)) / 1000) : "–") },
          { label: "worker", narrow: true, cell: (a) => [a.worker_host, a.worker_pid && `pid ${a.worker_pid}`].filter(Boolean).join(" · ") || "–" },
          { label: "error", cell: (a) => h("span", { class: "err", title: a.error || "" }, firstLine(a.error)) },
        ], items, {
          rowLink: (a) => `#/jobs/${a.job_id}`,
          empty: filtered ? empty("No attempt matches these filters.", "Clear a filter, or check the task and queue names.")
            : empty("No attempt has finished yet.", "Attempts appear here as masters finish jobs."),
        }),
        h("div", { class: "pager" },
          p.cursor ? h("a", { href: `#/attempts${query({ ...p, cursor: "" })}` }, "« newest") : null,
          next ? h("a", { href: `#/attempts${query({ ...p, cursor: next })}`, id: "next-page" }, "older »") : null));
    } catch (err) {
      if (!disposed) replace(list, failure(err, "Could not list attempts"));
    } finally {
      inflight = false;
      if (again && !disposed) { again = false; load(); }
    }
  }
  await load();
  return {
    live(frame) { if (!p.cursor && !frame.error) load(); },
    dispose() { disposed = true; },
  };
}
