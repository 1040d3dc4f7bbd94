"""The worker protocol, /api/v1/workers: workers anywhere, in any language, with no database.

A remote worker holds no database credentials; it speaks to `jobrun web`::

    POST   /workers                 register: name, queues, tasks, credits -> its id (201)
    POST   /workers/{id}/claim      up to `max` jobs (at most its credits), waiting up to
                                    `wait` s for one (a long poll woken by the masters' channel)
    POST   /workers/{id}/renew      extend the leases it holds, in one call
    POST   /workers/{id}/outcomes   end attempts: succeeded (result), failed (error, retry_in,
                                    permanent), retry, timeout, cancelled, released; with logs;
                                    and, with `claim`, claim the next jobs in the same call
    DELETE /workers/{id}            goodbye

Everything a master's claim, heartbeat and completion guarantee holds here, because the same
statements run: the claim is ``claim_jobs`` (queue concurrency, rate, keys, priority, aging,
in one statement; ``claim_plain`` for one queue without limits, as a master's) with the worker's id as lease owner; a renewal is ``heartbeat``; an
outcome goes through ``finish_jobs`` (``remote_finish``: retries, backoff, dead, limits
released, the attempt row naming the worker). A worker that goes silent stops renewing, and
the leader's reaper requeues its jobs when their leases expire, as a master's.

Outcomes are all or nothing: if any of a call's outcomes names a lease that is not (or no
longer) the worker's under that token, the call is a 409 naming those jobs and nothing is
changed; the worker drops them (their lease was lost: someone else may run the job) and may
send the others again. A report sent twice is refused the second time: no attempt ends twice.

A report may carry ``claim`` (the credits it frees, at most): once its outcomes are accepted,
up to that many jobs are claimed (no wait) and returned with the answer. A busy worker then
spends one round trip, one request and one pair of statements per batch instead of two
(measured: benchmarks/remote_drain.py; what a claim and a report each cost in series is what
kept a remote worker at a third of a master's drain rate), and one transaction: the outcomes
and the claim commit together. A refused report claims nothing.

A worker token (jobrun.web.workertokens) may register only for queues in its scope and act
only on workers whose queues are; the admin token may do anything.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Annotated, Any, Literal, Optional

import psycopg
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from pydantic import AfterValidator, Field, StrictBool, StrictStr

from jobrun import validate
from jobrun.errors import InvalidInput
from jobrun.policy import DEFAULT_RETRY
from jobrun.store import db as store_db
from jobrun.web.envelope import ApiError, responses
from jobrun.web.models import (ATTEMPTS_RULE, MAX_BATCH, VERSION_MAX, WholeInt, _Strict, _whole,
                               stated)
from jobrun.web.routes_jobs import Reply
from jobrun.web.workertokens import WorkerScope

router = APIRouter(prefix="/api/v1")
MAX_WAIT = 30.0         # seconds a claim may wait for a job
MAX_CREDITS = 1000      # jobs one worker may hold at once
FLOOR = 1.0             # a waiting claim looks again at least this often (jobrun.web.wakeups)
MAX_ERROR = 4096        # characters of an error message kept
MAX_TRACEBACK = 16 * 1024
MAX_LOG = 64 * 1024
SEEN_CACHE = 5.0        # seconds a worker's queues are trusted without reading its row
PLAIN_RETRY = 5.0       # seconds before a queue found with limits is tried with claim_plain
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
WORKER_PATTERN = r"^remote:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}:[0-9a-f]{16}$"
PROTOCOL = ("unauthorized", "forbidden", "validation_failed", "invalid_json", "payload_too_large",
            "internal_error", "unavailable")

WorkerId = Annotated[str, Path(description="The id register gave (remote:NAME:HEX)",
                               pattern=WORKER_PATTERN, max_length=90)]
QueueName = Annotated[StrictStr, Field(pattern=_whole(validate.QUEUE_RE))]
TaskName = Annotated[StrictStr, Field(pattern=_whole(validate.TASK_RE))]
Id = Annotated[WholeInt, Field(ge=1, le=VERSION_MAX, **stated(minimum=1, maximum=VERSION_MAX))]
Token = Annotated[WholeInt, Field(ge=0, le=VERSION_MAX, **stated(minimum=0, maximum=VERSION_MAX))]


def _storable(text: str) -> str:
    """Text the database can hold: no NUL, no lone surrogate (not UTF-8)."""
    if "\x00" in text:
        raise ValueError("a NUL character cannot be stored")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a lone surrogate is not valid UTF-8") from None
    return text


Text = Annotated[StrictStr, AfterValidator(_storable), Field(**stated(pattern="^[^\\x00]*$"))]


class Registration(_Strict):
    name: StrictStr = Field(description="The worker's name, shown in `jobrun workers`",
                            pattern=NAME_PATTERN)
    queues: list[QueueName] = Field(min_length=1, max_length=64)
    tasks: list[TaskName] = Field([], max_length=MAX_BATCH,
                                  description="The tasks it can run (shown; not a filter)")
    credits: WholeInt = Field(ge=1, le=MAX_CREDITS, description="Jobs it may hold at once",
                              **stated(minimum=1, maximum=MAX_CREDITS))
    version: Optional[StrictStr] = Field(None, max_length=64, pattern=r"^[ -~]*$")


class ClaimRequest(_Strict):
    max: WholeInt = Field(ge=1, le=MAX_CREDITS, description="Jobs wanted (its free credits);"
                                                           " at most its credits",
                          **stated(minimum=1, maximum=MAX_CREDITS))
    wait: float = Field(0.0, ge=0, le=MAX_WAIT, description="Seconds to wait for a job")


class Lease(_Strict):
    id: Id
    token: Token


class Leases(_Strict):
    jobs: list[Lease] = Field(max_length=10 * MAX_CREDITS)


class Outcome(_Strict):
    id: Id
    token: Token
    outcome: Literal["succeeded", "failed", "retry", "timeout", "cancelled", "released"]
    result: Any = Field(None, description="succeeded: any JSON value")
    error: Optional[Text] = Field(None, max_length=MAX_ERROR)
    traceback: Optional[Text] = Field(None, max_length=MAX_TRACEBACK)
    retry_in: Optional[float] = Field(
        None, ge=0, le=validate.MAX_DELAY,
        description="failed, retry, timeout: seconds before the next attempt (default: the"
                    " backoff)")
    permanent: StrictBool = Field(False, description="failed: no further attempt")
    max_attempts: Optional[WholeInt] = Field(
        None, ge=validate.MAX_ATTEMPTS_MIN, le=validate.MAX_ATTEMPTS_MAX, **ATTEMPTS_RULE,
        description="failed, retry, timeout: the task's own limit, when lower than the job's"
                    " (as a master applies a task's max_attempts)")
    log: Optional[Text] = Field(None, max_length=MAX_LOG)


class Outcomes(_Strict):
    outcomes: list[Outcome] = Field(min_length=1, max_length=MAX_BATCH)
    claim: WholeInt = Field(0, ge=0, le=MAX_CREDITS,
                            description="Once the outcomes are accepted, claim up to this many"
                                        " jobs (at most its credits; no wait), returned as"
                                        " `jobs`, as a claim's",
                            **stated(minimum=0, maximum=MAX_CREDITS))


def _nothing():
    return contextlib.AsyncExitStack()  # no transaction block: remote_finish is all or none


def _scope(request: Request) -> WorkerScope | None:
    """The worker token's scope; None for the admin token (or a server without tokens)."""
    return request.scope.get("state", {}).get("worker_scope")


def _allowed(request: Request, queues: list[str]) -> None:
    scope = _scope(request)
    if scope is not None and not scope.covers(queues):
        raise ApiError("forbidden", "this worker token is not scoped to every queue asked for")


async def _rows(request: Request, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    database = request.app.state.db
    try:
        async with database.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise store_db.translate(exc, database.client.dsn, database.q.schema) from None


async def _worker(request: Request, worker: str, busy: int | None = None) -> dict[str, Any]:
    """The worker's row (marked seen), or 404; 403 when the token does not cover its queues."""
    scope = _scope(request)
    found = await _rows(request, request.app.state.db.q.remote_seen, {
        "owner": worker, "busy": busy, "scope": None if scope is None else sorted(scope.queues)})
    if not found:
        raise ApiError("not_found", f"unknown worker {worker}: register again")
    if not found[0]["allowed"]:  # the statement changed nothing then
        _allowed(request, found[0]["queues"])
    seen = request.app.state.remote_seen
    if len(seen) > 10_000:  # a bound; entries are only a shortcut
        seen.clear()
    seen[worker] = (time.monotonic(), found[0])
    return found[0]


async def _known(request: Request, worker: str) -> dict[str, Any]:
    """As :func:`_worker`, from a read of the last SEEN_CACHE s when there is one (no round
    trip: a claim or a report costs one statement). Renewals always read and mark the row, so
    a worker that renews stays seen."""
    seen = request.app.state.remote_seen.get(worker)
    if seen is None or time.monotonic() - seen[0] > SEEN_CACHE:
        return await _worker(request, worker)
    _allowed(request, seen[1]["queues"])
    return seen[1]


@router.post("/workers", status_code=201, responses=responses(*PROTOCOL),
             summary="Register a remote worker")
async def register(request: Request, body: Registration):
    _allowed(request, body.queues)
    database = request.app.state.db
    worker = f"remote:{body.name}:{uuid.uuid4().hex[:16]}"
    host = request.client.host if request.client else "?"
    queues = list(dict.fromkeys(body.queues))
    await _rows(request, database.q.remote_register, {
        "owner": worker, "host": host, "name": body.name, "queues": queues,
        "credits": body.credits, "version": body.version, "tasks": sorted(set(body.tasks))})
    settings = request.app.state.settings
    return Reply({"worker": worker, "queues": queues, "credits": body.credits,
                  "lease_ttl": settings.lease_ttl, "max_wait": MAX_WAIT,
                  "max_body": request.app.state.body_limit}, status_code=201)


@router.post("/workers/{worker}/claim", responses=responses(*PROTOCOL, "not_found"),
             summary="Claim jobs, waiting for one up to `wait` seconds")
async def claim(request: Request, worker: WorkerId, body: ClaimRequest):
    row = await _known(request, worker)
    database = request.app.state.db
    settings = request.app.state.settings
    params = _claim_params(request, row, worker, body.max)
    deadline = time.monotonic() + body.wait
    with request.app.state.wakeups.waiter(row["queues"]) as waiter:
        while True:
            waiter.woken.clear()
            try:
                async with database.pool.connection() as conn:
                    rows = await _claim_rows(request, conn, row, params)
            except psycopg.Error as exc:
                raise store_db.translate(exc, database.client.dsn, database.q.schema) from None
            jobs = [r for r in rows if r["id"] is not None]
            left = deadline - time.monotonic()
            if jobs or left <= 0:
                break
            retries = [r["retry"] for r in rows if r["id"] is None and r["retry"] is not None]
            await waiter.wait(min([left, FLOOR, *(max(0.05, r) for r in retries)]))
            if await request.is_disconnected():  # gone: claim nothing it would never hear of
                break
            params["turn"] += 1
    return Reply({"jobs": [_job(r) for r in jobs], "lease_ttl": settings.lease_ttl})


def _claim_params(request: Request, row: dict[str, Any], worker: str,
                  wanted: int) -> dict[str, Any]:
    """claim_jobs' parameters for up to ``wanted`` jobs (at most its credits) of ``row``'s queues."""
    settings = request.app.state.settings
    queues = row["queues"]
    return {"queues": queues, "rooms": [None] * len(queues),
            "limit": min(wanted, row["credits"]), "owner": worker,
            "ttl": settings.lease_ttl, "order": settings.queue_order,
            "turn": 0, "nqueues": max(1, len(queues))}


async def _claim_rows(request: Request, conn: psycopg.AsyncConnection, row: dict[str, Any],
                      params: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's rows: ``claim_plain`` for a worker of one queue while that queue has no
    limit (what claim_jobs would lease, without the limits' statements: a remote batch's
    claim cost 1.6 ms of the server's time in claim_jobs), else ``claim_jobs``, as a master's
    claimer chooses (a queue found with limits is tried plainly again PLAIN_RETRY s later)."""
    q = request.app.state.db.q
    queues = row["queues"]
    plain_after = request.app.state.remote_plain_after
    if len(queues) == 1 and time.monotonic() >= plain_after.get(queues[0], 0.0):
        cur = await conn.execute(q.claim_plain, {
            "queue": queues[0], "limit": params["limit"], "owner": params["owner"],
            "ttl": params["ttl"]})
        rows = await cur.fetchall()
        if not rows or rows[-1]["held"] != "full":
            return rows
        if len(plain_after) > 10_000:  # a bound; entries are only a shortcut
            plain_after.clear()
        plain_after[queues[0]] = time.monotonic() + PLAIN_RETRY
    cur = await conn.execute(q.claim_jobs, params)
    return await cur.fetchall()


def _job(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "token": row["lease_token"], "task": row["task"],
            "queue": row["queue"], "payload": json.loads(row["payload"]),
            "attempt": row["attempts"], "max_attempts": row["max_attempts"],
            "priority": row["priority"], "idempotency_key": row["idempotency_key"],
            "traceparent": row["traceparent"], "created_at": row["created_at"]}


@router.post("/workers/{worker}/renew", responses=responses(*PROTOCOL, "not_found"),
             summary="Renew the leases the worker holds")
async def renew(request: Request, worker: WorkerId, body: Leases):
    await _worker(request, worker, busy=len(body.jobs))
    settings = request.app.state.settings
    renewed = await _rows(request, request.app.state.db.q.heartbeat, {
        "ids": [j.id for j in body.jobs], "tokens": [j.token for j in body.jobs],
        "owner": worker, "ttl": settings.lease_ttl}) if body.jobs else []
    kept = {r["id"] for r in renewed}
    return Reply({"renewed": [{"id": r["id"], "cancel_requested": r["cancel_requested"]}
                              for r in renewed],
                  "lost": [j.id for j in body.jobs if j.id not in kept],
                  "lease_ttl": settings.lease_ttl})


@router.post("/workers/{worker}/outcomes", responses=responses(*PROTOCOL, "not_found", "conflict"),
             summary="Report how attempts ended (all or nothing; 409 for a lost lease)")
async def outcomes(request: Request, worker: WorkerId, body: Outcomes):
    row = await _known(request, worker)
    items = body.outcomes
    if len({o.id for o in items}) != len(items):
        raise ApiError("validation_failed", "a job is reported twice in one call",
                       {"outcomes": "one outcome per job"})
    results = []
    for o in items:
        try:
            results.append(validate.result(o.result) if o.outcome == "succeeded" else None)
        except InvalidInput as exc:
            raise ApiError("validation_failed", f"job {o.id}: the result is not storable: {exc}",
                           {f"outcomes.{o.id}.result": str(exc)}) from None
    database = request.app.state.db
    params = {
        "ids": [o.id for o in items], "tokens": [o.token for o in items],
        "kinds": [o.outcome for o in items], "permanents": [o.permanent for o in items],
        "delays": [o.retry_in for o in items], "errors": [o.error for o in items],
        "tracebacks": [o.traceback for o in items], "results": results,
        "logs": [o.log for o in items], "owner": worker, "base": DEFAULT_RETRY.base,
        "factor": DEFAULT_RETRY.factor, "cap": DEFAULT_RETRY.cap}
    try:
        async with database.pool.connection() as conn:
            capped = [o for o in items
                      if o.max_attempts is not None and o.outcome in ("failed", "retry", "timeout")]
            # One transaction for the caps (rare: a task whose limit is below its jobs') or
            # the claim (one commit, one WAL flush, for the outcomes and the next jobs).
            together = bool(capped or body.claim)
            jobs = []
            async with conn.transaction() if together else _nothing():
                if capped:
                    await conn.execute(database.q.cap_max_attempts, {
                        "ids": [o.id for o in capped], "tokens": [o.token for o in capped],
                        "limits": [o.max_attempts for o in capped], "owner": worker})
                cur = await conn.execute(database.q.remote_finish, params)
                rows = await cur.fetchall()
                stale = [r["job_id"] for r in rows if not r["accepted"]]
                if stale and together:
                    raise psycopg.Rollback()  # the caps too: the call changes nothing
                if body.claim and not stale:
                    params = _claim_params(request, row, worker, body.claim)
                    jobs = [_job(r) for r in await _claim_rows(request, conn, row, params)
                            if r["id"] is not None]
    except psycopg.Error as exc:
        raise store_db.translate(exc, database.client.dsn, database.q.schema) from None
    if stale:
        shown = ", ".join(str(i) for i in stale[:10]) + (" ..." if len(stale) > 10 else "")
        raise ApiError("conflict", f"lease lost (not held by this worker under that token):"
                       f" job {shown}; nothing was changed",
                       {f"outcomes.{i}": "lease lost" for i in stale[:MAX_BATCH]})
    if body.claim:
        return Reply({"accepted": [o.id for o in items], "jobs": jobs,
                      "lease_ttl": request.app.state.settings.lease_ttl})
    return Reply({"accepted": [o.id for o in items]})


@router.delete("/workers/{worker}", status_code=204, responses=responses(*PROTOCOL, "not_found"),
               summary="Unregister a remote worker (leases it still holds expire and are reaped)")
async def forget(request: Request, worker: WorkerId):
    await _known(request, worker)
    if not await _rows(request, request.app.state.db.q.remote_forget, {"owner": worker}):
        raise ApiError("not_found", f"unknown worker {worker}")
    request.app.state.remote_seen.pop(worker, None)
    return Response(status_code=204)
