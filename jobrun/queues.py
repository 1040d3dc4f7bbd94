"""Queues as objects: add, update, get, list, delete, pause and resume, written once as
:mod:`jobrun.ops` writes operations (generators of named-query steps, no I/O) and driven by
Client, AsyncClient, the ``jobrun queue`` commands and ``/api/v1/queues`` alike.

A queue is returned as a dict: its settings (intervals in seconds; ``rate_limit`` per
``rate_period``), ``created_at``, ``updated_at``, ``version``, its live ``queued``
(runnable), ``scheduled`` and ``leased`` counts, and ``served_by``: the owners of the live
masters (the worker registry) whose -Q names it (empty: its jobs wait for a master that does
not exist). Every change bumps ``version`` and ``updated_at`` and NOTIFYs the masters, which
read the settings live (docs/queues.md). Every change (update, pause, resume, delete) may be
guarded by ``if_version``.
"""

from __future__ import annotations

from typing import Any

from jobrun import queue_rules, validate
from jobrun.errors import Conflict, InvalidInput, NotFound, Refused, StaleVersion
from jobrun.observe import STALE_AFTER
from jobrun.ops import Op, Step
from jobrun.sql import Queries

DEFAULT = "default"  # enqueue's default queue: never deleted


def _notify(q: Queries, name: str) -> Op:
    yield Step(q.queue_notify, {"channel": q.channel, "name": name})


def list_all(q: Queries) -> Op:
    """Every declared queue, by name."""
    return (yield Step(q.queue_view, {"name": None, "stale_after": STALE_AFTER}))


def get(q: Queries, name: str) -> Op:
    rows = yield Step(q.queue_view, {"name": validate.queue_name(name),
                                     "stale_after": STALE_AFTER})
    if not rows:
        raise NotFound(f"queue {name!r} is not declared")
    return rows[0]


def add(q: Queries, name: str, **settings: Any) -> Op:
    """Declare a queue; returns (queue, created). Adding a queue that exists changes nothing:
    a replay when the settings given match it (created False), else a Conflict."""
    validate.queue_name(name)
    checked = queue_rules.check(settings)
    rows = yield Step(q.queue_create, {"name": name, **queue_rules.params(checked)})
    if rows:  # a new queue holds no job yet: no master needs waking
        return (yield from get(q, name)), True
    current = yield from get(q, name)
    differ = queue_rules.differs(checked, current)
    if differ:
        raise Conflict(f"queue {name!r} exists with another {differ[0]}; change it with update")
    return current, False


def declare(q: Queries, name: str) -> Op:
    """Declare a queue with default settings, or leave it as it is; returns it."""
    queue, _ = yield from add(q, name)
    return queue


def update(q: Queries, name: str, if_version: int | None = None, **settings: Any) -> Op:
    """Change some settings; with ``if_version``, only while the queue is at that version
    (else StaleVersion carrying the queue as it is)."""
    validate.queue_name(name)
    checked = queue_rules.check(settings)
    if not checked:
        raise InvalidInput(f"nothing to change: give one of {', '.join(queue_rules.SETTINGS)}")
    rows = yield Step(q.queue_update, {"name": name, "version": validate.version(if_version),
                                       **queue_rules.params(checked)})
    current = yield from get(q, name)
    if not rows:
        raise StaleVersion(f"queue {name!r} is at version {current['version']}, not"
                           f" {if_version}", current)
    yield from _notify(q, name)
    return current


def _stale(name: str, current: dict[str, Any], if_version: int | None) -> StaleVersion:
    return StaleVersion(f"queue {name!r} is at version {current['version']}, not {if_version}",
                        current)


def set_paused(q: Queries, name: str, paused: bool, if_version: int | None = None) -> Op:
    rows = yield Step(q.queue_set_paused, {"name": validate.queue_name(name), "paused": paused,
                                           "version": validate.version(if_version)})
    if not rows:
        raise _stale(name, (yield from get(q, name)), if_version)  # get: NotFound if undeclared
    if not paused:
        yield from _notify(q, name)
    return (yield from get(q, name))


def delete(q: Queries, name: str, force: bool = False,
           if_version: int | None = None) -> Op:
    """Delete a queue with its finished jobs. Refused while it holds queued (runnable or
    scheduled) or leased jobs, unless ``force``, which deletes those too (a running attempt's
    outcome is then refused, as for a lost lease); refused while a schedule fires into it.
    Returns the queue as it was, with ``deleted_jobs``."""
    validate.queue_name(name)
    if name == DEFAULT:
        raise Refused(f"queue {DEFAULT!r} cannot be deleted: jobs enqueued without a queue go there")
    validate.version(if_version)
    before = yield from get(q, name)
    rows = yield Step(q.queue_delete, {"name": name, "force": bool(force), "version": if_version})
    r = rows[0]
    if r["found"] is None:
        raise NotFound(f"queue {name!r} is not declared")
    if if_version is not None and r["version"] != if_version:
        raise _stale(name, {**before, "version": r["version"]}, if_version)
    if r["schedules"]:
        raise Refused(f"queue {name!r} is the queue of schedule(s) {', '.join(r['schedules'])};"
                      " move or delete them first")
    if r["deleted"] is None:
        raise Refused(f"queue {name!r} holds {r['queued']} queued and {r['leased']} leased"
                      " job(s); wait for them, or delete with force to delete them too")
    return {**before, "queued": 0, "scheduled": 0, "leased": 0, "deleted_jobs": r["jobs"]}
