"""Exactly-once effects for transactional handlers (runs inside the child).

A task declared ``transactional=True`` gets ``(job, tx)``: ``tx`` is a psycopg connection the
child opened itself, inside an open transaction. In that same transaction the child

1. reserves the effect key ``(task, idempotency key or job id)`` in ``processed_effects``
   (an insert: a racing attempt of the same key waits on it; a key already committed means the
   effects exist, and the handler body is skipped),
2. runs the handler,
3. marks the job succeeded with one attempt row, guarded by (owner, token, status='leased'):
   complete_transactional, through finish_jobs, the one SQL path by which a lease ends,

and commits all of it at once. A lost lease (the guard matches no row, or LeaseLost raised in
the handler) rolls the effects back. So the handler's database writes happen exactly once per
(task, key), however often the job is started. Anything the handler does outside ``tx`` (an
HTTP call, an e-mail) remains at-least-once.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from jobrun import validate
from jobrun.app import Job, TaskDef
from jobrun.errors import LeaseLost

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

    from jobrun.sql import Queries

# psycopg (and the named queries, built with it) are imported on first use: a child whose app
# has no transactional task never needs them, and a forked child finds them imported already
# when the fork server preloaded them (runtime.preload).


KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 10, 5, 3  # seconds, seconds, probes


class EffectRunner:
    def __init__(self, dsn: str | None, schema: str, host: str, master_pid: int, child: int,
                 idle_timeout: float = 300.0) -> None:
        self.dsn = dsn
        self.idle_timeout = idle_timeout
        self.schema = schema
        self._q: Queries | None = None
        self.host = host
        self.master_pid = master_pid
        self.child = child
        self._conn: psycopg.Connection | None = None

    @property
    def q(self) -> Queries:
        if self._q is None:
            from jobrun.sql import for_schema

            self._q = for_schema(self.schema)
        return self._q

    def _connection(self) -> psycopg.Connection:
        import psycopg
        from psycopg.rows import dict_row

        if self._conn is None or self._conn.closed or self._conn.broken:
            if not self.dsn:
                raise RuntimeError("transactional task: the child has no database URL")
            # Client-side keepalives notice a dead server; the server-side ones and the idle
            # timeout let PostgreSQL end this session when this process is cut off or frozen
            # (the reaper ends it sooner, once the lease expired: see record_handler_session).
            from jobrun.store.db import follow_primary  # several hosts: the writable one

            conn = psycopg.connect(follow_primary(self.dsn), autocommit=True, row_factory=dict_row,
                                   keepalives=1, keepalives_idle=KEEPALIVE_IDLE,
                                   keepalives_interval=KEEPALIVE_INTERVAL,
                                   keepalives_count=KEEPALIVE_COUNT)
            conn.execute(self.q.handler_session_settings, {
                "idle": f"{int(self.idle_timeout * 1000)}ms", "keepidle": str(KEEPALIVE_IDLE),
                "keepinterval": str(KEEPALIVE_INTERVAL), "keepcount": str(KEEPALIVE_COUNT)})
            self._conn = conn
        return self._conn

    def run(self, task: TaskDef, job: Job, owner: str,
            log_text: Callable[[], str | None] = lambda: None) -> tuple[str, bool]:
        """Run the handler and commit its effects with the job's success.

        Returns (result JSON text, skipped). Raises LeaseLost when the completion guard refused
        (everything rolled back), or whatever the handler raised (rolled back too).
        """
        import psycopg

        conn = self._connection()
        key = job.idempotency_key or str(job.id)
        try:
            # Committed before the transaction starts, so the reaper sees which session to end
            # should this attempt's lease expire while its transaction is still open.
            if conn.execute(self.q.record_handler_session,
                            {"id": job.id, "token": job.token, "owner": owner}).fetchone() is None:
                raise LeaseLost()
            with conn.transaction():
                fresh = conn.execute(self.q.effect_claim,
                                     {"task": job.task, "key": key, "id": job.id}).fetchone()
                value = task.fn(job, conn) if fresh else None
                text = validate.result(value)
                log = log_text()
                done = conn.execute(self.q.complete_transactional, {
                    "id": job.id, "token": job.token, "owner": owner, "host": self.host,
                    "pid": self.master_pid, "child": self.child, "result": text,
                    "log": validate.escape_surrogates(log) if log else log}).fetchone()
                if done is None:
                    raise LeaseLost()
            return text, not fresh
        except BaseException:
            # An exception raised by a signal may land mid-statement; never reuse a connection
            # that is not cleanly idle.
            if conn.closed or conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                try:
                    conn.close()
                finally:
                    self._conn = None
            raise


def from_environment(master_pid: int, child: int) -> EffectRunner:
    import socket

    # A transaction left idle this long (a handler stuck between statements, or its process
    # frozen) is ended by the server: at least a minute, and longer with longer leases.
    try:
        ttl = float(os.environ.get("JOBRUN_LEASE_TTL") or 30)
    except ValueError:
        ttl = 30.0
    return EffectRunner(os.environ.get("JOBRUN_DATABASE_URL"),
                        os.environ.get("JOBRUN_SCHEMA", "jobrun"), socket.gethostname(),
                        master_pid, child, idle_timeout=max(60.0, 2 * ttl))
