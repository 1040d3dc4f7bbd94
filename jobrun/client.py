"""Producer and admin API: :class:`Client` (sync) and :class:`AsyncClient`.

Every public method is written once, in :class:`_Api`, as a call of an operation from
:mod:`jobrun.ops`; the two clients differ only in how they drive it (``_run``): the sync one
returns the result, the async one returns an awaitable. Pass ``conn=`` to run inside your
own psycopg transaction (a rollback then removes the job and its notification).
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any, Iterable, Sequence

import psycopg

from jobrun import config
from jobrun.store import db
from jobrun.store.driver import drive, drive_async
from jobrun import ops, queues, workflows
from jobrun.errors import InvalidInput
from jobrun.records import JobSpec
from jobrun.schedules import Schedules
from jobrun.sql import for_schema


class _Api:
    def __init__(self, dsn: str | None = None, *, schema: str | None = None,
                 max_payload_bytes: int | None = None,
                 settings: config.Settings | None = None) -> None:
        self.settings = settings or config.load({"database_url": dsn, "schema": schema,
                                                 "max_payload_bytes": max_payload_bytes})
        self.queries = for_schema(self.settings.schema)
        self.limit = self.settings.max_payload_bytes
        self._dsn: str | None = self.settings.database_url

    @property
    def dsn(self) -> str:
        if self._dsn is None:
            self._dsn = config.resolve_dsn(self.settings)
        return self._dsn

    def _run(self, op: ops.Op, conn: Any = None) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def run(self, op: ops.Op, conn: Any = None) -> Any:
        """Drive an operation written as :mod:`jobrun.ops` writes them (a generator of steps)."""
        return self._run(op, conn)

    # --- producers ------------------------------------------------------------------------

    def _wakes_after(self, conn: Any) -> bool:
        """Whether an enqueue wakes the masters after its commit rather than at it: on the
        client's own connection, where each statement commits alone. (A NOTIFY at a commit
        holds a cluster-wide lock until the commit is flushed: enqueues from many producers
        then commit one at a time; migration 0011.)"""
        return conn is None and not self.settings.pooled

    def enqueue(self, task: str, payload: Any = None, *, queue: str = "default",
                priority: int | None = None, run_at: datetime | None = None,
                delay: float | str | None = None, max_attempts: int | None = None,
                idempotency_key: str | None = None, conn: Any = None,
                payload_is_json: bool = False, concurrency_key: str | None = None,
                after: Sequence[int] | None = None, on_parent_failure: str = "cancel"):
        """Enqueue one job; returns ``Enqueued(job, created)``.

        ``after``: ids of jobs it waits for (docs/workflows.md): it is ``waiting`` until they
        all succeeded, and is cancelled if one ends dead or cancelled, unless
        ``on_parent_failure='run'``. Not with run_at, delay or concurrency_key.

        ``payload`` is any JSON-serialisable value (or JSON text with ``payload_is_json``).
        ``delay`` is seconds or a duration such as ``"30s"``; give it or ``run_at``.
        ``priority`` and ``max_attempts`` left None take the queue's defaults; jobs with one
        ``concurrency_key`` run at most the queue's key_concurrency at a time.
        """
        if after is None and on_parent_failure != "cancel":
            raise InvalidInput("on_parent_failure goes with after (the jobs it waits for)")
        if after is not None:
            if run_at is not None or delay is not None or concurrency_key is not None:
                raise InvalidInput("after does not go with run_at, delay or concurrency_key")
            return self._run(workflows.enqueue_after(
                self.queries, self.limit, task, payload, after, queue=queue, priority=priority,
                max_attempts=max_attempts, on_parent_failure=on_parent_failure,
                idempotency_key=idempotency_key, payload_is_json=payload_is_json), conn)
        return self._run(ops.enqueue(
            self.queries, self.limit, task, payload, queue=queue, priority=priority,
            run_at=run_at, delay=delay, max_attempts=max_attempts,
            idempotency_key=idempotency_key, payload_is_json=payload_is_json,
            concurrency_key=concurrency_key, wake_after=self._wakes_after(conn)), conn)

    def enqueue_many(self, items: Iterable[JobSpec | tuple[str, Any]], *, queue: str = "default",
                     priority: int | None = None, run_at: datetime | None = None,
                     delay: float | str | None = None, max_attempts: int | None = None,
                     conn: Any = None, concurrency_key: str | None = None):
        """Enqueue many jobs in one statement; returns ``[(id, created), ...]`` in order."""
        return self._run(ops.enqueue_many(
            self.queries, self.limit, items, queue=queue, priority=priority, run_at=run_at,
            delay=delay, max_attempts=max_attempts, concurrency_key=concurrency_key,
            wake_after=self._wakes_after(conn)), conn)

    # --- workflows (jobrun/workflows.py) -------------------------------------------------------

    def enqueue_workflow(self, flow: Any, *, idempotency_key: str | None = None,
                         queue: str = "default", conn: Any = None):
        """Enqueue a workflow (``workflows.chain``, ``group``, ``chord``, ``graph``, or one
        ``Step``) atomically, under one idempotency key for the whole; returns
        ``EnqueuedWorkflow(id, job_ids, created)``, the ids in the order of the flattened
        shape (``workflows.flatten``)."""
        return self._run(workflows.enqueue_workflow(
            self.queries, self.limit, flow, idempotency_key=idempotency_key, queue=queue), conn)

    def workflow(self, workflow_id: int, *, conn: Any = None):
        """A workflow with its members' statuses (``WorkflowRecord``)."""
        return self._run(workflows.get(self.queries, workflow_id), conn)

    def cancel_workflow(self, workflow_id: int, *, conn: Any = None):
        """Cancel every member not finished; returns the ids of the members changed."""
        return self._run(workflows.cancel(self.queries, workflow_id), conn)

    # --- inspection and admin -------------------------------------------------------------

    def get(self, job_id: int, *, conn: Any = None):
        return self._run(ops.get(self.queries, job_id), conn)

    def attempts(self, job_id: int, *, conn: Any = None):
        return self._run(ops.attempts(self.queries, job_id), conn)

    def list(self, *, status: str | None = None, queue: str | None = None,
             task: str | None = None, limit: int = 50, before: int | None = None,
             conn: Any = None):
        return self._run(ops.list_jobs(self.queries, status=status, queue=queue, task=task,
                                       limit=limit, before=before), conn)

    def events(self, job_id: int, *, conn: Any = None):
        """The job's transitions, oldest first (jobrun/events.py)."""
        return self._run(ops.events(self.queries, job_id), conn)

    def events_mode(self, *, conn: Any = None):
        return self._run(ops.events_mode(self.queries), conn)

    def set_events_mode(self, mode: str, *, conn: Any = None):
        """Record all, terminal or no transitions, cluster-wide (jobrun/events.py)."""
        return self._run(ops.set_events_mode(self.queries, mode), conn)

    def cancel(self, job_id: int, *, if_version: int | None = None, actor: str | None = None,
               conn: Any = None):
        """Cancel a job; with ``if_version``, only while the job is at that version
        (else :class:`~jobrun.errors.StaleVersion`). ``actor`` names the caller in the job's
        event (default: the database role)."""
        return self._run(ops.cancel(self.queries, job_id, if_version, actor), conn)

    def retry(self, job_id: int, *, if_version: int | None = None, actor: str | None = None,
              conn: Any = None):
        return self._run(ops.retry(self.queries, job_id, if_version, actor), conn)

    def delete(self, job_id: int, *, if_version: int | None = None, conn: Any = None):
        """Delete a finished job (succeeded, dead or cancelled) with its attempts."""
        return self._run(ops.delete(self.queries, job_id, if_version), conn)

    def purge(self, older_than: float | str | None, *, statuses: Sequence[str] = ops.TERMINAL,
              conn: Any = None):
        return self._run(ops.purge(self.queries, older_than, statuses), conn)

    def stats(self, *, conn: Any = None):
        return self._run(ops.stats(self.queries), conn)

    # --- queues (jobrun/queues.py) ------------------------------------------------------------

    def queue_add(self, name: str, *, conn: Any = None, **settings: Any):
        """Declare a queue with settings (concurrency, rate, aging, priority_default,
        max_attempts, retention, key_concurrency); returns ``(queue, created)``. A queue that
        exists is left alone: a replay if the given settings match, else a Conflict."""
        return self._run(queues.add(self.queries, name, **settings), conn)

    def queue_update(self, name: str, *, if_version: int | None = None, conn: Any = None,
                     **settings: Any):
        """Change some settings (None clears one); with ``if_version``, only while the queue
        is at that version (else :class:`~jobrun.errors.StaleVersion`)."""
        return self._run(queues.update(self.queries, name, if_version, **settings), conn)

    def queue_get(self, name: str, *, conn: Any = None):
        return self._run(queues.get(self.queries, name), conn)

    def queue_list(self, *, conn: Any = None):
        return self._run(queues.list_all(self.queries), conn)

    def queue_delete(self, name: str, *, force: bool = False, if_version: int | None = None,
                     conn: Any = None):
        """Delete a queue and its finished jobs; refused while it holds queued or leased jobs
        unless ``force`` (which deletes them too)."""
        return self._run(queues.delete(self.queries, name, force, if_version), conn)

    def declare_queue(self, name: str, *, conn: Any = None):
        """Declare a queue with default settings (no-op when it exists); returns it."""
        return self._run(queues.declare(self.queries, name), conn)

    def queues(self, *, conn: Any = None):
        return self.queue_list(conn=conn)

    def pause_queue(self, name: str, *, if_version: int | None = None, conn: Any = None):
        return self._run(queues.set_paused(self.queries, name, True, if_version), conn)

    def resume_queue(self, name: str, *, if_version: int | None = None, conn: Any = None):
        return self._run(queues.set_paused(self.queries, name, False, if_version), conn)

    @property
    def schedules(self) -> Schedules:  # recurring schedules: jobrun/schedules.py
        return Schedules(self)


class Client(_Api):
    """Synchronous client. Thread-safe: calls share one connection, one at a time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = db.connect(self.dsn, **db.pooled_options(self.settings.pooled))
        return self._conn

    def _drive(self, op: ops.Op, conn: psycopg.Connection) -> Any:
        return drive(op, conn, dsn=self._dsn, schema=self.settings.schema)

    def _run(self, op: ops.Op, conn: Any = None) -> Any:
        if conn is not None:
            return self._drive(op, conn)
        with self._lock:
            conn = self._connection()
            if not self.settings.pooled:  # its own connection, in autocommit mode
                return drive(op, conn, dsn=self._dsn, schema=self.settings.schema, direct=True)
            with conn.transaction():  # the operation's statements share one server connection
                return self._drive(op, conn)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncClient(_Api):
    """Asyncio client; every method returns an awaitable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._conn: psycopg.AsyncConnection | None = None
        self._lock: Any = None

    async def _drive(self, op: ops.Op, conn: psycopg.AsyncConnection) -> Any:
        return await drive_async(op, conn, dsn=self._dsn, schema=self.settings.schema)

    async def _run_own(self, op: ops.Op) -> Any:
        import asyncio

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = await db.connect_async(self.dsn, **db.pooled_options(self.settings.pooled))
            if not self.settings.pooled:  # its own connection, in autocommit mode
                return await drive_async(op, self._conn, dsn=self._dsn,
                                         schema=self.settings.schema, direct=True)
            async with self._conn.transaction():  # one server connection per operation
                return await self._drive(op, self._conn)

    def _run(self, op: ops.Op, conn: Any = None) -> Any:
        return self._drive(op, conn) if conn is not None else self._run_own(op)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
