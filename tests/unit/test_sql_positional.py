"""Queries the master runs on a raw cursor: numbered as psycopg itself numbers them."""

from __future__ import annotations

import pytest
from psycopg._queries import PostgresQuery
from psycopg.adapt import Transformer

from jobrun.sql import Queries, raw_queries
from jobrun.worker.claimer import claim_params

pytestmark = pytest.mark.unit


def test_the_claim_is_sent_as_psycopg_would_send_it() -> None:
    q = Queries("jobrun")
    params = claim_params(["default", "emails"], 8, "host:1:abc", 30.0, rooms=[None, 2])
    named = PostgresQuery(Transformer())
    named.convert(q.claim_jobs, params)
    text, names = q.positional("claim_jobs")
    assert text.encode() == named.query
    assert set(names) == set(params)
    assert q.positional("claim_jobs") is q.positional("claim_jobs")  # numbered once


def test_a_query_with_other_placeholders_is_refused() -> None:
    q = Queries("jobrun")
    binary = next(name for name, query in raw_queries().items() if ")b" in query.text)
    escaped = next(name for name, query in raw_queries().items() if "%%" in query.text)
    for name in (binary, escaped):
        with pytest.raises(RuntimeError, match="cannot be numbered"):
            q.positional(name)
