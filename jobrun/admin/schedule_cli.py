"""``jobrun schedule ...``: create, inspect, change and dry-run recurring schedules.

Same conventions as the rest of the CLI (jobrun/admin/cli.py): single objects print as JSON,
lists as tables, ``--json`` makes everything JSON, and a bad value is one
``jobrun: error: ...`` line with exit code 1.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Annotated, Optional

import typer

from jobrun.admin.options import AsJson, Dsn, Schema, session
from jobrun.admin.output import emit, table, timestamp
from jobrun.errors import InvalidInput
from jobrun.policy import cron
from jobrun.schedules import parse_time

schedule_app = typer.Typer(help="Recurring schedules (cron): create, list, pause, dry-run.",
                           no_args_is_help=True)

Name = Annotated[str, typer.Argument(metavar="NAME", help="Schedule name.", show_default=False)]
Cron = Annotated[Optional[str], typer.Option(
    "--cron", metavar="EXPR", show_default=False,
    help="5 fields (min hour day month weekday), 6 with seconds first, or @hourly/@daily/...")]
Task = Annotated[Optional[str], typer.Option("--task", show_default=False, help="Task name.")]
Payload = Annotated[Optional[str], typer.Option(
    "--payload", metavar="JSON", show_default=False, help="JSON payload of every job.")]
Queue = Annotated[Optional[str], typer.Option("--queue", "-q", show_default=False,
                                              help="Declared queue (default: default).")]
Priority = Annotated[Optional[int], typer.Option(show_default=False, help="-100..100.")]
Tz = Annotated[Optional[str], typer.Option("--tz", metavar="AREA/CITY", show_default=False,
                                           help="IANA time zone (default: UTC).")]
StartsAt = Annotated[Optional[str], typer.Option("--starts-at", metavar="ISO", show_default=False,
                                                 help="No fire before this time.")]
EndsAt = Annotated[Optional[str], typer.Option("--ends-at", metavar="ISO", show_default=False,
                                               help="No fire after this time (then: expired).")]
CatchUp = Annotated[Optional[str], typer.Option(
    "--catch-up", show_default=False,
    help="After downtime: latest (one job, default), all (every missed slot, capped), none.")]
MaxAttempts = Annotated[Optional[int], typer.Option("--max-attempts", show_default=False,
                                                    help="Starts allowed per job, 1..1000.")]
IfVersion = Annotated[Optional[int], typer.Option(
    "--if-version", metavar="N", show_default=False,
    help="Only if the schedule is still at version N (else exit 1, a conflict).")]


def _rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


@schedule_app.command("create")
def create(ctx: typer.Context, name: Name, cron_expr: Cron = None, task: Task = None,
           payload: Payload = None, queue: Queue = None, priority: Priority = None,
           tz: Tz = None, starts_at: StartsAt = None, ends_at: EndsAt = None,
           catch_up: CatchUp = None, max_attempts: MaxAttempts = None,
           dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Create a schedule; prints it as JSON (with its next fire)."""
    if cron_expr is None or task is None:
        raise InvalidInput("schedule create needs --cron EXPR and --task TASK")
    s = session(ctx, dsn, schema, as_json)
    record = s.client().schedules.create(
        name, cron_expr, task, payload, queue=queue or "default", priority=priority or 0,
        tz="UTC" if tz is None else tz, starts_at=starts_at, ends_at=ends_at,
        catch_up=catch_up or "latest",
        max_attempts=max_attempts, payload_is_json=payload is not None)
    emit(record.to_dict())


@schedule_app.command("update")
def update(ctx: typer.Context, name: Name, cron_expr: Cron = None, task: Task = None,
           payload: Payload = None, queue: Queue = None, priority: Priority = None,
           tz: Tz = None, starts_at: StartsAt = None, ends_at: EndsAt = None,
           catch_up: CatchUp = None, max_attempts: MaxAttempts = None,
           if_version: IfVersion = None,
           dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Change the given fields of a schedule; prints it as JSON."""
    s = session(ctx, dsn, schema, as_json)
    record = s.client().schedules.update(
        name, cron=cron_expr, task=task, payload=payload, queue=queue, priority=priority,
        tz=tz, starts_at=starts_at, ends_at=ends_at, catch_up=catch_up,
        max_attempts=max_attempts, payload_is_json=payload is not None, if_version=if_version)
    emit(record.to_dict())


@schedule_app.command("list")
def list_(ctx: typer.Context, dsn: Dsn = None, schema: Schema = None,
          as_json: AsJson = False) -> None:
    """List schedules with their status and last/next fire."""
    s = session(ctx, dsn, schema, as_json)
    records = s.client().schedules.list()
    if s.as_json:
        emit([r.to_dict() for r in records])
        return
    table(["name", "cron", "tz", "task", "queue", "status", "catch-up", "last fire", "next fire",
           "code"],
          [[r.name, r.cron, r.timezone, r.task, r.queue, r.status, r.catch_up,
            timestamp(r.last_fire_at), timestamp(r.next_fire_at), "yes" if r.declared else ""]
           for r in records], "no schedules")


@schedule_app.command("get")
def get(ctx: typer.Context, name: Name,
        runs: Annotated[int, typer.Option(help="Recent runs shown (0..1000).")] = 10,
        dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Show a schedule as JSON, with its recent runs (job, status, outcome)."""
    if not 0 <= runs <= 1000:
        raise InvalidInput("--runs must be from 0 to 1000")
    client = session(ctx, dsn, schema, as_json).client()
    out = client.schedules.get(name).to_dict()
    out["runs"] = client.schedules.runs(name, limit=runs) if runs else []
    emit(out)


@schedule_app.command("pause")
def pause(ctx: typer.Context, name: Name, if_version: IfVersion = None, dsn: Dsn = None,
          schema: Schema = None, as_json: AsJson = False) -> None:
    """Pause a schedule: its slots are skipped until it is resumed."""
    client = session(ctx, dsn, schema, as_json).client()
    emit(client.schedules.pause(name, if_version=if_version).to_dict())


@schedule_app.command("resume")
def resume(ctx: typer.Context, name: Name, if_version: IfVersion = None, dsn: Dsn = None,
           schema: Schema = None, as_json: AsJson = False) -> None:
    """Resume a schedule from its next slot after now (no burst of missed slots)."""
    client = session(ctx, dsn, schema, as_json).client()
    emit(client.schedules.resume(name, if_version=if_version).to_dict())


@schedule_app.command("delete")
def delete(ctx: typer.Context, name: Name,
           force: Annotated[bool, typer.Option(
               "--force", help="Also delete a schedule declared in code.")] = False,
           if_version: IfVersion = None,
           dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Delete a schedule (its jobs stay); refuses one declared in code unless --force."""
    client = session(ctx, dsn, schema, as_json).client()
    emit({**client.schedules.delete(name, force=force, if_version=if_version).to_dict(),
          "deleted": True})


@schedule_app.command("next")
def next_(ctx: typer.Context,
          expr: Annotated[str, typer.Argument(metavar="EXPR", show_default=False,
                                              help="Cron expression.")],
          tz: Tz = None,
          after: Annotated[Optional[str], typer.Option(
              "--after", metavar="ISO", show_default=False, help="Start after (default: now).")] = None,
          count: Annotated[int, typer.Option(help="How many fire times (1..1000).")] = 5,
          as_json: AsJson = False) -> None:
    """Dry run: print the next fire times of an expression (no database needed)."""
    s = session(ctx, None, None, as_json)
    if not 1 <= count <= 1000:
        raise InvalidInput("--count must be from 1 to 1000")
    zone = cron.zone("UTC" if tz is None else tz)
    parsed = cron.parse(expr)
    t = parse_time(after, "--after") or datetime.now(timezone.utc)
    times = []
    for _ in range(count):
        nxt = cron.next_fire(parsed, zone, t)
        if nxt is None:
            break
        times.append(nxt)
        t = nxt
    if not times:
        raise InvalidInput(f"{expr!r} has no fire time left in range after"
                           f" {after or t.isoformat()} ({cron.RANGE})")
    if s.as_json:
        emit([_rfc3339(x) for x in times])
        return
    for x in times:
        sys.stdout.write(f"{_rfc3339(x)}  {x.astimezone(zone).isoformat()}\n")
