// Queues: every declared queue with its settings and live depth; one queue's page pauses and
// resumes it. Settings read in words, rates as jobs/s (jobs/min below one a second), times as
// durations; the figures are the events stream's (docs/console.md).

import { get, rows } from "../api.js";
import { duration, empty, failure, h, loading, num, rate, replace, pauseOrResume, status, table, when } from "../ui.js";

// A queue's settings in words (the API gives intervals as seconds): [label, text] pairs.
export function settings(q) {
  const per = q.rate_period === 1 ? "s" : q.rate_period === 60 ? "min" : q.rate_period === 3600 ? "h" : null;
  return [
    ["concurrency", q.concurrency ?? "unlimited"],
    ["rate", q.rate_limit === null || q.rate_limit === undefined ? "unlimited"
      : per ? `${num(q.rate_limit)} starts/${per}` : `${num(q.rate_limit)} starts per ${duration(q.rate_period)}`],
    ["per key", q.key_concurrency === null || q.key_concurrency === undefined ? "–" : `at most ${num(q.key_concurrency)} running per concurrency key`],
    ["aging", q.aging ? `one priority step per ${duration(q.aging)} waiting` : "off"],
    ["default priority", q.priority_default ?? "–"],
    ["max attempts", q.max_attempts ?? "5 (the default)"],
    ["retention", q.retention ? `finished jobs kept ${duration(q.retention)}` : "the purge's default"],
    ["version", q.version ?? "–"],
    ["created", when(q.created_at)],
    ["updated", when(q.updated_at)],
  ];
}

export async function render({ root, route, frame }) {
  const name = route.id;
  const notice = h("div", { id: "queue-notice", "aria-live": "polite" });
  const body = h("div", { id: "queue-body" }, loading());
  replace(root, h("h1", {}, name ? `Queue ${name}` : "Queues"), notice, body);
  let queues = null;
  let stats = frame?.queues ?? [];
  let disposed = false;

  const statsOf = (q) => stats.find((s) => s.queue === q) || {};
  const nameOf = (q) => q.name ?? q.queue;

  async function load() {
    try {
      queues = rows(await get("/queues"), "queues").map((q) => ({ ...q, name: nameOf(q) }));
      if (!disposed) draw();
    } catch (err) {
      if (!disposed) replace(body, failure(err, "Could not list queues"));
    }
  }

  async function setPaused(q, paused) {
    await pauseOrResume(notice, "queue", q, paused, paused ? "paused: masters claim nothing from it until it is resumed" : "resumed");
    await load();
  }

  function draw() {
    if (!name) {
      replace(body, table([
        { label: "queue", cell: (q) => h("a", { href: `#/queues/${encodeURIComponent(q.name)}` }, q.name) },
        { label: "state", cell: (q) => status(q.paused ? "paused" : "running") },
        { label: "concurrency", num: true, cell: (q) => q.concurrency ?? "unlimited" },
        { label: "queued", num: true, cell: (q) => num(statsOf(q.name).queued) },
        { label: "leased", num: true, cell: (q) => num(statsOf(q.name).leased) },
        { label: "served by", num: true, narrow: true, cell: (q) => (q.served_by ? q.served_by.length : "–") },
        { label: "done", num: true, narrow: true, cell: (q) => rate(statsOf(q.name).done_per_s) },
        { label: "oldest", num: true, narrow: true, cell: (q) => duration(statsOf(q.name).oldest_age) },
        { label: "", cell: (q) => h("button", { onclick: () => setPaused(q.name, !q.paused), dataset: { queue: q.name } }, q.paused ? "Resume" : "Pause") },
      ], queues, { rowLink: (q) => `#/queues/${encodeURIComponent(q.name)}`, empty: empty("No queue is declared.", "Declare one with `jobrun queue add NAME`.") }));
      return;
    }
    const q = queues.find((x) => x.name === name);
    if (!q) {
      replace(body, h("div", { class: "state error" }, h("strong", {}, `No queue named ${name}.`), h("p", {}, h("a", { href: "#/queues" }, "See the declared queues"), " or declare it with ", h("code", {}, `jobrun queue add ${name}`), ".")));
      return;
    }
    const s = statsOf(name);
    const link = (st, label) => h("a", { href: `#/jobs?queue=${encodeURIComponent(name)}${st ? `&status=${st}` : ""}` }, label);
    replace(body,
      h("div", { class: "actions" },
        h("button", { id: q.paused ? "resume" : "pause", class: q.paused ? "primary" : "danger", onclick: () => setPaused(name, !q.paused) }, q.paused ? "Resume" : "Pause"),
        link("", "all jobs"), link("dead", "dead jobs")),
      h("div", { class: "cols" },
        h("div", {}, h("h2", {}, "Settings"),
          h("dl", { class: "kv" },
            h("dt", {}, "state"), h("dd", { id: "queue-state" }, status(q.paused ? "paused" : "running")),
            ...settings(q).flatMap(([k, v]) => [h("dt", {}, k), h("dd", { dataset: { setting: k } }, v)]))),
        h("div", {}, h("h2", {}, "Now"),
          h("dl", { class: "kv" },
            h("dt", {}, "queued"), h("dd", {}, num(s.queued)),
            h("dt", {}, "scheduled"), h("dd", {}, num(s.scheduled)),
            h("dt", {}, "waiting"), h("dd", {}, num(s.waiting ?? 0), " for the jobs they run after"),
            h("dt", {}, "leased"), h("dd", {}, num(s.leased)),
            h("dt", {}, "enqueued"), h("dd", { id: "queue-in" }, rate(s.enqueued_per_s)),
            h("dt", {}, "done"), h("dd", { id: "queue-done" }, rate(s.done_per_s)),
            h("dt", {}, "wait p50 · p95"), h("dd", { id: "queue-wait" }, `${duration(s.wait_p50)} · ${duration(s.wait_p95)}`),
            h("dt", {}, "oldest runnable"), h("dd", { id: "queue-oldest" }, duration(s.oldest_age)),
            h("dt", {}, "failures (5 min)"), h("dd", {}, num(s.failures))))));
  }

  await load();
  return {
    live(f) {
      if (f.error || !queues) return;
      stats = f.queues ?? stats;
      const paused = new Map(stats.map((s) => [s.queue, s.paused]));
      if (queues.some((q) => paused.has(q.name) && paused.get(q.name) !== q.paused) || stats.length !== queues.length) load();
      else draw();
    },
    dispose() { disposed = true; },
  };
}
