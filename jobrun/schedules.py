"""Recurring schedules: operations written once as generators (see :mod:`jobrun.ops`).

Every rule is checked here, when a schedule is created or changed, never when it fires: the
expression, the zone, the window (``ends_at`` after ``starts_at``, and at least one slot left
in it), the task, queue, priority, attempts and payload. The first slot is computed on the
database clock. The leader's fire path is in :mod:`jobrun.worker.scheduler`.

Every change (update, pause, resume, delete) may be guarded by the schedule's ``version``
(``if_version``): a schedule at another version is a :class:`~jobrun.errors.StaleVersion`
carrying it as it is, and nothing changes. A change bumps the version; a fire does not.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from jobrun import validate
from jobrun.errors import Conflict, InvalidInput, NotFound, Refused, StaleVersion
from jobrun.ops import LIST_MAX, Op, Step, _undeclared
from jobrun.policy import cron
from jobrun.records import JobRecord, _from_row
from jobrun.sql import Queries

# The fields that define when a schedule fires: changing one recomputes its next slot.
_TIMING = ("cron", "timezone", "starts_at", "ends_at")
RUNS_MAX = 1000  # recent runs shown with a schedule
_FIELDS = ("cron", "timezone", "task", "payload", "queue", "priority", "max_attempts",
           "starts_at", "ends_at", "catch_up")


@dataclass(frozen=True)
class ScheduleRecord:
    id: int
    name: str
    cron: str
    timezone: str
    task: str
    queue: str
    priority: int
    catch_up: str
    paused: bool
    declared: bool
    version: int
    created_at: datetime
    updated_at: datetime
    payload: Any = None
    max_attempts: int | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    next_fire_at: datetime | None = None
    last_fire_at: datetime | None = None

    @property
    def status(self) -> str:
        """expired (no fire left), paused or active."""
        if self.next_fire_at is None:
            return "expired"
        return "paused" if self.paused else "active"

    def upcoming(self, count: int) -> list[datetime]:
        """Its next ``count`` fire times (fewer where its window or the range ends); none while
        paused, and none after the first for a zone or expression stored past the checks (a
        zone name such as 'localtime' from before they refused it: the scheduler expires it)."""
        fires: list[datetime] = []
        at = self.next_fire_at
        while at is not None and len(fires) < count and not self.paused:
            fires.append(at)
            try:
                at = cron.next_fire(self.cron, self.timezone, at, self.ends_at)
            except InvalidInput:
                break
        return fires

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "ScheduleRecord":
        return _from_row(cls, row)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "status": self.status}


def parse_time(value: Any, what: str) -> datetime | None:
    """An aware datetime from a datetime or an ISO 8601 string with an offset."""
    if value is None or isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{what} {value!r} is not an ISO 8601 datetime"
                               " (e.g. 2030-01-31T09:00:00+00:00)") from None
    else:
        raise InvalidInput(f"{what} must be a datetime, not {type(value).__name__}")
    if when is not None and when.tzinfo is None:
        raise InvalidInput(f"{what} has no UTC offset and would be ambiguous; add one, e.g. Z")
    return when


def _checked(spec: dict[str, Any], limit: int) -> dict[str, Any]:
    """Validate a full definition; returns the query parameters (payload as JSON text)."""
    expr = cron.parse(spec["cron"]).text
    tz = spec.get("timezone")
    tz = "UTC" if tz is None else tz  # "" is no zone: refused, not taken for UTC
    cron.zone(tz)
    starts = parse_time(spec.get("starts_at"), "starts_at")
    ends = parse_time(spec.get("ends_at"), "ends_at")
    if starts is not None and ends is not None and ends <= starts:
        raise InvalidInput(f"the window ends ({ends.isoformat()}) before it starts"
                           f" ({starts.isoformat()})")
    catch_up = spec.get("catch_up") or "latest"
    if catch_up not in cron.CATCH_UP:
        raise InvalidInput(f"invalid catch-up {catch_up!r}: one of {', '.join(cron.CATCH_UP)}")
    payload = spec.get("payload")
    return {
        "cron": expr, "timezone": tz, "task": validate.task_name(spec["task"]),
        "payload": validate.payload_text(payload, limit) if spec.get("payload_is_json")
        else validate.payload(payload, limit),
        "queue": validate.queue_name(spec.get("queue") or "default"),
        "priority": validate.priority(spec.get("priority") or 0),
        "max_attempts": validate.max_attempts(spec.get("max_attempts")),
        "starts_at": starts, "ends_at": ends, "catch_up": catch_up,
    }


def _first_slot(p: dict[str, Any], now: datetime) -> datetime:
    nxt = cron.first_fire(p["cron"], p["timezone"], now, p["starts_at"], p["ends_at"])
    if nxt is None:
        raise InvalidInput(f"schedule {p['cron']!r} ({p['timezone']}) has no fire time left"
                           + (" in its window" if p["ends_at"] else f" in range ({cron.RANGE})"))
    return nxt


def _now(q: Queries) -> Op:
    rows = yield Step(q.db_now, {})
    return rows[0]["now"]


def create(q: Queries, limit: int, name: str, cron_expr: str, task: str, *,
           declared: bool = False, paused: bool = False, **spec: Any) -> Op:
    """Create a schedule; a name in use is a Conflict."""
    validate.schedule_name(name)
    params = _checked({**spec, "cron": cron_expr, "task": task}, limit)
    now = yield from _now(q)
    params.update(name=name, paused=bool(paused), declared=declared,
                  next_fire_at=_first_slot(params, now))
    existing = yield Step(q.schedule_get, {"name": name})
    if existing:
        raise Conflict(f"schedule {name!r} already exists (change it with: jobrun schedule update {name})")
    rows = yield Step(q.schedule_insert, params)
    if not rows:
        raise _undeclared(params["queue"])
    return ScheduleRecord.from_row(rows[0])


def get(q: Queries, name: str) -> Op:
    rows = yield Step(q.schedule_get, {"name": validate.schedule_name(name)})
    if not rows:
        raise NotFound(f"no schedule named {name!r}")
    return ScheduleRecord.from_row(rows[0])


def list_all(q: Queries) -> Op:
    rows = yield Step(q.schedule_list, {})
    return [ScheduleRecord.from_row(r) for r in rows]


def runs(q: Queries, name: str, limit: int = 10) -> Op:
    """The newest jobs the schedule made, each with its last attempt's outcome."""
    record = yield from get(q, name)
    return (yield Step(q.schedule_runs, {"id": record.id,
                                         "limit": validate.integer("limit", limit, 0, RUNS_MAX)}))


def _stale(current: ScheduleRecord, if_version: int | None) -> StaleVersion | None:
    """The refusal of a change guarded by ``if_version`` when the schedule is at another."""
    if if_version is None or current.version == if_version:
        return None
    return StaleVersion(f"schedule {current.name!r} is at version {current.version}, not"
                        f" {if_version}", current)


def _guarded(q: Queries, name: str, if_version: int | None) -> Op:
    """The schedule as it is, if a change guarded by ``if_version`` may go ahead."""
    validate.version(if_version)
    current = yield from get(q, name)
    stale = _stale(current, if_version)
    if stale:
        raise stale
    return current


def _changed_meanwhile(q: Queries, name: str, if_version: int | None) -> Op:
    """Why a change at the version read matched no row: gone, or changed since it was read."""
    current = yield from get(q, name)
    raise _stale(current, if_version) or Conflict(f"schedule {name!r} changed meanwhile;"
                                                  " try again")


def update(q: Queries, limit: int, name: str, *, declared: bool | None = None,
           if_version: int | None = None, **changes: Any) -> Op:
    """Change some fields of a schedule (None: keep). A new expression, zone or window
    starts again from the next slot after now; other changes keep the next slot."""
    unknown = set(changes) - set(_FIELDS) - {"payload_is_json"}
    if unknown:
        raise InvalidInput(f"unknown schedule field(s): {', '.join(sorted(unknown))}")
    current = yield from _guarded(q, name, if_version)
    spec = {f: getattr(current, f) for f in _FIELDS}
    spec.update({k: v for k, v in changes.items() if v is not None})
    if changes.get("payload") is None and "payload_is_json" in changes:
        spec.pop("payload_is_json", None)
    params = _checked(spec, limit)
    next_at = current.next_fire_at
    if any(params[f] != getattr(current, f) for f in _TIMING) or next_at is None:
        now = yield from _now(q)
        next_at = _first_slot(params, now)
    params.update(name=name, version=current.version, next_fire_at=next_at,
                  declared=current.declared if declared is None else declared)
    rows = yield Step(q.schedule_update, params)
    if not rows:
        again = yield Step(q.schedule_get, {"name": name})
        if again and again[0]["version"] == current.version:
            raise _undeclared(params["queue"])
        yield from _changed_meanwhile(q, name, if_version)
    return ScheduleRecord.from_row(rows[0])


def set_paused(q: Queries, name: str, paused: bool, if_version: int | None = None) -> Op:
    """Pause (its slots are skipped) or resume (from the next slot after now: no burst)."""
    current = yield from _guarded(q, name, if_version)
    next_at = current.next_fire_at
    if not paused:
        now = yield from _now(q)
        next_at = cron.first_fire(current.cron, current.timezone, now, current.starts_at,
                                  current.ends_at)
    rows = yield Step(q.schedule_set_paused, {"name": name, "paused": paused,
                                              "next_fire_at": next_at, "version": current.version})
    if not rows:
        yield from _changed_meanwhile(q, name, if_version)
    return ScheduleRecord.from_row(rows[0])


def delete(q: Queries, name: str, force: bool = False, if_version: int | None = None) -> Op:
    current = yield from _guarded(q, name, if_version)
    if current.declared and not force:
        raise Refused(f"schedule {name!r} is declared in code (@app.periodic): remove it there,"
                      " or delete it with --force (a master starting with that code adds it back)")
    rows = yield Step(q.schedule_delete, {"name": name, "version": if_version})
    if not rows:
        yield from _changed_meanwhile(q, name, if_version)
    return ScheduleRecord.from_row(rows[0])


def jobs(q: Queries, name: str, *, status: str | None = None, limit: int = 50,
         before: int | None = None) -> Op:
    """Jobs made by a schedule, newest first."""
    yield from get(q, name)
    rows = yield Step(q.list_schedule_jobs, {
        "schedule": name, "status": status, "limit": validate.page_size(limit, LIST_MAX),
        "before": None if before is None else validate.job_id(before, "before")})
    return [JobRecord.from_row(r) for r in rows]


def sync_declared(q: Queries, limit: int, declared: Iterable[dict[str, Any]]) -> Op:
    """Bring schedules declared in code into the table: create the missing ones, update the
    ones whose definition changed (keeping paused and the next slot when timing is the same).
    Returns the names created or changed."""
    changed = []
    for spec in declared:
        spec = dict(spec)
        name = spec.pop("name")
        rows = yield Step(q.schedule_get, {"name": name})
        if not rows:
            yield from create(q, limit, name, spec.pop("cron"), spec.pop("task"),
                              declared=True, **spec)
            changed.append(name)
            continue
        current = ScheduleRecord.from_row(rows[0])
        wanted = _checked(spec, limit)
        same = all((json.dumps(current.payload, sort_keys=True) ==
                    json.dumps(json.loads(wanted["payload"]), sort_keys=True)) if f == "payload"
                   else getattr(current, f) == wanted[f] for f in _FIELDS)
        if same and current.declared:
            continue
        yield from update(q, limit, name, declared=True, **spec)
        changed.append(name)
    return changed


class Schedules:
    """``client.schedules``: the schedule operations, driven by the client they belong to
    (sync: results; async: awaitables). Each takes ``conn=`` like the client's methods."""

    def __init__(self, api: Any) -> None:
        self._api = api

    def _run(self, op: Op, conn: Any) -> Any:
        return self._api._run(op, conn)

    def create(self, name: str, cron: str, task: str, payload: Any = None, *,
               queue: str = "default", priority: int = 0, tz: str = "UTC",
               starts_at: datetime | str | None = None, ends_at: datetime | str | None = None,
               catch_up: str = "latest", max_attempts: int | None = None,
               paused: bool = False, payload_is_json: bool = False, conn: Any = None):
        """Create a schedule; returns its :class:`ScheduleRecord` (with ``next_fire_at``)."""
        return self._run(create(
            self._api.queries, self._api.limit, name, cron, task, payload=payload, queue=queue,
            priority=priority, timezone=tz, starts_at=starts_at, ends_at=ends_at,
            catch_up=catch_up, max_attempts=max_attempts, paused=paused,
            payload_is_json=payload_is_json), conn)

    def update(self, name: str, *, cron: str | None = None, task: str | None = None,
               payload: Any = None, queue: str | None = None, priority: int | None = None,
               tz: str | None = None, starts_at: datetime | str | None = None,
               ends_at: datetime | str | None = None, catch_up: str | None = None,
               max_attempts: int | None = None, payload_is_json: bool = False,
               if_version: int | None = None, conn: Any = None):
        """Change the given fields (None keeps a field); with ``if_version``, only while the
        schedule is at that version (else :class:`~jobrun.errors.StaleVersion`), as for
        pause, resume and delete."""
        return self._run(update(
            self._api.queries, self._api.limit, name, cron=cron, task=task, payload=payload,
            queue=queue, priority=priority, timezone=tz, starts_at=starts_at, ends_at=ends_at,
            catch_up=catch_up, max_attempts=max_attempts, payload_is_json=payload_is_json,
            if_version=if_version), conn)

    def get(self, name: str, *, conn: Any = None):
        return self._run(get(self._api.queries, name), conn)

    def list(self, *, conn: Any = None):
        return self._run(list_all(self._api.queries), conn)

    def runs(self, name: str, *, limit: int = 10, conn: Any = None):
        return self._run(runs(self._api.queries, name, limit), conn)

    def jobs(self, name: str, *, status: str | None = None, limit: int = 50,
             before: int | None = None, conn: Any = None):
        return self._run(jobs(self._api.queries, name, status=status, limit=limit,
                              before=before), conn)

    def pause(self, name: str, *, if_version: int | None = None, conn: Any = None):
        return self._run(set_paused(self._api.queries, name, True, if_version), conn)

    def resume(self, name: str, *, if_version: int | None = None, conn: Any = None):
        return self._run(set_paused(self._api.queries, name, False, if_version), conn)

    def delete(self, name: str, *, force: bool = False, if_version: int | None = None,
               conn: Any = None):
        return self._run(delete(self._api.queries, name, force, if_version), conn)

    def sync_declared(self, declared: Iterable[dict[str, Any]], *, conn: Any = None):
        return self._run(sync_declared(self._api.queries, self._api.limit, declared), conn)
