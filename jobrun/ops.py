"""Producer and admin operations, written once, free of I/O.

Each operation is a generator that yields :class:`Step` (a named query and its parameters)
and receives the rows that step returned; its return value is the operation's result. The
sync :class:`~jobrun.client.Client` and the async :class:`~jobrun.client.AsyncClient` each
drive these generators with their own connection type, so the two clients cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
from datetime import datetime, timedelta
from typing import Any, Generator, Iterable, Sequence

from . import validate
from .errors import InvalidInput, NotFound, Refused
from .records import AttemptRecord, Enqueued, JobRecord, JobSpec, QueueStats
from .sql import Queries
from .tracing import current_traceparent

TERMINAL = ("succeeded", "dead", "cancelled")
STATUSES = ("queued", "leased") + TERMINAL
PURGE_BATCH = 5000


@dataclass(frozen=True)
class Step:
    query: str
    params: dict[str, Any]
    returns_rows: bool = True


Op = Generator[Step, list[dict[str, Any]], Any]


def _when(run_at: datetime | None, delay: float | str | None) -> tuple[datetime | None, float | None]:
    if run_at is not None and delay is not None:
        raise InvalidInput("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise InvalidInput(f"run_at must be a datetime, not {type(run_at).__name__}")
        if run_at.tzinfo is None:
            raise InvalidInput("run_at must be timezone-aware (naive datetimes are ambiguous)")
        return run_at, None
    return None, (validate.duration(delay) if delay is not None else None)


def _payload_limit_steps(q: Queries, limit: int):
    if limit != validate.DEFAULT_MAX_PAYLOAD_BYTES:
        yield Step(q.set_payload_limit, {"limit": str(limit)})


def enqueue(q: Queries, limit: int, task: str, payload: Any = None, *, queue: str = "default",
            priority: int = 0, run_at: datetime | None = None, delay: float | str | None = None,
            max_attempts: int | None = None, idempotency_key: str | None = None,
            traceparent: str | None = None, payload_is_json: bool = False) -> Op:
    text = validate.payload_text(payload, limit) if payload_is_json else validate.payload(payload, limit)
    when, secs = _when(run_at, delay)
    params = {
        "task": validate.task_name(task), "payload": text, "queue": validate.queue_name(queue),
        "priority": validate.priority(priority), "run_at": when, "delay": secs,
        "max_attempts": validate.max_attempts(max_attempts),
        "idempotency_key": validate.idempotency_key(idempotency_key),
        "traceparent": traceparent or current_traceparent(),
    }
    yield from _payload_limit_steps(q, limit)
    rows = yield Step(q.enqueue, params)
    row = dict(rows[0])
    created = row.pop("created")
    # The stored payload equals ours (a replay with another body is a conflict), so it is not
    # read back from the database.
    stored = json.loads(text) if payload_is_json else payload
    return Enqueued(JobRecord.from_row({**row, "payload": stored}), created)


def enqueue_many(q: Queries, limit: int, items: Iterable[JobSpec | tuple[str, Any]], *,
                 queue: str = "default", priority: int = 0, run_at: datetime | None = None,
                 delay: float | str | None = None, max_attempts: int | None = None) -> Op:
    tasks: list[str] = []
    payloads: list[str] = []
    queues: list[str] = []
    priorities: list[int] = []
    run_ats: list[datetime | None] = []
    limits: list[int | None] = []
    keys: list[str | None] = []
    validate.queue_name(queue)
    validate.priority(priority)
    validate.max_attempts(max_attempts)
    default_when = _when(run_at, delay)
    # Delays become absolute times on the database clock, read once for the whole batch.
    any_delay = False
    for n, item in enumerate(items):
        spec = item if isinstance(item, JobSpec) else JobSpec(*item)
        try:
            tasks.append(validate.task_name(spec.task))
            payloads.append(validate.payload(spec.payload, limit))
            queues.append(validate.queue_name(spec.queue) if spec.queue is not None else queue)
            priorities.append(validate.priority(spec.priority) if spec.priority is not None else priority)
            limits.append(validate.max_attempts(spec.max_attempts) if spec.max_attempts is not None else max_attempts)
            keys.append(validate.idempotency_key(spec.idempotency_key))
            when, secs = _when(spec.run_at, spec.delay) if (spec.run_at or spec.delay is not None) else default_when
        except InvalidInput as exc:
            raise InvalidInput(f"job {n}: {exc}") from None
        if secs is not None:
            any_delay = True
        run_ats.append(when if secs is None else secs)  # type: ignore[arg-type]
    if not tasks:
        return []
    if any_delay:
        rows = yield Step(q.db_now, {})
        base: datetime = rows[0]["now"]
        run_ats = [base + timedelta(seconds=v) if isinstance(v, float) else v for v in run_ats]
    yield from _payload_limit_steps(q, limit)
    rows = yield Step(q.enqueue_many, {
        "tasks": tasks, "payloads": payloads, "queues": queues,
        "priorities": priorities if any(priorities) else None,
        "run_ats": run_ats if any(r is not None for r in run_ats) else None,
        "max_attempts": limits if any(v is not None for v in limits) else None,
        "idempotency_keys": keys if any(k is not None for k in keys) else None,
        "traceparents": [tp] * len(tasks) if (tp := current_traceparent()) else None,
    })
    return [(row["id"], row["created"]) for row in rows]


def get(q: Queries, job_id: int) -> Op:
    rows = yield Step(q.get_job, {"id": job_id})
    if not rows:
        raise NotFound(f"no job {job_id}")
    return JobRecord.from_row(rows[0])


def attempts(q: Queries, job_id: int) -> Op:
    rows = yield Step(q.get_attempts, {"id": job_id})
    return [AttemptRecord.from_row(r) for r in rows]


def list_jobs(q: Queries, *, status: str | None = None, queue: str | None = None,
              task: str | None = None, limit: int = 50, before: int | None = None) -> Op:
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"invalid status {status!r}: one of {', '.join(STATUSES)}")
    if queue is not None:
        validate.queue_name(queue)
    if task is not None:
        validate.task_name(task)
    if not 1 <= limit <= 10000:
        raise InvalidInput("limit must be from 1 to 10000")
    rows = yield Step(q.list_jobs, {"status": status, "queue": queue, "task": task,
                                    "limit": limit, "before": before})
    return [JobRecord.from_row(r) for r in rows]


def cancel(q: Queries, job_id: int) -> Op:
    rows = yield Step(q.cancel_job, {"id": job_id})
    if rows:
        return JobRecord.from_row(rows[0])
    job = yield from get(q, job_id)
    raise Refused(f"job {job_id} is {job.status}; only queued or leased jobs can be cancelled")


def retry(q: Queries, job_id: int) -> Op:
    rows = yield Step(q.retry_job, {"id": job_id, "channel": q.channel})
    if rows:
        return JobRecord.from_row(rows[0])
    job = yield from get(q, job_id)
    raise Refused(f"job {job_id} is {job.status}; only dead or cancelled jobs can be retried")


def purge(q: Queries, older_than: float | str, statuses: Sequence[str] = TERMINAL,
          batch: int = PURGE_BATCH) -> Op:
    """Delete finished jobs older than ``older_than``; batched so no lock is held for long.

    Returns the number of jobs deleted. Each batch is its own step; callers that own the
    connection commit between batches.
    """
    secs = validate.duration(older_than)
    for s in statuses:
        if s not in TERMINAL:
            raise InvalidInput(f"cannot purge {s!r} jobs: only {', '.join(TERMINAL)}")
    total = 0
    while True:
        count = yield Step(q.purge_batch, {"statuses": list(statuses), "older_than": secs,
                                           "batch": batch}, returns_rows=False)
        total += count
        if count < batch:
            return total


def stats(q: Queries) -> Op:
    rows = yield Step(q.stats, {})
    return [QueueStats.from_row(r) for r in rows]


def queue_add(q: Queries, name: str) -> Op:
    rows = yield Step(q.queue_add, {"name": validate.queue_name(name)})
    return rows[0]


def queue_list(q: Queries) -> Op:
    return (yield Step(q.queue_list, {}))


def queue_set_paused(q: Queries, name: str, paused: bool) -> Op:
    rows = yield Step(q.queue_set_paused, {"name": validate.queue_name(name), "paused": paused})
    if not rows:
        raise NotFound(f"queue {name!r} is not declared")
    if not paused:
        yield Step(q.queue_notify, {"channel": q.channel, "name": name})
    return rows[0]
