"""jobrun: a durable job queue on PostgreSQL with a prefork supervisor."""

from jobrun.app import App, Job
from jobrun.client import AsyncClient, Client
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
from jobrun.records import AttemptRecord, Enqueued, JobRecord, JobSpec, QueueStats

__version__ = "0.1.0"

__all__ = [
    "App", "AsyncClient", "AttemptRecord", "Job", "Cancelled", "Client", "Conflict", "DatabaseUnavailable",
    "Enqueued", "InvalidInput", "JobRecord", "JobSpec", "JobrunError", "LeaseLost", "NotFound",
    "Permanent", "QueueStats", "Refused", "Retry", "SoftTimeLimit", "StaleVersion", "UnknownQueue",
]
