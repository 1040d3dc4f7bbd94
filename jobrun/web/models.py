"""Request bodies of the HTTP API, and the rules its OpenAPI document states.

The models check JSON types and unknown fields only; the values (names, ranges, payload size,
NUL) are checked by jobrun.validate through jobrun.ops, the same code (and the same one-line
messages) the Client and the CLI run. What those checks enforce is *stated* in the document by
the ``*_RULE`` schemas below, built from jobrun.validate's and jobrun.queue_rules' own
patterns and bounds, so a generated client sends nothing the server then refuses.
tests/acceptance/test_web_contract.py fuzzes the document against a real server to keep it so.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, StrictFloat,
                      StrictInt, StrictStr)
from pydantic_core import PydanticCustomError

from jobrun import queue_rules, validate
from jobrun.policy import cron
from jobrun.records import JobSpec
from jobrun.states import OUTCOMES, STATUSES
from jobrun.web.reads import SEARCH_MAX

MAX_BATCH = 1000
VERSION_MAX = 2**63 - 1  # a bigint: versions and ids
BIGINT_DIGITS = len(str(VERSION_MAX)) - 1  # any number of this many digits is a bigint


def _whole_number(value: Any) -> Any:
    """JSON has one kind of number: 3.0 is the integer 3 (JSON Schema agrees), so an integer
    field takes it. Text, booleans and fractions stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


WholeInt = Annotated[int, BeforeValidator(_whole_number)]


def _whole(regex) -> str:
    return f"^{regex.pattern}$"


_APPLIES_TO = {"pattern": ("string",), "minLength": ("string",), "maxLength": ("string",),
               "minimum": ("integer", "number"), "maximum": ("integer", "number"),
               "items": ("array",), "enum": ("string",)}


def stated(**rule: Any) -> dict[str, Any]:
    """``rule`` in the OpenAPI document only (json_schema_extra of a Field, Query, Path or
    Header); jobrun.validate enforces it. Each keyword goes on the branch of the value's type
    (an Optional field is anyOf [type, null]: the null stays allowed)."""
    def edit(schema: dict[str, Any]) -> None:
        branches = schema.get("anyOf") or [schema]
        for key, value in rule.items():
            for branch in branches:
                if branch is schema or branch.get("type") in _APPLIES_TO[key]:
                    branch[key] = value
    edit.rule = rule  # type: ignore[attr-defined]
    return {"json_schema_extra": edit}


def given(rule: dict[str, Any], kind: str = "string") -> dict[str, Any]:
    """``rule`` for a value that may be left out but is never null: a query parameter or a
    header (which cannot carry a null), or a setting that cannot be unset."""
    def edit(schema: dict[str, Any]) -> None:
        schema.pop("anyOf", None)
        schema.update(type=kind, **rule["json_schema_extra"].rule)
    return {"json_schema_extra": edit}


def exact_bounds(doc: Any) -> Any:
    """``doc`` (the OpenAPI document) with each integer's bounds written as integers again:
    FastAPI's document model holds every bound as a float, and 2**63-1 has no float (it
    reads back as 2**63, a version the database refuses). In place; returns ``doc``."""
    if isinstance(doc, dict):
        for key in ("minimum", "maximum"):
            value = doc.get(key)
            if isinstance(value, float) and value.is_integer():
                doc[key] = VERSION_MAX if value == float(VERSION_MAX) else int(value)
        for value in doc.values():
            exact_bounds(value)
    elif isinstance(doc, list):
        for value in doc:
            exact_bounds(value)
    return doc


TASK_RULE = stated(pattern=_whole(validate.TASK_RE))
QUEUE_RULE = stated(pattern=_whole(validate.QUEUE_RE))
SCHEDULE_RULE = TASK_RULE  # validate.schedule_name: a schedule's name follows the task rule
PRIORITY_RULE = stated(minimum=validate.PRIORITY_MIN, maximum=validate.PRIORITY_MAX)
ATTEMPTS_RULE = stated(minimum=validate.MAX_ATTEMPTS_MIN, maximum=validate.MAX_ATTEMPTS_MAX)
VERSION_RULE = stated(minimum=0, maximum=VERSION_MAX)
IDEMPOTENCY_RULE = stated(minLength=1, maxLength=validate.KEY_MAX, pattern="^[^\\x00]*$")
CONCURRENCY_KEY_RULE = stated(minLength=1, maxLength=validate.CONCURRENCY_KEY_MAX,
                              pattern="^[^\\x00-\\x1f\\x7f-\\x9f]*$")
SEARCH_RULE = stated(maxLength=SEARCH_MAX, pattern="^[^\\x00]*$")
# A version as GET returns it in ETag ("3", or W/"3").
IF_MATCH_RULE = given(stated(pattern=f'^(W/)?"?[0-9]{{1,{BIGINT_DIGITS}}}"?$'))
STATUS_RULE = stated(items={"type": "string", "enum": list(STATUSES)})
OUTCOME_RULE = stated(items={"type": "string", "enum": list(OUTCOMES)})


def seconds(low: float, high: float) -> dict[str, Any]:
    """An interval, stated as a number of seconds (or null). The server also takes duration
    text ("30s", "5m"), whose bounds JSON Schema cannot state: the document offers numbers."""
    def edit(schema: dict[str, Any]) -> None:
        schema["anyOf"] = [{"type": "number", "minimum": low, "maximum": high}, {"type": "null"}]
    return {"json_schema_extra": edit}


DELAY_RULE = seconds(0, validate.MAX_DELAY)
COUNT_RULE = stated(minimum=1, maximum=queue_rules.MAX_COUNT)
AGING_RULE = seconds(queue_rules.AGING_MIN, queue_rules.AGING_MAX)
RETENTION_RULE = seconds(queue_rules.RETENTION_MIN, queue_rules.RETENTION_MAX)
# COUNT/PERIOD: the subset of validate.rate's grammar that is always within its bounds (a
# count under MAX_COUNT; a period of at most 999 s, or one minute, hour or day).
RATE_RULE = stated(pattern=f"^[1-9][0-9]{{0,{len(str(queue_rules.MAX_COUNT)) - 2}}}"
                   "/(([1-9][0-9]{0,2})?(ms|s)|m|h|d)$")
CATCH_UP_RULE = stated(enum=list(cron.CATCH_UP))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewJob(_Strict):
    task: StrictStr = Field(description="Task name, e.g. email.send", **TASK_RULE)
    payload: Any = Field(None, description="Any JSON value (default null)")
    queue: StrictStr = Field("default", **QUEUE_RULE)
    priority: Optional[WholeInt] = Field(
        None, description="-100..100, lower runs first (default: the queue's priority_default)",
        **PRIORITY_RULE)
    run_at: Optional[AwareDatetime] = Field(None, description="RFC 3339 time with offset")
    delay: Optional[Union[StrictInt, StrictFloat, StrictStr]] = Field(
        None, description="Seconds, or a duration such as 30s, 5m, 1h30m (not with run_at)",
        **DELAY_RULE)
    max_attempts: Optional[WholeInt] = Field(
        None, description="1..1000 (default: the queue's max_attempts, else 5)", **ATTEMPTS_RULE)
    idempotency_key: Optional[StrictStr] = Field(
        None, description="Unique per queue; also the Idempotency-Key header", **IDEMPOTENCY_RULE)
    concurrency_key: Optional[StrictStr] = Field(
        None, description="At most the queue's key_concurrency jobs with this key run at once",
        **CONCURRENCY_KEY_RULE)
    after: Optional[list[WholeInt]] = Field(
        None, min_length=1, max_length=MAX_BATCH,
        **stated(items={"type": "integer", "minimum": 1, "maximum": VERSION_MAX}),
        description="Ids of jobs it waits for: it is 'waiting' until they all succeeded (not"
                    " with run_at, delay or concurrency_key; not in a batch)")
    on_parent_failure: Optional[Literal["cancel", "run"]] = Field(
        None, description="With after: when a job it waits for ends dead or cancelled, this"
                          " one is cancelled (default) or runs anyway")

    def spec(self) -> JobSpec:
        return JobSpec(task=self.task, payload=self.payload, queue=self.queue,
                       priority=self.priority, run_at=self.run_at, delay=self.delay,
                       max_attempts=self.max_attempts, idempotency_key=self.idempotency_key,
                       concurrency_key=self.concurrency_key)


class NewWorkflow(_Strict):
    workflow: Union[StrictStr, dict[str, Any]] = Field(description='The shape: {"chain": [...]}, {"group": [...]}, '
                                      '{"chord": [...], "then": ...}, {"graph": {name: step}, '
                                      '"after": {name: [names]}}, a step {"task", "payload", '
                                      '"queue", "priority", "max_attempts", '
                                      '"on_parent_failure", "after"} or a task name '
                                      '(docs/workflows.md)')
    queue: StrictStr = Field("default", description="Queue of the steps that name none",
                             **QUEUE_RULE)
    idempotency_key: Optional[StrictStr] = Field(
        None, description="One key for the whole workflow; also the Idempotency-Key header",
        **IDEMPOTENCY_RULE)


class NewJobs(_Strict):
    jobs: list[NewJob] = Field(min_length=1, max_length=MAX_BATCH)


class Guarded(_Strict):
    version: Optional[WholeInt] = Field(
        None, description="Change only while it (job, queue, schedule) is at this version"
                          " (else 409)",
        **VERSION_RULE)
