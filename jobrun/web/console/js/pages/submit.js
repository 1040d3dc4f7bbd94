// Submit: enqueue one job (POST /api/v1/jobs). The payload is parsed here before anything is
// sent: text that is not JSON is shown where it breaks and nothing leaves the page. The server
// checks the rest (task and queue names, ranges, the queue being declared) and its 422 is shown
// as it says it.

import { post } from "../api.js";
import { failure, h, replace } from "../ui.js";

// The payload as JSON, or the parser's complaint ({ error }). Empty text is null, as the API's
// default.
export function parsePayload(text) {
  if (!text.trim()) return { value: null };
  try {
    return { value: JSON.parse(text) };
  } catch (err) {
    return { error: err.message };
  }
}

// "30" is 30 seconds; "5m", "1h30m" go as text (the server reads durations).
function delayOf(text) {
  const t = text.trim();
  if (!t) return undefined;
  return /^\d+(\.\d+)?$/.test(t) ? Number(t) : t;
}

export async function render({ root, route }) {
  const p = route.params;
  const notice = h("div", { id: "submit-notice", "aria-live": "polite" });
  const payloadError = h("p", { id: "payload-error", class: "err", role: "alert" });
  const inputs = {
    task: h("input", { name: "task", required: true, value: p.task || "", placeholder: "email.send", size: 24 }),
    payload: h("textarea", { name: "payload", rows: 8, cols: 60, class: "mono", placeholder: '{"to": "a@example.com"}', spellcheck: "false" }, ""),
    queue: h("input", { name: "queue", value: p.queue || "default", size: 14 }),
    priority: h("input", { name: "priority", type: "number", min: -100, max: 100, step: 1, placeholder: "queue's default", size: 8 }),
    delay: h("input", { name: "delay", placeholder: "30, 5m, 1h30m", size: 10 }),
    idempotency_key: h("input", { name: "idempotency_key", size: 24, autocomplete: "off" }),
  };
  const check = () => {
    const parsed = parsePayload(inputs.payload.value);
    payloadError.textContent = parsed.error ? `Not JSON: ${parsed.error}` : "";
    inputs.payload.setAttribute("aria-invalid", parsed.error ? "true" : "false");
    return parsed;
  };
  inputs.payload.addEventListener("input", check);
  const field = (label, el, hint) => h("label", {}, label, el, hint ? h("span", { class: "legend" }, hint) : null);
  const form = h("form", { class: "submit", id: "submit-form", onsubmit: async (ev) => {
    ev.preventDefault();
    const parsed = check();
    if (parsed.error) { inputs.payload.focus(); return; }
    const body = { task: inputs.task.value.trim(), payload: parsed.value, queue: inputs.queue.value.trim() || "default" };
    if (inputs.priority.value !== "") body.priority = Number(inputs.priority.value);
    const delay = delayOf(inputs.delay.value);
    if (delay !== undefined) body.delay = delay;
    if (inputs.idempotency_key.value) body.idempotency_key = inputs.idempotency_key.value;
    try {
      const job = await post("/jobs", body);
      replace(notice, h("div", { class: "notice ok", role: "status", id: "submitted" },
        job.created === false ? "Already there (same idempotency key): " : "Enqueued ",
        h("a", { href: `#/jobs/${job.id}` }, `job #${job.id}`), ` (${job.task} on ${job.queue}, ${job.status}).`));
    } catch (err) {
      replace(notice, failure(err, "Could not enqueue"));
    }
  } },
  field("task", inputs.task, "required"),
  field("payload (JSON)", inputs.payload, "any JSON value; empty is null"),
  payloadError,
  h("div", { class: "filters" },
    field("queue", inputs.queue),
    field("priority", inputs.priority, "-100..100, lower runs first"),
    field("delay", inputs.delay, "seconds, or 5m, 1h30m"),
    field("idempotency key", inputs.idempotency_key, "a replay returns the stored job")),
  h("button", { class: "primary", id: "submit" }, "Enqueue"));
  replace(root, h("h1", {}, "Submit a job"), notice, form);
  return {};
}
