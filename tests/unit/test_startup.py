"""What the commands import before they do anything: start-up time is paid by every
`jobrun enqueue` from a shell script and by every master (re)start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobrun.policy import cron

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("module,absent", [
    ("jobrun.admin.cli", ("fastapi", "uvicorn", "croniter")),
    ("jobrun.worker.cli", ("fastapi", "croniter", "psycopg")),
    ("jobrun.child.forkserver", ("fastapi", "croniter", "psycopg", "prometheus_client")),
])
def test_commands_start_without_what_they_do_not_use(module: str, absent: tuple[str, ...]) -> None:
    """`jobrun` commands other than `jobrun web` do not import the HTTP stack (about 0.5 s of
    a `jobrun enqueue` here); croniter runs a process of its own (`file` on the interpreter)
    when imported, so it waits until a cron expression is read; the master imports the driver
    only after it launched the fork server, and a fork server needs neither."""
    code = (f"import sys, {module}; "
            f"print(','.join(m for m in {absent!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == ""


def test_cron_still_reads_expressions_after_a_lazy_import() -> None:
    code = ("import sys; from jobrun.policy import cron; assert 'croniter' not in sys.modules; "
            "from datetime import datetime, timezone; "
            "t = cron.next_fire(cron.parse('*/5 * * * *'), 'UTC', "
            "datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc)); print(t.isoformat())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "2026-01-01T00:05:00+00:00"
    assert cron.parse("@hourly").fields == "0 * * * *"
