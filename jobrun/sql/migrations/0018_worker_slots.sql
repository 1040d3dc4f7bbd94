-- 0018 worker slots: each master's registry row says how many jobs each of its children
-- runs at once (--slots), so that `jobrun top`, `jobrun workers`, /api/v1/workers and the
-- console show busy jobs against the master's whole capacity (children x slots).
ALTER TABLE {schema}.workers
    ADD COLUMN slots integer NOT NULL DEFAULT 1;
