"""Plain records returned by the producer and admin API."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple


@functools.cache
def _field_names(cls) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _from_row(cls, row: dict[str, Any]):
    names = _field_names(cls)
    return cls(**{k: v for k, v in row.items() if k in names})


def _fields(record: Any) -> dict[str, Any]:
    """A record's fields as a dict, values shared (dataclasses.asdict deep-copies each payload
    and result: a large one cost a response milliseconds)."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}

@dataclass(frozen=True)
class JobRecord:
    id: int
    queue: str
    task: str
    status: str
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    created_at: datetime
    payload: Any = None
    idempotency_key: str | None = None
    crashes: int = 0
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires_at: datetime | None = None
    cancel_requested: bool = False
    traceparent: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    schedule_id: int | None = None  # the schedule that made the job
    version: int = 0  # bumped by every change a user sees (optimistic concurrency; concepts.md)
    base_priority: int | None = None  # its priority before aging improved it (None: not aged)
    aged_at: datetime | None = None   # when its last aging step was due (None: not aged)
    concurrency_key: str | None = None  # at most the queue's key_concurrency run at once
    workflow_id: int | None = None  # the workflow it belongs to (docs/workflows.md)
    waiting_on: int | None = None   # parents not yet settled (None: no parents)
    on_parent_failure: str | None = None  # 'run', or None: cancelled when a parent fails
    parents: Any = None             # its parents' results by id (str), set at its release
    cancel_reason: str | None = None  # why a parent's failure cancelled it

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "JobRecord":
        return _from_row(cls, row)

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)


@dataclass(frozen=True)
class AttemptRecord:
    job_id: int
    lease_token: int
    attempt: int
    outcome: str
    finished_at: datetime
    started_at: datetime | None = None
    worker_host: str | None = None
    worker_pid: int | None = None
    worker_child: int | None = None
    error: str | None = None
    traceback: str | None = None
    result: Any = None
    log: str | None = None  # what the handler logged (and printed) during this attempt

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "AttemptRecord":
        return _from_row(cls, row)

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)


@dataclass(frozen=True)
class EventRecord:
    """One transition of a job (migration 0017, jobrun/events.py), in the order ``seq``."""

    job_id: int
    seq: int
    at: datetime
    event: str                  # what happened: enqueued, claimed, retried, ... (events.KINDS)
    status: str                 # the job's status after it
    attempt: int | None = None  # the job's attempts after it
    lease_token: int | None = None
    owner: str | None = None    # the master holding, or ending, the lease
    actor: str | None = None    # who made the change: the caller (cli:, api:) or the role
    outcome: str | None = None  # the outcome of the attempt it ended
    detail: Any = None          # {"run_at", "delay"} of a retry, {"error"}, {"reason"}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "EventRecord":
        return _from_row(cls, row)

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)


class Enqueued(NamedTuple):
    """What ``enqueue`` returns: the stored job, and False when it was an idempotent replay."""

    job: JobRecord
    created: bool


@dataclass(frozen=True)
class JobSpec:
    """One job for ``enqueue_many``; fields left None take the call's defaults."""

    task: str
    payload: Any = None
    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: float | str | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    concurrency_key: str | None = None


@dataclass(frozen=True)
class QueueStats:
    queue: str
    paused: bool
    queued: int
    scheduled: int
    leased: int
    succeeded: int
    dead: int
    cancelled: int
    oldest_queued_age: float | None
    waiting: int = 0  # waiting for parents (workflows)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "QueueStats":
        return _from_row(cls, row)


@dataclass(frozen=True)
class WorkflowRecord:
    """A workflow: its jobs in id order, each a dict (id, task, queue, status, attempts,
    cancel_reason, finished_at, after: the ids of its parents)."""
    id: int
    shape: str
    created_at: datetime
    jobs: list
    idempotency_key: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "WorkflowRecord":
        return _from_row(cls, row)

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)

    @property
    def status(self) -> str:
        """running (a member not finished), succeeded (all succeeded) or failed."""
        statuses = {j["status"] for j in self.jobs}
        if statuses & {"waiting", "queued", "leased"}:
            return "running"
        return "succeeded" if statuses <= {"succeeded"} else "failed"


class EnqueuedWorkflow(NamedTuple):
    """What enqueue_workflow returns: the workflow's id, its jobs' ids in the order given,
    and whether it was created (False: a replay of its idempotency key)."""
    id: int
    job_ids: list[int]
    created: bool
