// Schedules: next fires, pause/resume, recent runs. A server without the schedules endpoints
// (404 from /api/v1/schedules) gets a clear "not available" state instead of an error.

import { ApiError, get, rows } from "../api.js";
import { empty, failure, h, json, loading, replace, pauseOrResume, status, table, when } from "../ui.js";

const nameOf = (s) => s.name ?? s.id;
const nextOf = (s) => s.next_fire ?? s.next_run_at ?? s.next_fires?.[0] ?? s.next ?? null;

// "every day at 02:30, New York time; next at Dec 5, 2026, 02:30": the server's words, and the
// next fire as a wall-clock time in the schedule's own zone (the zone the words speak of), or
// the expression where the server gives no words.
export function inWords(s) {
  const zone = s.timezone ?? s.tz ?? "UTC";
  const words = s.description ?? `${s.cron ?? s.expression ?? "–"}, ${zone}`;
  const next = nextOf(s);
  const then = next ? new Date(next) : null;
  if (s.paused) return `${words}; paused`;
  if (!then || Number.isNaN(then.getTime())) return `${words}; no fire left`;
  const style = { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
  let at;
  try { at = then.toLocaleString(undefined, { ...style, timeZone: zone }); } catch { at = `${then.toLocaleString(undefined, style)} (this browser's time)`; }
  return `${words}; next at ${at}`;
}

export async function render({ root, route }) {
  const name = route.id;
  const notice = h("div", { id: "schedule-notice", "aria-live": "polite" });
  const body = h("div", { id: "schedules-body" }, loading());
  replace(root, h("h1", {}, name ? `Schedule ${name}` : "Schedules"), notice, body);
  let disposed = false;

  async function setPaused(n, paused) {
    await pauseOrResume(notice, "schedule", n, paused);
    await load();
  }

  async function load() {
    try {
      if (!name) {
        const list = rows(await get("/schedules"), "schedules");
        if (disposed) return;
        replace(body, table([
          { label: "schedule", cell: (s) => h("a", { href: `#/schedules/${encodeURIComponent(nameOf(s))}` }, nameOf(s)) },
          { label: "when", cell: (s) => h("span", { class: "schedule-words" }, s.description ?? "–") },
          { label: "cron", narrow: true, cell: (s) => h("code", {}, s.cron ?? s.expression ?? "–") },
          { label: "zone", narrow: true, cell: (s) => s.timezone ?? s.tz ?? "UTC" },
          { label: "task", cell: (s) => s.task ?? "–" },
          { label: "state", cell: (s) => status(s.paused ? "paused" : "running") },
          { label: "next fire", cell: (s) => when(nextOf(s)) },
          { label: "", cell: (s) => h("button", { onclick: () => setPaused(nameOf(s), !s.paused) }, s.paused ? "Resume" : "Pause") },
        ], list, { rowLink: (s) => `#/schedules/${encodeURIComponent(nameOf(s))}`, empty: empty("No schedule is defined.", "Declare schedules in your app; masters register them.") }));
        return;
      }
      const data = await get(`/schedules/${encodeURIComponent(name)}`);
      const s = data?.schedule ?? data;
      const runs = rows(data?.runs, "runs");
      if (disposed) return;
      const fires = s.next_fires ?? (nextOf(s) ? [nextOf(s)] : []);
      replace(body,
        h("p", { id: "schedule-words" }, inWords(s)),
        h("div", { class: "actions" }, h("button", { id: s.paused ? "resume" : "pause", onclick: () => setPaused(name, !s.paused) }, s.paused ? "Resume" : "Pause")),
        h("div", { class: "cols" },
          h("div", {}, h("h2", {}, "Definition"), json(s)),
          h("div", {}, h("h2", {}, "Next fires"), fires.length ? h("ul", {}, fires.map((t) => h("li", {}, when(t)))) : empty(s.paused ? "Paused: nothing will fire." : "No upcoming fire."))),
        h("h2", {}, "Recent runs"),
        table([
          { label: "job", cell: (j) => h("a", { href: `#/jobs/${j.id}` }, `#${j.id}`) },
          { label: "status", cell: (j) => status(j.status) },
          { label: "created", cell: (j) => when(j.created_at) },
          { label: "finished", narrow: true, cell: (j) => when(j.finished_at) },
        ], runs, { rowLink: (j) => `#/jobs/${j.id}`, empty: empty("No run yet.") }));
    } catch (err) {
      if (disposed) return;
      if (err instanceof ApiError && err.status === 404 && !name) {
        replace(body, h("div", { class: "state empty", id: "schedules-unavailable" },
          h("strong", {}, "Schedules are not available on this server."),
          h("p", {}, "This jobrun web server has no /api/v1/schedules endpoint (an older version). Upgrade jobrun on the web server to see and pause cron schedules here.")));
      } else {
        replace(body, failure(err, name ? `Could not load schedule ${name}` : "Could not list schedules"));
      }
    }
  }
  await load();
  return { dispose() { disposed = true; } };
}
