"""The `jobrun` command line run as a subprocess, and its answers read: ``ok`` (exit 0, the
output), ``ok_json`` and ``fails`` (the exit code and one line on stderr, no traceback). The
``cli`` fixture (tests/db/conftest.py) runs it against the test's own schema."""

from __future__ import annotations

import json
import subprocess
import sys


def run(env, *args, input=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "jobrun.admin.cli", *args], env=env, cwd=cwd,
                          input=input, capture_output=True, text=True, timeout=120)


def ok(result):
    assert result.returncode == 0, result.stderr
    return result.stdout


def ok_json(result):
    return json.loads(ok(result))


def fails(result, code=1):
    """The call failed with `code` and said so in one line on stderr, without a traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    if code == 1:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("jobrun: error: "), result.stderr
        return lines[0]
    return result.stderr
