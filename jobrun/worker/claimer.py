"""The claimer: claims batches of jobs (one statement) and hands them to children.

It wakes on a notification, a freed child or the poll floor; claims for every idle child plus
what busy children may take ahead (policy.prefetch); and writes each child its jobs in one
write. Rows no child can take go back to the queue uncounted (``unclaim``).

The last claim coming back short means the queues are dry until a notification or the poll
floor says otherwise, so a child freed meanwhile does not cost a claim statement.

Limits (docs/dispatch.md) are enforced by the claim statement; the claimer passes this
master's own room per queue (-Q emails=4, policy.dispatch.rooms) and the queue order, counts
what the statement reports held back, and wakes itself when a rate window frees a start
(other limits free up with a release, which NOTIFYs).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, Callable, Sequence

import psycopg

from jobrun import protocol
from jobrun.config import Settings
from jobrun.logs import event
from jobrun.policy import dispatch, prefetch
from jobrun.sql import Queries
from jobrun.store import db, direct
from jobrun.worker.dispatcher import Dispatcher
from jobrun.store.connector import CLAIMS, Connector
from jobrun.worker.lifecycle import Service, backoff_sleep
from jobrun.worker.metrics import Metrics
from jobrun.worker.supervisor import Child, ChildState, Inflight

log = logging.getLogger("jobrun.master")
PLAIN_RETRY = 1.0  # seconds of claim_jobs after claim_plain said it did not apply
S = ChildState
Batch = dict[Child, list[tuple[Inflight, dict[str, Any], bytes]]]


class Claimer(Service):
    name = "claimer"

    def __init__(self, dsn: str | Connector, queries: Queries, owner: str, settings: Settings,
                 dispatcher: Dispatcher, metrics: Metrics,
                 on_db_ok: Callable[[], None],
                 unwritten: Callable[[], list[Any]] = list) -> None:
        super().__init__()
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self.q = queries
        self.owner = owner
        self._frames = protocol.JobFrames(owner)
        self.settings = settings
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.on_db_ok = on_db_ok
        self.unwritten = unwritten  # outcomes not yet written (their jobs are still leased)
        self.conn: psycopg.AsyncConnection | None = None
        # Numbered parameters, prepared, run on libpq directly (jobrun/store/direct.py): the
        # 8 KB claim is not parsed at each call, nor run through psycopg's cursor.
        text, self._names = queries.positional("claim_jobs")
        self._statement = direct.Statement("claim", text)
        # One queue without limits, the common case, has a lean claim (claim_plain): it says
        # when it does not apply, and the full claim then runs for PLAIN_RETRY seconds.
        text, self._plain_names = queries.positional("claim_plain")
        self._plain = direct.Statement("claim_plain", text)
        self._plain_after = 0.0
        self.wake_event = asyncio.Event()
        self.claimed = 0
        self._dry = False
        self.backlogged = False  # the last claim came back full: jobs wait in the queue
        self._announced = 0  # notifications so far: one that arrives during a claim undries
        self._last_claim = 0.0
        self._waits: dict[str, Any] = {}
        self._unclaims: set[asyncio.Task] = set()
        self._returning: dict[asyncio.Task, list[str]] = {}  # give-backs in flight: queues
        self._turn = 0  # round_robin: the queue that goes first in the next claim
        self._rate_wake: asyncio.TimerHandle | None = None
        self._held: dict[tuple[str, str], Any] = {}
        # Results of busy children that ran on to a job they held, since the last decision,
        # and how many of them can change it (policy.prefetch.results_to_reconsider).
        self._ran_on = 0
        self._ran_on_limit = 0
        self.held: dict[str, dict[str, int]] = {}  # claims held back: queue -> reason -> count

    async def connect(self) -> None:
        """Open the claim connection, and warn if this host's clock is off the database's."""
        self.conn = await self.db.connect(CLAIMS)
        cur = await self.conn.execute(self.q.db_now)
        skew = time.time() - (await cur.fetchone())["clock"].timestamp()
        if abs(skew) > 2.0:
            event(log, logging.WARNING, "clock.skew", seconds=round(skew, 3),
                  note="the database clock decides persisted times; check NTP on this host")

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings  # queues, poll interval, TTL, prefetch: read at every claim
        self.wake_for_jobs()

    def wake(self) -> None:
        self.wake_event.set()

    def ran_on(self) -> None:
        """A busy child finished a job and runs on to one it already held: one slot more
        is free there. Most such results cannot make a claim worth it (the child still holds
        work, and top-ups wait for a quarter of the room there can be); the claimer looks
        again once enough of them came in that one could."""
        self._ran_on += 1
        if self._ran_on >= self._ran_on_limit:
            self.wake_event.set()

    def wake_for_jobs(self) -> None:
        """New jobs were announced (NOTIFY, or the LISTEN connection came back)."""
        self._dry = False
        self._announced += 1
        self.wake_event.set()

    def _interrupt_gently(self) -> None:
        # A claim in flight finishes and hands its jobs out (cancelled, its rows would stay
        # leased, undelivered, until their leases expired); the loop then sees stopping.
        self.wake()

    async def _run(self) -> None:
        failures = 0
        try:
            while not self.stopping:
                s = self.settings
                since = time.monotonic() - self._last_claim
                try:
                    await asyncio.wait_for(self.wake_event.wait(),
                                           max(0.0, s.poll_interval - since) if self._dry
                                           else s.poll_interval)
                except asyncio.TimeoutError:
                    pass
                self.wake_event.clear()
                if self.stopping:
                    break
                if self._dry and time.monotonic() - self._last_claim < s.poll_interval:
                    continue
                failures = await self._claim_once(s, failures)
        finally:
            if self._rate_wake is not None:
                self._rate_wake.cancel()
            for child in self.dispatcher.supervisor.alive():
                if child.state is S.RESERVED:
                    child.state = S.IDLE

    async def _claim_once(self, s: Settings, failures: int) -> int:
        """One claim and hand-out; returns the count of consecutive failures."""
        d = self.dispatcher
        idle = d.idle()
        coming = d.coming()  # starting: a job is parked for each, handed over once it is ready
        extra, most, dry_soon = self._room(idle)
        wanted = len(idle) + len(coming)
        self._ran_on = 0
        self._ran_on_limit = prefetch.results_to_reconsider(wanted, extra, most, dry_soon)
        if self._ran_on_limit:  # 0 exactly when a claim is worth it now
            return failures
        limit = wanted + extra
        for child in idle:
            child.state = S.RESERVED
        announced = self._announced
        try:
            self.conn = await self.db.reconnect(self.conn, CLAIMS)
            rows = await self._claim(s, limit)
            self._last_claim = time.monotonic()
            self.on_db_ok()
            self._turn = dispatch.next_turn(self._turn, len(s.queues))
            rows, mine_held = self._count_held(rows)
            # Short means dry, unless jobs were announced while the claim ran (its snapshot
            # may predate them), or this master's own limit held jobs back (a child that
            # finishes one of them makes room).
            self._dry = len(rows) < limit and self._announced == announced and not mine_held
            self.backlogged = len(rows) == limit
        except Exception as exc:  # noqa: BLE001 - database trouble: back off, retry
            for child in idle:
                if child.state is S.RESERVED:
                    child.state = S.IDLE
            self.metrics.db_errors.labels("claim").inc()
            self.db.failed(exc)
            event(log, logging.WARNING, "claim.failed", error=db.first_line(exc), retry=failures + 1)
            await backoff_sleep(failures + 1)
            self.wake()
            return failures + 1
        self.claimed += len(rows)
        orphans = self._hand_out(idle + coming, rows)
        if orphans:
            self._dry = False  # what goes back is queued: the next wake may claim it
            await self.unclaim(orphans)
        if rows:
            self.metrics.claim_batch.observe(len(rows))
            for row in rows:
                wait = self._waits.get(row["queue"])
                if wait is None:
                    wait = self._waits[row["queue"]] = self.metrics.wait.labels(row["queue"])
                wait.observe(max(0.0, row["waited"]))
            d.changed()
        if len(rows) == limit and not orphans:
            self.wake()  # there may be more (not when rows went back: no child wants them)
        return 0

    async def _claim(self, s: Settings, limit: int) -> list[dict[str, Any]]:
        """The claim statement's rows: claim_plain where it may apply, else claim_jobs."""
        if len(s.queues) == 1 and not s.queue_limits and time.monotonic() >= self._plain_after:
            params = plain_claim_params(s.queues[0], limit, self.owner, s.lease_ttl)
            rows = await self._plain.rows(self.conn, [params[n] for n in self._plain_names])
            if not rows or rows[-1]["held"] != "full":
                return rows
            self._plain_after = time.monotonic() + PLAIN_RETRY
        params = claim_params(
            s.queues, limit, self.owner, s.lease_ttl, order=s.queue_order, turn=self._turn,
            rooms=dispatch.rooms(s.queues, dict(s.queue_limits), self._held_by_queue())
            if s.queue_limits else None)
        return await self._statement.rows(self.conn, [params[n] for n in self._names])

    # --- limits (docs/dispatch.md) ---------------------------------------------------------

    def _held_by_queue(self) -> dict[str, int]:
        """This master's leased jobs per queue: running in a child or waiting in one, or
        finished with the outcome not yet written."""
        held: dict[str, int] = {}
        for child in self.dispatcher.supervisor.alive():
            for job in child.holding():
                held[job.queue] = held.get(job.queue, 0) + 1
        for done in self.unwritten():
            held[done.queue] = held.get(done.queue, 0) + 1
        for queues in self._returning.values():
            for queue in queues:
                held[queue] = held.get(queue, 0) + 1
        return held

    def _count_held(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
        """Split the claim's answer: the leased jobs, and the rows (id NULL) of queues a limit
        held back, counted by reason; whether this master's own limit held any back. A rate
        limit's row says when a start leaves the window: wake then."""
        jobs = [r for r in rows if r["id"] is not None]
        mine = False
        if len(jobs) == len(rows):
            return rows, mine
        for row in rows:
            if row["id"] is not None:
                continue
            key = (row["queue"], row["held"])
            counter = self._held.get(key)
            if counter is None:
                counter = self._held[key] = self.metrics.held_back.labels(*key)
            counter.inc()
            by_reason = self.held.setdefault(row["queue"], {})
            by_reason[row["held"]] = by_reason.get(row["held"], 0) + 1
            mine = mine or row["held"] == "master_limit"
            if row["retry"] is not None:
                self._wake_at(row["retry"])
        return jobs, mine

    def _wake_at(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.001, delay)
        if self._rate_wake is not None and not self._rate_wake.cancelled() \
                and self._rate_wake.when() <= when:
            return
        if self._rate_wake is not None:
            self._rate_wake.cancel()
        self._rate_wake = loop.call_at(when, self._rate_window_moved)

    def _rate_window_moved(self) -> None:
        self._rate_wake = None
        self.wake_for_jobs()

    # --- prefetch sizing (policy.prefetch) ------------------------------------------------

    def _cap(self, child: Child) -> int:
        return prefetch.cap(self.settings.prefetch, self.settings.max_tasks_per_child,
                            child.jobs_done)

    def _held_work(self, child: Child) -> float | None:
        """Seconds of work a child holds (running and waiting), None if any may be long."""
        return prefetch.backlog((j.task for j in (child.job, *child.queued) if j is not None),
                                self.dispatcher.runtime, self.settings.prefetch_max_runtime)

    def _headroom(self, child: Child) -> float | None:
        if child.held() >= self._cap(child):
            return None  # (before summing what it holds)
        return self._room_left(child, self._held_work(child), within_budget=True)

    def _room_left(self, child: Child, held: float | None, within_budget: bool) -> float | None:
        """policy.prefetch.headroom for ``child`` holding ``held`` seconds of work; not
        ``within_budget``: short jobs up to its cap, whatever their sum."""
        budget = self.settings.prefetch_max_runtime if within_budget else math.inf
        return prefetch.headroom(child.held(), self._cap(child), held, budget)

    def complete_linger(self) -> float:
        """How long the next completion statement waits for its batch (policy.prefetch)."""
        if not self.backlogged:
            return 0.0
        d = self.dispatcher
        busy = d.busy()
        ahead = bool(busy) and not d.idle() and all(c.queued for c in busy)
        return prefetch.complete_linger(True, ahead)

    def _room(self, idle: list[Child]) -> tuple[int, int, bool]:
        s = self.settings
        runtime = self.dispatcher.runtime
        most = prefetch.cap(s.prefetch, s.max_tasks_per_child, 0)  # a new child's
        if most <= 1 or not runtime:
            return 0, 0, False
        busy = [(self._cap(c) - c.held(), self._headroom(c), bool(c.queued))
                for c in self.dispatcher.busy()]
        return prefetch.room(prefetch=most, budget=s.prefetch_max_runtime, runtime=runtime,
                             idle=[self._cap(c) for c in idle], target=self.dispatcher.target,
                             busy=busy)

    # --- hand-out -------------------------------------------------------------------------

    def _hand_out(self, reserved: list[Child], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Give claimed rows to children: one to each reserved (idle) child, then the rest to
        the children holding fewest that may take more (idle, or topped up). One write per
        child. Returns the rows no child took, to be given back."""
        d = self.dispatcher
        rows = list(rows)
        rows.reverse()
        batches: Batch = {}
        for child in reserved:
            if d.parks(child) and child.parked is None and rows:
                self._assign(child, rows.pop(), batches)  # parked until it is ready
                continue
            if child.state is not S.RESERVED:
                continue  # exited while the claim ran
            if not rows:
                child.state = S.IDLE
                continue
            self._assign(child, rows.pop(), batches)
        if rows:
            # Children that went idle while the claim ran take rows too, first.
            self._fill(d.idle() + d.busy(), rows, batches, within_budget=True)
        if rows:
            # Run times measured while the claim ran may have grown past the room it was
            # sized for: rather than give rows back (a statement, and a claim again), let
            # children holding only short jobs take them, up to --prefetch.
            self._fill(d.busy(), rows, batches, within_budget=False)
        orphans = rows[::-1]
        for child, sent in batches.items():
            if child.send(b"".join(frame for _, _, frame in sent)):
                continue
            # Its socket is broken: take back what it never got, and replace it (its exit is
            # reported through its pidfd; a broken child must not keep its slot).
            for job, row, _ in sent:
                d.take_back(child, job)
                orphans.append(row)
            child.state = S.RETIRING
            event(log, logging.ERROR, "child.unwritable", child=child.index, pid=child.pid,
                  jobs=len(sent), note="replacing the child")
            d.supervisor.kill(child, "unwritable")
        return orphans

    def _fill(self, takers: list[Child], rows: list[dict[str, Any]], batches: Batch,
              within_budget: bool) -> None:
        """Hand rows (popped from the end) to the takers holding fewest, while they can take:
        below their cap, holding only short jobs and, if ``within_budget``, less work than
        --prefetch-max-runtime. Each taker's held work is summed once and then kept up as
        rows are assigned (not summed again over everything it holds for every row)."""
        work: dict[Child, float] = {}
        for child in takers:
            held = self._held_work(child)
            if self._room_left(child, held, within_budget) is not None:
                work[child] = held
        while rows and work:
            child = min(work, key=Child.held)
            row = rows.pop()
            self._assign(child, row, batches)
            took = prefetch.backlog((row["task"],), self.dispatcher.runtime,
                                    self.settings.prefetch_max_runtime)
            held = None if took is None else work[child] + took
            if self._room_left(child, held, within_budget) is not None:
                work[child] = held
            else:
                del work[child]

    def _assign(self, child: Child, row: dict[str, Any], batches: Batch) -> None:
        job = Inflight(id=row["id"], token=row["lease_token"], task=row["task"], queue=row["queue"],
                       attempts=row["attempts"], max_attempts=row["max_attempts"],
                       crashes=row["crashes"], created_at=row["created_at"],
                       claimed=self._last_claim)
        frame = self._frames.frame(
            id=job.id, token=job.token, task=job.task, queue=job.queue, attempt=job.attempts,
            max_attempts=job.max_attempts, priority=row["priority"], created_at=job.created_at,
            key=row["idempotency_key"], traceparent=row["traceparent"],
            payload_text=row["payload"])
        if self.dispatcher.parks(child):
            self.dispatcher.park(child, job, frame)
            return
        if child.job is None:
            self.dispatcher.start_job(child, job)
        else:
            child.queued.append(job)
        batches.setdefault(child, []).append((job, row, frame))

    # --- give-back ------------------------------------------------------------------------

    def give_back(self, rows: list[dict[str, Any]]) -> None:
        """Give back, in the background, claimed jobs no child will start."""
        task = asyncio.get_running_loop().create_task(self.unclaim(rows))
        self._unclaims.add(task)
        # Leased until given back (-Q NAME=N counts them).
        self._returning[task] = [row["queue"] for row in rows if row.get("queue")]
        task.add_done_callback(self._unclaims.discard)
        task.add_done_callback(self._returning.pop)

    async def given_back(self, timeout: float) -> None:
        """Wait for give-backs in flight."""
        if self._unclaims:
            await asyncio.wait(set(self._unclaims), timeout=timeout)

    async def unclaim(self, rows: list[dict[str, Any]]) -> None:
        """Give back claimed jobs no child started (one statement)."""
        try:
            self.conn = await self.db.reconnect(self.conn, CLAIMS)
            await self.conn.execute(self.q.unclaim, {
                "ids": [row["id"] for row in rows], "tokens": [row["lease_token"] for row in rows],
                "owner": self.owner})
        except Exception as exc:  # noqa: BLE001 - the leases then expire and are reaped
            event(log, logging.WARNING, "unclaim.failed", jobs=[row["id"] for row in rows],
                  error=db.first_line(exc))

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def claim_params(queues: Sequence[str], limit: int, owner: str, ttl: float, *,
                 order: str = dispatch.DEFAULT_ORDER, turn: int = 0,
                 rooms: Sequence[int | None] | None = None) -> dict[str, Any]:
    """Parameters of ``claim_jobs``: the served queues in -Q order, this master's room in each
    (None: no limit of its own), the queue order and the round_robin turn."""
    return {"queues": list(queues), "rooms": list(rooms) if rooms else [None] * len(queues),
            "limit": limit, "owner": owner, "ttl": ttl, "order": order, "turn": turn,
            "nqueues": max(1, len(queues))}


def plain_claim_params(queue: str, limit: int, owner: str, ttl: float) -> dict[str, Any]:
    """Parameters of ``claim_plain``: the one served queue, without limits or order."""
    return {"queue": queue, "limit": limit, "owner": owner, "ttl": ttl}
