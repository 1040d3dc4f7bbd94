// The console's only way to the server: /api/v1 over fetch, with the bearer token (kept in
// sessionStorage) when the server asks for one, and the events stream read over fetch too
// (EventSource cannot send an Authorization header).

const BASE = "/api/v1";
const TOKEN_KEY = "jobrun.token";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;   // HTTP status, or 0 when the server could not be reached
    this.body = body;
  }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}) {
  const h = { Accept: "application/json", ...extra };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

function messageOf(body, res) {
  if (body && typeof body === "object") {
    const e = body.error ?? body.detail ?? body.message;
    if (typeof e === "string") return e;
    if (e && typeof e === "object" && typeof e.message === "string") return e.message;
    if (e !== undefined) return JSON.stringify(e);
  }
  return `${res.status} ${res.statusText}`;
}

export async function request(method, path, body) {
  let res;
  try {
    res = await fetch(BASE + path, {
      method,
      headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `cannot reach the jobrun web server (${err.message})`);
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!res.ok) {
    if (res.status === 401) window.dispatchEvent(new CustomEvent("jobrun:unauthorized"));
    throw new ApiError(res.status, messageOf(data, res), data);
  }
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body ?? {});

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

// A list endpoint's rows, whatever its envelope ({items}, {jobs}, {data} or a bare array).
export function rows(data, ...keys) {
  if (Array.isArray(data)) return data;
  for (const k of [...keys, "items", "data", "results"]) if (Array.isArray(data?.[k])) return data[k];
  return [];
}

// The events stream: calls onFrame(kind, data) per event, onState("on"|"off", message) as the
// connection comes and goes, and reconnects with backoff until stop() is called. `params`
// (e.g. "?job=7") asks for job events too (`job` frames).
export function subscribe(onFrame, onState, params = "") {
  let stopped = false;
  let controller = null;
  let delay = 500;
  async function run() {
    while (!stopped) {
      controller = new AbortController();
      try {
        const res = await fetch(`${BASE}/events${params}`, { headers: headers({ Accept: "text/event-stream" }), signal: controller.signal });
        if (res.status === 401) {
          window.dispatchEvent(new CustomEvent("jobrun:unauthorized"));
          onState("off", "unauthorized");
          return;
        }
        if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
        onState("on", "live");
        delay = 500;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let kind = "message";
            const data = [];
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) kind = line.slice(6).trim();
              else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
            }
            if (data.length) {
              try { onFrame(kind, JSON.parse(data.join("\n"))); } catch (err) { console.error(err); }
            }
          }
        }
        if (!stopped) onState("off", "stream ended; reconnecting");
      } catch (err) {
        if (stopped) return;
        onState("off", `no live updates (${err.message}); retrying`);
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10000);
    }
  }
  run();
  return { stop() { stopped = true; controller?.abort(); } };
}
