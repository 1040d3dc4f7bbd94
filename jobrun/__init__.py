"""jobrun: a durable job queue on PostgreSQL with a prefork supervisor."""

from .app import App, Job
from .client import AsyncClient, Client
from .errors import (
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
    UnknownQueue,
)
from .records import AttemptRecord, Enqueued, JobRecord, JobSpec, QueueStats

__version__ = "0.1.0"

__all__ = [
    "App", "AsyncClient", "AttemptRecord", "Job", "Cancelled", "Client", "Conflict", "DatabaseUnavailable",
    "Enqueued", "InvalidInput", "JobRecord", "JobSpec", "JobrunError", "LeaseLost", "NotFound",
    "Permanent", "QueueStats", "Refused", "Retry", "SoftTimeLimit", "UnknownQueue",
]
