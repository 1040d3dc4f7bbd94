"""Typed binary arrays (jobrun/store/arrays.py) read back by a real PostgreSQL as sent."""

from __future__ import annotations

import math

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobrun.store.arrays import Float8s, Int4s, Int8s, Texts

from tests.profiles import examples


@pytest.fixture(scope="module")
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


# Text PostgreSQL can hold: any code point but NUL and the surrogates.
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=40)
int8 = st.integers(-2**63, 2**63 - 1)
int4 = st.integers(-2**31, 2**31 - 1)
float8 = st.floats(allow_nan=False)


@settings(max_examples=examples(60), deadline=None)
@given(ints=st.lists(int8, max_size=20), small=st.lists(st.one_of(st.none(), int4), max_size=20),
       floats=st.lists(float8, max_size=20), words=st.lists(st.one_of(st.none(), texts), max_size=20))
def test_each_array_reads_back_as_sent(conn, ints, small, floats, words):
    cur = psycopg.RawCursor(conn)
    cur.execute("SELECT $1::bigint[], $2::integer[], $3::float8[], $4::text[],"
                " cardinality($4::text[])",
                [Int8s(ints), Int4s(small), Float8s(floats), Texts(words)])
    got_ints, got_small, got_floats, got_words, count = cur.fetchone()
    assert (got_ints, got_small, got_words) == (ints, small, words)
    assert count == len(words)
    assert len(got_floats) == len(floats)
    assert all(a == b or (math.isinf(a) and a == b) for a, b in zip(got_floats, floats))


def test_a_batch_unnests_into_rows_as_the_completion_reads_it(conn):
    cur = psycopg.RawCursor(conn)
    cur.execute("SELECT * FROM unnest($1::bigint[], $2::text[], $3::integer[]) AS r(id, error, child)",
                [Int8s([7, 8]), Texts(["boom", None]), Int4s([None, 2])])
    assert cur.fetchall() == [(7, "boom", None), (8, None, 2)]


def test_a_value_out_of_its_type_is_refused_before_anything_is_sent(conn):
    cur = psycopg.RawCursor(conn)
    with pytest.raises(psycopg.DataError):
        cur.execute("SELECT $1::bigint[]", [Int8s([2**63])])
    cur.execute("SELECT 1")  # the connection is still usable
    assert cur.fetchone() == (1,)
