"""/api/v1 reads for operators: the attempts feed, workers, tasks and stats, plus the health
check (queues: routes_queues.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

from fastapi import APIRouter, Path, Query, Request

from jobrun import ops, validate
from jobrun.web import reads
from jobrun.web.envelope import responses
from jobrun.web.routes_jobs import READ, WRITE, db, reply

router = APIRouter(prefix="/api/v1")
Name = Annotated[str, Path(max_length=200)]


@router.get("/healthz", responses=responses("internal_error", "unavailable"))
async def healthz(request: Request):
    """Liveness and database reachability; needs no token."""
    rows = await db(request).run(_now(db(request).q))
    return reply({"ok": True, "db_now": rows})


def _now(q):
    rows = yield ops.Step(q.db_now, {})
    return rows[0]["now"]


@router.get("/attempts", responses=responses(*READ))
async def attempts_feed(
    request: Request,
    outcome: Annotated[list[str], Query(description="Repeatable; any of them matches")] = [],
    task: Optional[str] = None, queue: Optional[str] = None,
    limit: Annotated[int, Query(ge=1, le=reads.MAX_PAGE)] = 50,
    cursor: Optional[str] = None,
):
    """Finished attempts across jobs, newest first: {"attempts": [...], "next_cursor"}."""
    d = db(request)
    rows, following = await d.run(reads.attempts_feed(
        d.q, outcomes=outcome, task=task, queue=queue, limit=limit, cursor=cursor))
    return reply({"attempts": rows, "next_cursor": following})


@router.get("/workers", responses=responses(*READ))
async def workers(request: Request):
    """Live masters of the registry, with their queues, tasks and in-flight jobs."""
    return reply(await db(request).run(reads.workers(db(request).q)))


@router.get("/tasks", responses=responses(*READ))
async def tasks(request: Request):
    """Per task: jobs by status; success rate, mean and p95 run time over the last hour;
    the live masters that serve it."""
    return reply(await db(request).run(reads.tasks(db(request).q)))


@router.get("/tasks/{name}", responses=responses(*READ, "not_found"))
async def task(request: Request, name: Name):
    """One task's figures and its most recent jobs."""
    validate.task_name(name)
    return reply(await db(request).run(reads.task_detail(db(request).q, name)))


@router.get("/stats", responses=responses(*READ))
async def stats(request: Request):
    """Job counts per queue and the age of the oldest runnable job (`jobrun stats`)."""
    return reply([asdict(s) for s in await db(request).run(ops.stats(db(request).q))])
