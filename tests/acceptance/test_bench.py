"""`jobrun bench` against a real master: every tick sent or counted, the drain waited for,
percentiles from the database's timestamps."""

from __future__ import annotations

import json
import subprocess
import sys

from jobrun.admin.bench import open_loop, percentile
from tests.masterproc import ROOT, MasterProcess


def _jobrun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobrun", *args], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=300)


def test_bench_against_a_running_master(db_env, tmp_path):
    with MasterProcess(db_env, tmp_path, "-c", "2") as m:
        m.wait_ready(concurrency=2)
        done = _jobrun("--json", "bench", "--task", "noop", "--rate", "40", "--duration", "2",
                       "--producers", "2", env=db_env)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["sent"] + report["lagged"] == 80
        assert report["sent"] > 0 and report["unfinished"] == 0 and report["not_succeeded"] == 0
        assert report["outcomes"] == {"succeeded": report["sent"]}
        assert report["drained_after"] is not None
        start, finish = report["to_start_ms"], report["to_finish_ms"]
        assert 0 <= start["p50"] <= start["p95"] <= start["p99"]
        assert start["p50"] <= finish["p50"] and finish["p50"] <= finish["p99"]
        assert report["depth"], "the depth was sampled each second"
        text = _jobrun("bench", "--task", "noop", "--rate", "20", "--duration", "1", env=db_env)
        assert text.returncode == 0, text.stderr
        assert "achieved" in text.stdout and "enqueue to finish" in text.stdout


def test_a_bench_whose_jobs_fail_says_so_and_exits_1(db_env, tmp_path):
    """The example app has no task `noop`: every job ends dead at once, with fine latencies."""
    with MasterProcess(db_env, tmp_path, "-c", "2", app="examples.tasks") as m:
        m.wait_ready(concurrency=2)
        done = _jobrun("--json", "bench", "--task", "noop", "--rate", "20", "--duration", "1",
                       "--producers", "1", env=db_env)
        assert done.returncode == 1, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert report["sent"] > 0 and report["outcomes"] == {"dead": report["sent"]}
        assert "unknown task 'noop'" in report["top_error"]
        assert f"{report['sent']} of {report['sent']} jobs did not succeed" in done.stderr
        assert "unknown task 'noop'" in done.stderr
        text = _jobrun("bench", "--task", "noop", "--rate", "10", "--duration", "1", env=db_env)
        assert text.returncode == 1 and "jobs by outcome: dead" in text.stdout
        assert "did not succeed" in text.stderr


def test_bench_refuses_bad_input(db_env):
    done = _jobrun("bench", "--task", "noop", "--rate", "0", env=db_env)
    assert done.returncode == 1 and "--rate" in done.stderr
    done = _jobrun("bench", "--task", "noop", "--payload", "{nope", env=db_env)
    assert done.returncode == 1 and "--payload" in done.stderr


def test_open_loop_counts_lagged_ticks():
    import threading
    import time

    calls = []

    def slow() -> None:  # each send takes three intervals: two ticks lag behind each one
        calls.append(time.monotonic())
        time.sleep(0.03)
    sent, lagged = open_loop(time.monotonic(), 100.0, 30, 0, 1, slow, threading.Event())
    assert sent + lagged == 30
    assert lagged >= 10 and sent == len(calls)


def test_percentile():
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([float(i) for i in range(101)], 95) == 95.0
