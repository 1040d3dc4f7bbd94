"""Producer and admin operations, written once, free of I/O.

Each operation is a generator that yields :class:`Step` (a named query and its parameters)
and receives the rows that step returned; its return value is the operation's result. The
sync :class:`~jobrun.client.Client` and the async :class:`~jobrun.client.AsyncClient` each
drive these generators with their own connection type, so the two clients cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
import json
from datetime import datetime, timedelta
from typing import Any, Generator, Iterable, Sequence

from jobrun import events as job_events, validate
from jobrun.errors import InvalidInput, NotFound, Refused, StaleVersion, UnknownQueue
from jobrun.records import (AttemptRecord, Enqueued, EventRecord, JobRecord, JobSpec,
                            QueueStats)
from jobrun.sql import Queries
from jobrun.states import STATUSES, TERMINAL
from jobrun.tracing import producer

PURGE_BATCH = 5000
LIST_MAX = 10000  # jobs a list returns at most


@dataclass(frozen=True)
class Step:
    query: str
    params: dict[str, Any]
    returns_rows: bool = True
    # A step run after this one in a transaction of its own (in the same round trip where the
    # connection allows), whatever this one's outcome; its own outcome is ignored.
    then: "Step | None" = None


Op = Generator[Step, list[dict[str, Any]], Any]


def _when(run_at: datetime | None, delay: float | str | None) -> tuple[datetime | None, float | None]:
    if run_at is not None and delay is not None:
        raise InvalidInput("give run_at or delay, not both")
    if run_at is not None:
        return validate.run_at(run_at), None
    return None, (validate.delay(delay) if delay is not None else None)


def _undeclared(queue: str) -> UnknownQueue:
    return UnknownQueue(f'queue "{queue}" is not declared (declare it with: jobrun queue add {queue})')


def _wake(q: Queries, queues: list[str], run_ats: list[datetime | None]) -> Step:
    """The wake-up of the masters after an insert that sent none at its commit (``notify``
    'after', migration 0011): a queue is woken if a job went in to run by now. Should it fail,
    the jobs are committed all the same and run at the masters' next poll. One queue goes
    with scalar parameters (wake_queue: cheaper to send than arrays)."""
    first: dict[str, datetime | None] = {}
    for queue, at in zip(queues, run_ats):
        if queue not in first or (first[queue] is not None and (at is None or at < first[queue])):
            first[queue] = at
    if len(first) == 1:
        [(queue, at)] = first.items()
        return Step(q.wake_queue, {"channel": q.channel, "queue": queue, "run_at": at},
                    returns_rows=False)
    return Step(q.wake_queues, {"channel": q.channel, "queues": list(first),
                                "run_ats": list(first.values())}, returns_rows=False)


def _payload_limit_steps(q: Queries, limit: int):
    if limit != validate.DEFAULT_MAX_PAYLOAD_BYTES:
        yield Step(q.set_payload_limit, {"limit": str(limit)})


@producer("enqueue")
def enqueue(q: Queries, limit: int, task: str, payload: Any = None, *, queue: str = "default",
            priority: int | None = None, run_at: datetime | None = None,
            delay: float | str | None = None, max_attempts: int | None = None,
            idempotency_key: str | None = None, traceparent: str | None = None,
            payload_is_json: bool = False, concurrency_key: str | None = None,
            wake_after: bool = False) -> Op:
    """Priority and max_attempts left None take the queue's priority_default and max_attempts.
    ``wake_after``: each step is a transaction of its own (a connection in autocommit mode),
    so a new job's insert may leave its NOTIFY to a step after its commit (see _wake)."""
    text = validate.payload_text(payload, limit) if payload_is_json else validate.payload(payload, limit)
    when, secs = _when(run_at, delay)
    params = {
        "task": validate.task_name(task), "payload": text, "queue": validate.queue_name(queue),
        "priority": validate.priority(priority) if priority is not None else None,
        "run_at": when, "delay": secs,
        "max_attempts": validate.max_attempts(max_attempts),
        "idempotency_key": validate.idempotency_key(idempotency_key),
        "traceparent": traceparent,
        "concurrency_key": validate.concurrency_key(concurrency_key),
    }
    if params["idempotency_key"] is None:
        # A new job for certain: one plain insert (the payload size was checked above).
        wake = wake_after and not (secs is not None and secs > 0)
        rows = yield Step(q.insert_job, {**params, "notify": "after" if wake_after else "commit"},
                          then=_wake(q, [params["queue"]], [when]) if wake else None)
        if not rows:
            raise _undeclared(queue)
    else:
        yield from _payload_limit_steps(q, limit)
        rows = yield Step(q.enqueue, params)
        if not rows[0]["created"] and not rows[0]["stored"]:
            # A replay of a job committed after the statement began: read it as it is now.
            rows = [{**(yield from _job_row(q, rows[0]["id"])), "created": False, "stored": True}]
    row = dict(rows[0])
    created = row.pop("created")
    if not row.pop("stored", True):
        # A new job from the enqueue function: the columns it does not return are NULL in
        # the row and take their defaults. (A replay's are the stored row's, as it is now.)
        row = {k: v for k, v in row.items() if v is not None}
    if created:
        row["concurrency_key"] = params["concurrency_key"]
        row["traceparent"] = params["traceparent"]
    # The stored payload equals ours (a replay with another body is a conflict), so it is not
    # read back from the database.
    stored = json.loads(text) if payload_is_json else payload
    return Enqueued(JobRecord.from_row({**row, "payload": stored}), created)


# JobSpec fields beyond task and payload, all None when an item takes every call default.
_NO_OPTIONS = (None, None, None, None, None, None, None)


def _item_options(spec: JobSpec) -> tuple:
    """(queue, priority, (run_at, delay seconds), max_attempts, idempotency key, concurrency
    key) of one item, checked; None where the item takes the call's default."""
    queue = validate.queue_name(spec.queue) if spec.queue is not None else None
    priority = validate.priority(spec.priority) if spec.priority is not None else None
    limit = validate.max_attempts(spec.max_attempts)
    key = validate.idempotency_key(spec.idempotency_key)
    when = _when(spec.run_at, spec.delay) if (spec.run_at or spec.delay is not None) else None
    return queue, priority, when, limit, key, validate.concurrency_key(spec.concurrency_key)


_SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))


def _spec(n: int, item: Any) -> JobSpec:
    """An item of enqueue_many as a JobSpec: a JobSpec, a tuple or list of its fields in
    order, or a mapping of its fields by name; anything else is refused, naming the item."""
    if isinstance(item, JobSpec):
        return item
    if isinstance(item, Mapping):
        unknown = sorted(str(k) for k in item if k not in _SPEC_FIELDS)
        if unknown or "task" not in item:
            what = f"unknown field {unknown[0]!r}" if unknown else "no 'task'"
            raise InvalidInput(f"job {n}: a mapping item has {what}"
                               f" (fields: {', '.join(_SPEC_FIELDS)})")
        return JobSpec(**item)
    if isinstance(item, (tuple, list)) and 1 <= len(item) <= len(_SPEC_FIELDS):
        return JobSpec(*item)
    raise InvalidInput(f"job {n}: an item is a JobSpec, a (task, payload) tuple or a mapping"
                       f" of JobSpec fields, not {type(item).__name__}")


def _column(options: dict[int, tuple], field: int, default: Any, count: int) -> list | None:
    """One option for every item (the call's default where an item sets none), or None when
    no item sets it."""
    if all(o[field] is None for o in options.values()):
        return None
    column = [default] * count
    for n, o in options.items():
        if o[field] is not None:
            column[n] = o[field]
    return column


@producer("enqueue_many")
def enqueue_many(q: Queries, limit: int, items: Iterable[JobSpec | tuple[str, Any]], *,
                 queue: str = "default", priority: int | None = None,
                 run_at: datetime | None = None, delay: float | str | None = None,
                 max_attempts: int | None = None, concurrency_key: str | None = None,
                 wake_after: bool = False, traceparent: str | None = None) -> Op:
    """Priority and max_attempts left None (call and item) take the queue's defaults.
    ``wake_after`` as for enqueue; ``traceparent`` is stored on every job."""
    validate.queue_name(queue)
    if priority is not None:
        validate.priority(priority)
    validate.max_attempts(max_attempts)
    validate.concurrency_key(concurrency_key)
    default_when = _when(run_at, delay)
    tasks: list[str] = []
    payloads: list[str] = []
    options: dict[int, tuple] = {}  # by position: the items that set more than task and payload
    checked: set[str] = set()       # task names already validated in this batch
    for n, item in enumerate(items):
        if type(item) is tuple and len(item) == 2:
            task, body = item
            spec = None
        else:
            spec = _spec(n, item)
            task, body = spec.task, spec.payload
        try:
            if type(task) is not str or task not in checked:
                checked.add(validate.task_name(task))
            tasks.append(task)
            payloads.append(validate.payload(body, limit))
            if spec is not None and (spec.queue, spec.priority, spec.run_at, spec.delay,
                                     spec.max_attempts, spec.idempotency_key,
                                     spec.concurrency_key) != _NO_OPTIONS:
                options[n] = _item_options(spec)
        except InvalidInput as exc:
            raise InvalidInput(f"job {n}: {exc}") from None
    if not tasks:
        return []
    count = len(tasks)
    queues = _column(options, 0, queue, count)
    priorities = _column(options, 1, priority, count)
    whens = _column(options, 2, default_when, count)
    limits = _column(options, 3, max_attempts, count)
    keys = _column(options, 4, None, count)
    ckeys = _column(options, 5, concurrency_key, count)
    if ckeys is None and concurrency_key is not None:
        ckeys = [concurrency_key] * count
    # Delays become absolute times on the database clock, read once for the whole batch.
    base: datetime | None = None
    if default_when[1] is not None or any(secs is not None for _, secs in whens or ()):
        rows = yield Step(q.db_now, {})
        base = rows[0]["now"]

    def absolute(when: tuple[datetime | None, float | None]) -> datetime | None:
        at, secs = when
        return at if secs is None else base + timedelta(seconds=secs)  # type: ignore[operator]

    run_ats = [absolute(w) for w in whens] if whens is not None else None
    tp = traceparent
    if keys is None:
        # Every job is new: a plain insert. Payload sizes were checked above, with the cap the
        # SQL functions use.
        rows = yield Step(q.insert_jobs, {
            "n": count, "queue_names": sorted(set(queues)) if queues else [queue],
            "tasks": tasks, "payloads": payloads, "queue": queue, "queues": queues,
            "priority": priority, "priorities": priorities, "run_at": absolute(default_when),
            "run_ats": run_ats, "max_attempts": max_attempts, "attempt_limits": limits,
            "traceparent": tp, "concurrency_keys": ckeys,
            "notify": "after" if wake_after else "commit",
        }, then=_wake(q, queues or [queue] * count, run_ats or [absolute(default_when)] * count)
           if wake_after else None)
        missing = rows[0]["undeclared"]
        if missing is not None:
            raise _undeclared(missing)
        return [(job_id, True) for job_id in rows[0]["ids"]]
    yield from _payload_limit_steps(q, limit)
    default_at = absolute(default_when)
    rows = yield Step(q.enqueue_many, {
        "tasks": tasks, "payloads": payloads, "queues": queues or [queue] * count,
        "priorities": priorities or ([priority] * count if priority is not None else None),
        "run_ats": run_ats or ([default_at] * count if default_at else None),
        "attempt_limits": limits or ([max_attempts] * count if max_attempts else None),
        "idempotency_keys": keys, "traceparents": [tp] * count if tp else None,
        "concurrency_keys": ckeys,
    })
    return [(row["id"], row["created"]) for row in rows]


def _job_row(q: Queries, job_id: int) -> Op:
    rows = yield Step(q.get_job, {"id": validate.job_id(job_id)})
    if not rows:
        raise NotFound(f"no job {job_id}")
    return rows[0]


def get(q: Queries, job_id: int) -> Op:
    return JobRecord.from_row((yield from _job_row(q, job_id)))


def attempts(q: Queries, job_id: int) -> Op:
    rows = yield Step(q.get_attempts, {"id": validate.job_id(job_id)})
    return [AttemptRecord.from_row(r) for r in rows]


def list_jobs(q: Queries, *, status: str | None = None, queue: str | None = None,
              task: str | None = None, limit: int = 50, before: int | None = None) -> Op:
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"invalid status {status!r}: one of {', '.join(STATUSES)}")
    if queue is not None:
        validate.queue_name(queue)
    if task is not None:
        validate.task_name(task)
    rows = yield Step(q.list_jobs, {"status": status, "queue": queue, "task": task,
                                    "limit": validate.page_size(limit, LIST_MAX),
                                    "before": _before(before)})
    return [JobRecord.from_row(r) for r in rows]


def _before(value: Any) -> int | None:
    """A list's ``before``: the id the page ends under (None: the newest first)."""
    return None if value is None else validate.job_id(value, "before")


def _refusal(job: JobRecord, if_version: int | None, refused: str) -> Exception:
    """Why a guarded change of ``job`` matched no row: its version moved, or its state."""
    if if_version is not None and job.version != if_version:
        return StaleVersion(f"job {job.id} is at version {job.version}, not {if_version}", job)
    return Refused(f"job {job.id} is {job.status}; {refused}")


def events(q: Queries, job_id: int) -> Op:
    """The job's transitions, oldest first (NotFound: no such job)."""
    rows = yield Step(q.get_events, {"id": validate.job_id(job_id)})
    if not rows:
        raise NotFound(f"no job {job_id}")
    return [EventRecord.from_row(r) for r in rows if r["seq"] is not None]


def events_mode(q: Queries) -> Op:
    """The transition log's mode: all, terminal or none (jobrun/events.py)."""
    rows = yield Step(q.events_mode, {})
    return job_events.mode_of(rows[0]["level"])


def set_events_mode(q: Queries, mode: str) -> Op:
    """Set the transition log's mode for the whole cluster; returns it."""
    rows = yield Step(q.set_events_mode, {"level": job_events.level(mode)})
    return job_events.mode_of(rows[0]["level"])


def _actor(actor: str | None) -> str | None:
    """Who makes a change, as its event names it (None: the database role)."""
    if actor is None:
        return None
    if not isinstance(actor, str) or not 1 <= len(actor) <= 200 or not actor.isprintable():
        raise InvalidInput(f"invalid actor {validate._show(actor)}: 1 to 200 printable"
                           " characters")
    return actor


def cancel(q: Queries, job_id: int, if_version: int | None = None,
           actor: str | None = None) -> Op:
    rows = yield Step(q.cancel_job, {"id": validate.job_id(job_id),
                                    "version": validate.version(if_version),
                                    "actor": _actor(actor)})
    if rows:
        return JobRecord.from_row(rows[0])
    job = yield from get(q, job_id)
    raise _refusal(job, if_version, "only queued or leased jobs can be cancelled")


def retry(q: Queries, job_id: int, if_version: int | None = None,
          actor: str | None = None) -> Op:
    rows = yield Step(q.retry_job, {"id": validate.job_id(job_id), "channel": q.channel,
                                    "version": validate.version(if_version),
                                    "actor": _actor(actor)})
    if rows:
        return JobRecord.from_row(rows[0])
    job = yield from get(q, job_id)
    raise _refusal(job, if_version, "only dead or cancelled jobs can be retried")


def delete(q: Queries, job_id: int, if_version: int | None = None) -> Op:
    """Delete one finished job with its attempts; returns the deleted job."""
    rows = yield Step(q.delete_job, {"id": validate.job_id(job_id),
                                    "version": validate.version(if_version)})
    if rows:
        return JobRecord.from_row(rows[0])
    job = yield from get(q, job_id)
    raise _refusal(job, if_version, f"only {', '.join(TERMINAL)} jobs can be deleted")


def purge(q: Queries, older_than: float | str | None, statuses: Sequence[str] = TERMINAL,
          batch: int = PURGE_BATCH) -> Op:
    """Delete finished jobs: those of a queue with a retention of its own once older than
    that, the others once older than ``older_than`` (None or 0: the others are kept); batched
    so no lock is held for long.

    Returns the number of jobs deleted. Each batch is its own step; callers that own the
    connection commit between batches.
    """
    secs = validate.duration(older_than) if older_than is not None else 0.0
    if secs > validate.MAX_DELAY:  # now() minus it would be out of PostgreSQL's range
        raise InvalidInput(f"invalid older_than {validate._show(older_than)}: at most 100 years")
    for s in statuses:
        if s not in TERMINAL:
            raise InvalidInput(f"cannot purge {s!r} jobs: only {', '.join(TERMINAL)}")
    own = yield Step(q.queue_retentions, {})
    groups: dict[float, list[str]] = {}
    for row in own:
        groups.setdefault(row["retention"], []).append(row["name"])
    plans = [(keep, names, []) for keep, names in sorted(groups.items())]
    if secs > 0:
        plans.append((secs, None, [row["name"] for row in own]))
    total = 0
    for keep, only, exclude in plans:
        while True:
            count = yield Step(q.purge_batch, {"statuses": list(statuses), "older_than": keep,
                                               "batch": batch, "only": only, "exclude": exclude},
                               returns_rows=False)
            total += count
            if count < batch:
                break
    # Workflows go whole, once every member finished that long ago (whatever its status): so
    # only by a purge of every finished status.
    while secs > 0 and set(statuses) == set(TERMINAL):
        deleted = yield Step(q.purge_workflows, {"older_than": secs, "batch": batch},
                             returns_rows=True)
        total += sum(r["n"] for r in deleted)
        if len(deleted) < batch:
            break
    return total


def stats(q: Queries) -> Op:
    rows = yield Step(q.stats, {})
    return [QueueStats.from_row(r) for r in rows]
