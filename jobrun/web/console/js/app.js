// The console shell: hash router, token prompt, live events, keyboard.
//
// URLs: #/ overview · #/jobs?status=dead&queue=emails&task=&schedule=&q=&cursor= · #/jobs/123
// · #/attempts?outcome=failed&task=&queue=&cursor= · #/submit · #/queues · #/queues/emails · #/schedules · #/schedules/nightly · #/workers · #/tasks
// · #/workflows/7 (a workflow's graph; reached from its jobs).
// A page module exports render(ctx) and may return { live(frame), dispose() }.

import { setToken, subscribe, token } from "./api.js";
import { deferWhilePressed, h, replace } from "./ui.js";
import { record } from "./chart.js";

const PAGES = {
  overview: () => import("./pages/overview.js"),
  jobs: () => import("./pages/jobs.js"),
  job: () => import("./pages/job.js"),
  attempts: () => import("./pages/attempts.js"),
  submit: () => import("./pages/submit.js"),
  queues: () => import("./pages/queues.js"),
  schedules: () => import("./pages/schedules.js"),
  workers: () => import("./pages/workers.js"),
  tasks: () => import("./pages/tasks.js"),
  workflows: () => import("./pages/workflow.js"),
};
const GO_KEYS = { o: "#/", j: "#/jobs", a: "#/attempts", n: "#/submit", q: "#/queues", s: "#/schedules", w: "#/workers", t: "#/tasks" };

const main = document.getElementById("main");
const liveBadge = document.getElementById("live");
let current = null;        // the page on screen: { live, dispose }
let lastFrame = null;      // the newest events frame, handed to each page as it opens
let stream = null;
let renderSeq = 0;
// Every page gets the live frames through this: none while a pointer is pressed on it.
const toPage = deferWhilePressed(main, (frame) => current?.live?.(frame));

export function parseRoute(hash) {
  const [path, qs] = (hash.replace(/^#/, "") || "/").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(qs || ""));
  if (!parts.length) return { page: "overview", params };
  if (parts[0] === "jobs" && parts[1]) return { page: "job", id: parts[1], params };
  if (parts[0] in PAGES && parts[0] !== "job") return { page: parts[0], id: parts[1], params };
  return { page: "notfound", params };
}

async function render() {
  const seq = ++renderSeq;
  const route = parseRoute(location.hash);
  current?.dispose?.();
  current = null;
  for (const a of document.querySelectorAll("#nav a")) {
    const page = route.page === "job" ? "jobs" : route.page;
    if (a.dataset.page === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  main.dataset.page = route.page;
  if (route.page === "notfound") {
    replace(main, h("div", { class: "state error" }, h("strong", {}, "No such page."), h("p", {}, h("a", { href: "#/" }, "Go to the overview"))));
    return;
  }
  const mod = await PAGES[route.page]();
  if (seq !== renderSeq) return;  // the user moved on while the module loaded
  const root = h("section", { class: `page page-${route.page}` });
  replace(main, root);
  const page = (await mod.render({ root, route, frame: lastFrame, stale: () => seq !== renderSeq })) || {};
  if (seq !== renderSeq) { page.dispose?.(); return; }
  current = page;
}

function askToken(reason) {
  renderSeq++;  // a page still loading must not draw over the form
  stream?.stop();
  stream = null;
  current?.dispose?.();
  current = null;
  const input = h("input", { type: "password", name: "token", autocomplete: "current-password", "aria-label": "API token", required: true });
  const form = h("form", { class: "auth card", onsubmit: (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    start();
  } },
  h("h1", {}, "Token needed"),
  h("p", {}, reason || "This jobrun web server needs an API token: the contents of the file given to `jobrun web --token-file PATH`."),
  h("p", {}, "It is kept in this tab only (sessionStorage) and sent as a Bearer header."),
  input, h("button", { class: "primary" }, "Use token"));
  replace(main, form);
  main.dataset.page = "auth";
  input.focus();
}

function start() {
  stream?.stop();
  stream = subscribe((kind, data) => {
    if (kind === "snapshot" || kind === "summary") {
      lastFrame = data;
      liveBadge.dataset.frames = String(Number(liveBadge.dataset.frames || 0) + 1);  // frames received
      record(data);
      toPage(data);
    } else if (kind === "error") {
      liveBadge.textContent = "database unavailable";
      liveBadge.className = "live off";
      liveBadge.title = data.error;
      toPage({ error: data.error });
    }
  }, (state, message) => {
    liveBadge.textContent = state === "on" ? "live" : "offline";
    liveBadge.className = `live ${state}`;
    liveBadge.title = message;
  });
  render();
}

window.addEventListener("jobrun:unauthorized", () => {
  askToken(token() ? "The token was refused. Enter the right one." : undefined);
});
window.addEventListener("hashchange", render);

document.getElementById("lookup").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("search");
  const text = input.value.trim();
  input.blur();
  if (/^#?\d+$/.test(text)) location.hash = `#/jobs/${text.replace("#", "")}`;
  else location.hash = `#/jobs${text ? `?q=${encodeURIComponent(text)}` : ""}`;
});

// Keyboard: / search, j/k rows, Enter open, g+letter pages, ? help.
let pendingG = 0;
function moveSelection(step) {
  const rows = [...main.querySelectorAll("tr[data-row]")];
  if (!rows.length) return;
  let i = rows.findIndex((r) => r.classList.contains("selected"));
  rows[i]?.classList.remove("selected");
  i = i < 0 ? (step > 0 ? 0 : rows.length - 1) : Math.max(0, Math.min(rows.length - 1, i + step));
  rows[i].classList.add("selected");
  rows[i].scrollIntoView({ block: "nearest" });
}
document.addEventListener("keydown", (ev) => {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const t = ev.target;
  if (t instanceof HTMLElement && (t.matches("input, textarea, select") || t.isContentEditable)) {
    if (ev.key === "Escape") t.blur();
    return;
  }
  if (pendingG && Date.now() - pendingG < 1500 && GO_KEYS[ev.key]) {
    pendingG = 0;
    location.hash = GO_KEYS[ev.key];
    ev.preventDefault();
    return;
  }
  pendingG = 0;
  switch (ev.key) {
    case "/": ev.preventDefault(); document.getElementById("search").focus(); break;
    case "g": pendingG = Date.now(); break;
    case "j": moveSelection(1); break;
    case "k": moveSelection(-1); break;
    case "Enter": {
      const sel = main.querySelector("tr.selected[data-href]");
      if (sel) location.hash = sel.dataset.href;
      break;
    }
    case "?": document.getElementById("help").showModal(); break;
    default:
  }
});

start();
