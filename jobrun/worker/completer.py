"""Record attempt outcomes in batches: one statement per batch, no per-job round trip.

The statement (complete_jobs) hands the batch to finish_jobs (migration 0014), the one SQL
path by which a lease ends (jobrun/states.py): the reaper and transactional handlers use it too.

Batching adapts to load: a result that finds the completer idle is written at once, and
results that arrive while a flush runs are written by the next flush, which starts as soon as
that one ends. Only while jobs wait in the queue does the next flush start ``linger()``
seconds after the previous one ended (policy.prefetch.complete_linger), so the batch can fill:
those jobs waited in the queue anyway, and fewer statements leave more of the machine to the
backlog. A full batch, or a drain (shutdown), cuts the wait short. With the queue keeping up,
a result waits at most for the flush in progress, never for a timer.

Every row is guarded by (owner, fencing token, status = 'leased'); a row the guard refuses
is a lease this master lost (reaped and perhaps re-run elsewhere), counted, not an error.
On a database error the batch is kept and retried after a backoff: nothing is dropped. That
holds for an error of the statement itself too (a table locked or renamed by hand, a standby
promoted read-only, a permission revoked): the error is logged loudly at every retry, and the
rows are written once the cause is gone; until then their leases are renewed as usual.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Callable

import psycopg

from jobrun.store import db, direct
from jobrun.store.arrays import Float8s, Int4s, Int8s, Texts
from jobrun.store.connector import COMPLETIONS, Connector
from jobrun.worker.lifecycle import Service
from jobrun.logs import event
from jobrun.tracing import completion_span
from jobrun.sql import Queries

log = logging.getLogger("jobrun.completer")
MAX_BATCH = 1000


def _clean(text: str | None, limit: int) -> str | None:
    """Text columns cannot hold NUL; keep the tail of over-long tracebacks."""
    if text is None:
        return None
    text = text.replace("\x00", "\\0")
    return text if len(text) <= limit else text[-limit:]


@dataclass(slots=True)  # not frozen: a frozen one costs ~2 us a job to build; none is changed
class Completion:
    id: int
    token: int
    status: str  # the job's next status
    outcome: str  # the attempt's outcome
    delay: float = 0.0
    error: str | None = None
    traceback: str | None = None
    result: str | None = None  # JSON text
    child: int | None = None
    crashed: int = 0
    log: str | None = None  # what the handler logged
    refund: int = 0  # 1: the attempt does not count (no outcome of a started job is refunded)
    queue: str = ""  # the job's queue: its lease counts against -Q NAME=N until written
    # The task's max_attempts, lower than the job's, that decided this failed attempt's fate:
    # written to the job (cap_max_attempts) so that it shows the limit that applied.
    limit: int | None = None
    traceparent: str | None = None  # the job's: the completion span links to its trace


class Completer(Service):
    name = "completer"

    def __init__(self, dsn: str | Connector, queries: Queries, owner: str, host: str, pid: int,
                 on_refused: Callable[[list[Completion]], None] | None = None,
                 on_recorded: Callable[[list[Completion]], None] | None = None,
                 on_db_error: Callable[[], None] | None = None,
                 linger: Callable[[], float] = lambda: 0.0,
                 on_db_ok: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.linger = linger  # seconds the next flush waits for its batch to fill, now
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self._session = self.db.session(COMPLETIONS)  # prepared, rows looked up by id
        self.q = queries
        # Numbered parameters, typed arrays, prepared, run on libpq directly
        # (jobrun/store/direct.py): nothing of the statement or its parameters is worked out
        # again at each batch, nor run through psycopg's cursor.
        text, self._names = queries.positional("complete_jobs")
        self._statement = direct.Statement("complete", text)
        self.owner = owner
        self.host = host
        self.pid = pid
        self.on_refused = on_refused
        self.on_recorded = on_recorded
        self.on_db_error = on_db_error
        self.on_db_ok = on_db_ok
        self.pending: list[Completion] = []
        self.writing: list[Completion] = []  # the batch being written
        self._work = asyncio.Event()
        self._hurry = asyncio.Event()  # cuts a linger short: a full batch, or a drain
        self._draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        # monotonic: when the last statement ended (none yet: the first one does not linger,
        # however young the clock)
        self._last_end = -math.inf
        self.batches = 0
        self.refused = 0

    @property
    def _conn(self) -> psycopg.AsyncConnection | None:
        """The connection, while there is one (tests read its prepared statement's plan)."""
        return self._session.conn

    def submit(self, completion: Completion) -> None:
        self.pending.append(completion)
        self._idle.clear()
        self._work.set()
        if len(self.pending) >= MAX_BATCH:
            self._hurry.set()

    def unwritten(self) -> list[Completion]:
        """Outcomes submitted and not yet written: their jobs are still leased."""
        return self.writing + self.pending

    async def drain(self, timeout: float) -> bool:
        """Wait until everything submitted is written (no more lingering: the master is
        stopping); False if it could not be in time."""
        self._draining = True
        self._hurry.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def _run(self) -> None:
        try:
            while True:
                await self._work.wait()
                self._work.clear()
                while self.pending:
                    await self._linger()
                    batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
                    self.writing = batch
                    with completion_span(batch):  # a no-op without OpenTelemetry
                        await self._write(batch)
                    self.writing = []
                    self._last_end = time.monotonic()
                    if len(self.pending) < MAX_BATCH and not self._draining:
                        self._hurry.clear()
                self._idle.set()
        finally:
            await self._session.close()

    async def _linger(self) -> None:
        """With a backlog, let the batch fill: the next statement starts ``linger()`` after the
        last one ended, whether its results came while that one ran or after it (a child
        sends those of jobs it ran back to back together)."""
        wait = self._last_end + self.linger() - time.monotonic()
        if wait > 0 and not self._hurry.is_set():
            try:
                await asyncio.wait_for(self._hurry.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def _write(self, batch: list[Completion]) -> None:
        params = {
            "ids": Int8s([c.id for c in batch]), "tokens": Int8s([c.token for c in batch]),
            "statuses": Texts([c.status for c in batch]), "outcomes": Texts([c.outcome for c in batch]),
            "delays": Float8s([float(c.delay or 0.0) for c in batch]),
            "errors": Texts([_clean(c.error, 4000) for c in batch]),
            "tracebacks": Texts([_clean(c.traceback, 16000) for c in batch]),
            "results": Texts([c.result for c in batch]), "children": Int4s([c.child for c in batch]),
            "crashed": Int4s([c.crashed for c in batch]), "logs": Texts([c.log for c in batch]),
            "refunds": Int4s([c.refund for c in batch]),
            "owner": self.owner, "host": self.host,
            "pid": self.pid,
        }
        values = [params[name] for name in self._names]
        capped = [c for c in batch if c.limit is not None]
        if capped:
            await self._cap(capped)
        failures = 0
        while True:
            try:
                conn = await self._session.get()
                accepted = {row["job_id"] for row in await self._statement.rows(conn, values)}
                break
            except Exception as exc:  # noqa: BLE001 - kept and retried, whatever it was
                self.db.failed(exc)
                if self.on_db_error:
                    self.on_db_error()
                failures += 1
                statement = isinstance(exc, psycopg.Error) and bool(exc.sqlstate) and not \
                    isinstance(exc, psycopg.OperationalError)
                # The statement itself failed (not the connection): say so loudly; the rows
                # stay, and are written once whatever refuses them is fixed.
                event(log, logging.ERROR if statement else logging.WARNING,
                      "complete.failed" if statement else "complete.retry",
                      error=db.first_line(exc), jobs=len(batch), retry=failures)
                await self.db.pause(failures)
        self.db.succeeded()
        if self.on_db_ok:
            self.on_db_ok()
        self.batches += 1
        refused = [c for c in batch if c.id not in accepted]
        if refused:
            self.refused += len(refused)
            event(log, logging.WARNING, "complete.refused", jobs=[c.id for c in refused][:20],
                  count=len(refused), reason="lease lost (the guard did not match)")
            await self._note_lost(refused)
            if self.on_refused:
                self.on_refused(refused)
        if self.on_recorded:
            self.on_recorded([c for c in batch if c.id in accepted])

    async def _note_lost(self, refused: list[Completion]) -> None:
        """Write a ``lease_lost`` event for each refused outcome (migration 0017: a lost
        lease changes no row, so no trigger sees it). Only when a batch had refusals; not
        retried: the log then lacks that line, and the job's own transitions stand."""
        try:
            conn = await self._session.get()
            await conn.execute(self.q.note_lease_lost, {
                "ids": [c.id for c in refused], "tokens": [c.token for c in refused],
                "owner": self.owner, "reason": "outcome refused: the lease was lost"})
        except Exception as exc:  # noqa: BLE001 - see above
            self.db.failed(exc)
            event(log, logging.WARNING, "complete.note_failed", error=db.first_line(exc),
                  jobs=len(refused))

    async def _cap(self, capped: list[Completion]) -> None:
        """Write the task limits that decided these attempts to their jobs, while still leased
        and before their outcomes: a job never reads as ended at 3 of 5, and one whose outcome
        a crash keeps from being written is reaped by the limit that applied. A statement of
        its own, only in batches holding a failed attempt of a task whose max_attempts is
        lower than its job's, and once per job (the next claim reads the lower figure). Not
        retried: should it fail, the outcome is written all the same, and the job shows the
        limit it was enqueued with."""
        try:
            conn = await self._session.get()
            await conn.execute(self.q.cap_max_attempts, {
                "ids": [c.id for c in capped], "tokens": [c.token for c in capped],
                "limits": [c.limit for c in capped], "owner": self.owner})
        except Exception as exc:  # noqa: BLE001 - see above
            self.db.failed(exc)
            event(log, logging.WARNING, "complete.cap_failed", error=db.first_line(exc),
                  jobs=len(capped))
