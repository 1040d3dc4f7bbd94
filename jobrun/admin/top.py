"""Read-only views for operators: the data behind `jobrun workers`, `jobrun logs` and `jobrun top`.

Three layers, each usable alone:

- **data**: ``workers``, ``queues``, ``latest_failures``, ``snapshot``, ``attempt_logs`` take a
  psycopg connection (dict rows) and the schema's :class:`~jobrun.sql.Queries`, run named
  queries from ``sql/observe.sql`` and return plain dataclasses. Every number comes from the
  database clock, and ``snapshot`` reads one frame in one read-only REPEATABLE READ
  transaction, so all its queries see the same rows and the same ``now()``.
- **drawing**: ``render`` turns a :class:`Snapshot` into rich renderables; no I/O.
- **terminal**: ``watch`` is the only interactive part: a rich ``Live`` on the alternate
  screen, refreshed every ``interval`` seconds, keys read in cbreak mode by ``select`` on
  stdin with the time left until the next refresh as its timeout (one thread, so a key never
  waits for a query and a refresh never waits for a key). The terminal's mode is restored in
  ``finally`` blocks, whatever ends the loop: ``q``, ^C, SIGTERM/SIGHUP or an exception.

What top measures (also printed in its header): depth from the partial indexes on queued and
leased rows; rates per second over the last ``RATE_WINDOW`` seconds (enqueued: jobs created;
done: jobs that reached succeeded, dead or cancelled); wait = start minus the time the job
became runnable, p50/p95 over the latest ``WAIT_SAMPLE`` jobs finished in ``WAIT_WINDOW``;
failures = attempts that ended failed, timeout, worker_lost or lease_expired in ``FAIL_WINDOW``.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import termios
import time
import tty
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import psycopg
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from jobrun.store import db
from jobrun.errors import JobrunError, NotFound
from jobrun.sql import Queries

STALE_AFTER = 30.0   # a registry row older than this is a master that died without a word
RATE_WINDOW = 60.0
WAIT_WINDOW = 300.0
WAIT_SAMPLE = 2000
FAIL_WINDOW = 300.0
FAILURE_ROWS = 8
SORTS = ("queue", "queued", "oldest", "done/s", "failures")
_TEXT_COLUMNS = {"queue", "host", "queues", "version", "task", "outcome", "error", "master",
                 "schedule", "cron", "next fire"}


# --- data ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class InFlight:
    job_id: int
    task: str
    child: int | None
    pid: int | None
    elapsed: float | None
    host: str
    master_pid: int


@dataclass(frozen=True)
class Master:
    owner: str
    host: str
    pid: int
    app: str | None
    queues: list[str]
    concurrency: int
    busy: int
    version: str | None
    started_at: datetime
    last_seen: datetime
    uptime: float
    last_seen_ago: float
    inflight: list[InFlight]


@dataclass(frozen=True)
class QueueView:
    queue: str
    paused: bool
    concurrency: int | None
    queued: int            # runnable now
    scheduled: int         # queued with a future run_at
    leased: int
    oldest_age: float | None  # seconds since the oldest runnable job became runnable
    enqueued_per_s: float
    done_per_s: float
    wait_p50: float | None
    wait_p95: float | None
    wait_sample: int
    failures: int
    limits: str = ""       # c=3 (cluster-wide), r=5/1s (rate), k=2 (per key, when not 1)
    held: str = ""         # claims its limits held back, by reason (live masters, since start)


@dataclass(frozen=True)
class Failure:
    id: int
    task: str
    queue: str
    attempt: int
    outcome: str
    error: str             # first line only
    age: float


@dataclass(frozen=True)
class Snapshot:
    at: datetime           # the database clock
    queues: list[QueueView]
    masters: list[Master]
    stale_masters: int
    failures: list[Failure]
    # Recurring schedules (name, cron, timezone, task, queue, paused, last/next fire).
    schedules: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def inflight(self) -> list[InFlight]:
        jobs = [j for m in self.masters for j in m.inflight]
        return sorted(jobs, key=lambda j: -(j.elapsed or 0.0))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "inflight": [dataclasses.asdict(j) for j in self.inflight]}


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _inflight(row: dict[str, Any], db_now: float) -> list[InFlight]:
    out = []
    for item in row["inflight"] or []:
        started = item.get("started")
        out.append(InFlight(job_id=item.get("id"), task=item.get("task") or "?",
                            child=item.get("child"), pid=item.get("pid"),
                            elapsed=max(0.0, db_now - started) if started is not None else None,
                            host=row["host"], master_pid=row["pid"]))
    return out


def workers(conn: psycopg.Connection, q: Queries,
            stale_after: float = STALE_AFTER) -> tuple[list[Master], int]:
    """Live masters (seen within ``stale_after`` seconds) and how many stale rows were left out."""
    rows = conn.execute(q.observe_workers, {"stale_after": stale_after}).fetchall()
    live = [Master(owner=r["owner"], host=r["host"], pid=r["pid"], app=r["app"],
                   queues=list(r["queues"]), concurrency=r["concurrency"], busy=r["busy"],
                   version=r["version"], started_at=r["started_at"], last_seen=r["last_seen"],
                   uptime=r["uptime"], last_seen_ago=r["silent_for"],
                   inflight=_inflight(r, r["db_now"]))
            for r in rows if not r["stale"]]
    return live, len(rows) - len(live)


def queues(conn: psycopg.Connection, q: Queries) -> list[QueueView]:
    rows = conn.execute(q.observe_queues, {
        "rate_window": RATE_WINDOW, "wait_window": WAIT_WINDOW, "sample": WAIT_SAMPLE,
        "fail_window": FAIL_WINDOW}).fetchall()
    return [QueueView(queue=r["queue"], paused=r["paused"], concurrency=r["concurrency"],
                      queued=r["queued"], scheduled=r["scheduled"], leased=r["leased"],
                      oldest_age=r["oldest_age"], enqueued_per_s=r["enqueued"] / RATE_WINDOW,
                      done_per_s=r["finished"] / RATE_WINDOW, wait_p50=r["wait_p50"],
                      wait_p95=r["wait_p95"], wait_sample=r["wait_sample"],
                      failures=r["failures"], limits=limits_text(r), held=r["held"] or "")
            for r in rows]


def limits_text(row: dict[str, Any]) -> str:
    """A queue's limits in a few characters: c=3 r=5/1s k=2 (docs/dispatch.md)."""
    parts = []
    if row["concurrency"] is not None:
        parts.append(f"c={row['concurrency']}")
    if row["rate_limit"] is not None:
        parts.append(f"r={row['rate_limit']}/{duration(row['rate_period'])}")
    if row["key_concurrency"] not in (None, 1):
        parts.append(f"k={row['key_concurrency']}")
    return " ".join(parts)


def latest_failures(conn: psycopg.Connection, q: Queries, limit: int = FAILURE_ROWS) -> list[Failure]:
    rows = conn.execute(q.observe_latest_failures,
                        {"fail_window": FAIL_WINDOW, "limit": limit}).fetchall()
    return [Failure(id=r["id"], task=r["task"], queue=r["queue"], attempt=r["attempt"],
                    outcome=r["outcome"], error=first_line(r["error"]) or r["outcome"],
                    age=r["age"]) for r in rows]


def snapshot(conn: psycopg.Connection, q: Queries, failure_rows: int = FAILURE_ROWS) -> Snapshot:
    """One frame of `jobrun top`, read as one consistent snapshot."""
    with conn.transaction():
        conn.execute(q.observe_begin_snapshot)
        at = conn.execute(q.db_now).fetchone()["now"]
        masters, stale = workers(conn, q)
        return Snapshot(at=at, queues=queues(conn, q), masters=masters, stale_masters=stale,
                        failures=latest_failures(conn, q, failure_rows),
                        schedules=conn.execute(q.schedules_for_top, {"limit": 20}).fetchall())


def attempt_logs(conn: psycopg.Connection, q: Queries, job_id: int,
                 attempt: int | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The job's status and its finished attempts (all, or those numbered ``attempt``) with logs."""
    rows = conn.execute(q.observe_attempt_logs, {"id": job_id, "attempt": attempt}).fetchall()
    if not rows:
        raise NotFound(f"no job {job_id}")
    found = [{k: v for k, v in r.items() if k not in ("task", "status")}
             for r in rows if r["lease_token"] is not None]
    if attempt is not None and not found:
        raise NotFound(f"job {job_id} has no finished attempt {attempt}")
    return rows[0]["status"], found


class Source:
    """The observer's one connection: opened lazily, reopened after it breaks; errors translated."""

    def __init__(self, dsn: str, queries: Queries) -> None:
        self.dsn = dsn
        self.q = queries
        self._conn: psycopg.Connection | None = None

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            self._conn = db.reconnect(self._conn, self.dsn)
            return fn(self._conn, self.q, *args)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.close()
            raise db.translate(exc, self.dsn, self.q.schema) from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# --- drawing ------------------------------------------------------------------------------

def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _rate(per_s: float) -> str:
    return "0" if per_s == 0 else f"{per_s:.0f}" if per_s >= 100 else f"{per_s:.2f}"


def _sort_key(sort: str) -> Callable[[QueueView], Any]:
    return {
        "queue": lambda v: v.queue,
        "queued": lambda v: (-v.queued, v.queue),
        "oldest": lambda v: (-(v.oldest_age if v.oldest_age is not None else -1.0), v.queue),
        "done/s": lambda v: (-v.done_per_s, v.queue),
        "failures": lambda v: (-v.failures, v.queue),
    }[sort]


def _grid(title: str, *columns: str) -> Table:
    table = Table(*columns, title=title, title_justify="left", title_style="bold",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in table.columns:
        col.justify = "left" if col.header in _TEXT_COLUMNS else "right"
    return table


def render(snap: Snapshot | None, *, sort: str = "queue", paused: bool = False,
           interval: float | None = None, target: str = "", error: str | None = None,
           max_inflight: int | None = None) -> RenderableType:
    """One frame of `jobrun top` (``snap`` None: nothing read yet)."""
    head = Text.assemble(("jobrun top", "bold"), f"  {target}")
    if snap is not None:
        head.append(f"  {snap.at.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC (db)")
    if interval is not None:
        head.append(f"  every {interval:g}s")
    if paused:
        head.append("  PAUSED", "bold reverse")
    parts: list[RenderableType] = [head, Text(
        f"rates: jobs/s over the last {RATE_WINDOW:g} s (in: enqueued, done: finished); "
        f"wait: runnable->start, last {WAIT_SAMPLE} done in {WAIT_WINDOW / 60:g} min; "
        f"fail: failed attempts, {FAIL_WINDOW / 60:g} min", style="dim")]
    if error:
        parts.append(Text(f"error: {error}", style="bold red"))
    if snap is None:
        return Group(*parts)

    qt = _grid(f"Queues (sort: {sort})", "queue", "queued", "scheduled", "leased", "oldest",
               "in/s", "done/s", "wait p50", "wait p95", f"fail {FAIL_WINDOW / 60:g}m", "limits",
               "held back")
    for v in sorted(snap.queues, key=_sort_key(sort)):
        qt.add_row(v.queue + (" (paused)" if v.paused else ""), str(v.queued), str(v.scheduled),
                   str(v.leased), duration(v.oldest_age), _rate(v.enqueued_per_s),
                   _rate(v.done_per_s), duration(v.wait_p50), duration(v.wait_p95),
                   Text(str(v.failures), style="red" if v.failures else ""), v.limits,
                   Text(v.held, style="yellow" if v.held else ""))
    parts += [Text(""), qt]

    stale = f", {snap.stale_masters} stale hidden" if snap.stale_masters else ""
    mt = _grid(f"Masters ({len(snap.masters)} live{stale})", "host", "pid", "busy", "queues",
               "version", "uptime", "seen")
    for m in snap.masters:
        mt.add_row(m.host, str(m.pid), f"{m.busy}/{m.concurrency}", ",".join(m.queues),
                   m.version or "", duration(m.uptime), duration(m.last_seen_ago) + " ago")
    parts += [Text(""), mt if snap.masters else Text(f"Masters: none live{stale}", style="bold")]

    ft = _grid(f"Latest failures ({FAIL_WINDOW / 60:g} min)", "when", "task", "id", "attempt",
               "outcome", "error")
    for f in snap.failures:
        ft.add_row(duration(f.age) + " ago", f.task, str(f.id), str(f.attempt), f.outcome, f.error)
    ft.columns[5].overflow = "ellipsis"
    ft.columns[5].no_wrap = True
    parts += [Text(""), ft if snap.failures else Text("Latest failures: none", style="bold")]

    if snap.schedules:  # recurring schedules, soonest first
        st = _grid("Schedules", "schedule", "cron", "task", "last fire", "next fire")
        for r in snap.schedules:
            last, nxt = r["last_fire_at"], r["next_fire_at"]
            st.add_row(r["name"], f"{r['cron']} {r['timezone']}", r["task"],
                       duration((snap.at - last).total_seconds()) + " ago" if last else "-",
                       "paused" if r["paused"] else "expired" if nxt is None
                       else "in " + duration(max(0.0, (nxt - snap.at).total_seconds())))
        parts += [Text(""), st]

    jobs = snap.inflight
    shown = jobs if max_inflight is None else jobs[:max(0, max_inflight)]
    more = f", {len(jobs) - len(shown)} not shown" if len(shown) < len(jobs) else ""
    it = _grid(f"In flight ({len(jobs)}{more})", "task", "id", "child", "pid", "elapsed", "master")
    for j in shown:
        it.add_row(j.task, str(j.job_id), "" if j.child is None else str(j.child),
                   "" if j.pid is None else str(j.pid), duration(j.elapsed),
                   f"{j.host}:{j.master_pid}")
    parts += [Text(""), it if jobs else Text("In flight: none", style="bold")]
    return Group(*parts)


# --- terminal -----------------------------------------------------------------------------

@contextmanager
def _cbreak(fd: int | None) -> Iterator[None]:
    """Keys arrive one at a time without echo; ^C still interrupts. Always restored."""
    if fd is None:
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextmanager
def _signal_wakeups(signals: tuple[int, ...]) -> Iterator[tuple[int, set[int]]]:
    """Signal handlers only record; the pipe wakes the loop's select (the self-pipe trick)."""
    received: set[int] = set()
    r, w = os.pipe()
    os.set_blocking(w, False)
    previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    previous = {s: signal.signal(s, lambda signum, _frame: received.add(signum)) for s in signals}
    try:
        yield r, received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(r)
        os.close(w)


def _rows_left(console: Console, snap: Snapshot | None) -> int | None:
    """Rows the in-flight table may use so the frame fits the screen (it is drawn last)."""
    if snap is None:
        return None
    fixed = 20 + len(snap.queues) + len(snap.masters) + len(snap.failures)  # text + table chrome
    return console.size.height - fixed


def watch(fetch: Callable[[], Snapshot], *, interval: float = 1.0, target: str = "",
          console: Console | None = None, keys_fd: int | None = None) -> None:
    """Run the live view until ``q``, ^C, SIGTERM or SIGHUP. ``s`` cycles the queue sort,
    ``p`` pauses/resumes refreshing. A failing ``fetch`` shows its error and is retried."""
    console = console or Console()
    sort, paused, snap, error = 0, False, None, None
    stop = {signal.SIGTERM, signal.SIGHUP}
    try:
        with _signal_wakeups((signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH)) as (wake, got), \
                _cbreak(keys_fd), \
                Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False,
                     redirect_stderr=False) as live:
            due = 0.0
            while True:
                if not paused and time.monotonic() >= due:
                    try:
                        snap, error = fetch(), None
                    except JobrunError as exc:  # shown on screen, retried next period
                        error = first_line(str(exc))
                    due = time.monotonic() + interval
                live.update(render(snap, sort=SORTS[sort], paused=paused, interval=interval,
                                   target=target, error=error,
                                   max_inflight=_rows_left(console, snap)), refresh=True)
                timeout = None if paused else max(0.0, due - time.monotonic())
                fds = [wake] + ([keys_fd] if keys_fd is not None else [])
                ready, _, _ = select.select(fds, [], [], timeout)
                if wake in ready:
                    os.read(wake, 512)
                    if got & stop:
                        return
                    got.clear()
                if keys_fd in ready:
                    keys = os.read(keys_fd, 64)
                    if not keys:  # the terminal went away
                        return
                    for key in keys.decode(errors="replace").lower():
                        if key == "q":
                            return
                        if key == "s":
                            sort = (sort + 1) % len(SORTS)
                        elif key == "p":
                            paused = not paused
                            due = 0.0 if not paused else due
    except KeyboardInterrupt:
        return


def print_once(snap: Snapshot, *, target: str = "", console: Console | None = None) -> None:
    """One frame on stdout, for a pipe or a dumb terminal: no alternate screen, no keys."""
    console = console or Console(width=None if os.isatty(1) else 200)
    console.print(render(snap, target=target))
