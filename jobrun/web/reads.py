"""What the API reads beyond jobrun.ops: filtered lists with keyset cursors, the attempts
feed, per-task figures, the worker registry and queue views. Written as jobrun.ops writes
operations (generators of named-query steps, no I/O), so they run on the server's pool and
can be driven by a plain Client in tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from jobrun import ops, validate
from jobrun import observe
from jobrun.errors import InvalidInput, NotFound
from jobrun.ops import Op, Step
from jobrun.records import JobRecord
from jobrun.sql import Queries
from jobrun.states import OUTCOMES, STATUSES

TASK_WINDOW = 3600.0  # seconds of finished jobs and attempts behind a task's figures
TASK_SAMPLE = 2000    # at most this many of those jobs, and of those attempts (the newest)
TASK_RECENT = 10      # recent jobs shown with one task
MAX_PAGE = 100
SCAN = 5_000          # jobs a list looks at, at most, before it answers with what it found


def _one_of(values: Sequence[str], allowed: tuple[str, ...], what: str) -> list[str] | None:
    for v in values:
        if v not in allowed:
            raise InvalidInput(f"invalid {what} {v!r}: one of {', '.join(allowed)}")
    return list(values) or None


def _page(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"invalid limit {limit}: from 1 to {MAX_PAGE}")
    return limit


def list_jobs(q: Queries, *, statuses: Sequence[str] = (), queue: str | None = None,
              task: str | None = None, schedule: str | None = None, text: str | None = None,
              limit: int = 50, cursor: str | None = None, scan: int = SCAN) -> Op:
    """(jobs newest first, the cursor of the next page or None, partial).

    The walk looks at ``scan`` jobs at most (newest first, in the order of the index it walks:
    the task's, the schedule's or the primary key). When it stops there before the page is
    full, the page is *partial*: the cursor then continues below the last job it looked at,
    and older matches may follow."""
    params = {
        "statuses": _one_of(statuses, STATUSES, "status"),
        "queue": validate.queue_name(queue) if queue is not None else None,
        "task": validate.task_name(task) if task is not None else None,
        "schedule": validate.schedule_name(schedule) if schedule is not None else None,
        "q": _search_text(text), "limit": _page(limit), "before": _job_cursor(cursor),
    }
    # Without a filter beyond the walked index's own, every row it reaches matches: the walk
    # needs only the page (and the planner then picks a walk that stops there).
    residual = (params["statuses"] or params["queue"] or params["q"]
                or (params["task"] and params["schedule"]))
    params["scan"] = scan = scan if residual else limit
    rows = yield Step(q.web_list_jobs, params)
    jobs = [JobRecord.from_row(r) for r in rows if r["id"] is not None]
    if len(jobs) == limit:
        return jobs, str(jobs[-1].id), False
    stopped = rows[0]["walked_to"]  # None: the walk ran out before the page filled
    return jobs, (str(stopped) if stopped is not None else None), stopped is not None


SEARCH_MAX = 255  # characters of GET /jobs?q=


def _search_text(text: str | None) -> str | None:
    if text is None or text == "":
        return None
    if len(text) > SEARCH_MAX or "\x00" in text:
        raise InvalidInput(f"invalid q: 1 to {SEARCH_MAX} characters, no NUL")
    return text


def _job_cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    if not cursor.isdigit() or len(cursor) > 19 or int(cursor) > validate.BIGINT_MAX:
        raise InvalidInput(f"invalid cursor {cursor[:40]!r}")
    return int(cursor)


def attempts_feed(q: Queries, *, outcomes: Sequence[str] = (), task: str | None = None,
                  queue: str | None = None, limit: int = 50, cursor: str | None = None) -> Op:
    """(attempts across jobs, newest first, the cursor of the next page or None).

    The cursor is "<finished_at RFC 3339>,<job id>,<lease token>" of the last row seen."""
    at = job_id = token = None
    if cursor is not None:
        try:
            stamp, job, tok = cursor.split(",")
            at, job_id, token = datetime.fromisoformat(stamp), int(job), int(tok)
            if not (0 <= job_id <= validate.BIGINT_MAX and 0 <= token <= validate.BIGINT_MAX):
                raise ValueError(cursor)  # past bigint: the database would refuse it
        except ValueError:
            raise InvalidInput(f"invalid cursor {cursor[:60]!r}") from None
    rows = yield Step(q.web_attempts_feed, {
        "outcomes": _one_of(outcomes, OUTCOMES, "outcome"),
        "task": validate.task_name(task) if task is not None else None,
        "queue": validate.queue_name(queue) if queue is not None else None,
        "at": at, "job_id": job_id, "token": token, "limit": _page(limit)})
    following = None
    if len(rows) == limit:
        last = rows[-1]
        following = f"{last['finished_at'].isoformat()},{last['job_id']},{last['lease_token']}"
    return rows, following


def job_attempts(q: Queries, job_id: int) -> Op:
    """The finished attempts of a job that exists (404 otherwise)."""
    found = yield from ops.attempts(q, job_id)
    if not found:
        yield from ops.get(q, job_id)
    return found


def attempt_log(q: Queries, job_id: int, attempt: int) -> Op:
    rows = yield Step(q.observe_attempt_logs, {"id": job_id, "attempt": attempt})
    if not rows:
        raise NotFound(f"no job {job_id}")
    found = [r for r in rows if r["lease_token"] is not None]
    if not found:
        raise NotFound(f"job {job_id} has no finished attempt {attempt}")
    return [{k: v for k, v in r.items() if k not in ("task", "status")} for r in found]


def workers(q: Queries) -> Op:
    """Live masters of the registry, with the tasks each serves (None: not reported)."""
    rows = yield Step(q.observe_workers, {"stale_after": observe.STALE_AFTER})
    return [{k: v for k, v in r.items() if k not in ("stale", "db_now")}
            for r in rows if not r["stale"]]


def queues(q: Queries) -> Op:
    """Each declared queue's settings and live figures (what `jobrun top` shows)."""
    return (yield Step(q.observe_queues, {
        "rate_window": observe.RATE_WINDOW, "wait_window": observe.WAIT_WINDOW,
        "sample": observe.WAIT_SAMPLE, "fail_window": observe.FAIL_WINDOW,
        "stale_after": observe.STALE_AFTER}))


def _since(rows: list[dict[str, Any]], count: str) -> datetime | None:
    """The start of what a sample of the newest TASK_SAMPLE rows of the window covers: the
    window's start, or the oldest row sampled when the sample was full."""
    if not rows:
        return None
    if sum(r[count] for r in rows) < TASK_SAMPLE:
        return rows[0]["window_start"]
    return min(r["oldest"] for r in rows)


def tasks(q: Queries, task: str | None = None) -> Op:
    """Per task (all, or the one named): queued and leased jobs now; of the newest
    TASK_SAMPLE jobs that finished in the last TASK_WINDOW s, how many succeeded, died, were
    cancelled (``finished_since``: the oldest finished time those cover); of the newest
    TASK_SAMPLE attempts that ended in that window, how many, the share that succeeded, mean
    and p95 run time (``runs_since``); which live masters serve it. One statement
    (web_task_figures), every figure from a bounded read: the partial indexes on queued and
    leased jobs, and a LIMITed walk down the finished_at indexes; none counts the table's
    history."""
    if task is not None:
        validate.task_name(task)
    rows = yield Step(q.web_task_figures, {"window": TASK_WINDOW, "sample": TASK_SAMPLE,
                                           "stale_after": observe.STALE_AFTER, "task": task})
    kinds: dict[str, list[dict[str, Any]]] = {"finished": [], "runs": []}
    for r in rows:
        kinds.setdefault(r["kind"], []).append(r)
    finished_since, runs_since = _since(kinds["finished"], "n"), _since(kinds["runs"], "n")
    out: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return out.setdefault(name, {
            "task": name, "counts": {s: 0 for s in STATUSES}, "window_seconds": TASK_WINDOW,
            "finished_since": finished_since, "runs": 0, "success_rate": None,
            "mean_run_seconds": None, "p95_run_seconds": None, "runs_since": runs_since,
            "served_by": []})

    for r in rows:
        if task is not None and r["task"] != task:
            continue
        if r["kind"] == "runs":
            entry(r["task"]).update(runs=r["n"], success_rate=r["succeeded"] / r["n"],
                                    mean_run_seconds=r["mean_run"], p95_run_seconds=r["p95_run"])
        elif r["kind"] == "served":
            entry(r["task"])["served_by"] = r["served_by"]
        else:
            entry(r["task"])["counts"][r["status"]] = r["n"]
    return [out[name] for name in sorted(out)]


def task_detail(q: Queries, task: str) -> Op:
    found = yield from tasks(q, task)
    if not found:
        raise NotFound(f"no task {task!r}: no jobs and no live master serves it")
    recent, _, _ = yield from list_jobs(q, task=task, limit=TASK_RECENT)
    return {**found[0], "recent_jobs": recent}

