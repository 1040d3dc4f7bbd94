// Tasks: per task, attempts in the last hour by outcome, success rate and run times.

import { get, rows } from "../api.js";
import { duration, empty, failure, h, loading, num, replace, table } from "../ui.js";

// The API's task rows: runs, succeeded, mean and p95 run time (names vary by server version).
function normalise(t) {
  const attempts = t.attempts ?? t.runs ?? 0;
  const succeeded = t.succeeded ?? (t.success_rate === null || t.success_rate === undefined ? 0 : Math.round(t.success_rate * attempts));
  return { ...t, task: t.task ?? t.name, attempts, succeeded, failed: t.failed ?? attempts - succeeded,
    run_p50: t.mean_run_seconds ?? t.mean_run ?? null, run_p95: t.p95_run_seconds ?? t.p95_run ?? null };
}

export async function render({ root }) {
  const body = h("div", { id: "tasks-body" }, loading());
  replace(root, h("h1", {}, "Tasks"), h("p", { class: "legend" }, "Attempts: the newest 2,000 that ended in the last hour. Jobs: queued and leased now; succeeded, dead and cancelled among the newest 2,000 that finished in the last hour."), body);
  let disposed = false;
  let inflight = false;
  async function load() {
    if (inflight) return;
    inflight = true;
    try {
      const tasks = rows(await get("/tasks"), "tasks").map(normalise);
      if (disposed) return;
      replace(body, table([
        { label: "task", cell: (t) => h("a", { href: `#/jobs?task=${encodeURIComponent(t.task)}` }, t.task) },
        { label: "attempts", num: true, cell: (t) => num(t.attempts) },
        { label: "succeeded", num: true, cell: (t) => num(t.succeeded) },
        { label: "failed", num: true, cell: (t) => (t.failed ? h("span", { class: "err" }, num(t.failed)) : "0") },
        { label: "success", num: true, cell: (t) => (t.attempts ? `${num((100 * t.succeeded) / t.attempts, 1)} %` : "–") },
        { label: "jobs", narrow: true, cell: (t) => (t.counts ? Object.entries(t.counts).filter(([, n]) => n).map(([s, n]) => `${s} ${n}`).join(", ") || "none" : "–") },
        { label: "served by", num: true, narrow: true, cell: (t) => (t.served_by ? t.served_by.length : "–") },
        { label: "run mean", num: true, narrow: true, cell: (t) => duration(t.run_p50) },
        { label: "run p95", num: true, narrow: true, cell: (t) => duration(t.run_p95) },
      ], tasks, { rowLink: (t) => `#/jobs?task=${encodeURIComponent(t.task)}`, empty: empty("No attempt finished in the last hour.", "Tasks show up here once masters run them.") }));
    } catch (err) {
      if (!disposed) replace(body, failure(err, "Could not read task statistics"));
    } finally {
      inflight = false;
    }
  }
  await load();
  let last = 0;
  return {
    live(f) { if (!f.error && Date.now() - last > 5000) { last = Date.now(); load(); } },
    dispose() { disposed = true; },
  };
}
