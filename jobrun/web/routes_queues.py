"""/api/v1/queues: queues as objects (jobrun/queues.py), the same operations and rules as
``jobrun queue`` and ``Client.queue_*``.

Intervals (rate_period, aging, retention) are numbers of seconds in every response; a request
may give them as seconds or as duration text ("30s", "5m"), a rate as text ("50/s", "5/2s"),
and null clears a setting. A change may be guarded by the queue's version ({"version": n} in
the body or If-Match); a queue at another version is a 409 whose body carries it as it is.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Optional, Union

from fastapi import APIRouter, Header, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from jobrun import queue_rules, queues
from jobrun.web import reads
from jobrun.web.envelope import responses
from jobrun.web.models import (AGING_RULE, ATTEMPTS_RULE, COUNT_RULE, IF_MATCH_RULE,
                               PRIORITY_RULE, QUEUE_RULE, RATE_RULE, RETENTION_RULE,
                               VERSION_RULE, WholeInt, _Strict, given)
from jobrun.web.routes_jobs import READ, WRITE, Version, agreed_version, db, reply

router = APIRouter(prefix="/api/v1")
Name = Annotated[str, Path(max_length=200, description="Queue name", **QUEUE_RULE)]
Seconds = Optional[Union[StrictInt, StrictFloat, StrictStr]]


class QueueSettings(_Strict):
    concurrency: Optional[WholeInt] = Field(
        None, description="At most this many of its jobs leased across all masters; null: no limit",
        **COUNT_RULE)
    rate: Optional[StrictStr] = Field(
        None, description="At most COUNT starts per PERIOD, e.g. 50/s, 1000/m, 5/2s; null: none",
        **RATE_RULE)
    aging: Seconds = Field(
        None, description="Seconds (or 30s, 5m) per priority step a waiting job gains; null: off",
        **AGING_RULE)
    priority_default: Optional[WholeInt] = Field(
        None, description="Priority of jobs enqueued without one, -100..100",
        **given(PRIORITY_RULE, "integer"))
    max_attempts: Optional[WholeInt] = Field(
        None, description="Attempt limit of jobs enqueued without one, 1..1000; null: 5",
        **ATTEMPTS_RULE)
    retention: Seconds = Field(
        None, description="Seconds (or 7d) its finished jobs are kept; null: the purge's default",
        **RETENTION_RULE)
    key_concurrency: Optional[WholeInt] = Field(
        None, description="At most this many running jobs per concurrency key",
        **given(COUNT_RULE, "integer"))

    def given(self, *skip: str) -> dict[str, Any]:
        """The settings the request names (null included: it clears one)."""
        return {k: v for k, v in self.model_dump(exclude_unset=True).items() if k not in skip}


class NewQueue(QueueSettings):
    name: StrictStr = Field(**QUEUE_RULE)


class QueueChange(QueueSettings):
    # A change names at least one setting (a version alone changes nothing: a 422).
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "anyOf": [{"required": [name]} for name in queue_rules.SETTINGS]})

    version: Optional[WholeInt] = Field(
        None, description="Change only while the queue is at this version (else 409)",
        **VERSION_RULE)


class QueueView(BaseModel):
    """A queue as every response gives it. Intervals are numbers of seconds."""

    name: str
    paused: bool
    concurrency: Optional[int]
    rate_limit: Optional[int] = Field(description="Starts allowed per rate_period")
    rate_period: Optional[float] = Field(description="Seconds")
    aging: Optional[float] = Field(description="Seconds per priority step; null: off")
    priority_default: int
    max_attempts: Optional[int]
    retention: Optional[float] = Field(description="Seconds")
    key_concurrency: int
    created_at: datetime
    updated_at: datetime
    version: int = Field(description="Bumped by every change; also the ETag")
    queued: int = Field(description="Runnable queued jobs")
    scheduled: int = Field(description="Queued jobs with a future run_at")
    leased: int
    waiting: int = Field(0, description="Jobs waiting for others to finish first (workflows)")
    served_by: list[str] = Field(
        description="Owners of the live masters (seen in the last 30 s) whose -Q names the"
                    " queue; empty: no master serves it, and its jobs wait until one does")


ONE = {"response_model": QueueView}


@router.get("/queues", response_model=list[QueueView], responses=responses(*READ))
async def list_queues(request: Request):
    """Every declared queue: its settings, live counts (queued, scheduled, leased) and recent
    figures (enqueued and finished in the last minute, wait p50/p95, failures)."""
    return reply(await db(request).run(reads.queues(db(request).q)))


@router.get("/queues/{name}", **ONE, responses=responses(*READ, "not_found"))
async def get_queue(request: Request, name: Name):
    """One queue: its settings and live counts; its ETag is its version."""
    found = await db(request).run(queues.get(db(request).q, name))
    return reply(found, headers={"ETag": f'"{found["version"]}"'})


@router.post("/queues", status_code=201, **ONE, responses={
    200: {"description": "the queue exists with the settings given"},
    **responses(*WRITE, "conflict")})
async def create_queue(request: Request, body: NewQueue):
    """Declare a queue. 201 when created; 200 when it exists with the settings given; 409 when
    it exists with others (change them with PATCH)."""
    d = db(request)
    found, created = await d.run(queues.add(d.q, body.name, **body.given("name")))
    return reply(found, 201 if created else 200, {"ETag": f'"{found["version"]}"'})


@router.patch("/queues/{name}", **ONE, responses=responses(*WRITE, "not_found", "conflict"))
async def update_queue(request: Request, name: Name, body: QueueChange,
                       if_match: Annotated[Optional[str], Header(
                           alias="If-Match", description="Expected queue version",
                           **IF_MATCH_RULE)] = None):
    """Change the settings the body names (null clears one); live on every master at once."""
    expected = agreed_version(body.version, if_match)
    d = db(request)
    found = await d.run(queues.update(d.q, name, expected,
                                      **body.given("version")))
    return reply(found, headers={"ETag": f'"{found["version"]}"'})


@router.delete("/queues/{name}", **ONE, responses=responses(*WRITE, "not_found", "conflict"))
async def delete_queue(request: Request, name: Name, version: Version,
                       force: Annotated[bool, Query(description="Also delete its queued and"
                                                                " leased jobs")] = False):
    """Delete a queue and its finished jobs; 409 while it holds queued or leased jobs (unless
    ?force=true) or a schedule fires into it. Returns the queue as it was, with deleted_jobs."""
    d = db(request)
    return reply(await d.run(queues.delete(d.q, name, force, version)))


@router.post("/queues/{name}/pause", **ONE, responses=responses(*WRITE, "not_found", "conflict"))
async def pause_queue(request: Request, name: Name, version: Version):
    """Stop claiming from a queue (running jobs finish)."""
    return reply(await db(request).run(queues.set_paused(db(request).q, name, True, version)))


@router.post("/queues/{name}/resume", **ONE, responses=responses(*WRITE, "not_found", "conflict"))
async def resume_queue(request: Request, name: Name, version: Version):
    """Resume claiming from a paused queue."""
    return reply(await db(request).run(queues.set_paused(db(request).q, name, False, version)))

