"""/api/v1/schedules: recurring schedules (jobrun/schedules.py), the same operations and rules
as ``jobrun schedule`` and ``Client.schedules``."""

from __future__ import annotations

from typing import Annotated, Any, Optional

from fastapi import APIRouter, Path, Query, Request
from pydantic import AwareDatetime, Field, StrictBool, StrictInt, StrictStr

from jobrun import schedules
from jobrun.schedules import ScheduleRecord
from jobrun.web.envelope import responses
from jobrun.web.models import _Strict
from jobrun.web.routes_jobs import READ, WRITE, db, reply

router = APIRouter(prefix="/api/v1")
Name = Annotated[str, Path(max_length=200, description="Schedule name")]
NEXT_FIRES = 5  # fire times shown ahead


class ScheduleFields(_Strict):
    cron: Optional[StrictStr] = Field(None, description="5 fields, 6 with seconds, or @daily ...")
    task: Optional[StrictStr] = None
    payload: Any = Field(None, description="Any JSON value")
    queue: Optional[StrictStr] = None
    priority: Optional[StrictInt] = None
    max_attempts: Optional[StrictInt] = None
    timezone: Optional[StrictStr] = Field(None, description="IANA zone (default UTC)")
    starts_at: Optional[AwareDatetime] = None
    ends_at: Optional[AwareDatetime] = None
    catch_up: Optional[StrictStr] = Field(None, description="latest (default), all or none")


class NewSchedule(ScheduleFields):
    name: StrictStr
    cron: StrictStr
    task: StrictStr
    paused: StrictBool = False


def _view(record: ScheduleRecord, **extra: Any) -> dict[str, Any]:
    """A schedule with its status and its next fire times."""
    return {**record.to_dict(), "next_fires": record.upcoming(NEXT_FIRES), **extra}


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
    return reply(_view(made), 201)


@router.get("/schedules/{name}", responses=responses(*READ, "not_found"))
async def get_schedule(request: Request, name: Name,
                       runs: Annotated[int, Query(ge=1, le=100)] = 20):
    """One schedule, its next fire times and its newest runs (jobs, with their outcomes)."""
    d = db(request)
    record = await d.run(schedules.get(d.q, name))
    return reply(_view(record, runs=await d.run(schedules.runs(d.q, name, runs))))


@router.patch("/schedules/{name}", responses=responses(*WRITE, "not_found", "conflict"))
async def update_schedule(request: Request, name: Name, body: ScheduleFields):
    """Change some fields; a new expression, zone or window restarts from the next slot."""
    d = db(request)
    changes = body.model_dump(exclude_none=True)
    return reply(_view(await d.run(schedules.update(d.q, d.limit, name, **changes))))


@router.delete("/schedules/{name}", responses=responses(*WRITE, "not_found", "conflict"))
async def delete_schedule(request: Request, name: Name, force: bool = False):
    """Delete a schedule; one declared in code (@app.periodic) only with ?force=true (409)."""
    d = db(request)
    return reply(_view(await d.run(schedules.delete(d.q, name, force))))


@router.post("/schedules/{name}/pause", responses=responses(*WRITE, "not_found", "conflict"))
async def pause_schedule(request: Request, name: Name):
    """Skip the schedule's slots until it is resumed."""
    d = db(request)
    return reply(_view(await d.run(schedules.set_paused(d.q, name, True))))


@router.post("/schedules/{name}/resume", responses=responses(*WRITE, "not_found", "conflict"))
async def resume_schedule(request: Request, name: Name):
    """Resume from the next slot after now (no burst of missed slots)."""
    d = db(request)
    return reply(_view(await d.run(schedules.set_paused(d.q, name, False))))
