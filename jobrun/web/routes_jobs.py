"""/api/v1/jobs: enqueue (one or many), list, get, delete, cancel, retry, attempts, logs,
events.

Every change may be guarded by the job's version: {"version": n} in the body or an
If-Match header ("n" as GET returns it in ETag); a job at another version is a 409 whose
body carries the job as it is now.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime, timedelta
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse

from jobrun import ops, tracing, workflows
from jobrun.records import AttemptRecord, EventRecord, JobRecord
from jobrun.web import reads
from jobrun.web.envelope import ApiError, responses
from jobrun.web.models import (BIGINT_DIGITS, IDEMPOTENCY_RULE, IF_MATCH_RULE, QUEUE_RULE,
                               SCHEDULE_RULE, SEARCH_RULE, STATUS_RULE, TASK_RULE, Guarded,
                               NewJob, NewJobs, given, stated)
from jobrun.web.pool import Database

router = APIRouter(prefix="/api/v1")
JobId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Job id")]
READ = ("unauthorized", "validation_failed", "internal_error", "unavailable")
WRITE = READ + ("invalid_json", "forbidden", "payload_too_large")


def db(request: Request) -> Database:
    return request.app.state.db


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):  # the API writes intervals as seconds
        return value.total_seconds()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


class Reply(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, default=_plain, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode()


def reply(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return Reply(value, status_code=status, headers=headers)


def job_reply(job: JobRecord, status: int = 200, **extra: Any) -> JSONResponse:
    return reply({**job.to_dict(), **extra}, status, {"ETag": f'"{job.version}"'})


def _if_match(header: str | None) -> int | None:
    if header is None:
        return None
    text = header.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or len(text) > 19:
        raise ApiError("validation_failed", f"invalid If-Match {header[:40]!r}: a version",
                       {"If-Match": "a version as ETag gives it, e.g. \"3\""})
    return int(text)


# next_cursor of GET /jobs: a job id.
JOB_CURSOR_RULE = stated(pattern=f"^[0-9]{{1,{BIGINT_DIGITS}}}$")
IfMatch = Annotated[Optional[str], Header(alias="If-Match", description="Expected version (ETag)",
                                          **IF_MATCH_RULE)]
GuardBody = Annotated[Optional[Guarded], Body()]


def agreed_version(version: int | None, if_match: str | None) -> int | None:
    """The version a change expects: the body's ``version``, or If-Match's (they must agree)."""
    header = _if_match(if_match)
    if version is not None and header is not None and version != header:
        raise ApiError("validation_failed", "the body's version and If-Match disagree",
                       {"version": "differs from If-Match"})
    return version if version is not None else header


def expected_version(body: GuardBody = None, if_match: IfMatch = None) -> int | None:
    """The version a change expects, from a body that holds only it (``Guarded``)."""
    return agreed_version(body.version if body else None, if_match)


Version = Annotated[Optional[int], Depends(expected_version)]
# A producer's W3C trace context: the new jobs continue its trace (a malformed one is ignored).
TraceParent = Annotated[Optional[str], Header(
    alias="traceparent", description="W3C trace context the new jobs continue")]


@router.post("/jobs", status_code=201, response_model=JobRecord,
             responses={200: {"description": "idempotent replay: the stored job"},
                        **responses(*WRITE, "conflict", "not_found")})
async def enqueue(request: Request, job: NewJob,
                  idempotency_key: Annotated[Optional[str], Header(
                      alias="Idempotency-Key", **given(IDEMPOTENCY_RULE))] = None,
                  traceparent: TraceParent = None):
    """Enqueue one job. 201 when created; 200 when the idempotency key names a stored job
    with the same task and payload; 409 when it names one with another. With `after`, the
    job waits for those jobs (404 when one does not exist; the key is then its workflow's)."""
    key = job.idempotency_key
    if idempotency_key is not None:
        if key is not None and key != idempotency_key:
            raise ApiError("validation_failed", "the Idempotency-Key header and the body's"
                           " idempotency_key disagree", {"idempotency_key": "differs from header"})
        key = idempotency_key
    d = db(request)
    if job.after is not None or job.on_parent_failure is not None:
        return job_reply(*await _enqueue_after(d, job, key, traceparent))
    result = await d.run(ops.enqueue(
        d.q, d.limit, job.task, job.payload, queue=job.queue, priority=job.priority,
        run_at=job.run_at, delay=job.delay, max_attempts=job.max_attempts, idempotency_key=key,
        concurrency_key=job.concurrency_key, traceparent=tracing.valid_traceparent(traceparent)))
    return job_reply(result.job, 201 if result.created else 200, created=result.created)


async def _enqueue_after(d: Database, job: NewJob, key: str | None,
                         traceparent: str | None) -> tuple[JobRecord, int]:
    if job.after is None:
        raise ApiError("validation_failed", "on_parent_failure goes with after (the jobs it"
                       " waits for)", {"on_parent_failure": "without after"})
    if job.run_at is not None or job.delay is not None or job.concurrency_key is not None:
        raise ApiError("validation_failed", "after does not go with run_at, delay or"
                       " concurrency_key", {"after": "with run_at, delay or concurrency_key"})
    result = await d.run(workflows.enqueue_after(
        d.q, d.limit, job.task, job.payload, job.after, queue=job.queue, priority=job.priority,
        max_attempts=job.max_attempts, on_parent_failure=job.on_parent_failure or "cancel",
        idempotency_key=key, traceparent=tracing.valid_traceparent(traceparent)))
    return result.job, 201 if result.created else 200


@router.post("/jobs/batch", status_code=201, responses={
    200: {"description": "every job was an idempotent replay"}, **responses(*WRITE, "conflict")})
async def enqueue_batch(request: Request, batch: NewJobs, traceparent: TraceParent = None):
    """Enqueue up to 1000 jobs in one statement; returns {"jobs": [{"id", "created"}]} in order.
    Jobs that wait for others (after) go through POST /jobs or /workflows."""
    d = db(request)
    for n, j in enumerate(batch.jobs):
        if j.after is not None or j.on_parent_failure is not None:
            raise ApiError("validation_failed", f"job {n}: after is not taken in a batch:"
                           " POST /api/v1/workflows", {"after": "in a batch"})
    made = await d.run(ops.enqueue_many(d.q, d.limit, [j.spec() for j in batch.jobs],
                                        traceparent=tracing.valid_traceparent(traceparent)))
    jobs = [{"id": i, "created": c} for i, c in made]
    return reply({"jobs": jobs}, 201 if any(c for _, c in made) else 200)


@router.get("/jobs", responses=responses(*READ))
async def list_jobs(
    request: Request,
    status: Annotated[list[str], Query(description="Repeatable; any of them matches",
                                       **STATUS_RULE)] = [],
    queue: Annotated[Optional[str], Query(**given(QUEUE_RULE))] = None,
    task: Annotated[Optional[str], Query(**given(TASK_RULE))] = None,
    schedule: Annotated[Optional[str], Query(description="Jobs made by this schedule",
                                             **given(SCHEDULE_RULE))] = None,
    q: Annotated[Optional[str], Query(description="Substring of id, task or idempotency key",
                                      **given(SEARCH_RULE))] = None,
    limit: Annotated[int, Query(ge=1, le=reads.MAX_PAGE)] = 50,
    cursor: Annotated[Optional[str], Query(description="next_cursor of the previous page",
                                           **given(JOB_CURSOR_RULE))] = None,
):
    """Jobs newest first: {"jobs": [...], "next_cursor": str | null, "partial": bool}.
    A request looks at no more than 5,000 jobs; "partial": true means it stopped there with
    fewer matches than `limit`: older matches may follow next_cursor."""
    d = db(request)
    jobs, following, partial = await d.run(reads.list_jobs(
        d.q, statuses=status, queue=queue, task=task, schedule=schedule, text=q, limit=limit,
        cursor=cursor))
    return reply({"jobs": [j.to_dict() for j in jobs], "next_cursor": following,
                  "partial": partial})


# {job_id:int}: a path that is not a number (/jobs/batch) is not a job's, so a GET there is a
# 405 naming POST, not a 422 about the id.
@router.get("/jobs/{job_id:int}", response_model=JobRecord,
            responses=responses(*READ, "not_found"))
async def get_job(request: Request, job_id: JobId):
    """One job; its ETag is its version."""
    return job_reply(await db(request).run(ops.get(db(request).q, job_id)))


async def change(request: Request, op, job_id: int, version: int | None,
                 *by: str) -> JSONResponse:
    d = db(request)
    return job_reply(await d.run(op(d.q, job_id, version, *by)))


def actor(request: Request) -> str:
    """Who a change made through the API is by, in the job's event: the caller's address."""
    client = request.client
    return f"api:{client.host if client else 'unknown'}"[:200]


CHANGE = {"response_model": JobRecord, "responses": responses(*WRITE, "not_found", "conflict")}


@router.delete("/jobs/{job_id:int}", **CHANGE)
async def delete_job(request: Request, job_id: JobId, version: Version):
    """Delete a finished job (succeeded, dead or cancelled) and its attempts; returns it."""
    return await change(request, ops.delete, job_id, version)


@router.post("/jobs/{job_id:int}/cancel", **CHANGE)
async def cancel_job(request: Request, job_id: JobId, version: Version):
    """Cancel a queued job now, or ask a leased one to stop (cancel_requested)."""
    return await change(request, ops.cancel, job_id, version, actor(request))


@router.post("/jobs/{job_id:int}/retry", **CHANGE)
async def retry_job(request: Request, job_id: JobId, version: Version):
    """Put a dead or cancelled job back in its queue with its attempts reset."""
    return await change(request, ops.retry, job_id, version, actor(request))


@router.get("/jobs/{job_id:int}/attempts", response_model=list[AttemptRecord],
            responses=responses(*READ, "not_found"))
async def job_attempts(request: Request, job_id: JobId):
    """The job's finished attempts, oldest first, each with its log."""
    found = await db(request).run(reads.job_attempts(db(request).q, job_id))
    return reply([a.to_dict() for a in found])


@router.get("/jobs/{job_id:int}/events", response_model=list[EventRecord],
            responses=responses(*READ, "not_found"))
async def job_events(request: Request, job_id: JobId):
    """The job's transitions, oldest first: enqueued, claimed, retried, succeeded, ...
    (docs/concepts.md, "Transitions"); what is recorded follows `jobrun events mode`."""
    found = await db(request).run(ops.events(db(request).q, job_id))
    return reply([e.to_dict() for e in found])


@router.get("/jobs/{job_id:int}/attempts/{attempt}/logs", responses=responses(*READ, "not_found"))
async def attempt_logs(request: Request, job_id: JobId,
                       attempt: Annotated[int, Path(ge=1, le=2**31 - 1)]):
    """What the handler logged in attempt number `attempt` (one entry per run with that
    number: `retry` resets the numbering)."""
    return reply(await db(request).run(reads.attempt_log(db(request).q, job_id, attempt)))
