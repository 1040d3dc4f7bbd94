"""Every query the code names exists among the named queries (jobrun/sql/*.sql), and every
named query is named by some code.

``q.claim_jobs`` fails only when it runs (``AttributeError: no query named ...``), and some
queries run only on a rare path (a lost lease, a reload, a leader's takeover): a renamed or
deleted block would surface in production. This reads the code instead: every attribute taken
from a :class:`~jobrun.sql.Queries` (by its usual names: ``q``, ``queries``, ``self.q``,
``client.queries``, ``for_schema(...)``), every ``positional("name")`` and ``getattr(q,
"name")``, in jobrun/, tests/ and benchmarks/, must be a loaded query. A ``q`` that holds
something else names attributes of its own; those of :class:`Queries` itself and of ``str``
are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jobrun.admin import roles
from jobrun.sql import Queries, raw_queries

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("jobrun", "tests", "benchmarks")
LOADER = REPO / "jobrun" / "sql" / "__init__.py"  # where ``q`` is one parsed block
RECEIVERS = ("q", "queries")
NOT_QUERIES = set(dir(Queries("jobrun"))) | set(dir(str))


def _is_queries(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in RECEIVERS
    if isinstance(node, ast.Attribute):
        return node.attr in RECEIVERS
    if isinstance(node, ast.Call):
        return ast.unparse(node.func).split(".")[-1] in ("for_schema", "Queries")
    return False


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def names_in(source: str) -> set[str]:
    """The query names ``source`` refers to by name (see the module's docstring)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_queries(node.value) \
                and node.attr not in NOT_QUERIES and not node.attr.startswith("_"):
            found.add(node.attr)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "positional" \
                    and _literal(node.args[0]):
                found.add(_literal(node.args[0]))
            elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2 \
                    and _is_queries(node.args[0]) and _literal(node.args[1]):
                found.add(_literal(node.args[1]))
    return found


def named_by_code() -> dict[str, set[str]]:
    """Query name -> the files (relative to the repository) that name it."""
    uses: dict[str, set[str]] = {}
    for top in SOURCES:
        for path in sorted((REPO / top).rglob("*.py")):
            if path == LOADER or any(part.startswith(".venv") for part in path.parts):
                continue  # (benchmarks/.venv-peers: the peers' own code, not ours)
            for name in names_in(path.read_text()):
                uses.setdefault(name, set()).add(str(path.relative_to(REPO)))
    for name in roles.BLOCKS:  # run by getattr(q, block) over this list
        uses.setdefault(name, set()).add("jobrun/admin/roles.py")
    return uses


def test_every_query_the_code_names_exists() -> None:
    uses = named_by_code()
    assert {"claim_jobs", "complete_jobs", "observe_queues", "roles_create"} <= set(uses)
    missing = {name: sorted(files) for name, files in uses.items() if name not in raw_queries()}
    assert missing == {}


def test_every_query_is_named_by_some_code() -> None:
    """A block no code names is dead SQL a reader still has to read: remove it."""
    unused = sorted(set(raw_queries()) - set(named_by_code()))
    assert unused == [], f"queries no code names: {unused}"


def test_a_query_the_code_names_but_no_file_defines_is_found() -> None:
    source = ("def run(conn, q, client, schema):\n"
              "    conn.execute(q.no_such_query)\n"
              "    conn.execute(client.queries.nor_this_one)\n"
              "    text, names = q.positional('nor_a_numbered_one')\n"
              "    getattr(for_schema(schema), 'nor_one_by_getattr')\n"
              "    return q.schema, q.channel, 'x'.replace('x', 'y'), conn.other_attribute\n")
    named = names_in(source)
    assert named == {"no_such_query", "nor_this_one", "nor_a_numbered_one",
                     "nor_one_by_getattr"}
    assert not named & set(raw_queries())
