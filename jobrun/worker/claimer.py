"""The claimer: claims batches of jobs (one statement) and has them handed to children.

It wakes on a notification, a freed child or the poll floor; asks the hand-out
(worker/handout.py) how many rows to claim (one for every idle child plus what busy children
may take ahead, policy.prefetch), claims them, and gives them to the hand-out. Rows no child
can take go back to the queue uncounted (``unclaim``).

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
import time
from typing import Any, Callable, Iterable, Sequence

import psycopg

from jobrun.config import Settings
from jobrun.logs import event
from jobrun.policy import dispatch
from jobrun.sql import Queries
from jobrun.store import db, direct
from jobrun.store.connector import CLAIMS, Connector
from jobrun.worker.handout import HandOut
from jobrun.worker.lifecycle import Service, backoff_sleep
from jobrun.worker.metrics import Metrics
from jobrun.worker.child import Inflight
from jobrun.worker.tally import JobTally

log = logging.getLogger("jobrun.master")
PLAIN_RETRY = 1.0  # seconds of claim_jobs after claim_plain said it did not apply


class Claimer(Service):
    name = "claimer"

    def __init__(self, dsn: str | Connector, queries: Queries, owner: str, settings: Settings,
                 handout: HandOut, metrics: Metrics,
                 on_db_ok: Callable[[], None],
                 unwritten: Callable[[], list[Any]] = list,
                 holding: Callable[[], Iterable[Inflight]] = tuple,
                 tally: JobTally | None = None) -> None:
        super().__init__()
        self.tally = JobTally(metrics) if tally is None else tally  # the master's one
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self.q = queries
        self.owner = owner
        self.settings = settings
        self.handout = handout
        self.metrics = metrics
        self.on_db_ok = on_db_ok
        self.unwritten = unwritten  # outcomes not yet written (their jobs are still leased)
        self.holding = holding  # jobs the children hold (Children.holding)
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
        self._unclaims: set[asyncio.Task] = set()
        self._returning: dict[asyncio.Task, list[str]] = {}  # give-backs in flight: queues
        self._turn = 0  # round_robin: the queue that goes first in the next claim
        self._rate_wake: asyncio.TimerHandle | None = None
        self._held: dict[tuple[str, str], Any] = {}
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
        self.handout.reconfigure(settings)
        self.wake_for_jobs()

    def wake(self) -> None:
        self.wake_event.set()

    def ran_on(self) -> None:
        """A busy child finished a job and runs on to one it already held: the claimer looks
        again once enough such results came in to make a claim worth it (HandOut.ran_on)."""
        if self.handout.ran_on():
            self.wake_event.set()

    def complete_linger(self) -> float:
        """How long the next completion statement waits for its batch (policy.prefetch)."""
        return self.handout.complete_linger(self.backlogged)

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
            self.handout.unreserve()

    async def _claim_once(self, s: Settings, failures: int) -> int:
        """One claim and hand-out; returns the count of consecutive failures."""
        takers, limit = self.handout.reserve()
        if not limit:  # no claim is worth it now
            return failures
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
            self.handout.unreserve()
            self.metrics.db_errors.labels("claim").inc()
            self.db.failed(exc)
            event(log, logging.WARNING, "claim.failed", error=db.first_line(exc), retry=failures + 1)
            await backoff_sleep(failures + 1)
            self.wake()
            return failures + 1
        self.claimed += len(rows)
        orphans = self.handout.hand_out(takers, rows, self._last_claim)
        if orphans:
            self._dry = False  # what goes back is queued: the next wake may claim it
            await self.unclaim(orphans)
        if rows:
            self.metrics.claim_batch.observe(len(rows))
            for row in rows:
                self.tally.wait(row["queue"], max(0.0, row["waited"]))
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
        for job in self.holding():
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
