"""The read model behind ``jobrun workers``, ``jobrun logs``, ``jobrun top`` and the web's live
figures: named queries of ``sql/observe.sql`` run and shaped into plain dataclasses, no drawing.

``workers``, ``queues``, ``latest_failures``, ``snapshot`` and ``attempt_logs`` take a psycopg
connection (dict rows) and the schema's :class:`~jobrun.sql.Queries`. Every number comes from
the database clock, and ``snapshot`` reads one frame in one read-only REPEATABLE READ
transaction, so all its queries see the same rows and the same ``now()``. :class:`Source` is
an observer's one connection. The terminal view (:mod:`jobrun.admin.top`) draws these
frames; the web (:mod:`jobrun.web.reads`, :mod:`jobrun.web.summary`) serves them. This module
imports neither a terminal library nor the command line, so ``jobrun web`` loads neither.

What the figures measure (top prints it in its header): depth from the partial indexes on
queued and leased rows; rates per second over the last ``RATE_WINDOW`` seconds (enqueued: jobs
created; done: jobs that reached succeeded, dead or cancelled); wait = start minus the time the
job became runnable, p50/p95 over the latest ``WAIT_SAMPLE`` jobs finished in ``WAIT_WINDOW``;
failures = attempts that ended failed, timeout, worker_lost or lease_expired in ``FAIL_WINDOW``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import psycopg

from jobrun.errors import NotFound
from jobrun.sql import Queries
from jobrun.store import db

STALE_AFTER = 30.0   # a registry row older than this is a master that died without a word
RATE_WINDOW = 60.0
WAIT_WINDOW = 300.0
WAIT_SAMPLE = 2000
FAIL_WINDOW = 300.0
FAILURE_ROWS = 8


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
    busy: int  # jobs running (with --slots, several a child)
    version: str | None
    started_at: datetime
    last_seen: datetime
    uptime: float
    last_seen_ago: float
    inflight: list[InFlight]
    slots: int = 1  # jobs each child runs at once

    @property
    def capacity(self) -> str:
        """What ``busy`` is out of: children, or children x slots."""
        return str(self.concurrency) if self.slots == 1 else f"{self.concurrency}×{self.slots}"


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
    # The owners of the live masters serving it (None: not read); empty, and its jobs wait
    # for a master that does not exist.
    served_by: list[str] | None = None
    waiting: int = 0       # waiting for parents (workflows)


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
                   inflight=_inflight(r, r["db_now"]), slots=r["slots"])
            for r in rows if not r["stale"]]
    return live, len(rows) - len(live)


def queues(conn: psycopg.Connection, q: Queries) -> list[QueueView]:
    rows = conn.execute(q.observe_queues, {
        "rate_window": RATE_WINDOW, "wait_window": WAIT_WINDOW, "sample": WAIT_SAMPLE,
        "fail_window": FAIL_WINDOW, "stale_after": STALE_AFTER}).fetchall()
    return [QueueView(queue=r["queue"], paused=r["paused"], concurrency=r["concurrency"],
                      queued=r["queued"], scheduled=r["scheduled"], leased=r["leased"],
                      oldest_age=r["oldest_age"], enqueued_per_s=r["enqueued"] / RATE_WINDOW,
                      done_per_s=r["finished"] / RATE_WINDOW, wait_p50=r["wait_p50"],
                      wait_p95=r["wait_p95"], wait_sample=r["wait_sample"],
                      failures=r["failures"], limits=limits_text(r), held=r["held"] or "",
                      served_by=list(r["served_by"]), waiting=r["waiting"])
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


def duration(seconds: float | None) -> str:
    """Seconds in a few characters: 4.2s, 37s, 5m03s, 2h05m, 3d04h ('-' for None)."""
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
