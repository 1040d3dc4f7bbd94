"""Input validation: pure functions, tested as properties against independent oracles.

The oracles below are written from the rules' prose (character classes and lengths), not
from the module's regular expressions, so a mistake in a pattern shows up as a disagreement.
One test also checks that the Python rules agree with the CHECK constraints in PostgreSQL.
"""

from __future__ import annotations

import json
import math
import string

import psycopg
from psycopg import sql
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jobrun import validate
from jobrun.errors import InvalidInput

from tests.profiles import examples

LETTERS = string.ascii_letters
DIGITS = string.digits
LOWER = string.ascii_lowercase

# --- oracles -------------------------------------------------------------------------------


def task_ok(s: str) -> bool:
    rest = LETTERS + DIGITS + "_.:-"
    return 1 <= len(s) <= 200 and s[0] in LETTERS + "_" and all(c in rest for c in s[1:])


def queue_ok(s: str) -> bool:
    rest = LETTERS + DIGITS + "_.-"
    return 1 <= len(s) <= 63 and s[0] in LETTERS + DIGITS and all(c in rest for c in s[1:])


def schema_ok(s: str) -> bool:
    rest = LOWER + DIGITS + "_"
    return 1 <= len(s) <= 51 and s[0] in LOWER + "_" and all(c in rest for c in s[1:])


def accepts(fn, value) -> bool:
    try:
        fn(value)
    except InvalidInput:
        return False
    return True


def names(first: str, rest: str, max_len: int):
    return st.builds(lambda a, b: a + b, st.sampled_from(first),
                     st.text(alphabet=rest, max_size=max_len - 1))


# Characters that are never part of any name, plus a few look-alikes.
BAD_CHARS = st.sampled_from(list(" /\\'\"$;,!?*()[]{}<>@#%^&+=|~`\n\t\x00") + ["é", "ı", "٣", "\u200b"])

# --- names ---------------------------------------------------------------------------------

NAME_RULES = [
    (validate.task_name, task_ok, LETTERS + "_", LETTERS + DIGITS + "_.:-", 200),
    (validate.queue_name, queue_ok, LETTERS + DIGITS, LETTERS + DIGITS + "_.-", 63),
    (validate.schema_name, schema_ok, LOWER + "_", LOWER + DIGITS + "_", 51),
]
RULE_IDS = ["task", "queue", "schema"]


@pytest.mark.parametrize("fn,oracle,first,rest,max_len", NAME_RULES, ids=RULE_IDS)
def test_generated_valid_names_are_accepted(fn, oracle, first, rest, max_len):
    @given(names(first, rest, max_len))
    def check(name):
        assert oracle(name)
        assert fn(name) == name

    check()


@pytest.mark.parametrize("fn,oracle,first,rest,max_len", NAME_RULES, ids=RULE_IDS)
def test_names_with_a_bad_character_are_rejected(fn, oracle, first, rest, max_len):
    @given(names(first, rest, max_len), BAD_CHARS, st.integers(min_value=0))
    def check(name, bad, at):
        at %= len(name) + 1
        broken = name[:at] + bad + name[at:]
        with pytest.raises(InvalidInput, match="invalid .* name"):
            fn(broken)

    check()


@pytest.mark.parametrize("fn,oracle,first,rest,max_len", NAME_RULES, ids=RULE_IDS)
def test_names_agree_with_the_oracle_on_arbitrary_text(fn, oracle, first, rest, max_len):
    @given(st.one_of(st.text(max_size=max_len + 5),
                     st.text(alphabet=first + rest + "-:. ", max_size=max_len + 5)))
    @example("")
    @example(first[0] * max_len)
    @example(first[0] * (max_len + 1))
    @example("1abc")
    @example("abc\n")
    def check(name):
        assert accepts(fn, name) == oracle(name)

    check()


@pytest.mark.parametrize("fn", [validate.task_name, validate.queue_name, validate.schema_name],
                         ids=RULE_IDS)
@pytest.mark.parametrize("value", [None, 1, b"emails", ["a"], True])
def test_names_must_be_strings(fn, value):
    with pytest.raises(InvalidInput):
        fn(value)


def test_name_errors_name_the_value_and_the_rule():
    with pytest.raises(InvalidInput) as info:
        validate.queue_name("bad queue")
    assert "'bad queue'" in str(info.value)
    assert "63" in str(info.value)


def test_python_name_rules_agree_with_the_check_constraints(pg_dsn, schema):
    """The same names pass and fail in Python and in the jobs table's rules (the domains of
    its task and queue columns, migration 0012)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rules = {name: domain for name, domain in conn.execute(
            "SELECT k.conname, t.typname FROM pg_constraint k JOIN pg_type t ON t.oid = k.contypid"
            " JOIN pg_attribute a ON a.atttypid = t.oid"
            " WHERE a.attrelid = %s::regclass AND a.attname IN ('task', 'queue')",
            [f'"{schema}".jobs']).fetchall()}
        assert set(rules) == {"task_name_valid", "queue_name_valid"}

        def sql_accepts(kind: str, value: str) -> bool:
            domain = sql.Identifier(schema, rules[f"{kind}_name_valid"])
            try:
                conn.execute(sql.SQL("SELECT %s::text::{}").format(domain), [value])
            except psycopg.errors.CheckViolation:
                return False
            return True

        @settings(max_examples=examples(150), deadline=None)
        @given(st.one_of(st.text(max_size=210).filter(lambda s: "\x00" not in s),
                         names(LETTERS + "_", LETTERS + DIGITS + "_.:-", 200),
                         names(LETTERS + DIGITS, LETTERS + DIGITS + "_.-", 63)))
        @example("a" * 200)
        @example("a" * 201)
        @example("a" * 63)
        @example("a" * 64)
        @example("email.send\n")
        def check(value):
            assert sql_accepts("task", value) == accepts(validate.task_name, value)
            assert sql_accepts("queue", value) == accepts(validate.queue_name, value)

        check()


# --- duration ------------------------------------------------------------------------------

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
parts = st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.sampled_from(sorted(UNITS))),
                 min_size=1, max_size=6)


def render(ps) -> str:
    return "".join(f"{n}{u}" for n, u in ps)


@given(parts)
@example([(1, "h"), (30, "m"), (15, "s")])
@example([(250, "ms")])
def test_duration_round_trips_compound_strings(ps):
    expected = sum(n * UNITS[u] for n, u in ps)
    assert validate.duration(render(ps)) == pytest.approx(expected)


def test_duration_examples():
    assert validate.duration("1h30m15s") == 5415
    assert validate.duration("7d") == 7 * 86400
    assert validate.duration("250ms") == pytest.approx(0.25)
    assert validate.duration("1.5h") == 5400
    assert validate.duration(" 2W ") == 2 * 604800
    assert validate.duration(0) == 0


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False))
def test_duration_bare_numbers_are_seconds(x):
    assert validate.duration(x) == x
    assert validate.duration(repr(x)) == x
    if x == int(x):
        assert validate.duration(int(x)) == x
        assert validate.duration(str(int(x))) == x


GARBAGE = st.sampled_from(list("x!@#$%^&*()/,;:?<>[]{}|~`'\"") + ["é", "--", "1.2.3"])


@given(parts, GARBAGE, st.integers(min_value=0))
def test_duration_rejects_garbage_anywhere(ps, junk, at):
    text = render(ps)
    at %= len(text) + 1
    with pytest.raises(InvalidInput, match="invalid duration"):
        validate.duration(text[:at] + junk + text[at:])


@given(st.one_of(parts.map(render), st.floats(min_value=1e-9, max_value=1e9).map(repr)))
def test_duration_rejects_negative(text):
    with pytest.raises(InvalidInput):
        validate.duration("-" + text)


@pytest.mark.parametrize("value", [
    "", "   ", "s", "h1", "1 h", "1h 30m", "1x", "inf", "-inf", "nan", "Infinity", "1e400",
    float("inf"), float("nan"), -1, -0.5, True, False, None, [], b"5s",
])
def test_duration_rejects_bad_values(value):
    with pytest.raises(InvalidInput):
        validate.duration(value)


# --- integers ------------------------------------------------------------------------------


@given(st.integers())
def test_priority_range(n):
    assert accepts(validate.priority, n) == (-100 <= n <= 100)


@given(st.integers())
def test_max_attempts_range(n):
    assert accepts(validate.max_attempts, n) == (1 <= n <= 1000)


def test_max_attempts_none_means_default():
    assert validate.max_attempts(None) is None


@pytest.mark.parametrize("fn", [validate.priority, validate.max_attempts])
@pytest.mark.parametrize("value", [True, False, 1.0, "1", 2.5, float("nan")])
def test_bools_floats_and_strings_are_not_ints(fn, value):
    with pytest.raises(InvalidInput):
        fn(value)


@given(st.text(max_size=300))
def test_idempotency_key_rule(key):
    ok = 1 <= len(key) <= 255 and "\x00" not in key
    assert accepts(validate.idempotency_key, key) == ok


# --- payload -------------------------------------------------------------------------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**53), max_value=2**53),
                         st.floats(allow_nan=False, allow_infinity=False), st.text())
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.text(max_size=10), inner, max_size=5)),
    max_leaves=20,
)


def _walk_no_nul(obj) -> bool:
    if isinstance(obj, str):
        return "\x00" not in obj
    if isinstance(obj, list):
        return all(_walk_no_nul(v) for v in obj)
    if isinstance(obj, dict):
        return all(_walk_no_nul(k) and _walk_no_nul(v) for k, v in obj.items())
    return True


def _insert_nul(obj, path: list[int]):
    """Put a NUL into some string of obj (a key, a value or obj itself), chosen by path."""
    step = path[0] if path else 0
    if isinstance(obj, str):
        at = step % (len(obj) + 1)
        return obj[:at] + "\x00" + obj[at:]
    if isinstance(obj, list) and obj:
        i = step % len(obj)
        return obj[:i] + [_insert_nul(obj[i], path[1:])] + obj[i + 1:]
    if isinstance(obj, dict) and obj:
        items = list(obj.items())
        i = (step // 2) % len(items)
        k, v = items[i]
        if step % 2 == 0:  # into the key
            new_key = _insert_nul(k, path[1:])
            out = {kk: vv for kk, vv in items if kk != k}
            out[new_key] = v
            return out
        return {**obj, k: _insert_nul(v, path[1:])}
    return {"wrapped": obj, "nul\x00key": 1} if step % 2 else [obj, "\x00"]


@given(json_values.filter(_walk_no_nul))
def test_payload_round_trips(obj):
    text = validate.payload(obj)
    assert json.loads(text) == obj


@given(json_values.filter(_walk_no_nul), st.lists(st.integers(min_value=0, max_value=1000), max_size=6))
def test_payload_rejects_nul_anywhere(obj, path):
    bad = _insert_nul(obj, path)
    assert not _walk_no_nul(bad)
    with pytest.raises(InvalidInput, match="NUL"):
        validate.payload(bad)


@given(st.text().filter(lambda s: "\x00" not in s), st.text().filter(lambda s: "\x00" not in s))
def test_escaped_backslash_u0000_is_not_a_nul(a, b):
    value = a + "\\u0000" + b  # a real backslash followed by "u0000"
    text = validate.payload({"k": value, "\\u0000": [value]})
    assert json.loads(text) == {"k": value, "\\u0000": [value]}
    # The JSON text spells that as an escaped backslash, never as the \u0000 escape.
    assert validate.payload_text(text) == text


def test_payload_nul_examples():
    for bad in ["\x00", {"a\x00": 1}, {"a": ["ok", {"b": "x\x00y"}]}, ("t", "\x00")]:
        with pytest.raises(InvalidInput, match="NUL"):
            validate.payload(bad)
    with pytest.raises(InvalidInput, match="NUL"):
        validate.payload_text('{"a": "\\u0000"}')


@given(st.text(alphabet="aé€😀", max_size=60), st.integers(min_value=2, max_value=250))
def test_payload_size_cap_counts_utf8_bytes(s, limit):
    size = len(json.dumps(s, ensure_ascii=False).encode())
    assert size == 2 + sum(len(c.encode()) for c in s)
    assert accepts(lambda v: validate.payload(v, limit), s) == (size <= limit)


def test_payload_size_cap_message_gives_bytes():
    with pytest.raises(InvalidInput, match=r"payload is 12 bytes, over the limit of 11 bytes"):
        validate.payload("éééää", 11)
    assert validate.payload("éééää", 12) == '"éééää"'


def test_payload_size_is_measured_as_postgresql_renders_it(pg_dsn):
    """Python accepts a payload at a cap exactly when the SQL enqueue functions would.

    Both measure the UTF-8 JSON text as PostgreSQL renders jsonb (", " and ": " separators).
    Floats in exponent form are left out: PostgreSQL writes them out in full.
    """
    plain_floats = st.floats(min_value=-1e6, max_value=1e6).filter(
        lambda x: "e" not in repr(x) and not (x == 0 and math.copysign(1, x) < 0))
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), plain_floats,
                        st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00")))
    values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8),
                        inner, max_size=6)), max_leaves=30)

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        @settings(max_examples=examples(200), deadline=None)
        @given(values)
        @example({"to": "a@b.c", "tags": [1, 2, 3]})
        @example([1] * 50)
        def check(obj):
            text = validate.payload(obj)
            pg_size = conn.execute("SELECT octet_length(%s::jsonb::text)", [text]).fetchone()[0]
            assert accepts(lambda v: validate.payload(v, pg_size), obj)
            assert not accepts(lambda v: validate.payload(v, pg_size - 1), obj)

        check()


@pytest.mark.parametrize("bad", ["\ud800", {"a": ["x\udfff"]}, {"\udc00": 1}])
def test_payload_rejects_lone_surrogates(bad):
    with pytest.raises(InvalidInput, match="surrogate"):
        validate.payload(bad)


def test_payload_text_rejects_escaped_lone_surrogates():
    with pytest.raises(InvalidInput, match="surrogate"):
        validate.payload_text('{"a": "\\ud800"}')


def test_idempotency_key_rejects_lone_surrogates():
    with pytest.raises(InvalidInput):
        validate.idempotency_key("key-\ud800")
    assert validate.idempotency_key("clé-€") == "clé-€"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"),
                                 {"a": [1, float("nan")]}])
def test_payload_rejects_non_finite_numbers(bad):
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        validate.payload(bad)


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity]", "-Infinity"])
def test_payload_text_rejects_non_finite_constants(text):
    with pytest.raises(InvalidInput, match="not valid JSON"):
        validate.payload_text(text)


@pytest.mark.parametrize("bad", [object(), {1, 2}, b"bytes", {"a": object()}, {(1, 2): "tuple key"}])
def test_payload_rejects_non_serialisable(bad):
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        validate.payload(bad)


@pytest.mark.parametrize("text", ["", "{", "{'a': 1}", "[1,]", "nope"])
def test_payload_text_rejects_invalid_json(text):
    with pytest.raises(InvalidInput, match="not valid JSON"):
        validate.payload_text(text)


def test_error_messages_are_one_line_and_truncate_long_values():
    with pytest.raises(InvalidInput) as info:
        validate.task_name("x y" * 500)
    message = str(info.value)
    assert "\n" not in message
    assert len(message) < 250
    assert message.count("x y") < 30
