"""What the commands import before they do anything: start-up time is paid by every
`jobrun enqueue` from a shell script and by every master (re)start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobrun.policy import cron


def python_says(code: str) -> str:
    """What a fresh interpreter running ``code`` prints."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip()


@pytest.mark.parametrize("module,absent", [
    ("jobrun.admin.cli", ("fastapi", "uvicorn", "croniter")),
    ("jobrun.worker.cli", ("fastapi", "croniter", "psycopg")),
    ("jobrun.child.forkserver", ("fastapi", "croniter", "psycopg", "prometheus_client",
                                 "opentelemetry", "platform")),
])
def test_commands_start_without_what_they_do_not_use(module: str, absent: tuple[str, ...]) -> None:
    """`jobrun` commands other than `jobrun web` do not import the HTTP stack (about 0.5 s of
    a `jobrun enqueue` here); croniter runs a process of its own (`file` on the interpreter)
    when imported, so it waits until a cron expression is read; the master imports the driver
    only after it launched the fork server, and a fork server needs neither; it imports
    OpenTelemetry (~15 ms) only once its first children are out, and ``platform`` not at all."""
    assert python_says(f"import sys, {module}; "
                       f"print(','.join(m for m in {absent!r} if m in sys.modules))") == ""


def test_cron_still_reads_expressions_after_a_lazy_import() -> None:
    code = ("import sys; from jobrun.policy import cron; assert 'croniter' not in sys.modules; "
            "from datetime import datetime, timezone; "
            "t = cron.next_fire(cron.parse('*/5 * * * *'), 'UTC', "
            "datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc)); print(t.isoformat())")
    assert python_says(code) == "2026-01-01T00:05:00+00:00"
    assert cron.parse("@hourly").fields == "0 * * * *"


def test_the_master_launches_its_fork_server_before_heavy_imports() -> None:
    """Everything `jobrun-master` imports before it launches the fork server delays every
    child's start (the fork server imports the app meanwhile, on the other core). typer 0.29
    coerced each option through a pydantic TypeAdapter: pydantic's import and 25 adapters,
    ~0.3 s here, before the launch."""
    code = ("import sys, jobrun.worker.cli as cli\n"
            "def probe(settings, dsn):\n"
            "    print(','.join(m for m in ('pydantic', 'psycopg', 'asyncio', 'prometheus_client')"
            " if m in sys.modules), flush=True)\n"
            "    raise SystemExit(0)\n"
            "cli.launch_forkserver = probe\n"
            "sys.argv = ['jobrun-master', '-A', 'some.app', '-c', '2', '--metrics-addr', 'off',"
            " '--dsn', 'postgresql://nobody@127.0.0.1:1/none']\n"
            "cli.main()\n")
    assert python_says(code) == ""
