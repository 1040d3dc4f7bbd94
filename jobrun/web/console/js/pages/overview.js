// Overview: per-queue depth by status, rates in and done, wait p50/p95, busy/total children,
// latest failures and a chart, all from the live events frames (no polling).

import { draw } from "../chart.js";
import { duration, empty, firstLine, h, num, rate, replace, status, table } from "../ui.js";

export function render({ root, frame }) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Jobs done per second and queue depth over the last minutes");
  const body = h("div", { id: "overview-body" });
  replace(root,
    h("h1", {}, "Overview"),
    body,
    h("h2", {}, "Throughput and depth"),
    h("p", { class: "legend" }, h("span", { class: "a" }, "━ done/s (60 s average)"), "  ", h("span", { class: "b" }, "━ depth (queued + leased)")),
    svg);

  function live(f) {
    if (f.error) {
      replace(body, h("div", { class: "state error", role: "alert" }, h("strong", {}, f.error),
        h("p", {}, "Check that PostgreSQL is up and that `jobrun web` has the right database URL; this page resumes by itself.")));
      return;
    }
    const queues = f.queues || [];
    const masters = f.masters || [];
    const busy = masters.reduce((a, m) => a + m.busy, 0);
    const total = masters.reduce((a, m) => a + m.concurrency, 0);
    const sum = (k) => queues.reduce((a, q) => a + (q[k] || 0), 0);
    // The rates cover the stream's reads of the last 60 s (less while the stream is young).
    const over = f.rate_seconds ? `${Math.round(f.rate_seconds)} s` : "60 s";
    const cards = h("div", { class: "grid", id: "totals" },
      card("queued", num(sum("queued")), "runnable now"),
      card("scheduled", num(sum("scheduled")), "waiting for run_at"),
      card("leased", num(sum("leased")), "running or claimed"),
      card("in/s", num(sum("enqueued_per_s"), 1), `enqueued, ${over}`),
      card("done/s", num(sum("done_per_s"), 1), `finished, ${over}`),
      card("children", `${busy}/${total}`, `busy/total in ${masters.length} master${masters.length === 1 ? "" : "s"}`));
    const noMasters = masters.length ? null : h("div", { class: "state empty", id: "no-masters" },
      h("strong", {}, "No master is running."),
      h("p", {}, "Jobs stay queued until one starts: ", h("code", {}, "jobrun-master -A yourapp.tasks -c 4"),
        f.stale_masters ? ` (${f.stale_masters} master${f.stale_masters === 1 ? " has" : "s have"} stopped reporting)` : ""));
    const qtable = table([
      { label: "queue", cell: (q) => h("a", { href: `#/queues/${encodeURIComponent(q.queue)}` }, q.queue) },
      { label: "", cell: (q) => (q.paused ? status("paused") : "") },
      { label: "queued", num: true, cell: (q) => h("a", { href: `#/jobs?status=queued&queue=${encodeURIComponent(q.queue)}` }, num(q.queued)) },
      { label: "scheduled", num: true, narrow: true, cell: (q) => num(q.scheduled) },
      { label: "leased", num: true, cell: (q) => num(q.leased) },
      { label: "in", num: true, cell: (q) => rate(q.enqueued_per_s) },
      { label: "done", num: true, cell: (q) => rate(q.done_per_s) },
      { label: "wait p50", num: true, narrow: true, cell: (q) => duration(q.wait_p50) },
      { label: "wait p95", num: true, narrow: true, cell: (q) => duration(q.wait_p95) },
      { label: "oldest", num: true, narrow: true, cell: (q) => duration(q.oldest_age) },
      { label: "failures 5m", num: true, cell: (q) => (q.failures ? h("span", { class: "err" }, num(q.failures)) : "0") },
    ], queues, { rowLink: (q) => `#/queues/${encodeURIComponent(q.queue)}`, empty: empty("No queue is declared.", "Declare one with `jobrun queue add NAME`.") });
    const failures = f.failures || [];
    const ftable = table([
      { label: "job", cell: (x) => h("a", { href: `#/jobs/${x.id}` }, `#${x.id}`) },
      { label: "task", cell: (x) => x.task },
      { label: "queue", narrow: true, cell: (x) => x.queue },
      { label: "attempt", num: true, narrow: true, cell: (x) => x.attempt },
      { label: "outcome", cell: (x) => status(x.outcome) },
      { label: "error", cell: (x) => firstLine(x.error) },
      { label: "ago", num: true, cell: (x) => duration(x.age) },
    ], failures, { rowLink: (x) => `#/jobs/${x.id}`, empty: empty("No failed attempt in the last 5 minutes.") });
    replace(body, cards, noMasters, h("h2", {}, "Queues"), qtable, h("h2", {}, "Latest failures"), ftable);
    draw(svg);
  }

  if (frame) live(frame);
  else replace(body, h("p", { class: "state loading" }, "Waiting for the first frame of the live stream (/api/v1/events)…"));
  draw(svg);
  return { live };
}

function card(label, value, hint) {
  return h("div", { class: "card", dataset: { card: label } }, h("div", { class: "l" }, label), h("div", { class: "n" }, value), h("div", { class: "l" }, hint));
}
