"""``jobrun queue ...``: declare, change, inspect, delete, pause and resume queues.

Same conventions as the rest of the CLI (jobrun/admin/cli.py): single objects print as JSON,
lists as tables, ``--json`` makes everything JSON, and a bad value is one
``jobrun: error: ...`` line with exit code 1 that changes nothing. Settings take ``none`` to
clear them; durations are 30s, 5m, 1h, 2d; rates 50/s, 1000/m, 10/h, 5/2s (docs/queues.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from jobrun import queue_rules
from jobrun.admin.options import AsJson, Dsn, QueueName, Schema, session
from jobrun.admin.output import emit, note, table

queue_app = typer.Typer(help="Declare, change, list, delete, pause and resume queues.",
                        no_args_is_help=True)

_SETTINGS = "Settings"
Concurrency = Annotated[Optional[str], typer.Option(
    "--concurrency", metavar="N|none", show_default=False, rich_help_panel=_SETTINGS,
    help="At most N of its jobs running across all masters.")]
Rate = Annotated[Optional[str], typer.Option(
    "--rate", metavar="N/PERIOD|none", show_default=False, rich_help_panel=_SETTINGS,
    help="At most N starts per period, e.g. 50/s, 1000/m, 5/2s.")]
Aging = Annotated[Optional[str], typer.Option(
    "--aging", metavar="DURATION|none", show_default=False, rich_help_panel=_SETTINGS,
    help="A waiting job's priority improves one step per interval, e.g. 1m.")]
PriorityDefault = Annotated[Optional[str], typer.Option(
    "--priority-default", metavar="P", show_default=False, rich_help_panel=_SETTINGS,
    help="Priority of jobs enqueued without one (-100..100).")]
MaxAttempts = Annotated[Optional[str], typer.Option(
    "--max-attempts", metavar="N|none", show_default=False, rich_help_panel=_SETTINGS,
    help="Attempt limit of jobs enqueued without one (1..1000; none: 5).")]
Retention = Annotated[Optional[str], typer.Option(
    "--retention", metavar="DURATION|none", show_default=False, rich_help_panel=_SETTINGS,
    help="Purge its finished jobs older than this (none: the purge's default).")]
KeyConcurrency = Annotated[Optional[str], typer.Option(
    "--key-concurrency", metavar="K", show_default=False, rich_help_panel=_SETTINGS,
    help="At most K running jobs per concurrency key.")]


def _settings(**given: Optional[str]) -> dict[str, Any]:
    return {name: queue_rules.from_text(name, text) for name, text in given.items()
            if text is not None}


def _secs(value: float | None) -> str:
    return "" if value is None else f"{value:g}s"


def _rate(q: dict[str, Any]) -> str:
    return "" if q["rate_limit"] is None else f"{q['rate_limit']}/{q['rate_period']:g}s"


@queue_app.command("add")
def add(ctx: typer.Context, name: QueueName, concurrency: Concurrency = None, rate: Rate = None,
        aging: Aging = None, priority_default: PriorityDefault = None,
        max_attempts: MaxAttempts = None, retention: Retention = None,
        key_concurrency: KeyConcurrency = None, dsn: Dsn = None, schema: Schema = None,
        as_json: AsJson = False) -> None:
    """Declare a queue (with settings). One that exists is left alone: fine when the settings
    given match it, else an error (change it with update)."""
    client = session(ctx, dsn, schema, as_json).client()
    queue, created = client.queue_add(name, **_settings(
        concurrency=concurrency, rate=rate, aging=aging, priority_default=priority_default,
        max_attempts=max_attempts, retention=retention, key_concurrency=key_concurrency))
    emit({**queue, "created": created})


IfVersion = Annotated[Optional[int], typer.Option(
    "--if-version", metavar="N", show_default=False,
    help="Only if the queue is still at version N (else exit 1, a conflict).")]


@queue_app.command("update")
def update(ctx: typer.Context, name: QueueName, concurrency: Concurrency = None,
           rate: Rate = None, aging: Aging = None, priority_default: PriorityDefault = None,
           max_attempts: MaxAttempts = None, retention: Retention = None,
           key_concurrency: KeyConcurrency = None,
           if_version: IfVersion = None,
           dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Change some settings of a queue; live on every master at once."""
    client = session(ctx, dsn, schema, as_json).client()
    emit(client.queue_update(name, if_version=if_version, **_settings(
        concurrency=concurrency, rate=rate, aging=aging, priority_default=priority_default,
        max_attempts=max_attempts, retention=retention, key_concurrency=key_concurrency)))


@queue_app.command("get")
def get(ctx: typer.Context, name: QueueName, dsn: Dsn = None, schema: Schema = None,
        as_json: AsJson = False) -> None:
    """One queue: its settings (intervals in seconds) and live counts, as JSON."""
    emit(session(ctx, dsn, schema, as_json).client().queue_get(name))


@queue_app.command("list")
def list_(ctx: typer.Context, dsn: Dsn = None, schema: Schema = None,
          as_json: AsJson = False) -> None:
    """Declared queues with their settings, queued/scheduled/leased counts and the live masters
    serving each ("masters"; 0 with jobs queued is marked "0 !": nothing will run them)."""
    s = session(ctx, dsn, schema, as_json)
    rows = s.client().queue_list()
    if s.as_json:
        emit(rows)
        return
    table(["name", "paused", "queued", "scheduled", "leased", "masters", "concurrency", "rate",
           "aging", "priority", "attempts", "retention", "per key", "version"],
          [[r["name"], "yes" if r["paused"] else "", r["queued"], r["scheduled"], r["leased"],
            _masters(r), r["concurrency"], _rate(r), _secs(r["aging"]), r["priority_default"],
            r["max_attempts"], _secs(r["retention"]), r["key_concurrency"], r["version"]]
           for r in rows], "no queues")
    for name in unserved(rows):
        note(f"no live master serves queue {name!r}: its jobs wait until one runs with -Q {name}")


def unserved(rows: list[dict]) -> list[str]:
    """Queues holding queued jobs (runnable or scheduled) that no live master serves."""
    return [r["name"] for r in rows if r["queued"] + r["scheduled"] and not r["served_by"]]


def _masters(row: dict) -> str:
    count = len(row["served_by"])
    return f"{count} !" if not count and row["queued"] + row["scheduled"] else str(count)


@queue_app.command("delete")
def delete(ctx: typer.Context, name: QueueName,
           force: Annotated[bool, typer.Option(
               "--force", help="Also delete its queued and leased jobs.")] = False,
           if_version: IfVersion = None,
           dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Delete a queue and its finished jobs; refused while it holds queued or leased jobs
    (unless --force) or a schedule fires into it."""
    client = session(ctx, dsn, schema, as_json).client()
    emit(client.queue_delete(name, force=force, if_version=if_version))


@queue_app.command("pause")
def pause(ctx: typer.Context, name: QueueName, if_version: IfVersion = None, dsn: Dsn = None,
          schema: Schema = None, as_json: AsJson = False) -> None:
    """Stop claiming jobs from a queue (running jobs finish)."""
    emit(session(ctx, dsn, schema, as_json).client().pause_queue(name, if_version=if_version))


@queue_app.command("resume")
def resume(ctx: typer.Context, name: QueueName, if_version: IfVersion = None, dsn: Dsn = None,
           schema: Schema = None, as_json: AsJson = False) -> None:
    """Resume claiming jobs from a paused queue."""
    emit(session(ctx, dsn, schema, as_json).client().resume_queue(name, if_version=if_version))
