"""A password given with --dsn leaves the master's title (``ps``) at once, not after start-up:
the test holds the migration lock so start-up waits, and reads the title meanwhile."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess, title

SECRET = "Hunter2Secret"


def test_dsn_password_hidden_from_ps_during_start_up(pg_dsn, schema, db_env, tmp_path):
    # The test cluster trusts local connections, so the password is ignored but still passed.
    params = conninfo_to_dict(pg_dsn)
    url = make_conninfo(**{**params, "password": SECRET})
    env = {k: v for k, v in db_env.items() if k != "JOBRUN_DATABASE_URL"}
    with psycopg.connect(pg_dsn) as holder, psycopg.connect(pg_dsn, autocommit=True) as watcher:
        # holder: an open transaction holding the migration lock
        holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('jobrun.migrate:' || %s, 0))",
                       [schema])
        with MasterProcess(env, tmp_path, "-c", "1", "--dsn", url) as m:
            # (pg_stat_activity is read once per transaction: look from another connection)
            wait_for(lambda: watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE '%%pg_advisory_xact_lock%%' AND pid <> pg_backend_pid()").fetchone(),
                timeout=30, message="the master waiting to migrate")
            shown = title(m.pid)
            assert SECRET not in shown, shown
            assert "--dsn ***" in shown
            holder.rollback()  # release: start-up goes on
            m.wait_ready()
            assert SECRET not in title(m.pid)
            assert SECRET not in m.stderr()
