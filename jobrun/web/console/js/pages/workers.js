// Workers: live masters (host, pid, app, queues served, busy/total children) and what each
// child runs now, from the live stream.

import { duration, empty, h, loading, replace, table } from "../ui.js";

export function render({ root, frame }) {
  const body = h("div", { id: "workers-body" }, loading("Waiting for the live stream…"));
  replace(root, h("h1", {}, "Workers"), body);
  function live(f) {
    if (f.error) { replace(body, h("div", { class: "state error" }, h("strong", {}, f.error))); return; }
    const masters = f.masters || [];
    replace(body,
      table([
        { label: "master", cell: (m) => h("span", { class: "mono" }, m.pid ? `${m.host}:${m.pid}` : `${m.host} (remote)`) },
        { label: "app", narrow: true, cell: (m) => m.app ?? "–" },
        { label: "queues", cell: (m) => (m.queues || []).map((q, i) => [i ? ", " : "", h("a", { href: `#/queues/${encodeURIComponent(q)}` }, q)]) },
        { label: "tasks", narrow: true, cell: (m) => (m.tasks ? m.tasks.join(", ") : "–") },
        { label: "busy", num: true,
          cell: (m) => `${m.busy}/${m.concurrency}` + (m.slots > 1 ? `×${m.slots}` : "") },
        { label: "version", narrow: true, cell: (m) => m.version ?? "–" },
        { label: "up", num: true, narrow: true, cell: (m) => duration(m.uptime) },
        { label: "seen", num: true, narrow: true, cell: (m) => `${duration(m.last_seen_ago)} ago` },
      ], masters, { empty: empty("No master is running.", "Start one: jobrun-master -A yourapp.tasks -c 4 (it registers here within seconds).") }),
      f.stale_masters ? h("p", { class: "notice" }, `${f.stale_masters} registered master(s) stopped reporting and are left out.`) : null,
      h("h2", {}, "Running now"),
      table([
        { label: "job", cell: (j) => h("a", { href: `#/jobs/${j.job_id}` }, `#${j.job_id}`) },
        { label: "task", cell: (j) => j.task },
        { label: "master", cell: (j) => h("span", { class: "mono" }, `${j.host}:${j.master_pid}`) },
        { label: "child", num: true, narrow: true, cell: (j) => (j.pid ? `${j.child} (pid ${j.pid})` : j.child ?? "–") },
        { label: "for", num: true, cell: (j) => duration(j.elapsed) },
      ], f.inflight || [], { rowLink: (j) => `#/jobs/${j.job_id}`, empty: empty("No job is running.") }));
  }
  if (frame) live(frame);
  return { live };
}
