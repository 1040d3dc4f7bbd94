"""examples/api.sh, the curl walkthrough in docs/api.md, runs as the README's quickstart has it:
a real master running the example app (`jobrun-master -A examples.tasks -c 2`), a real
`jobrun web`, and the script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.masterproc import ROOT, MasterProcess
from tests.webproc import WebProcess

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "api.sh"


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="needs curl and jq")
def test_curl_walkthrough_against_the_quickstart_master(db_env, tmp_path):
    with MasterProcess(db_env, tmp_path, "-c", "2", app="examples.tasks") as master, \
            WebProcess(db_env) as web:
        master.wait_ready(concurrency=2)
        env = {k: v for k, v in os.environ.items() if k != "JOBRUN_WEB_TOKEN"}
        out = subprocess.run(["bash", str(SCRIPT), web.base], env=env, capture_output=True,
                             text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr + out.stdout
    lines = [line for line in out.stdout.splitlines() if not line.startswith("==")]
    enqueued, replayed, got, listed, cancelled, retried, attempts, error = (
        json.loads(line) for line in lines)
    assert enqueued["status"] == "queued" and enqueued["created"] is True
    assert replayed == dict(enqueued, created=False)
    assert got["id"] == enqueued["id"] and got["task"] == "hello" and listed == [enqueued["id"]]
    assert (cancelled["status"], cancelled["version"]) == ("cancelled", 1)
    assert (retried["status"], retried["version"]) == ("queued", 2)
    assert attempts == [{"attempt": 1, "outcome": "succeeded", "result": {"greeted": "api.sh"}}]
    assert error["code"] == "validation_failed"
