"""A part of the master that crashes stops the master: exit code 1 and a clear log line,
never a half-alive master (an in-process master on a real database, with real children)."""

from __future__ import annotations

import asyncio
import logging

from jobrun.config import Settings
from jobrun.worker.completer import Completer
from jobrun.worker.master import Master


def test_a_crashed_completer_stops_the_master_with_exit_code_1(pg_dsn, schema, client,
                                                               monkeypatch, caplog):
    async def broken_write(self, batch):
        raise RuntimeError("completer broken on purpose")

    monkeypatch.setattr(Completer, "_write", broken_write)  # the fault: a bug in the part
    monkeypatch.setenv("PYTHONPATH", ".")
    job_id = client.enqueue("noop").job.id
    settings = Settings(app="tests.apps.taskapp", schema=schema, concurrency=1,
                        metrics_addr="off", retention=0, poll_interval=0.1, grace=5)
    master = Master(settings, pg_dsn)
    with caplog.at_level(logging.INFO, logger="jobrun.master"):
        code = asyncio.run(asyncio.wait_for(master.run(), 60))
    assert code == 1
    names = [r.getMessage() for r in caplog.records]
    assert "service.crashed" in names and "master.service_failed" in names
    [failed] = [r for r in caplog.records if r.getMessage() == "master.service_failed"]
    assert failed.jobrun_fields["service"] == "completer"
    assert names[-1] == "master.stopped"
    assert not master.supervisor.alive()  # no child left behind
    assert client.get(job_id).status == "leased"  # unrecorded: its lease expires, is reaped
