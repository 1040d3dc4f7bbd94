"""The "nothing lost" check, one SQL query shared by the tests.

Every job is settled (succeeded, dead, cancelled) or pending with attempts below its maximum;
no lease is stuck past its TTL plus the reaper's period; no job started more than
max_attempts times; and each succeeded transactional job has its effects exactly once
(one processed_effects row and, when the test keeps an ``effects`` table, one row there).
Returns the violations; an empty list means nothing was lost.
"""

from __future__ import annotations

from psycopg import sql
from psycopg.rows import tuple_row

NOTHING_LOST = """
SELECT 'pending at max attempts' AS problem, j.id FROM {schema}.jobs j
 WHERE j.status = 'queued' AND j.attempts >= j.max_attempts
UNION ALL
SELECT 'started too often', j.id FROM {schema}.jobs j WHERE j.attempts > j.max_attempts
UNION ALL
SELECT 'lease stuck', j.id FROM {schema}.jobs j
 WHERE j.status = 'leased' AND j.lease_expires_at < now() - make_interval(secs => %(slack)s)
UNION ALL
SELECT 'effects not once', j.id FROM {schema}.jobs j
 WHERE j.status = 'succeeded' AND j.task = ANY(%(transactional)s)
   AND (SELECT count(*) FROM {schema}.processed_effects p WHERE p.job_id = j.id) <> 1
UNION ALL
SELECT 'effects without success', p.job_id FROM {schema}.processed_effects p
  JOIN {schema}.jobs j ON j.id = p.job_id WHERE j.status <> 'succeeded'
"""

# When the test keeps its own effects table (one row per committed handler run).
EFFECTS_ONCE = """
UNION ALL
SELECT 'effect rows not once', j.id FROM {schema}.jobs j
 WHERE j.status = 'succeeded' AND j.task = ANY(%(transactional)s)
   AND (SELECT count(*) FROM {schema}.effects e WHERE e.job_id = j.id) <> 1
UNION ALL
SELECT 'effect rows of unsucceeded job', e.job_id FROM {schema}.effects e
  JOIN {schema}.jobs j ON j.id = e.job_id WHERE j.status <> 'succeeded'
"""


def nothing_lost(conn, schema: str, *, transactional=("effect",), slack: float = 10.0) -> list:
    cur = conn.cursor(row_factory=tuple_row)
    has_effects = cur.execute("SELECT to_regclass(%s) IS NOT NULL",
                              [f'"{schema}".effects']).fetchone()[0]
    text = NOTHING_LOST + (EFFECTS_ONCE if has_effects else "")
    query = sql.SQL(text).format(schema=sql.Identifier(schema))
    return cur.execute(query, {"slack": slack, "transactional": list(transactional)}).fetchall()
