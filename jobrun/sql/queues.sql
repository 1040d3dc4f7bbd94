-- Queues as objects (jobrun queue, Client.queue_*, /api/v1/queues) and the aging sweeper.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.
-- Intervals leave the database as seconds (float8), never as interval values.

-- name: queue_view
-- Declared queues (all, or the one named) with every setting (intervals in seconds) and their queued (runnable), scheduled, leased and waiting jobs, counted through the partial indexes; `served_by`: the owners of the masters seen in the last `stale_after` s that serve it.
SELECT k.name, k.paused, k.concurrency, k.rate_limit,
       extract(epoch FROM k.rate_period)::float8 AS rate_period,
       extract(epoch FROM k.aging)::float8 AS aging, k.priority_default, k.max_attempts,
       extract(epoch FROM k.retention)::float8 AS retention, k.key_concurrency,
       k.created_at, k.updated_at, k.version,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'queued' AND j.queue = k.name AND j.run_at <= now()) AS queued,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'queued' AND j.queue = k.name AND j.run_at > now()) AS scheduled,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'leased' AND j.queue = k.name) AS leased,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'waiting' AND j.queue = k.name) AS waiting,
       ARRAY(SELECT w.owner FROM {schema}.workers w
              WHERE k.name = ANY (w.queues)
                AND w.last_seen >= now() - make_interval(secs => %(stale_after)s)
              ORDER BY w.host, w.pid, w.owner) AS served_by
  FROM {schema}.queues k
 WHERE %(name)s::text IS NULL OR k.name = %(name)s
 ORDER BY k.name

-- name: queue_names
-- The names of the declared queues, in order (a master refuses at start to serve any other).
SELECT name FROM {schema}.queues ORDER BY name

-- name: queue_create
-- Declare a queue with the given settings (unset ones take their defaults); no row when it exists.
INSERT INTO {schema}.queues (name, concurrency, rate_limit, rate_period, aging, priority_default,
                             max_attempts, retention, key_concurrency)
VALUES (%(name)s, %(concurrency)s::integer, %(rate_limit)s::integer,
        make_interval(secs => %(rate_period)s::float8), make_interval(secs => %(aging)s::float8),
        coalesce(%(priority_default)s::smallint, 0), %(max_attempts)s::integer,
        make_interval(secs => %(retention)s::float8), coalesce(%(key_concurrency)s::integer, 1))
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: queue_update
-- Change the settings a change sets (set_<name>), bump version and updated_at; guarded by an optional version; no row: undeclared or at another version.
UPDATE {schema}.queues
   SET concurrency = CASE WHEN %(set_concurrency)s THEN %(concurrency)s::integer ELSE concurrency END,
       rate_limit = CASE WHEN %(set_rate)s THEN %(rate_limit)s::integer ELSE rate_limit END,
       rate_period = CASE WHEN %(set_rate)s THEN make_interval(secs => %(rate_period)s::float8)
                          ELSE rate_period END,
       aging = CASE WHEN %(set_aging)s THEN make_interval(secs => %(aging)s::float8) ELSE aging END,
       priority_default = CASE WHEN %(set_priority_default)s THEN %(priority_default)s::smallint
                               ELSE priority_default END,
       max_attempts = CASE WHEN %(set_max_attempts)s THEN %(max_attempts)s::integer
                           ELSE max_attempts END,
       retention = CASE WHEN %(set_retention)s THEN make_interval(secs => %(retention)s::float8)
                        ELSE retention END,
       key_concurrency = CASE WHEN %(set_key_concurrency)s THEN %(key_concurrency)s::integer
                              ELSE key_concurrency END,
       version = version + 1, updated_at = now()
 WHERE name = %(name)s AND (%(version)s::bigint IS NULL OR version = %(version)s)
RETURNING name

-- name: queue_delete
-- Delete a queue and its finished jobs (with their attempts and effects); with force, its waiting, queued and leased jobs too. Refused (nothing deleted) while it holds unfinished jobs without force, while schedules fire into it, or when it is not at the version given (if any).
WITH k AS (
    SELECT name, version FROM {schema}.queues WHERE name = %(name)s FOR UPDATE
), b AS (
    SELECT (SELECT count(*) FROM {schema}.jobs j  -- waiting ones are not finished either
             WHERE j.status IN ('queued', 'waiting') AND j.queue = %(name)s) AS queued,
           (SELECT count(*) FROM {schema}.jobs j
             WHERE j.status = 'leased' AND j.queue = %(name)s) AS leased,
           (SELECT array_agg(s.name ORDER BY s.name) FROM {schema}.schedules s
             WHERE s.queue = %(name)s) AS schedules
), go AS (
    SELECT k.name FROM k, b
     WHERE b.schedules IS NULL AND (%(force)s OR (b.queued = 0 AND b.leased = 0))
       AND (%(version)s::bigint IS NULL OR k.version = %(version)s)
), d AS (
    DELETE FROM {schema}.jobs j USING go WHERE j.queue = go.name RETURNING j.id
), a AS (
    DELETE FROM {schema}.job_attempts t USING d WHERE t.job_id = d.id
), e AS (
    DELETE FROM {schema}.processed_effects t USING d WHERE t.job_id = d.id
), dq AS (
    DELETE FROM {schema}.queues q USING go WHERE q.name = go.name RETURNING q.name
)
SELECT (SELECT name FROM k) AS found, (SELECT version FROM k) AS version,
       (SELECT name FROM dq) AS deleted, b.queued, b.leased,
       b.schedules, (SELECT count(*) FROM d) AS jobs
  FROM b

-- name: queue_retentions
-- The queues with a retention of their own, in seconds.
SELECT name, extract(epoch FROM retention)::float8 AS retention
  FROM {schema}.queues WHERE retention IS NOT NULL ORDER BY name

-- name: aging_queues
-- The queues (of those given; NULL: of all) that age, with their aging interval in seconds.
SELECT name, extract(epoch FROM aging)::float8 AS aging
  FROM {schema}.queues
 WHERE (%(queues)s::text[] IS NULL OR name = ANY(%(queues)s::text[])) AND aging IS NOT NULL

-- name: age_queued
-- Write the aging steps owed by up to `batch` queued jobs of the given queues; walks each queue's priority levels from `start` up through jobs_claim, then each level's due prefix by run_at; returns the queue and former level of each job promoted.
-- A level is found by one index descent (the next priority present above the last), and its
-- due rows are a prefix of the level in run_at order: run_at <= now() - aging is an index
-- condition, the aged_at test a filter that skips only rows promoted into the level within
-- the last interval. The walk starts at level `start` (-100 or below: the lowest level that
-- ages), so the sweeper's next statement resumes at the level where a full batch stopped
-- instead of reading the levels before it again (docs/queues.md). Rows a claim or another
-- sweep holds are skipped; a row read before another sweep promoted it is re-checked on the
-- new version and no longer qualifies.
WITH RECURSIVE k AS (
    SELECT name, aging FROM {schema}.queues
     WHERE name = ANY(%(queues)s::text[]) AND aging IS NOT NULL
), lv(name, aging, p) AS (
    SELECT k.name, k.aging,
           (SELECT j.priority FROM {schema}.jobs j
             WHERE j.status = 'queued' AND j.queue = k.name
               AND j.priority >= greatest(-99, %(start)s::integer)
             ORDER BY j.priority LIMIT 1)
      FROM k
    UNION ALL
    SELECT lv.name, lv.aging,
           (SELECT j.priority FROM {schema}.jobs j
             WHERE j.status = 'queued' AND j.queue = lv.name AND j.priority > lv.p
             ORDER BY j.priority LIMIT 1)
      FROM lv WHERE lv.p IS NOT NULL
), due AS (
    SELECT d.id, d.since, lv.aging, lv.p AS level,
           least(d.priority + 100, floor(extract(epoch FROM now() - d.since)
                                         / extract(epoch FROM lv.aging)))::integer AS steps
      FROM lv CROSS JOIN LATERAL (
            SELECT j.id, j.priority, greatest(j.aged_at, j.run_at) AS since
              FROM {schema}.jobs j
             WHERE j.status = 'queued' AND j.queue = lv.name AND j.priority = lv.p
               AND j.run_at <= now() - lv.aging
               AND (j.aged_at IS NULL OR j.aged_at <= now() - lv.aging)
             ORDER BY j.run_at, j.id
             LIMIT %(batch)s
               FOR UPDATE SKIP LOCKED) d
     WHERE lv.p IS NOT NULL
     LIMIT %(batch)s
)
UPDATE {schema}.jobs j
   SET priority = j.priority - due.steps, base_priority = coalesce(j.base_priority, j.priority),
       aged_at = due.since + due.steps * due.aging  -- bookkeeping: version stays
  FROM due
 WHERE j.id = due.id AND due.steps > 0
RETURNING j.queue, due.level
