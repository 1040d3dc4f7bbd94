"""Faults that take a while to play out (a process stopped past the lease TTL, a connection
held half-open, a database restart, a terminated session), as one-call actions for the soak,
each counted in the seeded scheduler's tally.
"""

from __future__ import annotations

import os
import signal

from psycopg import sql

from jobrun.testing import Cluster, wait_for
from tests.faults.backends import backends, terminate
from tests.faults.load import TTL, Fleet, own_connection, restart_immediate
from tests.faults.proxy import HalfOpenProxy
from tests.masterproc import MasterProcess, live, title


def _leases_of(conn, schema: str, master: MasterProcess) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE status = 'leased' AND lease_owner LIKE %s")
    return conn.execute(query.format(sql.Identifier(schema, "jobs")),
                        [f"%:{master.pid}:%"]).fetchone()[0]


def _continue(pids) -> None:
    for pid in pids:
        if live(pid):
            os.kill(pid, signal.SIGCONT)


class Actions:
    def __init__(self, fleet: Fleet, dsn: str, schema: str, cluster: Cluster | None = None,
                 proxy: HalfOpenProxy | None = None) -> None:
        self.fleet, self.dsn, self.schema = fleet, dsn, schema
        self._conn = None
        self.cluster, self.proxy = cluster, proxy
        self.faults = fleet.faults

    def terminate_backend(self) -> None:
        found = backends(self.conn, self.schema)
        kinds = [k for k in found if k != "other"]
        if not kinds:
            return
        kind = self.faults.pick(kinds)
        victim = self.faults.pick(found[kind])
        if terminate(self.conn, victim):
            self.faults.count(f"terminate_{kind}", f"backend {victim}")

    def restart_postgres(self) -> None:
        restart_immediate(self.cluster)
        self.faults.count("pg_restart_immediate")
        self._conn.close()
        self._conn = None  # the restart ended our session too

    @property
    def conn(self):
        """The test's connection to the database (re-opened after a restart)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = own_connection(self.dsn)
        return self._conn

    def stop_child(self) -> None:
        """SIGSTOP a busy child until its master fenced and killed it (or TTL + 10 s)."""
        m = self.fleet.pick_master()
        busy = [p for p in m.children() if " job=" in title(p)]
        if not busy:
            return
        victim = self.faults.pick(busy)
        os.kill(victim, signal.SIGSTOP)
        self.faults.count("sigstop_child", f"pid={victim}")
        try:
            wait_for(lambda: not live(victim), timeout=TTL + 10, message="the stopped child fenced")
        except TimeoutError:
            self.faults.count("sigstop_child_not_fenced", f"pid={victim}")
        finally:
            _continue([victim])

    def stop_master(self) -> None:
        """SIGSTOP a master and its children until the others reaped its leases (at most
        TTL + 10 s), then SIGCONT."""
        m = self.fleet.pick_master()
        frozen = [m.pid, *m.children()]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        self.faults.count("sigstop_master", f"pid={m.pid}")
        try:
            wait_for(lambda: _leases_of(self.conn, self.schema, m) == 0, timeout=TTL + 10,
                     message="the stopped master's leases reaped")
        except TimeoutError:
            self.faults.count("sigstop_master_leases_kept", f"pid={m.pid}")
        finally:
            _continue(frozen)

    def half_open(self) -> None:
        """Freeze the proxy until the cut-off masters' leases were reaped (at most TTL + 10 s),
        then let it flow again (a partition that heals)."""
        cut = [m for m in self.fleet.live()
               if (m.fleet_env or {}).get("JOBRUN_DATABASE_URL") == self.proxy.dsn()]
        if not cut:
            return
        self.proxy.freeze()
        self.faults.count("half_open", f"masters {[m.pid for m in cut]}")
        try:
            wait_for(lambda: sum(_leases_of(self.conn, self.schema, m) for m in cut) == 0,
                     timeout=TTL + 10, message="the cut-off masters' leases reaped")
        except TimeoutError:
            self.faults.count("half_open_leases_kept")
        finally:
            self.proxy.thaw()
