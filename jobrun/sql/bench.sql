-- Queries of `jobrun bench` (jobrun/admin/bench.py): read-only, by job id.

-- name: bench_unfinished
-- How many of the given jobs have not finished yet (the benchmark's drain wait).
SELECT count(*) AS remaining
  FROM {schema}.jobs
 WHERE id = ANY(%(ids)s) AND status NOT IN ('succeeded', 'dead', 'cancelled')

-- name: bench_latencies
-- Per given job: status, and in ms by the database clock, enqueue to its first attempt's start and (finished jobs) to its last attempt's finish.
SELECT j.id, j.status,
       extract(epoch FROM min(a.started_at) - j.created_at)::float8 * 1000 AS to_start_ms,
       CASE WHEN j.status IN ('succeeded', 'dead', 'cancelled')
            THEN extract(epoch FROM max(a.finished_at) - j.created_at)::float8 * 1000
       END AS to_finish_ms
  FROM {schema}.jobs j
  LEFT JOIN {schema}.job_attempts a ON a.job_id = j.id
 WHERE j.id = ANY(%(ids)s)
 GROUP BY j.id, j.status, j.created_at

-- name: bench_top_error
-- The most frequent error of the given jobs' attempts that did not succeed, and how many attempts had it.
SELECT error, count(*) AS attempts
  FROM {schema}.job_attempts
 WHERE job_id = ANY(%(ids)s) AND outcome <> 'succeeded' AND error IS NOT NULL
 GROUP BY error
 ORDER BY attempts DESC
 LIMIT 1
