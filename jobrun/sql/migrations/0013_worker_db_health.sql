-- 0013 worker database health: each master's registry row carries what its connections have
-- seen lately (store.connector.DbHealth): the failed round trips in a row and the last error's
-- first line (without a password). A master whose claims, completions or heartbeats fail while
-- its registry still gets through shows it in `jobrun workers --json` and /api/v1/workers.
ALTER TABLE {schema}.workers
    ADD COLUMN db_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN db_error text;
