"""``jobrun workers``, ``jobrun logs`` and ``jobrun top``: the observation commands, which
:mod:`jobrun.admin.cli` adds to the ``jobrun`` app (:func:`register`). They read PostgreSQL
only, never a master, through the read model (:mod:`jobrun.observe`)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, Optional

import typer

from jobrun import observe, validate
from jobrun.admin import top
from jobrun.admin.options import AsJson, Dsn, JobId, Schema, session
from jobrun.admin.output import emit, note, table, timestamp
from jobrun.errors import InvalidInput


def workers(ctx: typer.Context, dsn: Dsn = None, schema: Schema = None,
            as_json: AsJson = False) -> None:
    """Live masters from the worker registry (rows silent for 30 s are stale and hidden)."""
    s = session(ctx, dsn, schema, as_json)
    live, stale = s.source().run(observe.workers)
    if s.as_json:
        emit([dataclasses.asdict(m) for m in live])
    else:
        table(["host", "pid", "app", "queues", "busy", "version", "uptime", "last seen"],
              [[m.host, m.pid or "remote", m.app, ",".join(m.queues), f"{m.busy}/{m.concurrency}", m.version,
                observe.duration(m.uptime), observe.duration(m.last_seen_ago) + " ago"]
               for m in live], "no live masters")
    if stale:
        note(f"{stale} stale master{'' if stale == 1 else 's'} hidden"
             f" (not seen for {observe.STALE_AFTER:g} s)")


def logs(ctx: typer.Context, job_id: JobId,
         attempt: Annotated[Optional[int], typer.Option(
             "--attempt", metavar="N", help="Only attempt number N.", show_default=False)] = None,
         dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Print what a job's handler logged, attempt by attempt."""
    validate.job_id(job_id)
    if attempt is not None:
        validate.attempt_number(attempt)
    s = session(ctx, dsn, schema, as_json)
    status, found = s.source().run(observe.attempt_logs, job_id, attempt)
    if s.as_json:
        emit(found)
        return
    for a in found:
        worker = (f"{a['worker_host']} pid {a['worker_pid']}"
                  + (f" child {a['worker_child']}" if a["worker_child"] is not None else "")
                  if a["worker_host"] else "no worker (reaped)")
        took = (f" ({observe.duration((a['finished_at'] - a['started_at']).total_seconds())})"
                if a["started_at"] else "")
        typer.echo(f"=== attempt {a['attempt']}: {a['outcome']}, {worker}, started "
                   f"{timestamp(a['started_at']) or '-'}, "
                   f"finished {timestamp(a['finished_at'])}{took}")
        if a["outcome"] != "succeeded" and a["error"]:
            typer.echo(f"error: {observe.first_line(a['error'])}")
        log_text = a["log"] or ""
        typer.echo(log_text.rstrip("\n") if log_text else "(no log captured)")
    if not found:
        note(f"job {job_id} ({status}) has no finished attempts yet")
    elif status == "leased" and attempt is None:
        note(f"job {job_id} is running now; its current attempt's log is stored when it ends")


def top_(ctx: typer.Context,
         once: Annotated[bool, typer.Option(
             "--once", help="Print one frame to stdout and exit (for pipes and dumb terminals).")
         ] = False,
         interval: Annotated[float, typer.Option(
             "--interval", metavar="SECONDS", help="Refresh period, 0.1 to 3600.")] = 1.0,
         dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Live view of queues, masters, in-flight jobs and failures. Keys: q quit, s sort, p pause.

    With --json, prints one snapshot as JSON (implies --once)."""
    s = session(ctx, dsn, schema, as_json)
    if not 0.1 <= interval <= 3600:
        raise InvalidInput(f"--interval {interval:g} is out of range (0.1 to 3600 seconds)")
    source = s.source()
    if s.as_json:
        emit(source.run(observe.snapshot).to_dict())
        return
    if once:
        top.print_once(source.run(observe.snapshot), target=s.target())
        return
    if not sys.stdout.isatty():
        raise InvalidInput("jobrun top needs a terminal on stdout; use --once to print one frame")
    top.watch(lambda: source.run(observe.snapshot), interval=interval, target=s.target(),
                  keys_fd=sys.stdin.fileno() if sys.stdin.isatty() else None)


def register(app: typer.Typer) -> None:
    """Add these commands to the ``jobrun`` app."""
    app.command("workers")(workers)
    app.command("logs")(logs)
    app.command("top")(top_)
