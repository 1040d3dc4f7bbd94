"""The fault soak: every fault kind, mixed by the seed, for minutes (``pytest -m soak``; not in
the default run). JOBRUN_SOAK_SECONDS sets the length (default 180), JOBRUN_FAULT_SEED replays.

Three masters (one of them reaching PostgreSQL through a proxy that can go half-open) on a
cluster of the test's own, waves of plain and transactional jobs, and between waves one fault:
SIGKILL of a child or a master (a new master replaces it), pg_terminate_backend of a session of
a kind the seed picks, ``pg_ctl restart -m immediate``, SIGSTOP of a child or a master past the
lease TTL (then SIGCONT), a half-open connection (then healed). At the end the shared checker
runs, and the run prints jobs, faults by kind, duplicate starts, losses, and the sizes of
jobs, job_attempts and their indexes before and after.
"""

from __future__ import annotations

import os
import time

import jobrun
import psycopg
import pytest

from jobrun.store import migrate
from jobrun.testing import Cluster, wait_for
from tests.faults.actions import Actions
from tests.faults.load import (REAPER_PERIOD, RESTARTABLE, TTL, Fleet, enqueue, finished,
                               prepare, relation_sizes, socket_path)
from tests.faults.proxy import HalfOpenProxy
from tests.faults.seed import Faults
from tests.invariants import after_faults

SCHEMA = "soak"


def _enqueue_wave(dsn: str, faults: Faults, n: int) -> None:
    with jobrun.Client(dsn, schema=SCHEMA) as c:
        enqueue(c, faults, n, sleep=0.4, max_attempts=(3, 5, 10, 10))


def _progress(actions: Actions) -> None:
    """Wait until a job finished since now, or nothing is left to finish."""
    done = finished(actions.conn, SCHEMA)
    wait_for(lambda: finished(actions.conn, SCHEMA) > done, timeout=60, interval=0.1,
             message="progress between faults")


@pytest.mark.soak
def test_fault_soak(db_env, tmp_path):
    seconds = float(os.environ.get("JOBRUN_SOAK_SECONDS", "180"))
    faults = Faults.from_environment("soak")
    with faults, Cluster(bin_dir=os.environ.get("JOBRUN_TEST_PG_BIN") or None,
                         settings=RESTARTABLE) as cluster, \
            HalfOpenProxy(socket_path(cluster.dsn)) as proxy:
        with psycopg.connect(cluster.dsn, autocommit=True) as c:
            migrate.migrate(c, SCHEMA)
            prepare(c, SCHEMA)
            before = relation_sizes(c, SCHEMA)
        env = dict(db_env, JOBRUN_DATABASE_URL=cluster.dsn, JOBRUN_SCHEMA=SCHEMA)
        with Fleet(env, tmp_path, faults, "-c", "2", record_dsn=cluster.dsn) as fleet:
            fleet.start_many(2, ready=2)
            fleet.start(env={"JOBRUN_DATABASE_URL": proxy.dsn()}, ready=2)
            actions = Actions(fleet, cluster.dsn, SCHEMA, cluster=cluster, proxy=proxy)
            kinds = {"sigkill_child": lambda: fleet.kill_child(), "sigkill_master": fleet.kill_master,
                     "terminate": actions.terminate_backend, "terminate2": actions.terminate_backend,
                     "pg_restart": actions.restart_postgres, "sigstop_child": actions.stop_child,
                     "sigstop_master": actions.stop_master, "half_open": actions.half_open,
                     "sigkill_child2": lambda: fleet.kill_child()}
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                _enqueue_wave(cluster.dsn, faults, faults.rng.randint(10, 40))
                _progress(actions)
                faults.pause(0.0, 1.0)
                kinds[faults.pick(list(kinds))]()
            outcome = after_faults(actions.conn, SCHEMA, ttl=TTL, reaper_period=REAPER_PERIOD,
                                   settle=120, intended=("succeeded", "dead"),
                                   enqueued=faults.enqueued)
            after = relation_sizes(actions.conn, SCHEMA)
            if outcome.violations:
                print(fleet.stderr()[-30000:])
        figures = outcome.figures
        print(f"\n[soak] {faults.replay_hint()}, {seconds:.0f} s")
        print(f"[soak] jobs {figures['jobs']}: succeeded {figures['succeeded']}, dead "
              f"{figures['dead']}, cancelled {figures['cancelled']}; starts {figures['starts']}")
        print(f"[soak] faults injected: {dict(sorted(faults.counts.items()))}")
        print(f"[soak] duplicates (starts beyond one per succeeded job): {figures['duplicates']}")
        print(f"[soak] losses: {outcome.losses()}; violations: {len(outcome.violations)}")
        for name in sorted(after):
            print(f"[soak] {name:40s} {before.get(name, 0):>12,d} -> {after[name]:>12,d} bytes")
        assert outcome.violations == [], faults.explain(f"violations: {outcome.violations[:20]}")
