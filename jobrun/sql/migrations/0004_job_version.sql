-- 0004 job version: a counter on every job row for optimistic concurrency (a "version" in an
-- HTTP API body or If-Match, the CLI's --if-version, the Client's if_version=), the tasks a
-- master serves in its registry row, and indexes for listing jobs by task or queue.

-- Every statement that changes a job row adds `version = version + 1` (jobrun/sql/*.sql).
-- Adding a column with a constant default rewrites no rows.
ALTER TABLE {schema}.jobs ADD COLUMN version bigint NOT NULL DEFAULT 0;

-- The task names a master's app declares (NULL: a master that does not report them).
ALTER TABLE {schema}.workers ADD COLUMN tasks text[];

-- GET /api/v1/jobs?task=..., newest first: without it a filter on a rare task walks the primary
-- key backwards through every newer row of other tasks. (One index only: each one is written by
-- every enqueue. A filter on a rare queue or a rare finished status still walks the key.)
CREATE INDEX jobs_task_id ON {schema}.jobs (task, id);
