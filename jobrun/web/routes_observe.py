"""/api/v1 reads for operators: the attempts feed, workers, tasks and stats, plus the health
check (queues: routes_queues.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

from fastapi import APIRouter, Path, Query, Request

from jobrun import ops, validate
from jobrun.web import reads
from jobrun.web.envelope import responses
from jobrun.web.models import OUTCOME_RULE, QUEUE_RULE, TASK_RULE, given, stated
from jobrun.web.routes_jobs import READ, db, reply

router = APIRouter(prefix="/api/v1")
Name = Annotated[str, Path(max_length=200, **given(TASK_RULE))]
# next_cursor of GET /attempts: "<finished_at, RFC 3339>,<job id>,<lease token>".
ATTEMPT_CURSOR_RULE = stated(pattern=(
    "^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    "([.][0-9]{1,6})?([+-](0[0-9]|1[0-3]):[0-5][0-9]|Z)?,[0-9]{1,18},[0-9]{1,18}$"))


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
    outcome: Annotated[list[str], Query(description="Repeatable; any of them matches",
                                        **OUTCOME_RULE)] = [],
    task: Annotated[Optional[str], Query(**given(TASK_RULE))] = None,
    queue: Annotated[Optional[str], Query(**given(QUEUE_RULE))] = None,
    limit: Annotated[int, Query(ge=1, le=reads.MAX_PAGE)] = 50,
    cursor: Annotated[Optional[str], Query(description="next_cursor of the previous page",
                                           **given(ATTEMPT_CURSOR_RULE))] = None,
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
