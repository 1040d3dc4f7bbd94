"""The "nothing lost" check, one SQL query shared by the tests.

Every job is settled (succeeded, dead, cancelled) or pending with attempts below its maximum;
no lease is stuck past its TTL plus the reaper's period, nor ends later than the longest a
master takes (config.MAX_LEASE_TTL); no job started more than max_attempts times; each
succeeded transactional job has its effects exactly once (one processed_effects row and, when
the test keeps an ``effects`` table, one row there); and a job's version moved only with
changes a user sees (docs/concepts.md, "Versions"): at most twice per claim (the claim, and
the end of that lease: finished, requeued or given back) and once for a cancel, however long
it ran and however often it was renewed or aged, plus one for a dependent's release. (A test
that retries jobs by hand adds one a retry: it is not one of these runs.) A released attempt
(shutdown, or a child with slots killed for a neighbour's sake) says why. Workflows: a
waiting job has a parent not settled, and no dependent started before every parent had
succeeded (or, with on_parent_failure 'run', had finished).
Returns the violations; an empty list means nothing was lost.

``after_faults`` is the stricter check the fault suite runs once its faults stopped: it waits
(with a deadline) for every lease to be resolved within TTL plus the reaper period and every
job to settle, and then also requires each job to end in a status the test intends (dead and
cancelled jobs with a recorded reason) and, when the test keeps an append-only ``starts``
record (one row per handler start), no job started more than max_attempts times by that
record either, and no dependent started (by that record) before every parent had succeeded.
A job cancelled because a parent failed has its reason in ``cancel_reason``.

With the transition log recording everything (``jobrun events mode all``, migration 0017),
both also check each job's events against it: its first event is ``enqueued``, each next
status is one jobrun/states.py allows after the one before (or the same), the last status
recorded is the job's status now, and a finished job has exactly one terminal event since it
was last put back by hand (none while it is not finished).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg import sql
from psycopg.rows import tuple_row

from jobrun.config import MAX_LEASE_TTL
from jobrun.events import TERMINAL_KINDS
from jobrun.states import TRANSITIONS
from jobrun.testing import wait_for

NOTHING_LOST = """
SELECT 'pending at max attempts' AS problem, j.id FROM {schema}.jobs j
 WHERE j.status = 'queued' AND j.attempts >= j.max_attempts
UNION ALL
SELECT 'started too often', j.id FROM {schema}.jobs j WHERE j.attempts > j.max_attempts
UNION ALL
SELECT 'lease stuck', j.id FROM {schema}.jobs j
 WHERE j.status = 'leased' AND j.lease_expires_at < now() - make_interval(secs => %(slack)s)
UNION ALL
SELECT 'lease past the bound', j.id FROM {schema}.jobs j
 WHERE j.status = 'leased'
   AND (j.lease_expires_at IS NULL OR j.lease_expires_at > now() + make_interval(secs => %(max_lease)s))
UNION ALL
SELECT 'effects not once', j.id FROM {schema}.jobs j
 WHERE j.status = 'succeeded' AND j.task = ANY(%(transactional)s)
   AND (SELECT count(*) FROM {schema}.processed_effects p WHERE p.job_id = j.id) <> 1
UNION ALL
SELECT 'effects without success', p.job_id FROM {schema}.processed_effects p
  JOIN {schema}.jobs j ON j.id = p.job_id WHERE j.status <> 'succeeded'
UNION ALL
SELECT 'version moved without a change a user sees', j.id FROM {schema}.jobs j
 WHERE j.version > 2 * j.lease_token + (j.status = 'cancelled' OR j.cancel_requested)::int
                    + (j.waiting_on IS NOT NULL)::int
UNION ALL
SELECT 'released without a reason', a.job_id FROM {schema}.job_attempts a
 WHERE a.outcome = 'released' AND a.error IS NULL
UNION ALL
SELECT 'waiting with no parent unsettled', d.id FROM {schema}.jobs d
 WHERE d.status = 'waiting' AND NOT EXISTS (
       SELECT FROM {schema}.job_deps e JOIN {schema}.jobs p ON p.id = e.parent
        WHERE e.dependent = d.id AND p.status IN ('waiting', 'queued', 'leased'))
UNION ALL
SELECT 'started before its parents all succeeded', d.id FROM {schema}.jobs d
  JOIN {schema}.job_deps e ON e.dependent = d.id JOIN {schema}.jobs p ON p.id = e.parent
 WHERE d.attempts > 0
   AND (p.status NOT IN ('succeeded', 'dead', 'cancelled')
        OR (d.on_parent_failure IS NULL AND p.status <> 'succeeded')
        OR coalesce((SELECT min(a.started_at) FROM {schema}.job_attempts a WHERE a.job_id = d.id),
                    d.started_at) < p.finished_at)
UNION ALL
SELECT 'cancelled for a parent that did not fail', d.id FROM {schema}.jobs d
 WHERE d.status = 'cancelled' AND d.cancel_reason IS NOT NULL AND NOT EXISTS (
       SELECT FROM {schema}.job_deps e JOIN {schema}.jobs p ON p.id = e.parent
        WHERE e.dependent = d.id AND p.status IN ('dead', 'cancelled'))
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

# After the faults: every job in a status the test intends; dead and cancelled ones with a
# reason (an attempt row with an error, or a cancel that never started).
SETTLED_AS_INTENDED = """
UNION ALL
SELECT 'lost (' || j.status || ')', j.id FROM {schema}.jobs j
 WHERE NOT j.status = ANY(%(intended)s)
UNION ALL
SELECT 'dead without a reason', j.id FROM {schema}.jobs j
 WHERE j.status = 'dead' AND NOT EXISTS (
       SELECT 1 FROM {schema}.job_attempts a
        WHERE a.job_id = j.id AND a.outcome <> 'succeeded' AND a.error IS NOT NULL)
UNION ALL
SELECT 'cancelled without a reason', j.id FROM {schema}.jobs j
 WHERE j.status = 'cancelled' AND NOT j.cancel_requested AND j.cancel_reason IS NULL
UNION ALL
SELECT 'lost (missing)', e.id FROM unnest(%(enqueued)s::bigint[]) AS e(id)
 WHERE NOT EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.id = e.id)
"""

# When the test keeps an append-only record of handler starts.
STARTS_BOUNDED = """
UNION ALL
SELECT 'recorded starts beyond max_attempts', j.id FROM {schema}.jobs j
 WHERE (SELECT count(*) FROM {schema}.starts s WHERE s.job_id = j.id) > j.max_attempts
UNION ALL
SELECT 'two starts under one lease token', s.job_id FROM {schema}.starts s
 GROUP BY s.job_id, s.token HAVING count(*) > 1
UNION ALL
SELECT 'succeeded without a recorded start', j.id FROM {schema}.jobs j
 WHERE j.status = 'succeeded' AND j.task = ANY(%(recorded)s)
   AND NOT EXISTS (SELECT 1 FROM {schema}.starts s WHERE s.job_id = j.id)
UNION ALL
SELECT 'a dependent started before its parents all succeeded', s.job_id
  FROM {schema}.starts s JOIN {schema}.job_deps e ON e.dependent = s.job_id
  JOIN {schema}.jobs p ON p.id = e.parent JOIN {schema}.jobs d ON d.id = s.job_id
 WHERE p.finished_at IS NULL OR s.at < p.finished_at
    OR (p.status <> 'succeeded' AND d.on_parent_failure IS NULL)
"""

# The job's events tell its story (mode all): run only when the mode is all throughout.
EVENTS_CONSISTENT = """
UNION ALL
SELECT 'events: ' || v.problem, v.job_id FROM (
    SELECT e.job_id, CASE
             WHEN e.prev_status IS NULL AND e.kind <> 'enqueued' THEN 'first is not enqueued'
             WHEN e.prev_status IS NOT NULL AND e.prev_status <> e.status
                  AND (e.prev_status, e.status) NOT IN (SELECT m.a, m.b FROM unnest(
                          %(moves_from)s::text[], %(moves_to)s::text[]) AS m(a, b))
                  THEN 'a move states.py does not allow: ' || e.prev_status || ' -> ' || e.status
           END AS problem
      FROM (SELECT job_id, kind, status,
                   lag(status) OVER (PARTITION BY job_id ORDER BY seq) AS prev_status
              FROM {schema}.job_events) e
) v WHERE v.problem IS NOT NULL
UNION ALL
SELECT 'events: last status recorded is not the status', j.id FROM {schema}.jobs j
 WHERE j.status <> (SELECT e.status FROM {schema}.job_events e WHERE e.job_id = j.id
                     ORDER BY e.seq DESC LIMIT 1)
    OR NOT EXISTS (SELECT FROM {schema}.job_events e WHERE e.job_id = j.id)
UNION ALL
SELECT 'events: terminal events not one per finish', j.id FROM {schema}.jobs j
 WHERE (SELECT count(*) FROM {schema}.job_events e
         WHERE e.job_id = j.id AND e.kind = ANY(%(terminal_kinds)s)
           AND e.seq > coalesce((SELECT max(r.seq) FROM {schema}.job_events r
                                  WHERE r.job_id = j.id AND r.kind = 'requeued'), 0))
       <> (j.status = ANY(%(terminal_kinds)s))::int
"""
EVENT_PARAMS = {
    "moves_from": [a for a, targets in TRANSITIONS.items() for _ in sorted(targets)],
    "moves_to": [b for _, targets in TRANSITIONS.items() for b in sorted(targets)],
    "terminal_kinds": list(TERMINAL_KINDS),
}
# Mode all: no settings row (the default) or the value 2.
EVENTS_MODE_ALL = """
SELECT to_regclass(%(events)s) IS NOT NULL
       AND coalesce((SELECT value FROM {schema}.settings WHERE name = 'job_events'), 2) = 2
"""

OPEN_LEASES = """
SELECT count(*) FROM {schema}.jobs
 WHERE status = 'leased' AND lease_expires_at < now() - make_interval(secs => %(period)s)
"""

UNSETTLED = "SELECT count(*) FROM {schema}.jobs WHERE status IN ('queued', 'leased')"

FIGURES = """
SELECT (SELECT count(*) FROM {schema}.jobs) AS jobs,
       (SELECT count(*) FROM {schema}.jobs WHERE status = 'succeeded') AS succeeded,
       (SELECT count(*) FROM {schema}.jobs WHERE status = 'dead') AS dead,
       (SELECT count(*) FROM {schema}.jobs WHERE status = 'cancelled') AS cancelled,
       (SELECT count(*) FROM {schema}.starts) AS starts,
       (SELECT coalesce(sum(n - 1), 0)::bigint FROM (
            SELECT count(*) AS n FROM {schema}.starts s JOIN {schema}.jobs j ON j.id = s.job_id
             WHERE j.status = 'succeeded' GROUP BY s.job_id) d) AS duplicates
"""


def _exists(cur, schema: str, table: str) -> bool:
    return cur.execute("SELECT to_regclass(%s) IS NOT NULL", [f'"{schema}".{table}']).fetchone()[0]


def _run(conn, schema: str, text: str, params: dict) -> list:
    cur = conn.cursor(row_factory=tuple_row)
    query = sql.SQL(text).format(schema=sql.Identifier(schema))
    return cur.execute(query, params).fetchall()


def _events_checked(conn, schema: str) -> bool:
    return _run(conn, schema, EVENTS_MODE_ALL, {"events": f'"{schema}".job_events'})[0][0]


def event_violations(conn, schema: str) -> list:
    """The events check alone (see above); empty when the mode is not all."""
    if not _events_checked(conn, schema):
        return []
    return _run(conn, schema, "SELECT NULL::text, NULL::bigint WHERE false" + EVENTS_CONSISTENT,
                EVENT_PARAMS)


def nothing_lost(conn, schema: str, *, transactional=("effect",), slack: float = 10.0) -> list:
    cur = conn.cursor(row_factory=tuple_row)
    text = NOTHING_LOST + (EFFECTS_ONCE if _exists(cur, schema, "effects") else "")
    events = _events_checked(conn, schema)
    text += EVENTS_CONSISTENT if events else ""
    return _run(conn, schema, text, {"slack": slack, "transactional": list(transactional),
                                     "max_lease": MAX_LEASE_TTL,
                                     **(EVENT_PARAMS if events else {})})


def violations(conn, schema: str, *, transactional=("effect",), recorded=("record", "effect"),
               intended=("succeeded",), enqueued=(), slack: float = 10.0,
               remote: bool = False) -> list:
    """Every rule above at once, for a run that is over: nothing_lost's, plus each job in an
    ``intended`` status (dead/cancelled ones with a reason) and every ``enqueued`` id still in
    the table, plus the ``starts`` record (if the schema has one) bounded by max_attempts, plus
    (``remote``) the worker protocol's rules (REMOTE, below). Each violation is (problem, job
    id)."""
    cur = conn.cursor(row_factory=tuple_row)
    text = NOTHING_LOST + (EFFECTS_ONCE if _exists(cur, schema, "effects") else "")
    text += SETTLED_AS_INTENDED
    if _exists(cur, schema, "starts"):
        text += STARTS_BOUNDED
    events = _events_checked(conn, schema)
    text += EVENTS_CONSISTENT if events else ""
    text += "UNION ALL" + REMOTE if remote else ""
    return _run(conn, schema, text, {"slack": slack, "transactional": list(transactional),
                                     "recorded": list(recorded), "intended": list(intended),
                                     "enqueued": list(enqueued), "max_lease": MAX_LEASE_TTL,
                                     **(EVENT_PARAMS if events else {})})


@dataclass
class Outcome:
    """What ``after_faults`` found: the violations and the run's figures."""

    violations: list
    figures: dict = field(default_factory=dict)

    def losses(self) -> int:
        return sum(1 for problem, _ in self.violations if problem.startswith("lost"))


def figures(conn, schema: str) -> dict:
    if not _exists(conn.cursor(row_factory=tuple_row), schema, "starts"):
        return {}
    cur = conn.cursor()
    cur.execute(sql.SQL(FIGURES).format(schema=sql.Identifier(schema)))
    names = [c.name for c in cur.description]
    return dict(zip(names, cur.fetchone()))


def after_faults(conn, schema: str, *, ttl: float, reaper_period: float, settle: float = 60.0,
                 slack: float = 5.0, **rules) -> Outcome:
    """Once the faults stopped: wait for every expired lease to be resolved within TTL plus the
    reaper period (plus ``slack``), then for every job to settle (up to ``settle`` s), then
    check. A wait that times out is itself a violation ('lease stuck' / 'never settled'), so
    the caller gets every problem at once instead of a bare timeout."""
    found = []
    try:
        wait_for(lambda: _run(conn, schema, OPEN_LEASES, {"period": reaper_period + slack})[0][0] == 0,
                 timeout=ttl + reaper_period + 2 * slack, interval=0.1,
                 message="expired leases to be reaped")
    except TimeoutError:
        found.append(("lease stuck past TTL + reaper period", None))
    try:
        wait_for(lambda: _run(conn, schema, UNSETTLED, {})[0][0] == 0, timeout=settle,
                 interval=0.1, message="every job to settle")
    except TimeoutError:
        found.append(("never settled", None))
    found += violations(conn, schema, slack=ttl + reaper_period + slack, **rules)
    return Outcome(found, figures(conn, schema))


# The worker protocol (/api/v1/workers, jobrun/web/routes_workers.py): an attempt a remote
# worker ended names it (worker_host is its id, remote:NAME:HEX, and no pid or child); no
# attempt row is under a token the job never had; each job a remote worker finished has
# exactly one attempt row under its last token (no outcome accepted twice, or under a stale
# token: the report's 409 changed nothing). (Two rows under one token cannot be: job_attempts'
# key is (job_id, lease_token).)
REMOTE = """
SELECT 'remote attempt not naming its worker', a.job_id FROM {schema}.job_attempts a
 WHERE a.worker_host LIKE 'remote:%%'
   AND (a.worker_pid IS NOT NULL OR a.worker_child IS NOT NULL
        OR a.worker_host !~ '^remote:[A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}:[0-9a-f]{{16}}$')
UNION ALL
SELECT 'attempt under a token never issued', a.job_id FROM {schema}.job_attempts a
  JOIN {schema}.jobs j ON j.id = a.job_id WHERE a.lease_token > j.lease_token
UNION ALL
SELECT 'remote job finished without its attempt', j.id FROM {schema}.jobs j
 WHERE j.status IN ('succeeded', 'dead')
   AND EXISTS (SELECT 1 FROM {schema}.job_attempts a
                WHERE a.job_id = j.id AND a.worker_host LIKE 'remote:%%')
   AND (SELECT count(*) FROM {schema}.job_attempts a
         WHERE a.job_id = j.id AND a.lease_token = j.lease_token) <> 1
"""


def remote_attempts(conn, schema: str) -> list:
    """The worker protocol's rules (REMOTE); each violation is (problem, job id)."""
    return _run(conn, schema, REMOTE, {})
