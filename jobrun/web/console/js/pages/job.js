// One job: payload, state, version, its timeline (every recorded transition: who claimed,
// retried, cancelled it and when), attempts (who ran it, when, outcome, error, traceback,
// result, captured log); cancel and retry guarded by the version shown: a page that went stale
// gets the server's 409 and shows it, never overwriting a newer state. The page keeps its own
// stream of the job's events (`?job=ID`): each one redraws it from the API, the record.

import { ApiError, get, post, rows, subscribe } from "../api.js";
import { duration, failure, h, json, loading, replace, status, when } from "../ui.js";

export async function render({ root, route }) {
  const id = route.id;
  let job = null;
  let disposed = false;
  const notice = h("div", { id: "job-notice", "aria-live": "polite" });
  const body = h("div", { id: "job-body" }, loading());
  replace(root, h("h1", {}, `Job #${id}`), notice, body);

  async function fetchJob() {
    const data = await get(`/jobs/${encodeURIComponent(id)}`);
    const j = data?.job ?? data;
    let history = data?.history;
    if (!Array.isArray(history)) history = rows(await get(`/jobs/${encodeURIComponent(id)}/attempts`), "attempts");
    let events = [];
    let eventsError = null;  // the page still shows the job when its timeline cannot be read
    try {
      events = rows(await get(`/jobs/${encodeURIComponent(id)}/events`), "events");
    } catch (err) {
      eventsError = err;
    }
    return { ...j, history, events, eventsError };
  }

  async function act(action) {
    const shown = job;
    try {
      await post(`/jobs/${encodeURIComponent(id)}/${action}`, { version: shown.version });
      replace(notice, h("div", { class: "notice ok", role: "status" }, `${action === "retry" ? "Retried" : "Cancel requested"} (was version ${shown.version}).`));
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) {
        replace(notice, h("div", { class: "notice error", role: "alert", id: "conflict" },
          h("strong", {}, "409 Conflict: "), err.message,
          h("p", {}, `This page showed version ${shown.version}; the job changed since. Nothing was overwritten. The page now shows the current state; check it and try again if it still applies.`)));
      } else {
        replace(notice, failure(err, `Could not ${action}`));
      }
    }
    await refresh();
  }

  function draw() {
    const j = job;
    const canCancel = j.status === "waiting" || j.status === "queued" || j.status === "leased";
    const canRetry = j.status === "dead" || j.status === "cancelled";
    const attempts = j.history;
    replace(body,
      h("div", { class: "actions" },
        h("button", { id: "cancel", class: "danger", disabled: !canCancel || j.cancel_requested, onclick: () => act("cancel"), title: canCancel ? "Cancel this job (a running one stops at its next heartbeat)" : "Only waiting, queued or leased jobs can be cancelled" }, j.cancel_requested ? "Cancel requested" : "Cancel"),
        h("button", { id: "retry", class: "primary", disabled: !canRetry, onclick: () => act("retry"), title: canRetry ? "Queue it again now, attempts reset" : "Only dead or cancelled jobs can be retried" }, "Retry")),
      h("div", { class: "cols" },
        h("div", {},
          h("h2", {}, "State"),
          h("dl", { class: "kv" },
            h("dt", {}, "status"), h("dd", { id: "job-status" }, status(j.status), j.cancel_requested ? " (cancel requested)" : ""),
            h("dt", {}, "version"), h("dd", { id: "job-version" }, String(j.version ?? "–")),
            h("dt", {}, "task"), h("dd", {}, h("a", { href: `#/jobs?task=${encodeURIComponent(j.task)}` }, j.task)),
            h("dt", {}, "queue"), h("dd", {}, h("a", { href: `#/queues/${encodeURIComponent(j.queue)}` }, j.queue)),
            h("dt", {}, "attempts"), h("dd", {}, `${j.attempts} of ${j.max_attempts}${j.crashes ? `, ${j.crashes} crashed` : ""}`),
            h("dt", {}, "priority"), h("dd", {}, String(j.priority)),
            h("dt", {}, "run at"), h("dd", {}, when(j.run_at)),
            h("dt", {}, "created"), h("dd", {}, when(j.created_at)),
            h("dt", {}, "started"), h("dd", {}, when(j.started_at)),
            h("dt", {}, "finished"), h("dd", {}, when(j.finished_at)),
            j.lease_owner ? [h("dt", {}, "leased by"), h("dd", { class: "mono" }, j.lease_owner)] : null,
            j.idempotency_key ? [h("dt", {}, "idempotency key"), h("dd", { class: "mono" }, j.idempotency_key)] : null,
            j.schedule ? [h("dt", {}, "schedule"), h("dd", {}, h("a", { href: `#/schedules/${encodeURIComponent(j.schedule)}` }, j.schedule))] : null,
            j.traceparent ? [h("dt", {}, "traceparent"), h("dd", { class: "mono" }, j.traceparent)] : null,
            j.workflow_id ? [h("dt", {}, "workflow"), h("dd", {}, h("a", { id: "job-workflow", href: `#/workflows/${j.workflow_id}` }, `#${j.workflow_id}`), j.waiting_on ? ` · waits for ${j.waiting_on} more` : "")] : null,
            j.cancel_reason ? [h("dt", {}, "cancelled because"), h("dd", {}, j.cancel_reason)] : null)),
        h("div", {}, h("h2", {}, "Payload"), json(j.payload),
          j.parents ? [h("h2", {}, "Parents' results"), json(j.parents)] : null)),
      h("h2", {}, `Timeline (${j.events.length})`),
      j.eventsError ? failure(j.eventsError, "Could not read the timeline")
        : j.events.length ? h("ol", { id: "timeline", class: "timeline" }, j.events.map(step))
        : h("p", { class: "state empty", id: "timeline-empty" }, "No transitions recorded (jobrun events mode)."),
      h("h2", {}, `Attempts (${attempts.length})`),
      attempts.length ? attempts.map(attempt) : h("p", { class: "state empty" }, j.status === "queued" ? "Not run yet: it waits for a master serving its queue." : j.status === "waiting" ? "Not run yet: it waits for the jobs it runs after." : "No finished attempt."));
  }

  async function refresh() {
    try {
      const fresh = await fetchJob();
      if (disposed) return;
      const changed = !job || fresh.version !== job.version || fresh.history.length !== job.history.length || fresh.status !== job.status || fresh.events.length !== job.events.length;
      job = fresh;
      if (changed) draw();
    } catch (err) {
      if (!disposed) replace(body, failure(err, `Could not load job #${id}`));
    }
  }

  await refresh();
  // Its first frame (snapshot) comes once every later transition of the job will reach it:
  // reading the job again then closes the gap since the read above.
  const stream = subscribe((kind) => {
    if (disposed) return;
    if (kind === "snapshot") root.dataset.jobStream = "live";
    if (kind === "job" || kind === "snapshot") refresh();
  }, () => {}, `?job=${encodeURIComponent(id)}`);
  return {
    live(frame) { if (!frame.error && job && !["succeeded"].includes(job.status)) refresh(); },
    dispose() { disposed = true; stream.stop(); },
  };
}

// One transition, in words: what happened, by whom, and what it left to come.
function step(e) {
  const d = e.detail || {};
  const by = e.actor ? ` by ${e.actor}` : "";
  const on = e.owner ? ` on ${e.owner}` : "";
  const later = d.delay !== undefined ? `, runs again in ${duration(Number(d.delay))}` : "";
  const outcome = e.outcome ? ` (${e.outcome})` : "";
  const words = {
    enqueued: `enqueued${by}${d.run_at ? `, to run at ${d.run_at}` : ""}`,
    claimed: `claimed${on}, attempt ${e.attempt}`,
    started: `started${on}, attempt ${e.attempt}`,
    cancel_requested: `cancel requested${by}`,
    changed: `changed${by}`,
    succeeded: `succeeded${on}`,
    dead: `dead${outcome}${on}${d.error ? `: ${d.error}` : ""}`,
    cancelled: `cancelled${e.owner ? on : by}`,
    retried: `attempt ${e.attempt} ended${outcome}${later}`,
    released: `released at shutdown${on}, back in its queue`,
    reaped: `lease expired${on}: requeued${later}`,
    given_back: `given back unstarted${on}`,
    requeued: `put back in its queue${by}`,
    ready: "its parents settled: queued to run",
    lease_lost: `lease lost${on}${d.reason ? `: ${d.reason}` : ""}`,
  }[e.event] || e.event;
  return h("li", { dataset: { event: e.event, seq: e.seq } },
    h("span", { class: "when" }, when(e.at)), " ", h("span", { class: `status ${e.event}` }, e.event), " ", words);
}

function attempt(a) {
  const ran = a.started_at && a.finished_at ? (new Date(a.finished_at) - new Date(a.started_at)) / 1000 : null;
  const who = [a.worker_host, a.worker_pid && `pid ${a.worker_pid}`, a.worker_child !== null && a.worker_child !== undefined && `child ${a.worker_child}`].filter(Boolean).join(" · ");
  return h("details", { class: "card attempt", open: true, dataset: { attempt: a.attempt } },
    h("summary", {}, `Attempt ${a.attempt} `, status(a.outcome), ` · ${who || "unknown worker"} · `, when(a.finished_at), ran !== null ? ` · ran ${duration(ran)}` : ""),
    a.error ? [h("h3", {}, "Error"), h("pre", { class: "mono err" }, a.error)] : null,
    a.traceback ? [h("h3", {}, "Traceback"), h("pre", { class: "mono" }, a.traceback)] : null,
    a.result !== undefined && a.result !== null ? [h("h3", {}, "Result"), json(a.result)] : null,
    a.log ? [h("h3", {}, "Log"), h("pre", { class: "mono log" }, a.log)] : h("p", { class: "legend" }, "No captured log."));
}
