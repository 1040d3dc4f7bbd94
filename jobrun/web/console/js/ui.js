// Small DOM and formatting helpers shared by the pages.

import { post } from "./api.js";

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function replace(root, ...children) {
  root.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

// `apply(frame)` for each live frame, held back while a pointer is pressed inside `el`: a page
// redrawn between a press and its release has replaced the link or button under the pointer,
// and the browser then fires no click. The last frame held is applied once the click is done
// (to the page then on screen, if the click opened another).
export function deferWhilePressed(el, apply) {
  let pressed = false;
  let held = null;
  const release = () => {
    if (!pressed) return;
    pressed = false;
    setTimeout(() => {  // after the click this release makes
      if (held !== null && !pressed) { const f = held; held = null; apply(f); }
    }, 0);
  };
  el.addEventListener("pointerdown", () => {
    pressed = true;
    window.addEventListener("pointerup", release, { once: true });
    window.addEventListener("pointercancel", release, { once: true });
  });
  return (frame) => { if (pressed) held = frame; else apply(frame); };
}

export function status(s) { return h("span", { class: `status ${s}` }, s); }

export function num(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

// Seconds as a person reads them: 850 ms, 4.2 s, 2 min 5 s, 3 h 4 min, 2 d 3 h.
export function duration(s) {
  if (s === null || s === undefined || Number.isNaN(Number(s))) return "–";
  s = Number(s);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const whole = Math.round(s);
  const [big, small, bigUnit, smallUnit] = whole < 3600 ? [60, 1, "min", "s"]
    : whole < 86400 ? [3600, 60, "h", "min"] : [86400, 3600, "d", "h"];
  const rest = Math.floor((whole % big) / small);
  return rest ? `${Math.floor(whole / big)} ${bigUnit} ${rest} ${smallUnit}` : `${Math.floor(whole / big)} ${bigUnit}`;
}

// A rate of jobs: per second from one a second up, per minute below (0.05/s reads as 3/min).
export function rate(perSecond, what = "jobs") {
  if (perSecond === null || perSecond === undefined || Number.isNaN(Number(perSecond))) return "–";
  const n = Number(perSecond);
  if (n === 0) return `0 ${what}/s`;
  if (n >= 1) return `${num(n, n >= 100 ? 0 : 1)} ${what}/s`;
  return `${num(n * 60, n * 60 >= 10 ? 0 : 1)} ${what}/min`;
}

export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return h("time", { datetime: d.toISOString(), title: d.toISOString() }, d.toLocaleString());
}

export function json(value) {
  return h("pre", { class: "mono" }, value === undefined ? "" : JSON.stringify(value, null, 2));
}

export function firstLine(text) {
  return (text || "").split("\n").find((l) => l.trim())?.trim() ?? "";
}

// Explanatory states: what is happening and what to do about it.
export function loading(what = "Loading…") { return h("p", { class: "state loading" }, what); }
export function empty(title, hint) { return h("div", { class: "state empty" }, h("strong", {}, title), hint ? h("p", {}, hint) : null); }
export function failure(err, what) {
  const hint = err?.status === 0
    ? "The jobrun web server is not answering. Is `jobrun web` running?"
    : err?.status === 401 ? "The server needs a token: enter it above."
    : err?.status === 503 ? "The web server cannot reach PostgreSQL. Check the database URL (JOBRUN_DATABASE_URL) and that PostgreSQL is up."
    : err?.status === 404 ? "It does not exist (or was purged)."
    : null;
  return h("div", { class: "state error", role: "alert" },
    h("strong", {}, `${what}: ${err?.message ?? err}`), hint ? h("p", {}, hint) : null);
}

export function table(columns, items, { rowLink, empty: emptyEl } = {}) {
  if (!items.length) return emptyEl ?? empty("Nothing here.");
  const head = h("tr", {}, columns.map((c) => h("th", { class: [c.num ? "num" : "", c.narrow ? "hide-narrow" : ""].join(" ").trim() || null }, c.label)));
  const body = items.map((item) => {
    const link = rowLink?.(item);
    const tr = h("tr", link ? { "data-row": "", "data-href": link } : {},
      columns.map((c) => h("td", { class: [c.num ? "num" : "", c.narrow ? "hide-narrow" : ""].join(" ").trim() || null }, c.cell(item))));
    if (link) tr.addEventListener("click", (ev) => { if (!ev.target.closest("a,button")) location.hash = link; });
    return tr;
  });
  return h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, head), h("tbody", {}, body)));
}

// Pause or resume a queue or schedule (POST /{kind}s/{name}/pause|resume); the outcome goes
// into `notice`.
export async function pauseOrResume(notice, kind, name, paused, done = paused ? "paused" : "resumed") {
  const verb = paused ? "pause" : "resume";
  try {
    await post(`/${kind}s/${encodeURIComponent(name)}/${verb}`);
    replace(notice, h("div", { class: "notice ok", role: "status" }, `${kind[0].toUpperCase()}${kind.slice(1)} ${name} ${done}.`));
  } catch (err) {
    replace(notice, failure(err, `Could not ${verb} ${name}`));
  }
}
