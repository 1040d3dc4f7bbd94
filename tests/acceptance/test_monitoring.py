"""The Grafana dashboard and the Prometheus rules use only metrics a real master exports (or
that docs/operations.md lists as the scheduler's); promtool accepts the rules and the alerts
fire on the series they are meant for; `jobrun health` against a real master."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from jobrun.testing import wait_for
from tests.masterproc import ROOT, MasterProcess

RULES = ROOT / "etc" / "prometheus" / "jobrun-rules.yml"
DASHBOARD = ROOT / "etc" / "grafana" / "jobrun.json"
METRIC = re.compile(r"\b(jobrun_[a-z0-9_]+)\b")
SUFFIXES = {"counter": ("", "_total"), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
            "summary": ("", "_sum", "_count"), "info": ("_info",), "untyped": ("",)}


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return exprs


def _rule_exprs() -> list[str]:
    return re.findall(r"^\s*expr:\s*(.+)$", RULES.read_text(), flags=re.M)


def _exported(text: str) -> set[str]:
    """Sample names a /metrics page can carry: from its TYPE lines and its samples."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
        names.update(name + suffix for suffix in SUFFIXES.get(kind, ("",)))
    names.update(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, flags=re.M))
    return names


def _scheduler_documented() -> set[str]:
    docs = (ROOT / "docs" / "operations.md").read_text()
    match = re.search(r"from the scheduler:(.*?)\n\n", docs, flags=re.S)
    assert match, "docs/operations.md lists the scheduler's metrics after 'from the scheduler:'"
    return set(METRIC.findall(match.group(1)))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def _jobrun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobrun", *args], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=120)


def test_names_exist_in_a_real_master_and_health(db_env, tmp_path):
    with MasterProcess(db_env, tmp_path, "-c", "1", "--metrics-addr", "127.0.0.1:0") as m:
        m.wait_ready(concurrency=1)
        found: list[str] = []
        wait_for(lambda: found.extend(re.findall(r"metrics\.listening.*?addr=(127\.0\.0\.1:\d+)",
                                                 m.stderr())) or found, timeout=20,
                 message="the metrics address")
        addr = found[0]
        for task in ("noop", "permanent"):  # one succeeds, one ends dead
            assert _jobrun("enqueue", task, env=db_env).returncode == 0
        wait_for(lambda: 'outcome="succeeded"' in _get(f"http://{addr}/metrics")
                 and "jobrun_jobs_dead_total{" in _get(f"http://{addr}/metrics"),
                 timeout=30, message="both jobs counted")
        exported = _exported(_get(f"http://{addr}/metrics"))
        health = _jobrun("health", "--addr", addr, env=db_env)
        assert health.returncode == 0 and "ready" in health.stdout, health.stderr
        assert "database: ok, last reached" in health.stdout, health.stdout
        m.signal(signal.SIGSTOP)  # a frozen master does not answer: not healthy
        try:
            frozen = _jobrun("health", "--addr", addr, "--timeout", "1", env=db_env)
            assert frozen.returncode == 1, frozen.stdout
        finally:
            m.signal(signal.SIGCONT)
    allowed = exported | _scheduler_documented()
    for source, exprs in (("rules", _rule_exprs()), ("dashboard", _dashboard_exprs())):
        used = {name for expr in exprs for name in METRIC.findall(expr)}
        assert used, source
        missing = sorted(used - allowed)
        assert not missing, f"{source} uses metrics no master exports: {missing}"
    # The check can fail: a misspelt name is caught.
    assert "jobrun_job_wait_second_bucket" not in allowed


def test_dashboard_is_sane():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dash["templating"]["list"]}
    for panel in dash["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for var in re.findall(r"\$(\w+)", target["expr"]):
                assert var in variables or var.startswith("__"), (panel["title"], var)
    refs = {(p["title"], t["refId"]) for p in dash["panels"] for t in p["targets"]}
    assert len(refs) == sum(len(p["targets"]) for p in dash["panels"])


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package: prometheus)")
    return tool


def test_promtool_checks_the_rules():
    done = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _without_annotations(text: str) -> str:
    out, skipping = [], False
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if line.strip() == "annotations:":
            skipping, level = True, indent
            continue
        if skipping and (not line.strip() or indent > level):
            continue
        skipping = False
        out.append(line)
    return "\n".join(out) + "\n"


def test_alerts_fire_on_their_series(tmp_path):
    """promtool's rule tests: each alert fires on the series it watches, and not without."""
    # promtool compares annotations too; the test is about when alerts fire, so drop them.
    rules = tmp_path / "rules.yml"
    rules.write_text(_without_annotations(RULES.read_text()))
    tests = tmp_path / "tests.yml"
    tests.write_text(textwrap.dedent(f"""\
        rule_files: [{rules}]
        evaluation_interval: 1m
        tests:
          - interval: 1m
            input_series:
              - series: 'jobrun_jobs_dead_total{{queue="default",task="email.send",instance="a"}}'
                values: '0 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20'
              - series: 'jobrun_lease_fenced_total{{instance="a"}}'
                values: '0 0 0 0 0 1 1 1 1 1 1'
              - series: 'jobrun_job_wait_seconds_bucket{{queue="slow",le="30"}}'
                values: '0+0x40'
              - series: 'jobrun_job_wait_seconds_bucket{{queue="slow",le="60"}}'
                values: '0+10x40'
              - series: 'jobrun_job_wait_seconds_bucket{{queue="slow",le="+Inf"}}'
                values: '0+10x40'
              - series: 'jobrun_build_info{{instance="a",version="0.1.0",python="3.11"}}'
                values: '1x40'
              - series: 'jobrun_children{{instance="a",state="idle"}}'
                values: '1x40'
              - series: 'jobrun_scheduler_leader{{instance="a"}}'
                values: '0x40'
            alert_rule_test:
              - eval_time: 12m
                alertname: JobrunDeadJobsRising
                exp_alerts:
                  - exp_labels: {{severity: warning, queue: default, task: email.send}}
              - eval_time: 6m
                alertname: JobrunLeasesFenced
                exp_alerts:
                  - exp_labels: {{severity: warning, instance: a}}
              - eval_time: 30m
                alertname: JobrunQueueWaitHigh
                exp_alerts:
                  - exp_labels: {{severity: warning, queue: slow}}
              - eval_time: 30m
                alertname: JobrunNoLiveMaster
                exp_alerts: []
              - eval_time: 30m
                alertname: JobrunSchedulerWithoutLeader
                exp_alerts:
                  - exp_labels: {{severity: critical}}
          - interval: 1m
            input_series:
              - series: 'jobrun_build_info{{instance="a",version="0.1.0",python="3.11"}}'
                values: '1 1 1 _ _ _ _ _ _ _ _ _ _ _ _ _'
            alert_rule_test:
              - eval_time: 15m
                alertname: JobrunNoLiveMaster
                exp_alerts:
                  - exp_labels: {{severity: critical}}
        """))
    done = subprocess.run([_promtool(), "test", "rules", str(tests)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
