"""Job versions: every statement that changes a job row bumps it, and if_version guards
cancel, retry and delete through the Client and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import jobrun
from jobrun.errors import Refused, StaleVersion
from jobrun.policy import RetryPolicy
from jobrun.worker.claimer import claim_params
from jobrun.worker.reaper import reap_params

OWNER = "test-host:1:abc"


def version(client, job_id):
    return client.get(job_id).version


def execute(client, query, params):
    with client._connection().cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else cur.rowcount


def claim(client):
    return execute(client, client.queries.claim_jobs,
                   claim_params(["default"], 10, OWNER, 30))


def complete(client, job_id, token, status, outcome):
    return execute(client, client.queries.complete_jobs, {
        "ids": [job_id], "tokens": [token], "statuses": [status], "outcomes": [outcome],
        "delays": [0.0], "errors": [None], "tracebacks": [None], "results": [None],
        "children": [1], "crashed": [0], "logs": [None], "refunds": [0],
        "owner": OWNER, "host": "test-host", "pid": 1})


def test_every_change_of_a_job_bumps_its_version(client):
    q = client.queries
    job = client.enqueue("t.v").job
    assert job.version == 0
    [row] = claim(client)
    assert version(client, job.id) == 1
    execute(client, q.heartbeat, {"ttl": 30, "ids": [job.id], "tokens": [row["lease_token"]],
                                  "owner": OWNER})
    assert version(client, job.id) == 2
    execute(client, q.unclaim, {"ids": [job.id], "tokens": [row["lease_token"]], "owner": OWNER})
    assert version(client, job.id) == 3
    [row] = claim(client)
    complete(client, job.id, row["lease_token"], "dead", "failed")
    assert version(client, job.id) == 5
    client.retry(job.id)
    assert version(client, job.id) == 6
    [row] = claim(client)
    execute(client, "UPDATE {}.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s"
            .replace("{}", f'"{client.settings.schema}"'), [job.id])
    execute(client, q.reap_expired, reap_params(10, {}, RetryPolicy(0.0, 2.0, 1.0)))
    assert version(client, job.id) == 8  # the claim and the reaper (not the test's update)
    [row] = claim(client)
    execute(client, q.complete_transactional, {
        "id": job.id, "token": row["lease_token"], "owner": OWNER, "host": "h", "pid": 1,
        "child": 1, "result": None, "log": None})
    assert version(client, job.id) == 10
    other = client.enqueue("t.v").job
    client.cancel(other.id)
    assert version(client, other.id) == 1


def test_if_version_guards_the_client(client):
    job = client.enqueue("t.g").job
    with pytest.raises(StaleVersion) as stale:
        client.cancel(job.id, if_version=3)
    assert stale.value.current.version == 0 and stale.value.current.status == "queued"
    assert client.cancel(job.id, if_version=0).status == "cancelled"
    with pytest.raises(StaleVersion):
        client.retry(job.id, if_version=0)
    assert client.retry(job.id, if_version=1).status == "queued"
    with pytest.raises(Refused):
        client.delete(job.id)
    client.cancel(job.id)
    with pytest.raises(StaleVersion):
        client.delete(job.id, if_version=2)
    assert client.delete(job.id, if_version=3).id == job.id
    with pytest.raises(jobrun.NotFound):
        client.get(job.id)
    with pytest.raises(jobrun.InvalidInput):
        client.cancel(job.id, if_version=-1)


def test_if_version_on_the_command_line(client, db_env):
    job = client.enqueue("t.cli").job

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "jobrun", *args], env=db_env,
                              capture_output=True, text=True, timeout=120)

    stale = cli("cancel", str(job.id), "--if-version", "4")
    assert stale.returncode == 1 and "version 0, not 4" in stale.stderr
    assert "Traceback" not in stale.stderr
    done = cli("cancel", str(job.id), "--if-version", "0")
    assert done.returncode == 0 and json.loads(done.stdout)["version"] == 1
    gone = cli("delete", str(job.id), "--if-version", "1")
    assert gone.returncode == 0 and json.loads(gone.stdout)["id"] == job.id
    assert cli("retry", str(job.id)).returncode == 1
