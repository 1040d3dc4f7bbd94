-- 0016 worker database host: each master's registry row names the database host:port its
-- last new connection reached (store.connector.DbHealth), so that after a failover
-- /api/v1/workers shows which masters follow the new primary.
ALTER TABLE {schema}.workers
    ADD COLUMN db_host text;
