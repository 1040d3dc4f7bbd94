"""The master's and its children's PostgreSQL connections, told apart in pg_stat_activity.

The master sets no application_name, so a backend is known by the last statement it ran: each
of the master's connections runs its own named queries (LISTEN; claim_plain/claim_jobs/unclaim/
db_now; complete_jobs; heartbeat; registry_*; reap_expired/purge_batch; leader_acquire), and a
child's transactional connection runs effect_claim/complete_transactional inside explicit
transactions. Our own connections (the test's and the handlers' start record) carry an
application_name starting with ``faults-`` and are left out.
"""

from __future__ import annotations

import re

from jobrun.sql import raw_queries, render

KINDS = ("listen", "claim", "complete", "heartbeat", "registry", "reaper", "leader", "child")

_BY_QUERY = {
    "claim": ("claim_jobs", "claim_plain", "unclaim", "db_now"),
    "complete": ("complete_jobs", "cap_max_attempts"),
    "heartbeat": ("heartbeat",),
    "registry": ("registry_upsert", "registry_delete", "registry_purge_stale", "registry_live",
                 "metrics_queue_depth"),
    "reaper": ("reap_expired", "purge_batch"),
    "leader": ("leader_acquire",),
    "child": ("effect_claim", "complete_transactional"),
}

ACTIVITY = """
SELECT pid, query FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND datname = current_database()
   AND pid <> pg_backend_pid() AND application_name NOT LIKE 'faults-%%'
"""


def _squeeze(text: str) -> str:
    """Comments dropped, whitespace squeezed."""
    return re.sub(r"\s+", " ", re.sub(r"--[^\n]*", "", text or "")).strip()


def _prefix(text: str) -> str:
    """The query's text up to its first parameter: what psycopg sends (with $n for
    parameters) starts with it."""
    return _squeeze(text.split("%(")[0])[:80]


def prefixes(schema: str) -> list[tuple[str, str]]:
    raw = raw_queries()
    found = []
    for kind, names in _BY_QUERY.items():
        for name in names:
            found.append((_prefix(render(raw[name].text, schema)), kind))
    # Longest first, so a prefix that extends another wins.
    return sorted(found, key=lambda p: -len(p[0]))


def kind_of(query: str, schema: str, table=None) -> str:
    text = _squeeze(query)
    if text.upper().startswith("LISTEN"):
        return "listen"
    if text.upper() in ("BEGIN", "COMMIT", "ROLLBACK") or '.effects"' in text or ".effects " in text:
        return "child"  # the master's connections are autocommit: only children open transactions
    for prefix, kind in table or prefixes(schema):
        if text.startswith(prefix):
            return kind
    return "other"


def backends(conn, schema: str) -> dict[str, list[int]]:
    """{kind: backend pids} of the connections in this database, our own left out."""
    table = prefixes(schema)
    found: dict[str, list[int]] = {}
    for pid, query in conn.execute(ACTIVITY).fetchall():
        found.setdefault(kind_of(query, schema, table), []).append(pid)
    return found


def terminate(conn, pid: int) -> bool:
    return bool(conn.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0])


__all__ = ["KINDS", "backends", "kind_of", "terminate"]
