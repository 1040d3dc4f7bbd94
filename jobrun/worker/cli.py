"""``jobrun-master``: run the prefork master.

    jobrun-master -A myapp.tasks -c 16 -Q default,emails

Options may also come from the config file and JOBRUN_* environment variables; flags win.
Exit codes: 0 after a clean stop, 1 on a fatal error, 2 on bad usage, 3 when the app cannot
be imported (so a supervisor such as systemd does not restart it in a loop).
"""

from __future__ import annotations

import sys

from setproctitle import setproctitle

from jobrun.redact import title_without_secrets, undecodable_argument


def hide_secrets_in_title() -> None:
    """Retitle the process at once: its command line (``ps``) may hold --dsn with a password,
    and start-up (imports, migrations) takes a while before the master sets its own title."""
    setproctitle(title_without_secrets(["jobrun-master", *sys.argv[1:]]))


if __name__ == "__main__" or sys.argv[0].endswith("jobrun-master"):
    hide_secrets_in_title()

import logging  # noqa: E402 - after the title is safe
import os  # noqa: E402
from typing import Optional  # noqa: E402

import typer  # noqa: E402

from jobrun import config
from jobrun import logs
from jobrun import tracing
from jobrun.errors import JobrunError
from jobrun.logs import event

# The database driver, the metrics and the master itself are imported only once the fork
# server is launched (``launch_forkserver``): it imports the app meanwhile, on another core.

cli = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0] if __doc__ else None)


@cli.command(context_settings={"help_option_names": ["-h", "--help"]})
def run(
    app: Optional[str] = typer.Option(None, "-A", "--app", help="MODULE[:ATTR] holding a jobrun.App (attr default: app)"),
    concurrency: Optional[int] = typer.Option(None, "-c", "--concurrency", help="children (default: CPUs)"),
    queues: Optional[str] = typer.Option(None, "-Q", "--queues", help="comma-separated queues, each NAME or NAME=N (at most N of this master's jobs of it at once); default: default"),
    queue_order: Optional[str] = typer.Option(None, "--queue-order", help="global (one priority order over all queues; default), priority (earlier -Q queues first) or round_robin (queues take turns)"),
    dsn: Optional[str] = typer.Option(None, "--dsn", help="PostgreSQL URL (default: config, env, else embedded)"),
    schema: Optional[str] = typer.Option(None, "--schema"),
    poll_interval: Optional[str] = typer.Option(None, "--poll-interval", help="claim poll floor, e.g. 0.2 or 500ms"),
    prefetch: Optional[int] = typer.Option(None, "--prefetch", help="jobs a child may hold at once when its tasks are short (default 256; 1 = one at a time)"),
    prefetch_max_runtime: Optional[str] = typer.Option(None, "--prefetch-max-runtime", help="hand jobs ahead only while the work waiting in a child stays under this (default 100ms)"),
    max_tasks_per_child: Optional[int] = typer.Option(None, "--max-tasks-per-child"),
    slots: Optional[int] = typer.Option(None, "--slots", help="jobs one child runs at once, of tasks that share a child (async handlers, @app.task(slots=True)); default 1"),
    spawn: Optional[str] = typer.Option(None, "--spawn", help="fork (default: a fork server imports the app once and forks children) or exec (each child imports it); docs/spawning.md"),
    max_memory_per_child: Optional[int] = typer.Option(None, "--max-memory-per-child", help="MiB of RSS"),
    time_limit: Optional[str] = typer.Option(None, "--time-limit", help="hard limit per job (child killed)"),
    soft_time_limit: Optional[str] = typer.Option(None, "--soft-time-limit", help="raises SoftTimeLimit in the handler"),
    grace: Optional[str] = typer.Option(None, "--grace", help="drain time on SIGTERM (default 30s)"),
    lease_ttl: Optional[str] = typer.Option(None, "--lease-ttl", help="lease length, at most 1d; renewed every ttl/3 (default 30s)"),
    retention: Optional[str] = typer.Option(None, "--retention", help="purge finished jobs older than this (default 7d; 0 = never)"),
    metrics_addr: Optional[str] = typer.Option(None, "--metrics-addr", help="HOST:PORT for /metrics, /healthz, /readyz (default 127.0.0.1:9110; off to disable)"),
    metrics_allow_remote: bool = typer.Option(False, "--metrics-allow-remote", help="allow a non-loopback --metrics-addr"),
    log_format: Optional[str] = typer.Option(None, "--log-format", help="text or json"),
    log_level: Optional[str] = typer.Option(None, "--log-level"),
    no_migrate: bool = typer.Option(False, "--no-migrate", help="do not apply missing migrations at start"),
    config_file: Optional[str] = typer.Option(None, "--config", help="config file (default: $JOBRUN_CONFIG, ./jobrun.toml, /etc/jobrun/jobrun.toml)"),
) -> None:
    if config_file is not None:  # read at start and again on every HUP
        os.environ["JOBRUN_CONFIG"] = config_file
    overrides = dict(app=app, concurrency=concurrency, queues=queues, queue_order=queue_order,
                     database_url=dsn, schema=schema,
                     poll_interval=poll_interval, prefetch=prefetch,
                     prefetch_max_runtime=prefetch_max_runtime, max_tasks_per_child=max_tasks_per_child, slots=slots, spawn=spawn,
                     max_memory_per_child=max_memory_per_child, time_limit=time_limit,
                     soft_time_limit=soft_time_limit, grace=grace, lease_ttl=lease_ttl,
                     retention=retention, metrics_addr=metrics_addr,
                     metrics_allow_remote=metrics_allow_remote or None, log_format=log_format,
                     log_level=log_level)
    try:
        settings = config.load(overrides)  # every value checked by its line of the table
    except JobrunError as exc:
        typer.echo(f"jobrun-master: error: {exc}", err=True)
        raise typer.Exit(2)
    if settings.pooled:
        typer.echo("jobrun-master: error: pooled = true (JOBRUN_POOLED): the master needs a direct"
                   " connection to PostgreSQL (LISTEN, session advisory locks, prepared statements);"
                   " give it the server's own address, not PgBouncer's (see docs/operations.md)", err=True)
        raise typer.Exit(2)
    if not settings.app:
        typer.echo("jobrun-master: error: name the app with -A MODULE[:ATTR] (or app = in the config file)", err=True)
        raise typer.Exit(2)
    logs.setup(settings.log_format, settings.log_level)
    log = logging.getLogger("jobrun.master")
    try:
        tracing.configure("jobrun-master")  # OTEL_ENABLED=true: spans and metrics over OTLP
    except JobrunError as exc:
        typer.echo(f"jobrun-master: error: {exc}", err=True)
        raise typer.Exit(2)
    try:
        dsn_value = config.resolve_dsn(settings)
    except JobrunError as exc:
        event(log, logging.CRITICAL, "master.start_failed", error=str(exc))
        raise typer.Exit(1)
    launched = launch_forkserver(settings, dsn_value)
    try:
        code = _run_master(settings, dsn_value, overrides, no_migrate, launched, log)
    finally:
        if launched is not None and launched.popen.returncode is None and not launched.attached:
            launched.abandon()  # the master did not get as far as starting it
    raise typer.Exit(code)


def launch_forkserver(settings: config.Settings, dsn: str):
    """With --spawn fork, launch the fork server now, before this process imports its heavy
    parts, runs migrations or opens any connection or thread: the app's import there overlaps
    all of that (docs/spawning.md). None with --spawn exec or where forking is unsupported (the
    master then says why)."""
    if settings.spawn != "fork":
        return None
    from jobrun.child.clone import unsupported
    from jobrun.worker.forkserver import ForkServer, child_env, child_limits

    if unsupported() is not None:
        return None
    # It forks the first -c children by itself once the app is imported, while this process
    # is still importing and connecting; the master adopts them (started as the ones its
    # supervisor spawns later: child_limits).
    return ForkServer(settings.app or "", child_env(dsn, settings.schema), 0).launch(
        initial=settings.concurrency, request=child_limits(settings))


def _run_master(settings: config.Settings, dsn_value: str, overrides: dict, no_migrate: bool,
                launched, log: logging.Logger) -> int:
    from jobrun.store import db, migrate
    from jobrun.worker.metrics import check_free, parse_addr

    try:
        addr = parse_addr(settings.metrics_addr, settings.metrics_allow_remote)
    except JobrunError as exc:
        typer.echo(f"jobrun-master: error: {exc}", err=True)
        return 2
    try:
        if addr is not None:
            check_free(*addr)
        with db.connect(dsn_value) as conn:
            if not no_migrate:
                applied = migrate.migrate(conn, settings.schema)
                if applied:
                    event(log, logging.INFO, "schema.migrated", schema=settings.schema,
                          versions=applied)
            undeclared = _undeclared_queues(conn, settings)
    except JobrunError as exc:
        event(log, logging.CRITICAL, "master.start_failed", error=str(exc))
        return 1
    if undeclared is not None:
        typer.echo(f"jobrun-master: error: {undeclared}", err=True)
        return 2

    from jobrun.worker.master import Master

    def reload() -> config.Settings:
        return config.load(overrides)

    master = Master(settings, dsn_value, reload_settings=reload, launched=launched)
    try:
        import uvloop

        return uvloop.run(master.run())
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep a fallback anyway
        import asyncio

        return asyncio.run(master.run())


def _undeclared_queues(conn, settings: config.Settings) -> str | None:
    """Why -Q names a queue that is not declared (queues are a closed set: docs/queues.md), or
    None. A master serving one would wait for jobs no producer can enqueue, and say nothing."""
    import psycopg

    from jobrun.sql import for_schema
    from jobrun.store import db

    try:
        declared = [r["name"] for r in conn.execute(for_schema(settings.schema).queue_names)]
    except psycopg.Error as exc:  # no schema yet (--no-migrate): say what to run
        raise db.translate(exc, schema=settings.schema) from None
    missing = [name for name in settings.queues if name not in declared]
    if not missing:
        return None
    names = ", ".join(missing)
    return (f"queue{'s' if len(missing) > 1 else ''} {names} not declared (declared:"
            f" {', '.join(declared) or 'none'}); declare with: jobrun queue add NAME")


def main() -> None:
    hide_secrets_in_title()
    bad = undecodable_argument(sys.argv[1:])
    if bad is not None:  # bad usage, refused before anything starts
        typer.echo(f"jobrun-master: error: {bad}", err=True)
        raise SystemExit(2)
    cli(prog_name="jobrun-master")


if __name__ == "__main__":
    main()
