-- 0008 aging: what the aging sweeper (jobrun/worker/aging.py) records on a job it promotes.
--
--   aged_at        when the job's last aging step was due (run_at + k * aging after k steps);
--                  the next step is due one aging interval after greatest(aged_at, run_at),
--                  so a retry's later run_at restarts the clock. NULL: never promoted.
--   base_priority  the priority the job had before its first step; NULL: never promoted
--                  (priority is then still the one it was enqueued with).
--
-- No new index: the sweeper finds due rows through jobs_claim (queue, priority, run_at, id)
-- WHERE status = 'queued', one priority level at a time (docs/queues.md). Both columns are
-- NULL on every job that never ages, which costs nothing in the row.
ALTER TABLE {schema}.jobs
    ADD COLUMN aged_at timestamptz,
    ADD COLUMN base_priority smallint
        CONSTRAINT base_priority_range CHECK (base_priority BETWEEN -100 AND 100);
