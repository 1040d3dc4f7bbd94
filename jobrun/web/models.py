"""Request bodies of the HTTP API. They check JSON types and unknown fields only; the values
(names, ranges, payload size, NUL) are checked by jobrun.validate through jobrun.ops, the same
code the Client and the SQL functions' callers run."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from jobrun.records import JobSpec

MAX_BATCH = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewJob(_Strict):
    task: StrictStr = Field(description="Task name, e.g. email.send")
    payload: Any = Field(None, description="Any JSON value (default null)")
    queue: StrictStr = "default"
    priority: Optional[StrictInt] = Field(
        None, description="-100..100, lower runs first (default: the queue's priority_default)")
    run_at: Optional[AwareDatetime] = Field(None, description="RFC 3339 time with offset")
    delay: Optional[Union[StrictInt, StrictFloat, StrictStr]] = Field(
        None, description="Seconds, or a duration such as 30s, 5m, 1h30m (not with run_at)")
    max_attempts: Optional[StrictInt] = Field(
        None, description="1..1000 (default: the queue's max_attempts, else 5)")
    idempotency_key: Optional[StrictStr] = Field(
        None, description="Unique per queue; also the Idempotency-Key header")
    concurrency_key: Optional[StrictStr] = Field(
        None, description="At most the queue's key_concurrency jobs with this key run at once")

    def spec(self) -> JobSpec:
        return JobSpec(task=self.task, payload=self.payload, queue=self.queue,
                       priority=self.priority, run_at=self.run_at, delay=self.delay,
                       max_attempts=self.max_attempts, idempotency_key=self.idempotency_key,
                       concurrency_key=self.concurrency_key)


class NewJobs(_Strict):
    jobs: list[NewJob] = Field(min_length=1, max_length=MAX_BATCH)


class Guarded(_Strict):
    version: Optional[StrictInt] = Field(
        None, description="Change only while the job is at this version (else 409)")
