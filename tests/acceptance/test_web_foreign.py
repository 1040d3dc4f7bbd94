"""Another job system's name for one of jobrun's fields is refused with jobrun's name in the
answer: a 422 of `jobrun web` (body fields, query parameters) and `jobrun` on the command line."""

from __future__ import annotations

import subprocess
import sys

from tests.masterproc import ROOT
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)


def test_a_foreign_body_field_names_jobrun_s(api):
    r = api.post("/jobs", json={"task": "t", "max_retries": 3, "countdown": 10})
    assert r.status_code == 422
    body = r.json()
    assert body["code"] == "validation_failed"
    assert body["fields"]["max_retries"].startswith("unknown field; use max_attempts (")
    assert "max_retries N is max_attempts N+1" in body["fields"]["max_retries"]
    assert body["fields"]["countdown"].startswith("unknown field; use delay (")
    assert "use max_attempts" in body["message"] or "use delay" in body["message"]
    batch = api.post("/jobs/batch", json={"jobs": [{"task": "t", "eta": "2030-01-01T00:00:00Z"}]})
    assert batch.status_code == 422
    assert batch.json()["fields"]["jobs.0.eta"].startswith("unknown field; use run_at (")
    # A name no other system uses keeps the plain answer.
    plain = api.post("/jobs", json={"task": "t", "colour": "red"}).json()
    assert plain["fields"]["colour"] == "Extra inputs are not permitted"


def test_a_foreign_query_parameter_names_jobrun_s(api):
    r = api.get("/jobs", params={"state": "queued"})
    assert r.status_code == 422
    body = r.json()
    assert body["message"].startswith("unknown query parameter 'state'; use status (")
    assert body["fields"]["state"].startswith("unknown query parameter; use status (")
    assert api.get("/jobs", params={"colour": "red"}).json()["fields"] == {
        "colour": "unknown query parameter"}


def test_a_foreign_option_names_jobrun_s():
    def jobrun(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jobrun", *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=60)
    done = jobrun("enqueue", "t", "--max-retries", "3")
    assert done.returncode == 2
    assert done.stderr.startswith("jobrun: error: no option --max-retries: use --max-attempts (")
    done = jobrun("list", "--state=queued")
    assert done.returncode == 2 and "use --status" in done.stderr
    done = jobrun("enqueue", "t", "--countdown", "5")
    assert done.returncode == 2 and "use --delay" in done.stderr
