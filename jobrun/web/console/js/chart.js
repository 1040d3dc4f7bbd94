// Throughput and depth over the last minutes, drawn as a small inline SVG from the events
// frames the console has seen (kept in memory for this tab, one point per frame).

const NS = "http://www.w3.org/2000/svg";
const KEEP_SECONDS = 600;
const history = [];  // { t (ms), depth, done, enqueued }

export function record(frame) {
  if (!frame?.queues) return;
  const sum = (f) => frame.queues.reduce((a, q) => a + (f(q) || 0), 0);
  const t = Date.now();
  history.push({ t, depth: sum((q) => q.queued + q.leased), done: sum((q) => q.done_per_s), enqueued: sum((q) => q.enqueued_per_s) });
  while (history.length && history[0].t < t - KEEP_SECONDS * 1000) history.shift();
}

function el(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function path(points, x, y) {
  return points.map((p, i) => `${i ? "L" : "M"}${x(p).toFixed(1)},${y(p).toFixed(1)}`).join("");
}

// Two series on their own scales: done/s (line a) and depth (line b).
export function draw(svg) {
  const W = Math.max(200, Math.round(svg.getBoundingClientRect().width) || 600), H = 160, pad = 28;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren();
  svg.append(el("line", { class: "axis", x1: pad, y1: H - pad, x2: W - 4, y2: H - pad }));
  if (history.length < 2) {
    const t = el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" });
    t.textContent = "collecting points from the live stream…";
    svg.append(t);
    return;
  }
  const t0 = history[0].t, t1 = history[history.length - 1].t;
  const span = Math.max(1, t1 - t0);
  const maxDone = Math.max(1, ...history.map((p) => Math.max(p.done, p.enqueued)));
  const maxDepth = Math.max(1, ...history.map((p) => p.depth));
  const x = (p) => pad + ((p.t - t0) / span) * (W - pad - 4);
  svg.append(el("path", { class: "a", d: path(history, x, (p) => H - pad - (p.done / maxDone) * (H - 2 * pad)) }));
  svg.append(el("path", { class: "b", d: path(history, x, (p) => H - pad - (p.depth / maxDepth) * (H - 2 * pad)) }));
  const label = (text, y, cls) => { const t = el("text", { x: 2, y, class: cls }); t.textContent = text; svg.append(t); };
  label(`${maxDone.toFixed(maxDone < 10 ? 1 : 0)}/s`, pad - 6);
  label(`${Math.round(span / 1000)} s`, H - 8);
  const d = el("text", { x: W - 4, y: pad - 6, "text-anchor": "end" });
  d.textContent = `depth ${maxDepth}`;
  svg.append(d);
}
