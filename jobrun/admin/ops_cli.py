"""Operator commands of ``jobrun``: config show/check, roles, health, embedded status/stop,
events mode.

:mod:`jobrun.admin.cli` adds them to its app (:func:`register`); they share its global options
(``--dsn``, ``--schema``, ``--json``, :mod:`jobrun.admin.options`) and its error protocol
(exit 1 with one ``jobrun: error:`` line).
"""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Optional

import typer

from jobrun import config
from jobrun.admin import config_report
from jobrun.admin import roles as role_sql
from jobrun.admin.options import AsJson, Dsn, Schema, session
from jobrun.admin.output import emit, note, table
from jobrun.errors import InvalidInput, JobrunError
from jobrun.redact import redact
from jobrun.store import db, embedded

config_app = typer.Typer(help="Show the effective settings, or check a config file.",
                         no_args_is_help=True)
embedded_app = typer.Typer(help="The embedded PostgreSQL kept under state_dir.",
                           no_args_is_help=True)
events_app = typer.Typer(help="The transition log: every change of a job as an event"
                              " (jobrun get ID --events).", no_args_is_help=True)
ConfigFile = Annotated[Optional[Path], typer.Option(
    "--config", metavar="FILE", show_default=False,
    help="Config file (default: $JOBRUN_CONFIG, ./jobrun.toml, /etc/jobrun/jobrun.toml).")]


def _environ(config_file: Path | None) -> dict[str, str]:
    environ = dict(os.environ)
    if config_file is not None:
        environ["JOBRUN_CONFIG"] = str(config_file)
    return environ


@config_app.command("show")
def config_show(ctx: typer.Context, config_file: ConfigFile = None, dsn: Dsn = None,
                schema: Schema = None, as_json: AsJson = False) -> None:
    """Every setting, its effective value and its source (flag, environment, file, default);
    the database URL's password is never shown."""
    s = session(ctx, dsn, schema, as_json)
    entries, path = config_report.effective({"database_url": s.dsn, "schema": s.schema},
                                            _environ(config_file))
    if s.as_json:
        emit({"file": str(path) if path else None,
              "settings": [dataclasses.asdict(e) for e in entries]})
        return
    typer.echo(f"config file: {path or 'none'}")
    table(["setting", "value", "source"],
          [[e.name, _text(e.value), e.source] for e in entries], "no settings")


def _text(value: object) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return "" if value is None else str(value)


@config_app.command("check")
def config_check(file: Annotated[Path, typer.Argument(metavar="FILE", show_default=False)]) -> None:
    """Validate a config file: every bad or unknown key is named; exit 1 if any."""
    problems = config_report.check_file(file)
    for problem in problems:
        typer.echo(f"jobrun: error: {problem}", err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"{file}: ok")


def roles(ctx: typer.Context,
          apply: Annotated[bool, typer.Option("--apply", help="Run the SQL (needs CREATEROLE and the schema's owner).")] = False,
          print_: Annotated[bool, typer.Option("--print", help="Print the SQL (the default).")] = False,
          prefix: Annotated[str, typer.Option("--prefix", help="Role names: PREFIXproducer, PREFIXworker, PREFIXobserver.")] = "jobrun_",
          dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """SQL for least-privilege roles: producer, worker (a master), observer (read-only).

    The producer enqueues and reads jobs; the observer reads for top and dashboards."""
    s = session(ctx, dsn, schema, as_json)
    names = role_sql.RoleNames.with_prefix(prefix)
    settings = s.settings()
    if apply and print_:
        raise InvalidInput("give --print or --apply, not both")
    if not apply:
        typer.echo(role_sql.script(settings.schema, names), nl=False)
        return
    url = config.resolve_dsn(settings)
    with db.connect(url) as conn:
        try:
            role_sql.apply(conn, settings.schema, names)
        except Exception as exc:
            if isinstance(exc, JobrunError):
                raise
            raise db.translate(exc, url, settings.schema) from None
    note(f"roles {names.producer}, {names.worker}, {names.observer} granted on schema"
         f" {settings.schema} at {redact(url)}")


def health(addr: Annotated[Optional[str], typer.Option(
               "--addr", metavar="HOST:PORT", show_default=False,
               help="A master's metrics address (default: metrics_addr, 127.0.0.1:9110).")] = None,
           timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait.")] = 5.0) -> None:
    """Exit 0 when the master at ADDR is ready (/readyz answers 200), else 1; either way, say
    how its database connections fare and which queues with queued jobs no live master
    serves (/healthz)."""
    target = addr or config.load().metrics_addr
    url = f"http://{target}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read().decode(errors="replace").strip()
            typer.echo(f"{target}: {body or 'ready'}")
            _database_health(target, timeout, err=False)
            return
    except urllib.error.HTTPError as exc:
        typer.echo(f"{target}: not ready ({exc.code})", err=True)
        _database_health(target, timeout, err=True)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        typer.echo(f"{target}: unreachable ({reason})", err=True)
    raise typer.Exit(1)


def _database_health(target: str, timeout: float, err: bool) -> None:
    """Print the master's database health and the queues no live master serves from /healthz
    (503 has the same body), if it answers."""
    try:
        with urllib.request.urlopen(f"http://{target}/healthz", timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except (urllib.error.URLError, OSError, ValueError):
        return
    try:
        report = json.loads(body)
    except ValueError:
        return
    for line in (database_line(report), unserved_line(report)):
        if line:
            typer.echo(line, err=err)


def unserved_line(report: dict) -> str | None:
    """One line on the queues whose queued jobs no live master serves, as the master saw them
    at its last count (metrics.set_depth); None when there are none."""
    unserved = report.get("unserved_queues") if isinstance(report, dict) else None
    if not unserved or not isinstance(unserved, dict):
        return None
    listed = ", ".join(f"{name} ({count} queued)" for name, count in sorted(unserved.items()))
    return f"no live master serves: {listed}; their jobs wait until one runs with -Q"


def database_line(report: dict) -> str | None:
    """One line on the database from a master's /healthz report (store.connector's health):
    when it was last reached, the failures since, and the last error while it fails."""
    if not isinstance(report, dict) or "seconds_since_db" not in report:
        return None
    since = f"last reached {report['seconds_since_db']:.1f} s ago"
    if report.get("db_host"):
        since += f" on {report['db_host']}"
    failures = report.get("db_failures") or 0
    state = "ok" if report.get("database_ok", True) else "NOT reached recently"
    if not failures:
        return f"database: {state}, {since}"
    return (f"database: {state}, {since}, {failures} failure{'s' if failures != 1 else ''}"
            f" in a row, the last: {report.get('db_error') or 'unknown'}")


@events_app.command("mode")
def events_mode(ctx: typer.Context,
                mode: Annotated[Optional[str], typer.Argument(
                    metavar="[all|terminal|none]", show_default=False,
                    help="Record every transition (all, the default), only succeeded, dead"
                         " and cancelled (terminal), or none. Omitted: show the mode.")] = None,
                dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Show or set, for the whole cluster at once, which transitions of jobs are recorded."""
    s = session(ctx, dsn, schema, as_json)
    client = s.client()
    now = client.events_mode() if mode is None else client.set_events_mode(mode)
    if s.as_json:
        emit({"mode": now})
    else:
        typer.echo(f"events mode: {now}")


def _state_dir(ctx: typer.Context, state_dir: Path | None) -> Path:
    if state_dir is not None:
        return state_dir
    return config.state_path(session(ctx, None, None, False).settings())


StateDir = Annotated[Optional[Path], typer.Option(
    "--state-dir", metavar="DIR", show_default=False, help="Default: state_dir (.jobrun).")]


@embedded_app.command("status")
def embedded_status(ctx: typer.Context, state_dir: StateDir = None,
                    as_json: AsJson = False) -> None:
    """Whether the embedded PostgreSQL runs, its pid and socket, and the processes using it."""
    s = session(ctx, None, None, as_json)
    st = embedded.status(_state_dir(ctx, state_dir))
    if s.as_json:
        emit(dataclasses.asdict(st))
        return
    if not st.initialised:
        typer.echo(f"no embedded PostgreSQL in {st.pgdata}")
        return
    typer.echo(f"{st.pgdata}: " + (f"running, pid {st.pid}, socket in {st.socket_dir}"
                                    if st.running else "stopped"))
    typer.echo("used by: " + (", ".join(map(str, st.users)) or "no live process"))
    if st.stale:
        typer.echo(f"stale (exited without leaving): {', '.join(map(str, st.stale))}")


@embedded_app.command("stop")
def embedded_stop(ctx: typer.Context, state_dir: StateDir = None,
                  force: Annotated[bool, typer.Option("--force", help="Stop it even while live processes use it.")] = False) -> None:
    """Stop the embedded PostgreSQL (refused while live jobrun processes use it)."""
    st = embedded.stop(_state_dir(ctx, state_dir), force=force)
    if not st.running:
        typer.echo(f"{st.pgdata}: not running")
    else:
        typer.echo(f"{st.pgdata}: stopped (pid {st.pid})")


def bench(ctx: typer.Context,
          task: Annotated[str, typer.Option("--task", help="A task the running master's app has (a fast one measures the queue, not the handler).", show_default=False)],
          rate: Annotated[float, typer.Option("--rate", help="Jobs per second, open loop.")] = 100.0,
          duration: Annotated[float, typer.Option("--duration", help="Seconds of arrivals.")] = 10.0,
          payload: Annotated[Optional[str], typer.Option("--payload", metavar="JSON", help="Each job's payload.", show_default=False)] = None,
          queue: Annotated[str, typer.Option("--queue", "-q")] = "default",
          producers: Annotated[int, typer.Option("--producers", help="Producer threads (connections).")] = 4,
          settle: Annotated[float, typer.Option("--settle", help="Seconds to wait for the drain after the last enqueue.")] = 120.0,
          dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Open-loop load against a running master: achieved rate, lagged ticks, depth over time,
    enqueue-to-start and enqueue-to-finish p50/p95/p99 from the database's timestamps."""
    import json

    from jobrun.admin.bench import Bench

    s = session(ctx, dsn, schema, as_json)
    try:
        body = json.loads(payload) if payload is not None else None
    except ValueError as exc:
        raise InvalidInput(f"--payload is not valid JSON: {exc}") from None
    report = Bench(s.client().settings, task, body, queue, rate, duration, producers, settle).run()
    if s.as_json:
        emit(dataclasses.asdict(report))
    else:
        _print_bench(report)
    problem = report.problem(settle)
    if problem is not None:
        note(problem)
        raise typer.Exit(1)


def _print_bench(r) -> None:
    typer.echo(f"target {r.rate:g} jobs/s for {r.duration:g}s: sent {r.sent}, achieved"
               f" {r.achieved:.1f} jobs/s, lagged ticks skipped {r.lagged}")
    drained = "-" if r.drained_after is None else f"{r.drained_after:.2f}s"
    outcomes = ", ".join(f"{status} {n}" for status, n in sorted(r.outcomes.items()))
    typer.echo(f"all finished {drained} after the last enqueue; jobs by outcome: {outcomes}")
    table(["ms", "p50", "p95", "p99"],
          [[name, *(("-" if v is None else f"{v:.1f}") for v in series.values())]
           for name, series in (("enqueue to start", r.to_start_ms),
                                ("enqueue to finish", r.to_finish_ms))], "")
    if r.depth:
        typer.echo("depth each second, queued: " + " ".join(str(q) for _, q, _ in r.depth))
        typer.echo("                   leased: " + " ".join(str(x) for _, _, x in r.depth))


def register(app: typer.Typer) -> None:
    """Add these commands to the ``jobrun`` app."""
    app.add_typer(config_app, name="config")
    app.add_typer(embedded_app, name="embedded")
    app.add_typer(events_app, name="events")
    app.command("roles")(roles)
    app.command("health")(health)
    app.command("bench")(bench)
