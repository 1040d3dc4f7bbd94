-- Queries of the migration runner (jobrun.store.migrate) and the master's LISTEN.
-- "{schema}" is the quoted schema name, "{channel}" the quoted notification channel
-- (<schema>_ready); parameters are psycopg's %(name)s placeholders.

-- name: migrate_lock
-- Serialise migration steps of one schema across processes (a transaction-level advisory lock).
SELECT pg_advisory_xact_lock(hashtextextended('jobrun.migrate:' || %(schema)s::text, 0))

-- name: migrate_ledger_exists
-- Whether the schema has its ledger of applied migrations yet.
SELECT to_regclass(format('%%I.schema_migrations', %(schema)s::text)) IS NOT NULL AS present

-- name: migrate_create_schema
-- Create the schema if it is missing.
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: migrate_create_ledger
-- Create the ledger of applied migrations if it is missing.
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())

-- name: migrate_applied
-- The versions applied so far.
SELECT version FROM {schema}.schema_migrations

-- name: migrate_record
-- Record a migration as applied (in the transaction of its DDL).
INSERT INTO {schema}.schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: listen_ready
-- Subscribe this session to the schema's "jobs ready" notifications (payload: the queue).
LISTEN {channel}
