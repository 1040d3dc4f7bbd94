"""examples/api.sh, the curl walkthrough in docs/api.md, runs against a real `jobrun web`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.webproc import web, web_schema  # noqa: F401 (fixtures)

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "api.sh"


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="needs curl and jq")
def test_curl_walkthrough(web):
    env = {k: v for k, v in os.environ.items() if k != "JOBRUN_WEB_TOKEN"}
    out = subprocess.run(["bash", str(SCRIPT), web.base], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    lines = [line for line in out.stdout.splitlines() if not line.startswith("==")]
    enqueued, got, listed, cancelled, retried, error = (json.loads(line) for line in lines)
    assert enqueued["status"] == "queued" and enqueued["created"] is True
    assert got["id"] == enqueued["id"] and listed == [enqueued["id"]]
    assert (cancelled["status"], cancelled["version"]) == ("cancelled", 1)
    assert (retried["status"], retried["version"]) == ("queued", 2)
    assert error["code"] == "validation_failed"
