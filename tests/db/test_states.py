"""jobrun/states.py is the one definition of statuses, outcomes and moves: the database's rules
(the job_status domain, the attempts' outcome check, the partial indexes, the targets
finish_jobs accepts) hold exactly its values. And the one way a lease ends, finish_jobs, is
what the reaper goes through, with each task's own backoff."""

from __future__ import annotations

import asyncio
import math
import re

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.rows import dict_row

from jobrun import states
from jobrun.policy import RetryPolicy
from jobrun.sql import for_schema
from jobrun.states import Status
from jobrun.worker.reaper import Reaper
from tests.dbview import lease
from tests.profiles import examples

_QUOTED = re.compile(r"'((?:[^']|'')*)'")


def quoted_values(definition: str) -> set[str]:
    """The string literals of a constraint's or an index's definition."""
    return {m.replace("''", "'") for m in _QUOTED.findall(definition)}


def difference(found: set[str], expected: tuple[str, ...]) -> str | None:
    """How the database's values differ from the module's, or None when they are the same."""
    missing, extra = set(expected) - found, found - set(expected)
    if not missing and not extra:
        return None
    return f"missing in the database: {sorted(missing)}; only in the database: {sorted(extra)}"


def domain_check(conn: psycopg.Connection, schema: str, domain: str) -> str:
    [(definition,)] = conn.execute(
        "SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k"
        "  JOIN pg_type t ON t.oid = k.contypid"
        " WHERE t.typname = %s AND t.typnamespace = %s::regnamespace",
        [domain, schema]).fetchall()
    return definition


def table_check(conn: psycopg.Connection, schema: str, table: str, name: str) -> str:
    [(definition,)] = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conname = %s AND conrelid = %s::regclass",
        [name, f'"{schema}".{table}']).fetchall()
    return definition


def index_predicate(conn: psycopg.Connection, schema: str, index: str) -> str:
    [(definition,)] = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
        [schema, index]).fetchall()
    return definition.split(" WHERE ", 1)[1]


def test_the_status_domain_holds_exactly_the_statuses(admin_conn, schema):
    definition = domain_check(admin_conn, schema, "job_status")
    assert difference(quoted_values(definition), states.STATUSES) is None, definition
    # The comparison notices a value too few or too many.
    assert difference(quoted_values(definition), states.STATUSES + ("paused",))
    assert difference(quoted_values(definition), states.STATUSES[1:])


def test_the_attempt_outcome_check_holds_exactly_the_outcomes(admin_conn, schema):
    definition = table_check(admin_conn, schema, "job_attempts", "outcome_valid")
    assert difference(quoted_values(definition), states.OUTCOMES) is None, definition
    assert difference(quoted_values(definition), states.OUTCOMES[:-1])


def test_the_partial_indexes_name_the_finished_statuses_and_the_failures(admin_conn, schema):
    finished = index_predicate(admin_conn, schema, "jobs_finished")
    assert difference(quoted_values(finished), states.TERMINAL) is None, finished
    failed = index_predicate(admin_conn, schema, "job_attempts_failed")
    assert difference(quoted_values(failed), states.FAILURES) is None, failed


def test_the_status_domain_refuses_what_the_module_does_not_name(admin_conn, schema):
    domain = sql.Identifier(schema, "job_status")
    for status in states.STATUSES:
        admin_conn.execute(sql.SQL("SELECT %s::text::{}").format(domain), [status])
    with pytest.raises(psycopg.errors.CheckViolation):
        admin_conn.execute(sql.SQL("SELECT 'paused'::text::{}").format(domain))


def test_the_moves_are_a_closed_graph_and_only_finished_jobs_are_terminal():
    assert set(states.TRANSITIONS) == set(states.STATUSES)
    assert all(targets <= set(states.STATUSES) for targets in states.TRANSITIONS.values())
    assert states.FINISHES == states.TRANSITIONS[Status.LEASED]
    assert set(states.TERMINAL) <= states.FINISHES
    assert not states.allowed(Status.SUCCEEDED, Status.QUEUED)
    assert states.allowed(Status.DEAD, Status.QUEUED)
    assert not states.allowed(Status.QUEUED, Status.SUCCEEDED)  # a job runs before it succeeds
    assert set(states.FAILURES) < set(states.OUTCOMES)


def _finish(conn: psycopg.Connection, schema: str, job: dict, status: str) -> list:
    return conn.execute(for_schema(schema).complete_jobs, {
        "ids": [job["id"]], "tokens": [job["lease_token"]], "statuses": [status],
        "outcomes": ["failed"], "delays": [0.0], "errors": ["e"], "tracebacks": [None],
        "results": [None], "children": [0], "crashed": [0], "logs": [None], "refunds": [0],
        "owner": "o", "host": "h", "pid": 1}).fetchall()


@pytest.mark.parametrize("status", states.STATUSES)
def test_finish_jobs_moves_a_leased_job_only_where_the_module_allows(pg_dsn, client, schema,
                                                                      status):
    client.enqueue("t")
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        [job] = lease(conn, schema, 1, "o")
        if states.allowed(Status.LEASED, status):
            assert [r["job_id"] for r in _finish(conn, schema, job, status)] == [job["id"]]
            assert client.get(job["id"]).status == status
        else:
            with pytest.raises(psycopg.Error) as info:
                _finish(conn, schema, job, status)
            assert info.value.sqlstate == "JR001", info.value  # InvalidInput (jobrun/store/db.py)
            assert client.get(job["id"]).status == Status.LEASED


# ---- the reaper's backoff: the task's own ladder -------------------------------------------

SLOW = RetryPolicy(base=1.0, factor=10.0, cap=1000.0)
ATTEMPT = 3  # the ceiling after the 3rd start: 100 s with SLOW, 4 s with the default ladder
JOBS = 20  # per task; all 20 of SLOW's delays under 4 s: 0.04 ** 20


def test_the_reaper_backs_off_with_the_task_s_own_ladder(pg_dsn, client, schema):
    """A task whose ladder the master knows (from its children's ready frames) is requeued
    under that ladder's ceiling; a task it does not know, under the default's. Before, every
    job was requeued with the default base and cap and a factor of 2."""
    client.enqueue_many([("slow", i) for i in range(JOBS)] + [("other", i) for i in range(JOBS)],
                        max_attempts=10)
    jobs = sql.Identifier(schema, "jobs")
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        assert len(lease(conn, schema, 2 * JOBS, "gone")) == 2 * JOBS
        conn.execute(sql.SQL("UPDATE {} SET attempts = %s,"
                             " lease_expires_at = now() - interval '1 s'").format(jobs), [ATTEMPT])
        before = conn.execute("SELECT now() AS t").fetchone()["t"]
        tasks = {"slow": {"retry": [SLOW.base, SLOW.factor, SLOW.cap]}}  # "other": not known
        reaper = Reaper(pg_dsn, for_schema(schema), interval=1.0, retention=0.0,
                        tasks=lambda: tasks)

        async def reap() -> int:
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True,
                                                             row_factory=dict_row) as aconn:
                return await reaper.reap(aconn)

        assert asyncio.run(reap()) == 2 * JOBS
        after = conn.execute("SELECT now() AS t").fetchone()["t"]
        rows = conn.execute(sql.SQL("SELECT task, status, run_at FROM {}").format(jobs)).fetchall()
    assert {r["status"] for r in rows} == {Status.QUEUED}
    # The delay of each: its run_at less the reap's clock, which lies between before and after.
    low = {t: [(r["run_at"] - after).total_seconds() for r in rows if r["task"] == t]
           for t in ("slow", "other")}
    high = {t: [(r["run_at"] - before).total_seconds() for r in rows if r["task"] == t]
            for t in ("slow", "other")}
    slow_ceiling, default_ceiling = SLOW.ceiling(ATTEMPT), RetryPolicy().ceiling(ATTEMPT)
    assert (slow_ceiling, default_ceiling) == (100.0, 4.0)
    assert max(low["slow"]) <= slow_ceiling and min(high["slow"]) >= 0
    assert max(high["slow"]) > default_ceiling, high["slow"]  # factor 10, not 2
    assert max(low["other"]) <= default_ceiling and min(high["other"]) >= 0


POLICIES = [RetryPolicy(), RetryPolicy(1.0, 10.0, 1000.0), RetryPolicy(0.5, 1.0, 3.0),
            RetryPolicy(2.0, 0.5, 60.0), RetryPolicy(0.0, 2.0, 300.0), RetryPolicy(5.0, 2.0, 1.0),
            RetryPolicy(1e-3, 1e6, 86400.0), RetryPolicy(1.0, 1e300, 10.0)]


def _sql_ceilings(conn: psycopg.Connection, schema: str,
                  cases: list[tuple[RetryPolicy, int]]) -> list[tuple[float]]:
    return conn.execute(
        sql.SQL("SELECT {}(u.n, u.b, u.f, u.c) FROM unnest(%s::int[], %s::float8[], %s::float8[],"
                " %s::float8[]) WITH ORDINALITY AS u(n, b, f, c, i) ORDER BY u.i").format(
            sql.Identifier(schema, "retry_ceiling")),
        [[n for _, n in cases], [p.base for p, _ in cases], [p.factor for p, _ in cases],
         [p.cap for p, _ in cases]]).fetchall()


def _same_ceilings(got: list[tuple[float]], cases: list[tuple[RetryPolicy, int]]) -> None:
    # Within a billionth, or both below 1e-299 s (retry_ceiling's logarithms stop short of
    # the smallest floats: any such delay is none).
    for (policy, n), (value,) in zip(cases, got, strict=True):
        assert math.isclose(value, policy.ceiling(n), rel_tol=1e-9, abs_tol=1e-299), (policy, n)


def test_retry_ceiling_in_sql_is_the_policy_s_ceiling(admin_conn, schema):
    """The reaper's ceiling (retry_ceiling, in logarithms) is RetryPolicy.ceiling, also where
    a power would overflow."""
    cases = [(p, n) for p in POLICIES for n in (1, 2, 3, 7, 60, 61, 1000)]
    _same_ceilings(_sql_ceilings(admin_conn, schema, cases), cases)
    # Written as constants, the planner folds the call: no logarithm of 0 on the way.
    ceiling = sql.Identifier(schema, "retry_ceiling")
    for args, expected in [("3, 0.0, 2.0, 300.0", 0.0), ("3, 1.0, 0.0, 300.0", 0.0),
                           ("1, 1.0, 0.0, 300.0", 1.0), ("3, 1.0, 2.0, 0.0", 0.0)]:
        query = sql.SQL("SELECT {}(" + args + ")").format(ceiling)
        assert admin_conn.execute(query).fetchone()[0] == expected, args


# The ladders reap_params sends: finite, a positive factor (base and cap below 0 mean "at
# once" to both, a ceiling below 0 in Python and 0 in SQL, and are left out here).
ladders = st.builds(RetryPolicy, st.floats(0, 1e6), st.floats(1e-6, 1e6), st.floats(0, 1e9))


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(st.tuples(ladders, st.integers(1, 1000)), min_size=1, max_size=50))
def test_retry_ceiling_in_sql_is_the_policy_s_ceiling_for_any_ladder_sent(admin_conn, schema,
                                                                          cases):
    _same_ceilings(_sql_ceilings(admin_conn, schema, cases), cases)
