"""Jobs in a queue that no live master serves wait for nothing: `jobrun queue list` marks the
queue, `jobrun health` names it, and the HTTP API (GET /api/v1/queues, the console's source)
lists the masters serving each queue in ``served_by``. A real master, the real `jobrun`
command line and a real `jobrun web`, on one schema."""

from __future__ import annotations

import httpx

from jobrun.testing import wait_for

from tests.cliproc import ok, ok_json, run
from tests.masterproc import metrics_url
from tests.webproc import WebProcess, web_env


def queue_rows(db_env) -> dict[str, dict]:
    return {r["name"]: r for r in ok_json(run(db_env, "queue", "list", "--json"))}


def test_a_queue_no_master_serves_is_named_everywhere(master, client, db_env, pg_dsn, schema):
    client.queue_add("emails")
    client.queue_add("idle")  # no master either, but no job waits in it
    m = master("-c", "1", "-Q", "default", "--metrics-addr", "127.0.0.1:0", ready=1)
    client.enqueue("sleep", 60, queue="emails")
    client.enqueue("sleep", 60, queue="emails", delay="1h")

    rows = wait_for(lambda: (r := queue_rows(db_env))["default"]["served_by"] and r,
                    timeout=15, message="the master's registry row")
    assert rows["default"]["served_by"][0].split(":")[1] == str(m.pid)
    assert rows["emails"]["served_by"] == [] and rows["idle"]["served_by"] == []

    listed = run(db_env, "queue", "list")
    head, _, *lines = ok(listed).splitlines()
    at = head.index(" masters") + 1  # the column's cells start under its name
    masters = {ln.split()[0]: ln[at:at + len("masters")].strip() for ln in lines if ln.strip()}
    assert masters == {"default": "1", "emails": "0 !", "idle": "0"}, ok(listed)
    assert listed.stderr.strip() == ("jobrun: no live master serves queue 'emails': its jobs"
                                     " wait until one runs with -Q emails")

    addr = metrics_url(m).removeprefix("http://")

    def health() -> str | None:  # the master's view is periodic: one taken between the two
        out = ok(run(db_env, "health", "--addr", addr))  # enqueues counts one job
        return out if "no live master serves: emails (2 queued)" in out else None
    out = wait_for(health, timeout=20, message="health to name the unserved queue, 2 queued")
    assert "idle" not in out

    with WebProcess(web_env(pg_dsn, schema)) as web:
        api = {q["name"]: q for q in httpx.get(web.base + "/api/v1/queues", timeout=30).json()}
        one = httpx.get(web.base + "/api/v1/queues/emails", timeout=30).json()
    assert api["default"]["served_by"] == rows["default"]["served_by"]
    assert api["emails"]["served_by"] == [] and one["served_by"] == []
