"""Bulk-filled job tables for the read benchmarks: one INSERT ... SELECT generate_series each.

`history`: a queue that has run for a while, `rows` jobs created over the last hour, newest
ids last, worked first in first out: the newest 4 % are queued (a quarter of them scheduled an
hour ahead), the 0.05 % before them leased; of the older ones, per 10,000: 5 dead (a rare
finished status), 290 cancelled, the rest succeeded; queues `default` 70 %,
`emails` 20 %, `reports` ~10 %, `rare` 0.01 %; tasks `bench.t0` .. `bench.t<tasks-1>` and
`bench.rare` (0.01 %); one job in 1,000 made by the schedule `bench.nightly`. Every finished job has its attempt rows (a dead job two).

`drain`: the middle of a fast drain of `rows` jobs: the first `done` fraction finished in the
last seconds at 3,000 jobs/s, 4 leased, the rest queued.

Both end with VACUUM ANALYZE, as autovacuum would have by then.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

QUEUES = ("emails", "reports", "rare")

HISTORY = """
INSERT INTO {jobs} (task, queue, payload, status, run_at, attempts, started_at, finished_at,
                    created_at, lease_owner, lease_expires_at, idempotency_key, schedule_id)
SELECT CASE WHEN t = 0 THEN 'bench.rare' ELSE 'bench.t' || (t %% %(tasks)s) END,
       CASE WHEN q < 7000 THEN 'default' WHEN q < 9000 THEN 'emails'
            WHEN q < 9999 THEN 'reports' ELSE 'rare' END,
       jsonb_build_object('n', g), status,
       CASE WHEN status = 'queued' AND g %% 4 = 0 THEN now() + interval '1 hour' ELSE c END,
       CASE WHEN status = 'queued' THEN 0 WHEN status = 'dead' THEN 2 ELSE 1 END,
       CASE WHEN status <> 'queued' THEN c + interval '1 s' END,
       CASE WHEN status IN ('succeeded', 'dead', 'cancelled')
            THEN c + interval '1 s' + (g %% 7) * interval '100 ms' END,
       c,
       CASE WHEN status = 'leased' THEN 'bench:1:x' END,
       CASE WHEN status = 'leased' THEN now() + interval '30 s' END,
       CASE WHEN g %% 3 = 0 THEN 'key-' || g END,
       CASE WHEN g %% 1000 = 1 THEN %(schedule)s::bigint END
  FROM (SELECT g, c, q, t,
               CASE WHEN newer < %(rows)s / 25 THEN 'queued'
                    WHEN newer < %(rows)s / 25 + %(rows)s / 2000 THEN 'leased'
                    WHEN b < 5 THEN 'dead' WHEN b < 295 THEN 'cancelled'
                    ELSE 'succeeded' END AS status
          FROM (SELECT g, %(rows)s - g AS newer, g %% 10000 AS b, (g * 7919) %% 10000 AS q,
                       (g * 104729) %% 10000 AS t,
                       now() - (%(rows)s - g) * (interval '1 hour' / %(rows)s) - interval '5 s' AS c
                  FROM generate_series(1::bigint, %(rows)s) g) s) s
"""

DRAIN = """
INSERT INTO {jobs} (task, queue, payload, status, attempts, created_at, started_at,
                    finished_at, lease_owner, lease_expires_at)
SELECT 'noop', 'default', 'null', CASE WHEN g <= %(done)s THEN 'succeeded'
            WHEN g <= %(done)s + 4 THEN 'leased' ELSE 'queued' END,
       CASE WHEN g <= %(done)s + 4 THEN 1 ELSE 0 END,
       now() - interval '10 s',
       CASE WHEN g <= %(done)s + 4 THEN now() - (%(done)s - g) * interval '333 us' END,
       CASE WHEN g <= %(done)s THEN now() - (%(done)s - g) * interval '333 us' END,
       CASE WHEN g > %(done)s AND g <= %(done)s + 4 THEN 'bench:1:x' END,
       CASE WHEN g > %(done)s AND g <= %(done)s + 4 THEN now() + interval '30 s' END
  FROM generate_series(1, %(rows)s) g
"""

ATTEMPTS = """
INSERT INTO {attempts} (job_id, lease_token, attempt, started_at, finished_at, outcome, error)
SELECT id, 1, 1, started_at, finished_at,
       CASE status WHEN 'succeeded' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled'
                   ELSE 'failed' END,
       CASE status WHEN 'dead' THEN 'ValueError: bench' END
  FROM {jobs} WHERE finished_at IS NOT NULL
UNION ALL
SELECT id, 0, 1, started_at - interval '1 s', started_at - interval '500 ms', 'failed',
       'ValueError: bench'
  FROM {jobs} WHERE status = 'dead'
"""


def _run(conn: psycopg.Connection, schema: str, text: str, params: dict) -> None:
    conn.execute(sql.SQL(text).format(jobs=sql.Identifier(schema, "jobs"),
                                      attempts=sql.Identifier(schema, "job_attempts")), params)


def history(conn: psycopg.Connection, schema: str, rows: int, tasks: int = 20) -> None:
    for name in QUEUES:
        conn.execute(sql.SQL("INSERT INTO {} (name) VALUES (%s) ON CONFLICT DO NOTHING").format(
            sql.Identifier(schema, "queues")), [name])
    schedule = conn.execute(sql.SQL(
        "INSERT INTO {} (name, cron, task) VALUES ('bench.nightly', '0 3 * * *', 'bench.t1')"
        " RETURNING id").format(sql.Identifier(schema, "schedules"))).fetchone()[0]
    _run(conn, schema, HISTORY, {"rows": rows, "tasks": tasks, "schedule": schedule})
    _run(conn, schema, ATTEMPTS, {})
    analyze(conn, schema)


def drain(conn: psycopg.Connection, schema: str, rows: int, done: float = 0.5) -> None:
    _run(conn, schema, DRAIN, {"rows": rows, "done": int(rows * done)})
    _run(conn, schema, ATTEMPTS, {})
    analyze(conn, schema)


def analyze(conn: psycopg.Connection, schema: str) -> None:
    for table in ("jobs", "job_attempts"):
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, table)))
