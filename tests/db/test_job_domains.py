"""The jobs table's value rules live in domains (migration 0012): the same rules and errors on
every write, checked where a value is written; and the migration moves a filled table onto
them without rewriting it, keeping every row (its partial indexes are built again)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from jobrun.store import migrate

pytestmark = pytest.mark.db

DOMAINS = 12  # the migration that moves the rules into domains


def jobs(schema: str) -> sql.Identifier:
    return sql.Identifier(schema, "jobs")


# (column, bad value, the rule's name): each refused on insert, as the table's CHECK
# constraints refused it, under the same constraint name (jobrun/store/db.py maps it).
BAD = [
    ("queue", "bad queue", "queue_name_valid"),
    ("queue", "q" * 64, "queue_name_valid"),
    ("task", "1task", "task_name_valid"),
    ("task", "t" * 201, "task_name_valid"),
    ("status", "running", "status_valid"),
    ("priority", 101, "priority_range"),
    ("max_attempts", 0, "max_attempts_range"),
    ("idempotency_key", "", "idempotency_key_valid"),
    ("concurrency_key", "a\nb", "concurrency_key_valid"),
    ("run_at", "10000-01-01 00:00:00+00", "run_at_range"),
]


@pytest.mark.parametrize("column, value, rule", BAD, ids=[f"{c}-{r}" for c, _, r in BAD])
def test_an_insert_breaking_a_rule_is_refused_by_its_name(admin_conn, schema, column, value, rule):
    values = {"queue": "default", "task": "t", column: value}
    names = sql.SQL(", ").join(sql.Identifier(k) for k in values)
    marks = sql.SQL(", ").join(sql.Placeholder() for _ in values)
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        admin_conn.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            jobs(schema), names, marks), list(values.values()))
    assert info.value.diag.constraint_name == rule
    assert admin_conn.execute(sql.SQL("SELECT count(*) FROM {}").format(jobs(schema))).fetchone()[0] == 0


@pytest.mark.parametrize("column, value, rule",
                         [b for b in BAD if b[0] in ("status", "priority", "run_at", "queue")])
def test_an_update_setting_a_bad_value_is_refused(admin_conn, schema, column, value, rule):
    job_id = admin_conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task) VALUES ('default', 't') RETURNING id").format(
            jobs(schema))).fetchone()[0]
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        admin_conn.execute(sql.SQL("UPDATE {} SET {} = %s WHERE id = %s").format(
            jobs(schema), sql.Identifier(column)), [value, job_id])
    assert info.value.diag.constraint_name == rule
    row = admin_conn.execute(sql.SQL("SELECT status, priority, queue FROM {} WHERE id = %s").format(
        jobs(schema)), [job_id]).fetchone()
    assert row == ("queued", 0, "default")


def test_the_migration_keeps_a_filled_table_in_place(admin_conn, scratch_schemas):
    name = scratch_schemas("dom")
    migrate.migrate(admin_conn, name, target=DOMAINS - 1)
    admin_conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, priority, idempotency_key, concurrency_key, status)"
        " SELECT 'q' || (i % 3), 'task.' || i, (i % 201) - 100,"
        "        CASE WHEN i % 2 = 0 THEN 'k' || i END, CASE WHEN i % 5 = 0 THEN 'c' || i END,"
        "        (ARRAY['queued', 'leased', 'succeeded'])[1 + i % 3]"
        "   FROM generate_series(1, 3000) AS i").format(jobs(name)))
    target = f'"{name}".jobs'
    table_file = "SELECT relfilenode FROM pg_class WHERE oid = %s::regclass"
    indexes = ("SELECT c.relname, i.indisvalid, i.indpred IS NOT NULL AS partial,"
               "       c.relfilenode FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
               " WHERE i.indrelid = %s::regclass ORDER BY 1")
    before_file = admin_conn.execute(table_file, [target]).fetchone()
    before = admin_conn.execute(indexes, [target]).fetchall()
    content = sql.SQL("SELECT md5(string_agg(j::text, ',' ORDER BY id)) FROM {} j").format(jobs(name))
    digest = admin_conn.execute(content).fetchone()[0]

    assert migrate.migrate(admin_conn, name, target=DOMAINS) == [DOMAINS]

    assert admin_conn.execute(table_file, [target]).fetchone() == before_file  # not rewritten
    after = admin_conn.execute(indexes, [target]).fetchall()
    assert [(r[0], r[1]) for r in after] == [(r[0], True) for r in before]
    # Whole-column indexes are kept as they are; PostgreSQL builds partial ones again.
    assert [r[3] for r in after if not r[2]] == [r[3] for r in before if not r[2]]
    assert admin_conn.execute(content).fetchone()[0] == digest
    types = dict(admin_conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attname IN ('queue', 'status')", [target]).fetchall())
    assert types == {"queue": f"{name}.queue_name", "status": f"{name}.job_status"}
    with pytest.raises(psycopg.errors.CheckViolation):
        admin_conn.execute(sql.SQL("UPDATE {} SET status = 'bogus' WHERE id = 1").format(jobs(name)))


def test_a_row_breaking_a_rule_stops_the_migration_and_changes_nothing(admin_conn, scratch_schemas):
    """A row the rule would refuse (written under a looser constraint of the same name) makes
    validating its domain fail: the migration rolls back whole."""
    name = scratch_schemas("domfail")
    migrate.migrate(admin_conn, name, target=DOMAINS - 1)
    admin_conn.execute(sql.SQL(
        "ALTER TABLE {} DROP CONSTRAINT priority_range,"
        " ADD CONSTRAINT priority_range CHECK (priority BETWEEN -1000 AND 1000)").format(jobs(name)))
    admin_conn.execute(sql.SQL("INSERT INTO {} (queue, task, priority) VALUES ('q', 't', 500)").format(
        jobs(name)))
    with pytest.raises(psycopg.errors.CheckViolation):
        migrate.migrate(admin_conn, name, target=DOMAINS)
    assert migrate.status(admin_conn, name)[0] == set(range(1, DOMAINS))
    assert admin_conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attname = 'priority'", [f'"{name}".jobs']).fetchone()[0] \
        == "smallint"
