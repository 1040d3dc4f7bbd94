"""jobrun: a durable job queue on PostgreSQL with a prefork supervisor."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from jobrun.app import App, Job
from jobrun.errors import (
    Cancelled,
    Conflict,
    DatabaseUnavailable,
    InvalidInput,
    JobrunError,
    LeaseLost,
    NotFound,
    Permanent,
    Refused,
    Retry,
    SoftTimeLimit,
    StaleVersion,
    UnknownQueue,
)

if TYPE_CHECKING:  # pragma: no cover
    from jobrun.client import AsyncClient, Client
    from jobrun.records import AttemptRecord, Enqueued, JobRecord, JobSpec, QueueStats

__version__ = "0.1.0"

__all__ = [
    "App", "AsyncClient", "AttemptRecord", "Job", "Cancelled", "Client", "Conflict", "DatabaseUnavailable",
    "Enqueued", "InvalidInput", "JobRecord", "JobSpec", "JobrunError", "LeaseLost", "NotFound",
    "Permanent", "QueueStats", "Refused", "Retry", "SoftTimeLimit", "StaleVersion", "UnknownQueue",
]

# Imported on first use: the client brings psycopg (a sixth of a second), which an app module
# that only registers tasks, the fork server and the master's first steps do not need.
_LAZY = {"Client": "jobrun.client", "AsyncClient": "jobrun.client",
         "AttemptRecord": "jobrun.records", "Enqueued": "jobrun.records",
         "JobRecord": "jobrun.records", "JobSpec": "jobrun.records", "QueueStats": "jobrun.records"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobrun' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
