-- 0010 queued jobs by task: what GET /api/v1/tasks counts its queued jobs per task through.
--
-- jobs_claim (queue, priority, run_at, id) holds no task, so counting a deep queue's jobs per
-- task read every queued row from the table (a bitmap heap scan: about 25 ms at 40,000 queued
-- on PostgreSQL 15). This index holds the task of every queued job and nothing else, so the
-- count is an index-only scan of the queue's depth (deduplicated: about 300 kB at 40,000
-- queued). It costs one index entry per job made queued (an enqueue or a retry); a claim or a
-- completion writes a row version that is not queued, so it adds nothing here (docs/api.md:
-- the drain and enqueues measured with and without it).
CREATE INDEX jobs_queued_task ON {schema}.jobs (task) WHERE status = 'queued';
