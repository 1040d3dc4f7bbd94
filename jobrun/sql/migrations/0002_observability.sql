-- 0002 observability: the worker registry, per-attempt logs, and indexes for recent activity.

-- One row per live master, refreshed every few seconds; rows not seen for a while are stale
-- and deleted by any master's reaper.
CREATE TABLE {schema}.workers (
    owner       text PRIMARY KEY,          -- host:pid:nonce, also the lease owner of its jobs
    host        text NOT NULL,
    pid         integer NOT NULL,
    app         text,
    queues      text[] NOT NULL,
    concurrency integer NOT NULL,
    busy        integer NOT NULL DEFAULT 0,
    version     text,
    inflight    jsonb NOT NULL DEFAULT '[]', -- [{{"id", "task", "child", "pid", "started"}}]
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now()
);

-- What a handler logged during an attempt (bounded in size by the child).
ALTER TABLE {schema}.job_attempts ADD COLUMN log text;

-- Recent completions (rates, wait percentiles) without scanning all history.
CREATE INDEX job_attempts_finished ON {schema}.job_attempts (finished_at);
-- Recent failures (jobrun top) without reading every recent success.
CREATE INDEX job_attempts_failed ON {schema}.job_attempts (finished_at)
    WHERE outcome IN ('failed', 'timeout', 'worker_lost', 'lease_expired');
-- Recent enqueues: created_at follows insertion order, so a BRIN index stays tiny and cheap.
CREATE INDEX jobs_created_brin ON {schema}.jobs USING brin (created_at);
