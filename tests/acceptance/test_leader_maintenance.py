"""The cluster's maintenance with two real masters: only the leader reaps, and when the leader
dies (SIGKILL) or freezes (SIGSTOP) while it holds a job, the job's lease expires and the
other master, now leader, reaps it within the documented bound.

Leader A serves `default`, B serves only `other`, so the job runs on A and, once reaped, stays
queued (nobody else claims it): what B did is plain to see. Leases: job lease TTL 3 s, leader
lease TTL 3 s (takeover within ttl + ttl/3 = 4 s), reap interval 1 s.
"""

from __future__ import annotations

import signal
import time

import pytest

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess

TTL = 3.0
TAKEOVER = TTL + TTL / 3
REAP_INTERVAL = 1.0
SLACK = 2.0  # statement time and process start-up on a loaded machine


@pytest.fixture
def env(db_env):
    return {**db_env, "JOBRUN_SCHEDULE_LEASE_TTL": str(TTL), "JOBRUN_LEASE_TTL": str(TTL),
            "JOBRUN_LOG_LEVEL": "debug"}


def started(m: MasterProcess, part: str) -> int:
    return m.stderr().count(f"leader.part_started part={part}")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["sigkill", "sigstop"])
def test_the_new_leader_reaps_a_job_whose_lease_expired_with_the_old_leader(
        client, db, env, tmp_path, how):
    client.queue_add("other")
    with MasterProcess(env, tmp_path, "-c", "1", "-Q", "default") as a:
        a.wait_ready(timeout=40)
        wait_for(lambda: "scheduler.leading" in a.stderr(), timeout=10, message="a to lead")
        with MasterProcess(env, tmp_path, "-c", "1", "-Q", "other") as b:
            b.wait_ready(timeout=40)
            wait_for(lambda: started(a, "reaper") and started(a, "aging"), timeout=10,
                     message="a's maintenance")
            job = client.enqueue("sleep", 120).job
            wait_for(lambda: client.get(job.id).status == "leased", timeout=15,
                     message="the job leased by a")
            # b is up, serves, and keeps its registry row, but runs no maintenance.
            wait_for(lambda: len(db.rows("SELECT owner FROM {s}.workers")) == 2, timeout=10,
                     message="both registered")
            assert "scheduler.leading" not in b.stderr()
            assert started(b, "reaper") == 0 and started(b, "aging") == 0

            a.signal(how)
            gone = time.monotonic()
            wait_for(lambda: client.get(job.id).status == "queued", timeout=TAKEOVER + 10,
                     interval=0.05, message="the job reaped")
            took = time.monotonic() - gone
            print(f"reaped {took:.2f} s after the leader's {how.name}"
                  f" (bound {TAKEOVER + REAP_INTERVAL:.1f} s)")
            assert took <= TAKEOVER + REAP_INTERVAL + SLACK
            assert [x["outcome"] for x in db.attempts(job.id)] == ["lease_expired"]
            assert "lease.expired" in b.stderr() and "lease.expired" not in a.stderr()
            assert "scheduler.leading" in b.stderr() and started(b, "reaper") == 1
            if how == signal.SIGSTOP:
                # Woken, a steps down before it acts again: its maintenance stops.
                a.signal(signal.SIGCONT)
                wait_for(lambda: "scheduler.step_down" in a.stderr(), timeout=10,
                         message="the woken leader to step down")
                wait_for(lambda: "leader.part_stopped part=reaper" in a.stderr(), timeout=10,
                         message="its reaper to stop")
                assert "lease.expired" not in a.stderr()
                assert client.get(job.id).status in ("queued", "leased")
