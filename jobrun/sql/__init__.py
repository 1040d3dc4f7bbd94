"""Named SQL, loaded once from the .sql files beside this module.

Every ``*.sql`` file here (``queries.sql``: producers, admin and the master's hot path;
``observe.sql``: metrics, the worker registry and ``jobrun top``) holds blocks that start with
``-- name: <name>`` followed by a one-line ``-- <description>``; names are unique across files. Migrations are ``migrations/NNNN_<name>.sql``. Both use ``{schema}``
where the schema name goes; it is inserted by psycopg's ``sql.Identifier`` (quoted, and
validated against a strict pattern before that), never by string formatting of user input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from psycopg import sql

from .. import validate

_NAME_RE = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.M)
_PARAM_RE = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class Query:
    name: str
    doc: str
    text: str


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


@lru_cache(maxsize=None)
def raw_queries() -> dict[str, Query]:
    queries: dict[str, Query] = {}
    files = sorted(e.name for e in resources.files(__package__).iterdir() if e.name.endswith(".sql"))
    for filename in files:
        _parse(_read(filename), queries)
    return queries


def _parse(source: str, queries: dict[str, Query]) -> None:
    parts = _NAME_RE.split(source)
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = body.strip().splitlines()
        if not lines or not lines[0].startswith("-- "):
            raise RuntimeError(f"query {name} has no description line")
        if name in queries:
            raise RuntimeError(f"query {name} is defined twice")
        queries[name] = Query(name, lines[0][3:].strip(), "\n".join(lines[1:]).strip())


@lru_cache(maxsize=None)
def migrations() -> tuple[Migration, ...]:
    folder = resources.files(__package__).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        m = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    found.sort(key=lambda mig: mig.version)
    if [mig.version for mig in found] != list(range(1, len(found) + 1)):
        raise RuntimeError("migration versions must run 1, 2, 3, ... without gaps")
    return tuple(found)


def channel(schema: str) -> str:
    """The notification channel of a schema's "jobs ready" announcements."""
    return f"{schema}_ready"


def schedules_channel(schema: str) -> str:
    """The notification channel of a schema's "schedules changed" announcements."""
    return f"{schema}_schedules"


def render(text: str, schema: str) -> str:
    """Insert the (validated, quoted) schema name, and its channel names ({channel}: jobs
    ready; {schedules_channel}: schedules changed; {ready_channel}: the first as a string, for
    pg_notify), into a query or migration."""
    validate.schema_name(schema)
    return sql.SQL(text).format(schema=sql.Identifier(schema),
                                channel=sql.Identifier(channel(schema)),
                                ready_channel=sql.Literal(channel(schema)),
                                schedules_channel=sql.Identifier(schedules_channel(schema)),
                                ).as_string(None)


class Queries:
    """All named queries rendered for one schema; ``q.claim_jobs`` is a query string."""

    def __init__(self, schema: str) -> None:
        self.schema = validate.schema_name(schema)
        self.channel = channel(schema)
        self.schedules_channel = schedules_channel(schema)
        self._texts = {name: render(q.text, schema) for name, q in raw_queries().items()}
        self._positional: dict[str, tuple[str, tuple[str, ...]]] = {}

    def __getattr__(self, name: str) -> str:
        try:
            return self._texts[name]
        except KeyError:
            raise AttributeError(f"no query named {name!r}") from None

    def positional(self, name: str) -> tuple[str, tuple[str, ...]]:
        """A query with its ``%(name)s`` parameters numbered as PostgreSQL's ``$1, $2, ...``,
        and the names in that order: for statements sent as they are (jobrun.store.direct).
        psycopg parses a named query at every execution once it is longer than 4 KB (the
        claim is 8 KB): about 0.1 ms of the master's CPU a claim."""
        found = self._positional.get(name)
        if found is None:
            found = numbered(getattr(self, name))
            if found is None:
                raise RuntimeError(f"query {name} cannot be numbered: it has other % or $ text")
            self._positional[name] = found
        return found


def numbered(text: str) -> tuple[str, tuple[str, ...]] | None:
    """``text`` with its ``%(name)s`` parameters numbered ``$1, $2, ...``, and the names in
    that order; None if it holds any other % (a binary %(x)b, an escaped %%: psycopg would
    rewrite them, a statement sent as it is would not) or a $ already."""
    if "%" in _PARAM_RE.sub("", text) or "$" in text:
        return None
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PARAM_RE.sub(number, text), tuple(names)


@lru_cache(maxsize=32)
def for_schema(schema: str) -> Queries:
    return Queries(schema)
