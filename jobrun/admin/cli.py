"""The ``jobrun`` command line: producer and admin commands over the sync :class:`Client`.

Output: single objects print as JSON, lists as tables; ``--json`` makes everything JSON.
Exit codes are a protocol: 0 success, 1 a jobrun error (bad value, not found, conflict,
refused, database unreachable), printed as one ``jobrun: error: ...`` line on stderr with no
traceback, 2 a malformed command line (typer's own usage errors).

The global options ``--dsn``, ``--schema`` and ``--json`` go before the command
(``jobrun --json stats``) or after it (``jobrun stats --json``); a value given after the
command wins. With no database URL anywhere, jobrun uses the embedded PostgreSQL under the
state directory and migrates it on first use, so ``jobrun enqueue`` works with no setup. An
explicit URL is never migrated implicitly: that is ``jobrun migrate``'s job.

This module builds the app: its own commands, then those of the sub-command modules, which
share the global options through :mod:`jobrun.admin.options` and print through
:mod:`jobrun.admin.output` (they never import this module).
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import socket
import sys
from datetime import datetime
from typing import Annotated, Optional

import psycopg
import typer
from setproctitle import setproctitle

from jobrun import __version__, config, foreign
from jobrun import ops
from jobrun.admin import observe_cli, ops_cli
from jobrun.admin.options import AsJson, Dsn, JobId, Schema, apply_migrations, session
from jobrun.admin.output import emit, note, table, timestamp
from jobrun.admin.queue_cli import queue_app
from jobrun.admin.schedule_cli import schedule_app
from jobrun.admin.workflow_cli import workflow_app
from jobrun.errors import InvalidInput, JobrunError
from jobrun.redact import redact, title_without_secrets, undecodable_argument
from jobrun.store import db
from jobrun.store import migrate as migrations
from jobrun.web import cli as web_cli
from jobrun.remote import cli as remote_cli

app = typer.Typer(name="jobrun", help="A durable job queue on PostgreSQL.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _parse_run_at(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--run-at {text!r} is not an ISO 8601 datetime"
                           " (e.g. 2030-01-31T09:00:00+00:00)") from None
    if when.tzinfo is None:
        raise InvalidInput(f"--run-at {text!r} has no UTC offset and would be ambiguous;"
                           " add one, e.g. Z or +02:00")
    return when


# --- commands -----------------------------------------------------------------------------

def _version(value: bool) -> None:
    if value:
        typer.echo(f"jobrun {__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context, dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False,
          ) -> None:
    """A durable job queue on PostgreSQL."""
    session(ctx, dsn, schema, as_json)


@app.command()
def migrate(ctx: typer.Context, dsn: Dsn = None, schema: Schema = None,
            as_json: AsJson = False) -> None:
    """Create or upgrade jobrun's schema (safe to run concurrently and repeatedly)."""
    s = session(ctx, dsn, schema, as_json)
    settings = s.settings()
    url = config.resolve_dsn(settings)
    applied = apply_migrations(url, settings.schema)
    latest = len(migrations.migrations())
    if s.as_json:
        emit({"schema": settings.schema, "target": redact(url), "applied": applied,
              "version": latest})
        return
    where = f"schema {settings.schema!r} at {redact(url)}"
    names = {m.version: m.name for m in migrations.migrations()}
    for version in applied:
        typer.echo(f"applied {version:04d}_{names[version]}")
    typer.echo(f"{where} is at version {latest}" + ("" if applied else " (already current)"))


@app.command()
def enqueue(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(metavar="TASK", help="Task name, e.g. email.send.",
                                       show_default=False)],
    payload: Annotated[Optional[str], typer.Argument(
        metavar="PAYLOAD_JSON", show_default=False,
        help="JSON payload; '-' reads it from stdin. Default: null.")] = None,
    queue: Annotated[str, typer.Option("--queue", "-q", help="Declared queue.")] = "default",
    priority: Annotated[Optional[int], typer.Option(
        help="-100..100, lower runs first. Default: the queue's priority_default.",
        show_default=False)] = None,
    delay: Annotated[Optional[str], typer.Option(
        help="Run after a duration: 30s, 5m, 1h30m.", show_default=False)] = None,
    run_at: Annotated[Optional[str], typer.Option(
        "--run-at", help="Run at an ISO 8601 time with offset.", show_default=False)] = None,
    max_attempts: Annotated[Optional[int], typer.Option(
        "--max-attempts", help="Starts allowed, 1..1000. Default: the queue's max_attempts, else 5.",
        show_default=False)] = None,
    key: Annotated[Optional[str], typer.Option(
        "--key", help="Idempotency key, unique per queue.", show_default=False)] = None,
    concurrency_key: Annotated[Optional[str], typer.Option(
        "--concurrency-key", help="Run at most the queue's key_concurrency jobs with this key at once.",
        show_default=False)] = None,
    after: Annotated[Optional[list[int]], typer.Option(
        "--after", metavar="JOB_ID", show_default=False,
        help="Wait for this job to succeed first (repeat for several).")] = None,
    on_parent_failure: Annotated[str, typer.Option(
        "--on-parent-failure", metavar="cancel|run",
        help="When a job it waits for ends dead or cancelled.")] = "cancel",
    dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False,
) -> None:
    """Enqueue a job; prints it as JSON with "created" (false for an idempotent replay)."""
    s = session(ctx, dsn, schema, as_json)
    if payload == "-":
        payload = sys.stdin.read()
    when = _parse_run_at(run_at) if run_at is not None else None
    if when is not None and delay is not None:
        raise InvalidInput("give --delay or --run-at, not both")
    result = s.client().enqueue(task, payload, queue=queue, priority=priority, run_at=when,
                                delay=delay, max_attempts=max_attempts, idempotency_key=key,
                                payload_is_json=payload is not None,
                                concurrency_key=concurrency_key, after=after or None,
                                on_parent_failure=on_parent_failure)
    emit({**result.job.to_dict(), "created": result.created})


@app.command()
def get(ctx: typer.Context, job_id: JobId,
        attempts: Annotated[bool, typer.Option(
            "--attempts", help="Include the recorded attempts (as \"history\").")] = False,
        events: Annotated[bool, typer.Option(
            "--events", help="Its transitions, oldest first: a table (with --json, the job"
                             " with them as \"events\").")] = False,
        dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Show one job as JSON."""
    s = session(ctx, dsn, schema, as_json)
    client = s.client()
    out = client.get(job_id).to_dict()
    if attempts:  # each with its captured "log"
        out["history"] = [a.to_dict() for a in client.attempts(job_id)]
    if not events:
        emit(out)
        return
    found = client.events(job_id)
    if s.as_json or attempts:
        emit({**out, "events": [e.to_dict() for e in found]})
        return
    table(["seq", "at", "event", "status", "attempt", "owner", "actor", "outcome", "detail"],
          [[e.seq, e.at.isoformat(timespec="milliseconds"), e.event, e.status, e.attempt,
            e.owner, e.actor, e.outcome, _detail(e.detail)] for e in found],
          f"no events recorded for job {job_id} (jobrun events mode)")


def _detail(detail: dict | None) -> str:
    if not detail:
        return ""
    return " ".join(f"{k}={v}" for k, v in detail.items())


@app.command("list")
def list_(
    ctx: typer.Context,
    status: Annotated[Optional[str], typer.Option(
        help=f"One of {', '.join(ops.STATUSES)}.", show_default=False)] = None,
    queue: Annotated[Optional[str], typer.Option("--queue", "-q", show_default=False)] = None,
    task: Annotated[Optional[str], typer.Option(show_default=False)] = None,
    limit: Annotated[int, typer.Option(help="At most this many jobs (1..10000).")] = 50,
    before: Annotated[Optional[int], typer.Option(
        metavar="ID", help="Only jobs with a smaller id (the next page).",
        show_default=False)] = None,
    schedule: Annotated[Optional[str], typer.Option(
        metavar="NAME", help="Only jobs made by this schedule.", show_default=False)] = None,
    dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False,
) -> None:
    """List jobs, newest first."""
    s = session(ctx, dsn, schema, as_json)
    if schedule is not None and (queue or task):
        raise InvalidInput("--schedule cannot be combined with --queue or --task")
    jobs = (s.client().schedules.jobs(schedule, status=status, limit=limit, before=before)
            if schedule is not None else
            s.client().list(status=status, queue=queue, task=task, limit=limit, before=before))
    if s.as_json:
        emit([j.to_dict() for j in jobs])
        return
    table(["id", "queue", "task", "status", "attempts", "priority", "run_at", "created_at"],
          [[j.id, j.queue, j.task, j.status, f"{j.attempts}/{j.max_attempts}", j.priority,
            timestamp(j.run_at), timestamp(j.created_at)] for j in jobs], "no jobs")
    if len(jobs) == limit:
        note(f"more may follow: add --before {jobs[-1].id}")


def _actor() -> str:
    """Who a change made here is by, in the job's event: the user at this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"cli:{user}@{socket.gethostname()}"[:200]


IfVersion = Annotated[Optional[int], typer.Option(
    "--if-version", metavar="N", show_default=False,
    help="Only if the job is still at version N (else exit 1, a conflict).")]


@app.command()
def cancel(ctx: typer.Context, job_id: JobId, if_version: IfVersion = None, dsn: Dsn = None,
           schema: Schema = None, as_json: AsJson = False) -> None:
    """Cancel a queued job now, or ask a running one to stop."""
    client = session(ctx, dsn, schema, as_json).client()
    emit(client.cancel(job_id, if_version=if_version, actor=_actor()).to_dict())


@app.command()
def retry(ctx: typer.Context, job_id: JobId, if_version: IfVersion = None, dsn: Dsn = None,
          schema: Schema = None, as_json: AsJson = False) -> None:
    """Put a dead or cancelled job back in its queue, with its attempts reset."""
    client = session(ctx, dsn, schema, as_json).client()
    emit(client.retry(job_id, if_version=if_version, actor=_actor()).to_dict())


@app.command()
def delete(ctx: typer.Context, job_id: JobId, if_version: IfVersion = None, dsn: Dsn = None,
           schema: Schema = None, as_json: AsJson = False) -> None:
    """Delete a finished job (succeeded, dead or cancelled) with its attempts."""
    client = session(ctx, dsn, schema, as_json).client()
    emit(client.delete(job_id, if_version=if_version).to_dict())


@app.command()
def purge(
    ctx: typer.Context,
    older_than: Annotated[Optional[str], typer.Option(
        "--older-than", show_default=False,
        help="Finished longer ago than this, e.g. 7d, in queues without a retention of their"
             " own (those keep theirs). Without it: only queues with a retention.")] = None,
    status: Annotated[Optional[list[str]], typer.Option(
        "--status", help="Repeatable; default: succeeded, dead and cancelled.",
        show_default=False)] = None,
    dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False,
) -> None:
    """Delete finished jobs (with their attempts) older than their queue's retention or a
    duration."""
    s = session(ctx, dsn, schema, as_json)
    deleted = s.client().purge(older_than, statuses=tuple(status) if status else ops.TERMINAL)
    if s.as_json:
        emit({"deleted": deleted})
    else:
        typer.echo(f"deleted {deleted} job{'' if deleted == 1 else 's'}")


@app.command()
def stats(ctx: typer.Context, dsn: Dsn = None, schema: Schema = None,
          as_json: AsJson = False) -> None:
    """Job counts per queue, and the age of the oldest runnable job."""
    s = session(ctx, dsn, schema, as_json)
    rows = s.client().stats()
    if s.as_json:
        emit([dataclasses.asdict(r) for r in rows])
        return
    table(["queue", "paused", "waiting", "queued", "scheduled", "leased", "succeeded", "dead",
           "cancelled", "oldest queued"],
          [[r.queue, "yes" if r.paused else "", r.waiting, r.queued, r.scheduled, r.leased,
            r.succeeded,
            r.dead, r.cancelled, _age(r.oldest_queued_age)] for r in rows], "no queues")


app.command("web")(web_cli.web)
app.command("worker")(remote_cli.worker)
app.add_typer(schedule_app, name="schedule")
app.add_typer(queue_app, name="queue")
app.add_typer(workflow_app, name="workflow")
ops_cli.register(app)      # config, embedded, events, roles, health, bench
observe_cli.register(app)  # workers, logs, top


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "unknown error"


def main() -> None:
    # `jobrun top --dsn URL` runs for long: keep a password out of `ps` from the start.
    setproctitle(title_without_secrets(["jobrun", *sys.argv[1:]]))
    # A byte that is not UTF-8 could only fail later, deep in a command (encoding a name, a
    # payload, a URL): refuse it at once, as any bad value, before anything is done.
    bad = undecodable_argument(sys.argv[1:])
    if bad is not None:
        typer.echo(f"jobrun: error: {bad}", err=True)
        sys.exit(1)
    said = foreign.option_hint(sys.argv[1:])  # --max-retries: name jobrun's option
    if said is not None:
        typer.echo(f"jobrun: error: {said}", err=True)
        sys.exit(2)
    try:
        app(prog_name="jobrun")
    except JobrunError as exc:
        typer.echo(f"jobrun: error: {_one_line(str(exc))}", err=True)
        sys.exit(1)
    except psycopg.Error as exc:  # a database error no operation translated itself
        typer.echo(f"jobrun: error: {_one_line(str(db.translate(exc)))}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
