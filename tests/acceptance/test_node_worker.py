"""The Node.js reference worker (examples/node-worker/worker.js, plain node) against a real
`jobrun web` and PostgreSQL: jobs enqueued from Python run in Node; their results are read
back from Python."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile

import psycopg
import pytest

import jobrun
from jobrun.testing import wait_for
from tests.invariants import nothing_lost, remote_attempts
from tests.webproc import WebProcess, web_env, web_schema  # noqa: F401

pytestmark = [pytest.mark.acceptance,
              pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")]
TOKEN = "node-worker-token-0123456789ab"
WORKER = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "node-worker", "worker.js")


def test_jobs_enqueued_from_python_run_in_node(pg_dsn, web_schema, tmp_path):
    tokens, mine = tmp_path / "workers", tmp_path / "token"
    tokens.write_text(f"{TOKEN} node\n")
    mine.write_text(TOKEN + "\n")
    for path in (tokens, mine):
        path.chmod(0o600)
    with jobrun.Client(pg_dsn, schema=web_schema) as client, \
            WebProcess(web_env(pg_dsn, web_schema), "--worker-token-file", str(tokens)) as web:
        client.declare_queue("node")
        adds = [client.enqueue("node.add", [i, 2 * i, 3], queue="node").job.id for i in range(25)]
        upper = client.enqueue("node.upper", "grüße", queue="node").job.id
        rejected = client.enqueue("node.reject", None, queue="node").job.id
        log = tempfile.TemporaryFile(mode="w+")
        node = subprocess.Popen(["node", WORKER, "--url", web.base, "--token-file", str(mine),
                                 "--queue", "node", "--slots", "8", "--name", "js"],
                                stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            ids = adds + [upper, rejected]
            wait_for(lambda: all(client.get(i).status in ("succeeded", "dead") for i in ids),
                     timeout=60, interval=0.1, message="the node worker to run the jobs")
        finally:
            node.send_signal(signal.SIGTERM)
            code = node.wait(30)
            log.seek(0)
            printed = log.read()
        assert code == 0, printed
        assert TOKEN not in printed
        for i, job_id in enumerate(adds):
            [attempt] = client.attempts(job_id)
            assert attempt.result == {"sum": 3 * i + 3, "runtime": "node"}
            assert attempt.worker_host.startswith("remote:js:")
        assert client.attempts(upper)[0].result == {"text": "GRÜSSE", "attempt": 1}
        assert client.get(rejected).status == "dead"
        assert "not for this worker" in client.attempts(rejected)[0].error
        with psycopg.connect(pg_dsn) as conn:
            assert remote_attempts(conn, web_schema) == []
            assert nothing_lost(conn, web_schema) == []
