"""`jobrun config show` (values and their sources, secrets redacted) and `config check`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-pw-do-not-print"


def _jobrun(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    full = dict(env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "jobrun", *args], capture_output=True,
                          text=True, env=full, cwd=cwd, timeout=60)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("JOBRUN_")}


def test_show_names_each_source_and_redacts(tmp_path):
    conf = tmp_path / "app.toml"
    conf.write_text(f'database_url = "postgresql://app:{SECRET}@db.internal:5433/prod"\n'
                    'concurrency = 7\ngrace = "45s"\n')
    env = dict(_clean_env(), JOBRUN_GRACE="50s")
    done = _jobrun("--json", "config", "show", "--config", str(conf), "--schema", "sch",
                   env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["file"] == str(conf)
    by_name = {e["name"]: e for e in out["settings"]}
    assert by_name["concurrency"] == {"name": "concurrency", "value": 7, "source": f"file ({conf})"}
    assert by_name["grace"]["value"] == 50.0
    assert by_name["grace"]["source"] == "environment (JOBRUN_GRACE)"
    assert by_name["schema"]["value"] == "sch" and by_name["schema"]["source"] == "flag"
    assert by_name["lease_ttl"]["source"] == "default"
    assert "db.internal:5433/prod" in by_name["database_url"]["value"]
    # The table form too.
    table = _jobrun("config", "show", "--config", str(conf), env=env, cwd=tmp_path)
    assert table.returncode == 0 and SECRET not in table.stdout + table.stderr
    assert "environment (JOBRUN_GRACE)" in table.stdout


def test_check_names_bad_and_unknown_keys(tmp_path):
    conf = tmp_path / "bad.toml"
    conf.write_text('concurency = 3\ngrace = "soon"\nlog_format = "xml"\nqueues = ["default"]\n')
    done = _jobrun("config", "check", str(conf), env=_clean_env(), cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3, done.stderr
    assert "unknown setting 'concurency'" in lines[0]
    assert "grace" in lines[1] and "soon" in lines[1]
    assert "log_format" in lines[2]
    assert done.stdout == ""


def test_check_accepts_the_documented_example(tmp_path):
    done = _jobrun("config", "check", str(ROOT / "etc" / "jobrun.toml"), env=_clean_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(": ok")


def test_check_reports_broken_toml_and_missing_file(tmp_path):
    conf = tmp_path / "broken.toml"
    conf.write_text("concurrency = \n")
    done = _jobrun("config", "check", str(conf), env=_clean_env(), cwd=tmp_path)
    assert done.returncode == 1 and "not valid TOML" in done.stderr
    done = _jobrun("config", "check", str(tmp_path / "nope.toml"), env=_clean_env(), cwd=tmp_path)
    assert done.returncode == 1 and "cannot read" in done.stderr


def test_health_of_nothing_listening_is_1(tmp_path):
    done = _jobrun("health", "--addr", "127.0.0.1:1", "--timeout", "2", env=_clean_env(), cwd=tmp_path)
    assert done.returncode == 1 and "unreachable" in done.stderr


@pytest.mark.parametrize("line,says", [("concurrency = 0", "concurrency must be at least 1"),
                                       ("prefetch = 0", "prefetch must be at least 1"),
                                       ('log_format = "yaml"', "log_format is one of text, json")])
def test_check_and_a_master_start_refuse_a_value_alike(tmp_path, monkeypatch, line, says):
    """One line of the settings table decides for `config check` and for `jobrun-master` (and
    for a SIGHUP: tests/unit/test_master_parts.py); both name the file and the key."""
    from typer.testing import CliRunner

    from jobrun.admin.config_report import check_file
    from jobrun.worker import cli

    conf = tmp_path / "jobrun.toml"
    conf.write_text(line + "\n")
    [problem] = check_file(conf)
    assert problem.startswith(f"{conf}: {says}")
    for name in [k for k in os.environ if k.startswith("JOBRUN_")]:
        monkeypatch.delenv(name)
    started = CliRunner().invoke(cli.cli, ["-A", "tests.apps.taskapp", "--dsn",
                                           "postgresql://nobody@127.0.0.1:1/none"],
                                 env={"JOBRUN_CONFIG": str(conf)})
    assert started.exit_code == 2, started.output
    assert f"{conf}: {says}" in started.stderr
