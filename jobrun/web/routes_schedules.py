"""/api/v1/schedules: recurring schedules (jobrun/schedules.py), the same operations and rules
as ``jobrun schedule`` and ``Client.schedules``.

As for jobs, every change may be guarded by the schedule's version: {"version": n} in the body
or an If-Match header ("n" as a schedule's ETag gives it); a schedule at another version is a
409 whose body carries it as it is now, and nothing changed.
"""

from __future__ import annotations

import zoneinfo
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, Field, StrictBool, StrictStr

from jobrun import schedules
from jobrun.policy import cron, cron_words
from jobrun.schedules import ScheduleRecord
from jobrun.web.envelope import responses
from jobrun.web.models import (ATTEMPTS_RULE, CATCH_UP_RULE, IF_MATCH_RULE, PRIORITY_RULE,
                               QUEUE_RULE, SCHEDULE_RULE, TASK_RULE, VERSION_RULE, WholeInt,
                               _Strict, stated)
from jobrun.web.routes_jobs import READ, WRITE, Version, agreed_version, db, reply

router = APIRouter(prefix="/api/v1")
Name = Annotated[str, Path(max_length=200, description="Schedule name", **SCHEDULE_RULE)]
NEXT_FIRES = 5  # fire times shown ahead


def _cron_pattern() -> str:
    """The expressions the document offers: an alias, or five fields each '*', '*/N' or one
    value in its range (days to 28, so every month has one). The server takes croniter's whole
    grammar (lists, ranges, names, a seconds field); JSON Schema cannot state which of those
    fire, so the document states this subset, all of which do."""
    fields = ("[1-5]?[0-9]", "1?[0-9]|2[0-3]", "[1-9]|1[0-9]|2[0-8]", "[1-9]|1[0-2]", "[0-6]")
    five = " ".join(f"(\\*(/[1-9])?|{f})" for f in fields)
    return f"^({'|'.join(cron.ALIASES)}|{five})$"


def _zones(schema: dict[str, Any]) -> None:
    """IANA zones as Area/Location (and UTC): built when the document is, not at import."""
    schema["anyOf"] = [{"type": "string", "enum": ["UTC", *sorted(
        z for z in zoneinfo.available_timezones()
        if "/" in z and not z.startswith(("posix/", "right/")))]}, {"type": "null"}]


CRON_RULE = stated(pattern=_cron_pattern())
ZONE_RULE = {"json_schema_extra": _zones}


class ScheduleFields(_Strict):
    cron: Optional[StrictStr] = Field(None, description="5 fields, 6 with seconds, or @daily ...",
                                      **CRON_RULE)
    task: Optional[StrictStr] = Field(None, **TASK_RULE)
    payload: Any = Field(None, description="Any JSON value")
    queue: Optional[StrictStr] = Field(None, **QUEUE_RULE)
    priority: Optional[WholeInt] = Field(None, **PRIORITY_RULE)
    max_attempts: Optional[WholeInt] = Field(None, **ATTEMPTS_RULE)
    timezone: Optional[StrictStr] = Field(None, description="IANA zone (default UTC)",
                                          **ZONE_RULE)
    starts_at: Optional[AwareDatetime] = None
    ends_at: Optional[AwareDatetime] = None
    catch_up: Optional[StrictStr] = Field(None, description="latest (default), all or none",
                                          **CATCH_UP_RULE)


class ScheduleChange(ScheduleFields):
    version: Optional[WholeInt] = Field(
        None, description="Change only while the schedule is at this version (else 409)",
        **VERSION_RULE)


class NewSchedule(ScheduleFields):
    name: StrictStr = Field(**SCHEDULE_RULE)
    cron: StrictStr = Field(description="5 fields, 6 with seconds, or @daily ...", **CRON_RULE)
    task: StrictStr = Field(**TASK_RULE)
    paused: StrictBool = False


def _view(record: ScheduleRecord, **extra: Any) -> dict[str, Any]:
    """A schedule with its status, its next fire times and its cadence in words."""
    return {**record.to_dict(), "next_fires": record.upcoming(NEXT_FIRES),
            "description": cron_words.describe(record.cron, record.timezone), **extra}


def _one(record: ScheduleRecord, status: int = 200, **extra: Any) -> JSONResponse:
    """One schedule's view; its ETag is its version."""
    return reply(_view(record, **extra), status, {"ETag": f'"{record.version}"'})


@router.get("/schedules", responses=responses(*READ))
async def list_schedules(request: Request):
    """Every schedule: {"schedules": [...]}, each with its status and next fire times."""
    d = db(request)
    return reply({"schedules": [_view(s) for s in await d.run(schedules.list_all(d.q))]})


@router.post("/schedules", status_code=201, responses=responses(*WRITE, "conflict"))
async def create_schedule(request: Request, body: NewSchedule):
    """Create a schedule (409 if the name is taken; 422 for an invalid expression, zone or
    window, found now, never when it fires)."""
    d = db(request)
    spec = body.model_dump(exclude={"name", "cron", "task", "paused"}, exclude_none=True)
    made = await d.run(schedules.create(d.q, d.limit, body.name, body.cron, body.task,
                                        paused=body.paused, **spec))
    return _one(made, 201)


@router.get("/schedules/{name}", responses=responses(*READ, "not_found"))
async def get_schedule(request: Request, name: Name,
                       runs: Annotated[int, Query(ge=1, le=100)] = 20):
    """One schedule, its next fire times and its newest runs (jobs, with their outcomes)."""
    d = db(request)
    record = await d.run(schedules.get(d.q, name))
    return _one(record, runs=await d.run(schedules.runs(d.q, name, runs)))


@router.patch("/schedules/{name}", responses=responses(*WRITE, "not_found", "conflict"))
async def update_schedule(request: Request, name: Name, body: ScheduleChange,
                          if_match: Annotated[Optional[str], Header(
                              alias="If-Match", description="Expected schedule version",
                              **IF_MATCH_RULE)] = None):
    """Change some fields; a new expression, zone or window restarts from the next slot."""
    expected = agreed_version(body.version, if_match)
    d = db(request)
    changes = body.model_dump(exclude_none=True, exclude={"version"})
    return _one(await d.run(schedules.update(
        d.q, d.limit, name, if_version=expected, **changes)))


@router.delete("/schedules/{name}", responses=responses(*WRITE, "not_found", "conflict"))
async def delete_schedule(request: Request, name: Name, version: Version, force: bool = False):
    """Delete a schedule; one declared in code (@app.periodic) only with ?force=true (409)."""
    d = db(request)
    return reply(_view(await d.run(schedules.delete(d.q, name, force, version))))


@router.post("/schedules/{name}/pause", responses=responses(*WRITE, "not_found", "conflict"))
async def pause_schedule(request: Request, name: Name, version: Version):
    """Skip the schedule's slots until it is resumed."""
    d = db(request)
    return _one(await d.run(schedules.set_paused(d.q, name, True, version)))


@router.post("/schedules/{name}/resume", responses=responses(*WRITE, "not_found", "conflict"))
async def resume_schedule(request: Request, name: Name, version: Version):
    """Resume from the next slot after now (no burst of missed slots)."""
    d = db(request)
    return _one(await d.run(schedules.set_paused(d.q, name, False, version)))
