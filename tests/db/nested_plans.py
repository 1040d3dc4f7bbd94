"""The plans of statements run inside functions (finish_jobs), as auto_explain reports them.

An EXPLAIN of a statement that calls a PL/pgSQL function shows only the call; auto_explain,
told to report nested statements to the client, shows the plans each statement in it ran
with (its cached generic plan once the session has settled on one). Loading it takes a
superuser, which the throwaway test cluster is; on a server where the test role is not, the
tests that need it are skipped.
"""

from __future__ import annotations

import psycopg
import pytest

SETTINGS = ("SET auto_explain.log_min_duration = 0", "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_level = notice")


def _loaded(error: Exception | None) -> None:
    if error is not None:
        pytest.skip(f"auto_explain cannot be loaded here: {error}")


def report_plans(conn: psycopg.Connection) -> list[str]:
    """From now on, the plan of every statement ``conn`` runs (nested ones too) is appended
    to the list returned."""
    plans: list[str] = []
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        _loaded(exc)
    for setting in SETTINGS:
        conn.execute(setting)
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    return plans


async def report_plans_async(conn: psycopg.AsyncConnection) -> list[str]:
    """report_plans for an async connection."""
    plans: list[str] = []
    try:
        await conn.execute("LOAD 'auto_explain'", prepare=False)
    except psycopg.Error as exc:
        _loaded(exc)
    for setting in SETTINGS:
        await conn.execute(setting, prepare=False)
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    return plans


def plan_of(plans: list[str], start: str) -> str:
    """The one reported plan whose statement text starts with ``start`` (after spaces)."""
    found = [p for p in plans if p.split("Query Text:", 1)[-1].lstrip().startswith(start)]
    assert len(found) == 1, plans
    return found[0]
