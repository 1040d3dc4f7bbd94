// Queues: every declared queue with its settings and live depth; one queue's page pauses and
// resumes it.

import { get, rows } from "../api.js";
import { duration, empty, failure, h, json, loading, num, replace, pauseOrResume, status, table } from "../ui.js";

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
        { label: "done/s", num: true, narrow: true, cell: (q) => num(statsOf(q.name).done_per_s, 1) },
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
            h("dt", {}, "concurrency"), h("dd", {}, q.concurrency ?? "unlimited"),
            ...Object.entries(q).filter(([k]) => !["name", "paused", "concurrency"].includes(k))
              .flatMap(([k, v]) => [h("dt", {}, k.replaceAll("_", " ")), h("dd", {}, typeof v === "object" && v !== null ? json(v) : String(v ?? "–"))]))),
        h("div", {}, h("h2", {}, "Now"),
          h("dl", { class: "kv" },
            h("dt", {}, "queued"), h("dd", {}, num(s.queued)),
            h("dt", {}, "scheduled"), h("dd", {}, num(s.scheduled)),
            h("dt", {}, "leased"), h("dd", {}, num(s.leased)),
            h("dt", {}, "in/s · done/s"), h("dd", {}, `${num(s.enqueued_per_s, 1)} · ${num(s.done_per_s, 1)}`),
            h("dt", {}, "wait p50 · p95"), h("dd", {}, `${duration(s.wait_p50)} · ${duration(s.wait_p95)}`),
            h("dt", {}, "oldest runnable"), h("dd", {}, duration(s.oldest_age)),
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
