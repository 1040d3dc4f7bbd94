"""Other job systems' words for jobrun's fields: one table, read wherever a name is refused.

People arrive from Celery, Sidekiq, RQ, River, Oban or another seed with their words
(``max_retries``, ``countdown``, ``eta``, ``?state=``). A refusal that only says "unknown
field" leaves them to search; one that names jobrun's field does not. The HTTP API's 422 for
an unknown body field or query parameter (jobrun.web.envelope, jobrun.web.app) and the
command line's unknown option (jobrun.admin.cli) add :func:`hint`'s words. docs/coming-from.md
is the longer map, statuses and flags included; tests/unit/test_foreign.py checks that every
jobrun name this table points to is a field the API takes.

The table holds names no jobrun request field or option uses, so a hint never shadows a
real field; each note says how the meaning differs where it does (``max_retries`` counts
retries, ``max_attempts`` counts starts).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple


class Foreign(NamedTuple):
    field: str | None  # jobrun's request field (None: no per-job field; the note says where)
    note: str


_ATTEMPTS = "the starts in all, the first included: max_retries N is max_attempts N+1"

FOREIGN: dict[str, Foreign] = {
    "max_retries": Foreign("max_attempts", _ATTEMPTS),
    "retries": Foreign("max_attempts", _ATTEMPTS),
    "retry": Foreign("max_attempts", _ATTEMPTS),
    "retry_limit": Foreign("max_attempts", _ATTEMPTS),
    "max_tries": Foreign("max_attempts", "the starts in all, as max_tries counts them"),
    "countdown": Foreign("delay", "seconds from now, or a duration such as 30s, 5m, 1h30m"),
    "schedule_in": Foreign("delay", "seconds from now, or a duration such as 30s, 5m, 1h30m"),
    "eta": Foreign("run_at", "an RFC 3339 time with its offset"),
    "scheduled_at": Foreign("run_at", "an RFC 3339 time with its offset"),
    "queue_name": Foreign("queue", "a declared queue's name"),
    "task_name": Foreign("task", "the name the app registers with @app.task"),
    "kind": Foreign("task", "the name the app registers with @app.task"),
    "args": Foreign("payload", "one JSON value the handler gets as job.payload"),
    "kwargs": Foreign("payload", "one JSON value the handler gets as job.payload"),
    "unique_key": Foreign("idempotency_key", "unique per queue; a replay returns the stored job"),
    "job_key": Foreign("idempotency_key", "unique per queue; a replay returns the stored job"),
    "state": Foreign("status", "queued, leased, succeeded, dead or cancelled"),
    "timeout": Foreign(None, "time limits are per task (@app.task(time_limit=...)) or per"
                             " master (--time-limit), not per job"),
    "expires": Foreign(None, "a jobrun job does not expire: cancel it, or check a deadline"
                             " in the payload in the handler"),
}

# jobrun's fields as command-line options (jobrun enqueue / jobrun list).
OPTIONS = {"max_attempts": "--max-attempts", "delay": "--delay", "run_at": "--run-at",
           "queue": "--queue", "idempotency_key": "--key", "status": "--status",
           "task": "the TASK argument", "payload": "the PAYLOAD_JSON argument"}


def hint(name: str) -> str | None:
    """What to say after "unknown field NAME" for a well-known foreign ``name``, else None."""
    found = FOREIGN.get(name.lower())
    if found is None:
        return None
    if found.field is None:
        return found.note
    return f"use {found.field} ({found.note})"


def option_hint(args: Iterable[str]) -> str | None:
    """The refusal of the first foreign ``--option`` in a command line (``--max-retries 3``,
    ``--eta=...``) naming jobrun's, else None. Arguments after ``--`` are values, not options."""
    for arg in args:
        if arg == "--":
            return None
        if not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0]
        found = FOREIGN.get(name.replace("-", "_").lower())
        if found is not None and found.field in OPTIONS:  # (--timeout is jobrun health's own)
            return f"no option --{name}: use {OPTIONS[found.field]} ({found.note})"
    return None
