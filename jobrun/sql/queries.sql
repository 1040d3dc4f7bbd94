-- Named queries. Each block: "-- name: <name>", then a one-line description, then the SQL.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.

-- Guards by id. The statements that update given jobs by id (the heartbeat, unclaim, and
-- finish_jobs of migration 0014, which completions and the reaper call) guard on
-- `status = 'leased'` written as `status COLLATE "C" = 'leased'` (the same test: the values
-- are ASCII). Written plainly, it lets the planner use the partial index on leased rows,
-- and with statistics from when few rows were leased (ANALYZE of a freshly filled queue) a
-- cached generic plan scans every leased row for each job of the batch: a 200-job
-- completion took 84 ms instead of 4 ms, and a drain of 20,000 slowed to 700 jobs/s. The
-- COLLATE keeps that index out of reach, so they look jobs up by primary key
-- (tests/db/test_plans.py). The master's connections that run the completion and the
-- heartbeat also plan them generically with sequential scans costed out (BY_ID_SETTINGS in
-- jobrun/store/db.py): a plan made while the table was a few pages read each batch with a
-- sequential scan, and kept doing so as the table grew.

-- ===== producers =========================================================================

-- name: enqueue
-- Enqueue one job through the SQL API; returns the job and whether it was created: a replay's row as it is now (`stored`), a new job's as the function wrote it.
-- The function's row is the one it read; the columns it does not return (version, lease,
-- times, ...) are read here from the stored row. This statement does not see a row the
-- function inserted (it runs on the snapshot taken before the call), so `stored` is false
-- for a new job, whose other columns are then their defaults; a replay of a job committed
-- after this statement began is not seen either, and is read again (jobrun/ops.py).
SELECT e.id, e.created, j.id IS NOT NULL AS stored,
       coalesce(j.queue, e.queue) AS queue, coalesce(j.task, e.task) AS task,
       coalesce(j.status, e.status) AS status, coalesce(j.priority, e.priority) AS priority,
       coalesce(j.run_at, e.run_at) AS run_at, coalesce(j.attempts, e.attempts) AS attempts,
       coalesce(j.max_attempts, e.max_attempts) AS max_attempts,
       coalesce(j.idempotency_key, e.idempotency_key) AS idempotency_key,
       coalesce(j.created_at, e.created_at) AS created_at,
       j.crashes, j.lease_owner, j.lease_token, j.lease_expires_at, j.cancel_requested,
       j.traceparent, j.started_at, j.finished_at, j.schedule_id, j.version, j.base_priority,
       j.aged_at, j.concurrency_key
  FROM {schema}.enqueue(%(task)s, %(payload)s::jsonb,
                        queue => %(queue)s, priority => %(priority)s, run_at => %(run_at)s,
                        delay => make_interval(secs => %(delay)s),
                        max_attempts => %(max_attempts)s, idempotency_key => %(idempotency_key)s,
                        traceparent => %(traceparent)s, concurrency_key => %(concurrency_key)s) e
  LEFT JOIN {schema}.jobs j ON j.id = e.id AND NOT e.created

-- name: insert_job
-- Insert one new job (no idempotency key; values checked by the client), priority and max_attempts defaulting to the queue's; no row if its queue is not declared. `notify` 'after': no NOTIFY at the commit, the caller runs wake_queues after it.
WITH quiet AS MATERIALIZED (SELECT set_config('jobrun.notify', %(notify)s::text, true))
INSERT INTO {schema}.jobs (queue, task, payload, priority, run_at, max_attempts, traceparent,
                          concurrency_key)
SELECT k.name, %(task)s, %(payload)s::jsonb, coalesce(%(priority)s::smallint, k.priority_default),
       coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8), now()),
       coalesce(%(max_attempts)s::integer, k.max_attempts, 5), %(traceparent)s::text,
       %(concurrency_key)s::text
  FROM {schema}.queues k, quiet WHERE k.name = %(queue)s
RETURNING id, true AS created, queue, task, status, priority, run_at, attempts, max_attempts,
          idempotency_key, created_at

-- name: enqueue_many
-- Enqueue many jobs through the SQL API (any with an idempotency key); one (id, created) row per input, in input order.
SELECT id, created
  FROM {schema}.enqueue_many(%(tasks)b::text[], %(payloads)b::text[]::jsonb[], %(queues)b::text[],
                             %(priorities)b::integer[], %(run_ats)b::timestamptz[],
                             %(attempt_limits)b::integer[], %(idempotency_keys)b::text[],
                             %(traceparents)b::text[], %(concurrency_keys)b::text[])

-- name: insert_jobs
-- Insert many new jobs (no idempotency keys; values checked by the client) in one statement; returns their ids in input order, or, inserting nothing, an undeclared queue. `notify` as for insert_job.
WITH quiet AS MATERIALIZED (
    SELECT set_config('jobrun.notify', %(notify)s::text, true)
), undeclared AS (
    SELECT u.name FROM unnest(%(queue_names)b::text[]) AS u(name)
     WHERE NOT EXISTS (SELECT FROM {schema}.queues k WHERE k.name = u.name)
     LIMIT 1
), ids AS MATERIALIZED (
    -- Drawn in input order and zipped with the input below: ids[i] is the id of item i.
    SELECT ARRAY(SELECT nextval((SELECT pg_get_serial_sequence('{schema}.jobs', 'id')::regclass))
                   FROM generate_series(1, %(n)s::integer) ORDER BY 1) AS ids
     WHERE NOT EXISTS (SELECT FROM undeclared)
), ins AS (
    INSERT INTO {schema}.jobs (id, queue, task, payload, priority, run_at, max_attempts, traceparent,
                              concurrency_key)
    -- Priority and max_attempts not given: the queue's defaults (read once for the call's
    -- queue; per row only for items naming their own).
    SELECT u.id, coalesce(u.queue, %(queue)s::text), u.task, u.payload::jsonb,
           coalesce(u.priority, %(priority)s::integer, CASE WHEN u.queue IS NULL
               THEN (SELECT k.priority_default FROM {schema}.queues k WHERE k.name = %(queue)s)
               ELSE (SELECT k.priority_default FROM {schema}.queues k WHERE k.name = u.queue) END),
           coalesce(u.run_at, %(run_at)s::timestamptz, now()),
           coalesce(u.max_attempts, %(max_attempts)s::integer, CASE WHEN u.queue IS NULL
               THEN (SELECT k.max_attempts FROM {schema}.queues k WHERE k.name = %(queue)s)
               ELSE (SELECT k.max_attempts FROM {schema}.queues k WHERE k.name = u.queue) END, 5),
           %(traceparent)s::text, u.ckey
      FROM ids, quiet, unnest(ids.ids, %(tasks)b::text[], %(payloads)b::text[], %(queues)b::text[],
                       %(priorities)b::integer[], %(run_ats)b::timestamptz[],
                       %(attempt_limits)b::integer[], %(concurrency_keys)b::text[])
           AS u(id, task, payload, queue, priority, run_at, max_attempts, ckey)
)
SELECT (SELECT name FROM undeclared) AS undeclared, (SELECT ids FROM ids) AS ids

-- name: wake_queues
-- Wake the masters of these queues where a job was enqueued to run by now (run_at NULL: now): what the insert trigger does at a commit, sent after an insert that set jobrun.notify to 'after' (migration 0011). An undeclared queue (its insert failed) is not woken.
SELECT pg_notify(%(channel)s, w.queue)
  FROM (SELECT DISTINCT u.queue FROM unnest(%(queues)s::text[], %(run_ats)s::timestamptz[])
                                     AS u(queue, run_at)
         WHERE (u.run_at IS NULL OR u.run_at <= now())
           AND EXISTS (SELECT FROM {schema}.queues k WHERE k.name = u.queue)) w

-- name: wake_queue
-- wake_queues for one queue and one time (scalars: cheaper to send than arrays).
SELECT pg_notify(%(channel)s, %(queue)s::text)
 WHERE (%(run_at)s::timestamptz IS NULL OR %(run_at)s::timestamptz <= now())
   AND EXISTS (SELECT FROM {schema}.queues k WHERE k.name = %(queue)s::text)

-- name: set_payload_limit
-- Tell the SQL enqueue functions the configured payload cap (session setting).
SELECT set_config('jobrun.max_payload_bytes', %(limit)s, false)

-- ===== inspection and admin ==============================================================

-- name: get_job
-- One job by id.
SELECT * FROM {schema}.jobs WHERE id = %(id)s

-- name: get_attempts
-- The recorded attempts of one job, oldest first.
SELECT * FROM {schema}.job_attempts WHERE job_id = %(id)s ORDER BY lease_token

-- name: list_jobs
-- Jobs newest first, filtered by status/queue/task, keyset-paginated on id (before = last id seen).
SELECT * FROM {schema}.jobs
 WHERE (%(status)s::text IS NULL OR status = %(status)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(before)s::bigint IS NULL OR id < %(before)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: cancel_job
-- Cancel a job: a waiting or queued one at once, a leased one by setting cancel_requested; returns the row. `actor` (when not NULL) names the caller in the job's event (jobrun.actor, migration 0017).
UPDATE {schema}.jobs j
   SET status = CASE WHEN j.status = 'leased' THEN j.status ELSE 'cancelled' END,
       finished_at = CASE WHEN j.status = 'leased' THEN j.finished_at ELSE now() END,
       cancel_requested = (j.status = 'leased'), version = j.version + 1
  FROM (SELECT CASE WHEN %(actor)s::text IS NOT NULL
                    THEN set_config('jobrun.actor', %(actor)s::text, true) END) AS who(actor)
 WHERE j.id = %(id)s AND j.status IN ('waiting', 'queued', 'leased')
   AND (%(version)s::bigint IS NULL OR j.version = %(version)s)
RETURNING j.*

-- name: retry_job
-- Put a dead or cancelled job back to queued now (to waiting while parents of it are unsettled), with its attempts and crashes reset and the priority it was enqueued with (before aging); `actor` as in cancel_job.
WITH r AS (
    UPDATE {schema}.jobs j
       SET status = CASE WHEN j.waiting_on > 0 THEN 'waiting' ELSE 'queued' END,
           attempts = 0, crashes = 0, run_at = now(), finished_at = NULL,
           cancel_requested = false, version = j.version + 1, cancel_reason = NULL,
           priority = coalesce(j.base_priority, j.priority), base_priority = NULL,
           aged_at = NULL
      FROM (SELECT CASE WHEN %(actor)s::text IS NOT NULL
                        THEN set_config('jobrun.actor', %(actor)s::text, true) END) AS who(actor)
     WHERE j.id = %(id)s AND j.status IN ('dead', 'cancelled')
       AND (%(version)s::bigint IS NULL OR j.version = %(version)s)
    RETURNING j.*
), n AS (
    SELECT pg_notify(%(channel)s, r.queue) FROM r WHERE r.status = 'queued'
)
SELECT r.* FROM r LEFT JOIN n ON true

-- name: purge_batch
-- Delete up to `batch` finished jobs (and their attempts and effects) older than a duration, of the queues in `only` (all when NULL) but not in `exclude`; members of workflows are left to purge_workflows.
WITH d AS (
    SELECT id FROM {schema}.jobs
     WHERE status = ANY(%(statuses)s::text[]) AND workflow_id IS NULL
       AND finished_at < now() - make_interval(secs => %(older_than)s)
       AND (%(only)s::text[] IS NULL OR queue = ANY(%(only)s::text[]))
       AND queue <> ALL(%(exclude)s::text[])
     ORDER BY finished_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
), a AS (
    DELETE FROM {schema}.job_attempts t USING d WHERE t.job_id = d.id
), e AS (
    DELETE FROM {schema}.processed_effects t USING d WHERE t.job_id = d.id
)
DELETE FROM {schema}.jobs j USING d WHERE j.id = d.id

-- name: stats
-- Job counts by queue and status, with the age of the oldest runnable queued job per queue.
SELECT k.name AS queue, k.paused,
       coalesce(c.waiting, 0) AS waiting,
       coalesce(c.queued, 0) AS queued, coalesce(c.scheduled, 0) AS scheduled,
       coalesce(c.leased, 0) AS leased, coalesce(c.succeeded, 0) AS succeeded,
       coalesce(c.dead, 0) AS dead, coalesce(c.cancelled, 0) AS cancelled,
       extract(epoch FROM now() - c.oldest_runnable)::float8 AS oldest_queued_age
  FROM {schema}.queues k
  LEFT JOIN (
    SELECT queue,
           count(*) FILTER (WHERE status = 'waiting') AS waiting,
           count(*) FILTER (WHERE status = 'queued' AND run_at <= now()) AS queued,
           count(*) FILTER (WHERE status = 'queued' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE status = 'leased') AS leased,
           count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE status = 'dead') AS dead,
           count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
           min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now()) AS oldest_runnable
      FROM {schema}.jobs GROUP BY queue
  ) c ON c.queue = k.name
 ORDER BY k.name

-- name: queue_set_paused
-- Pause or resume a queue (a change of its settings: version and updated_at move), guarded by an optional version; no row when undeclared or at another version.
UPDATE {schema}.queues SET paused = %(paused)s, version = version + 1, updated_at = now()
 WHERE name = %(name)s AND (%(version)s::bigint IS NULL OR version = %(version)s)
RETURNING name

-- name: queue_notify
-- Wake masters for a queue (after resume).
SELECT pg_notify(%(channel)s, %(name)s)

-- name: db_now
-- The database clock.
SELECT now() AS now, clock_timestamp() AS clock

-- ===== the master's hot path =============================================================

-- Limits in the claim (docs/dispatch.md). A served queue with a cluster-wide concurrency or
-- rate limit has its queue_claims row locked (in name order: no deadlock between masters
-- serving queues in other orders) and read in its latest version, so claims of that queue
-- take turns and each sees what the one before took; `allowed` is the least of this claim's
-- budget, the master's own room in the queue (-Q emails=4), the cluster-wide room (taken -
-- freed: freed read from the snapshot errs on the safe side) and the rate window's room. A
-- queue without limits takes no lock, and its rows come from the same index scan as ever.
-- A job with a concurrency key is leased only if its key_leases row goes in (the primary key
-- decides a race); keys at their limit (by the snapshot) are skipped in the scan.
-- Besides the leased jobs, one row with a NULL id per queue a limit held back: the reason
-- (concurrency, rate, key, master_limit) and, for a rate, seconds until a start leaves the
-- window.

-- name: claim_jobs
-- Lease up to `limit` runnable jobs of unpaused queues within their limits, ordered by `order`: bump attempts and the fencing token; plus a row per queue held back.
WITH q AS (
    SELECT k.name, u.pos, u.room, k.concurrency, k.rate_limit, k.rate_period, k.key_concurrency,
           -- The rate window's bucket for this claim's starts (a fiftieth of the period, the
           -- time rounded up: a start counts a little long, never too short) and its margin.
           greatest(now(), to_timestamp(ceil(extract(epoch FROM now()) * 50
                                             / extract(epoch FROM k.rate_period))
                                        * extract(epoch FROM k.rate_period) / 50)) AS rate_bucket,
           least(interval '1 second', k.rate_period) AS rate_margin
      FROM unnest(%(queues)s::text[], %(rooms)s::integer[]) WITH ORDINALITY AS u(name, room, pos)
      JOIN {schema}.queues k ON k.name = u.name
     WHERE NOT k.paused
), lim AS MATERIALIZED (
    SELECT c.queue, c.taken, c.starts_at, c.starts_n, c.last_claim_at FROM {schema}.queue_claims c
     WHERE c.queue IN (SELECT name FROM q WHERE concurrency IS NOT NULL OR rate_limit IS NOT NULL)
     ORDER BY c.queue
       FOR UPDATE
), spare AS (
    SELECT l.queue,
           CASE WHEN q.concurrency IS NOT NULL
                THEN greatest(0, q.concurrency - (l.taken - r.freed))::integer END AS conc_left,
           -- A claim whose clock is a margin behind the latest one's may have missed starts
           -- the latter trimmed: it starts nothing, and tries again shortly.
           CASE WHEN q.rate_limit IS NULL THEN NULL
                WHEN now() < l.last_claim_at - q.rate_margin THEN 0
                ELSE greatest(0, q.rate_limit - coalesce(
                         (SELECT sum(w.n) FROM unnest(l.starts_at, l.starts_n) AS w(at, n)
                           WHERE w.at > now() - q.rate_period), 0))::integer END AS rate_left,
           CASE WHEN now() < l.last_claim_at - q.rate_margin THEN 0.05
                ELSE extract(epoch FROM coalesce(
                         (SELECT min(w.at) FROM unnest(l.starts_at) AS w(at)
                           WHERE w.at > now() - q.rate_period), now())
                         + q.rate_period - now())::float8 END AS rate_retry
      FROM lim l JOIN q ON q.name = l.queue
      JOIN {schema}.queue_releases r ON r.queue = l.queue
), room AS (
    SELECT q.name, q.pos, q.key_concurrency, q.concurrency IS NOT NULL AS counted,
           a.allowed,
           CASE WHEN a.allowed >= %(limit)s THEN NULL
                WHEN a.allowed = f.conc_left THEN 'concurrency'
                WHEN a.allowed = f.rate_left THEN 'rate'
                ELSE 'master_limit' END AS reason,
           f.rate_retry
      FROM q LEFT JOIN spare f ON f.queue = q.name
      CROSS JOIN LATERAL (SELECT least(%(limit)s, q.room, f.conc_left, f.rate_left) AS allowed) a
), cand AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at, c.concurrency_key, m.name AS queue, m.pos, m.allowed,
           m.counted, m.key_concurrency,
           row_number() OVER (PARTITION BY m.name ORDER BY c.priority, c.run_at, c.id) AS rn
      FROM room m CROSS JOIN LATERAL (
            -- The outer LIMIT never cuts (the inner one is at most `limit`); it gives the
            -- planner a bound it can read. A LIMIT it cannot evaluate is taken as a tenth of
            -- the queue, so the claim's estimated cost grew with the queue's depth and, past
            -- jit_above_cost (about 120k queued), every claim was JIT-compiled: 2.5 s a claim
            -- at 1M queued where JIT is available (docs/queues.md, tests/db/test_claim_cost.py).
            SELECT * FROM (
                SELECT j.id, j.priority, j.run_at, j.concurrency_key FROM {schema}.jobs j
                 WHERE j.status = 'queued' AND j.queue = m.name AND j.run_at <= now()
                   AND (j.concurrency_key IS NULL
                        OR (SELECT count(*) FROM {schema}.key_leases kl
                             WHERE kl.queue = m.name AND kl.key = j.concurrency_key)
                           < m.key_concurrency)
                 ORDER BY j.priority, j.run_at, j.id
                 LIMIT least(%(limit)s, m.allowed + 1)  -- one more than allowed: held back?
                   FOR UPDATE SKIP LOCKED) s
             LIMIT %(limit)s) c
), pick AS MATERIALIZED (
    SELECT * FROM cand WHERE rn <= allowed
     ORDER BY CASE WHEN %(order)s = 'round_robin' THEN rn END,
              CASE WHEN %(order)s <> 'global' THEN mod(pos - 1 + %(turn)s, %(nqueues)s) END,
              priority, run_at, id
     LIMIT %(limit)s
), keyed AS (
    SELECT p.id, p.queue, p.concurrency_key AS key, p.key_concurrency,
           row_number() OVER (PARTITION BY p.queue, p.concurrency_key
                              ORDER BY p.priority, p.run_at, p.id) AS krank
      FROM pick p WHERE p.concurrency_key IS NOT NULL
), kins AS (
    -- The free slots of each key (by the snapshot), one to each of its jobs in order.
    INSERT INTO {schema}.key_leases (queue, key, slot, job_id)
    SELECT k.queue, k.key, s.slot, k.id
      FROM keyed k CROSS JOIN LATERAL (
            SELECT g.slot FROM generate_series(0, k.key_concurrency - 1) AS g(slot)
             WHERE NOT EXISTS (SELECT FROM {schema}.key_leases kl
                                WHERE kl.queue = k.queue AND kl.key = k.key AND kl.slot = g.slot)
             ORDER BY g.slot OFFSET k.krank - 1 LIMIT 1) s
     ORDER BY k.queue, k.key, s.slot  -- one order for all masters: racing inserts cannot deadlock
    ON CONFLICT DO NOTHING
    RETURNING job_id
), upd AS (
    UPDATE {schema}.jobs j
       SET status = 'leased', attempts = j.attempts + 1, lease_token = j.lease_token + 1,
           lease_owner = %(owner)s, lease_expires_at = now() + make_interval(secs => %(ttl)s),
           started_at = now(), version = j.version + 1, counted = p.counted
      FROM pick p
     WHERE j.id = p.id AND (p.concurrency_key IS NULL OR p.id IN (SELECT job_id FROM kins))
    RETURNING j.id, j.lease_token, j.task, j.queue, j.attempts, j.max_attempts, j.crashes,
              j.priority, j.idempotency_key, j.traceparent,
              extract(epoch FROM j.created_at)::float8 AS created_at,
              extract(epoch FROM now() - j.run_at)::float8 AS waited,
              CASE WHEN j.parents IS NULL THEN j.payload::text  -- workflows: see claim_plain
                   ELSE j.payload::text || ',"parents":' || j.parents::text END AS payload,
              j.counted
), took AS (
    UPDATE {schema}.queue_claims c
       SET taken = c.taken + t.counted,
           -- The window: earlier buckets and this claim's, trimmed a margin beyond a period.
           starts_at = CASE WHEN q.rate_limit IS NULL THEN '{{}}' ELSE ARRAY(
                           SELECT w.at FROM (SELECT o.at, o.n FROM unnest(c.starts_at, c.starts_n) AS o(at, n)
                                             UNION ALL SELECT q.rate_bucket, t.started) w
                            WHERE w.at > now() - q.rate_period - q.rate_margin
                            GROUP BY w.at ORDER BY w.at) END,
           starts_n = CASE WHEN q.rate_limit IS NULL THEN '{{}}' ELSE ARRAY(
                           SELECT sum(w.n)::integer
                             FROM (SELECT o.at, o.n FROM unnest(c.starts_at, c.starts_n) AS o(at, n)
                                   UNION ALL SELECT q.rate_bucket, t.started) w
                            WHERE w.at > now() - q.rate_period - q.rate_margin
                            GROUP BY w.at ORDER BY w.at) END,
           last_claim_at = greatest(c.last_claim_at, now())
      FROM (SELECT u.queue, count(*) FILTER (WHERE u.counted) AS counted, count(*) AS started
              FROM upd u WHERE u.queue IN (SELECT queue FROM lim) GROUP BY u.queue) t
      JOIN q ON q.name = t.queue
     WHERE c.queue = t.queue
), held AS (
    SELECT m.name AS queue, m.reason, CASE WHEN m.reason = 'rate' THEN m.rate_retry END AS retry
      FROM room m
     WHERE m.reason IS NOT NULL AND EXISTS (SELECT FROM cand c WHERE c.queue = m.name
                                                                AND c.rn > c.allowed)
    UNION ALL
    SELECT DISTINCT p.queue, 'key', NULL::float8 FROM pick p
     WHERE p.concurrency_key IS NOT NULL AND p.id NOT IN (SELECT job_id FROM kins)
)
SELECT id, lease_token, task, queue, attempts, max_attempts, crashes, priority, idempotency_key,
       traceparent, created_at, waited, payload, NULL::text AS held, NULL::float8 AS retry
  FROM upd
UNION ALL
SELECT NULL, NULL, NULL, queue, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, reason, retry
  FROM held

-- name: claim_plain
-- claim_jobs for one queue of a master without -Q limits, while the queue has no concurrency or rate limit and the jobs it would lease carry no concurrency key; otherwise it leases nothing and returns one row with a NULL id and held = 'full': run claim_jobs.
-- Where it applies it leases what claim_jobs would lease from the same snapshot (the first
-- `limit` runnable jobs in priority order, none of them counted), without the limits'
-- statements: ~150 us of the server's CPU for a claim of two jobs against ~370
-- (docs/BENCHMARKS.md). The candidates are locked before the queue is read, so the
-- limits seen are those of this snapshot, as in claim_jobs.
WITH cand AS MATERIALIZED (
    SELECT * FROM (
        SELECT j.id, j.concurrency_key FROM {schema}.jobs j
         WHERE j.status = 'queued' AND j.queue = %(queue)s AND j.run_at <= now()
         ORDER BY j.priority, j.run_at, j.id
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED) s
     LIMIT %(limit)s  -- as in claim_jobs: a bound the planner can read (tests/db/test_claim_cost.py)
), k AS MATERIALIZED (
    SELECT k.paused, k.concurrency IS NULL AND k.rate_limit IS NULL
                     AND NOT EXISTS (SELECT FROM cand WHERE concurrency_key IS NOT NULL) AS plain
      FROM {schema}.queues k WHERE k.name = %(queue)s
), upd AS (
    UPDATE {schema}.jobs j
       SET status = 'leased', attempts = j.attempts + 1, lease_token = j.lease_token + 1,
           lease_owner = %(owner)s, lease_expires_at = now() + make_interval(secs => %(ttl)s),
           started_at = now(), version = j.version + 1, counted = false
      FROM cand c
     WHERE j.id = c.id AND EXISTS (SELECT FROM k WHERE k.plain AND NOT k.paused)
    RETURNING j.id, j.lease_token, j.task, j.queue, j.attempts, j.max_attempts, j.crashes,
              j.priority, j.idempotency_key, j.traceparent,
              extract(epoch FROM j.created_at)::float8 AS created_at,
              extract(epoch FROM now() - j.run_at)::float8 AS waited,
              -- A released dependent's parents' results (migration 0019) follow its payload:
              -- the frame splices this text in last (protocol.JobFrames), so they arrive as a
              -- "parents" field of the frame. NULL for every other job: the payload alone.
              CASE WHEN j.parents IS NULL THEN j.payload::text
                   ELSE j.payload::text || ',"parents":' || j.parents::text END AS payload
)
SELECT id, lease_token, task, queue, attempts, max_attempts, crashes, priority, idempotency_key,
       traceparent, created_at, waited, payload, NULL::text AS held, NULL::float8 AS retry
  FROM upd
UNION ALL
SELECT NULL, NULL, NULL, %(queue)s::text, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       'full', NULL
  FROM k WHERE NOT k.plain AND NOT k.paused

-- name: complete_jobs
-- Record a batch of attempt outcomes through finish_jobs (migration 0014), each guarded by owner, fencing token and status; returns the ids accepted. The master sends the arrays in binary, typed (jobrun/store/arrays.py).
SELECT f.job_id
  FROM {schema}.finish_jobs(
           ids => %(ids)s::bigint[], tokens => %(tokens)s::bigint[],
           statuses => %(statuses)s::text[], outcomes => %(outcomes)s::text[],
           channel => {ready_channel}, owner => %(owner)s::text,
           delays => %(delays)s::float8[], errors => %(errors)s::text[],
           tracebacks => %(tracebacks)s::text[], results => %(results)s::text[],
           children => %(children)s::integer[], crashed => %(crashed)s::integer[],
           logs => %(logs)s::text[], refunds => %(refunds)s::integer[],
           host => %(host)s::text, pid => %(pid)s::integer) AS f(job_id)

-- name: cap_max_attempts
-- Write a task's max_attempts, lower than its jobs', to the leased jobs whose failed attempt it decided, just before their outcomes (complete_jobs), so that they show the limit that applied; guarded as the completion is, never raises a limit, and leaves version alone (the outcome moves it).
UPDATE {schema}.jobs j
   SET max_attempts = c.lim
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(limits)s::integer[]) AS c(id, token, lim)
 WHERE j.id = c.id AND j.lease_token = c.token AND j.lease_owner = %(owner)s
   AND j.status COLLATE "C" = 'leased'  -- lookups by id: see "Guards by id" above
   AND j.max_attempts > c.lim

-- name: heartbeat
-- Extend the leases this master still holds; returns those rows with their cancel flag (missing rows were lost).
-- A renewal is bookkeeping: it leaves `version` as it is (docs/concepts.md, "Versions"), so a
-- change guarded by the version a user read of a running job is not refused because of it.
UPDATE {schema}.jobs j
   SET lease_expires_at = now() + make_interval(secs => %(ttl)s)
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
 WHERE j.id = h.id AND j.lease_token = h.token AND j.lease_owner = %(owner)s
   AND j.status COLLATE "C" = 'leased'  -- lookups by id: see "Guards by id" above
RETURNING j.id, j.cancel_requested

-- name: reap_expired
-- Requeue (with its task's backoff), kill or cancel up to `limit` jobs whose lease expired (or that no master's claim wrote: no expiry, or one past `max_lease` seconds ahead), through finish_jobs, each guarded by the token read.
-- The backoff ladders of the tasks in `tasks` are theirs (bases, factors, caps); any other
-- task's is the default (base, factor, cap): see jobrun/worker/reaper.py. A claim and a
-- heartbeat set the expiry to now() + the master's lease_ttl, which is at most max_lease
-- (jobrun/config.py's MAX_LEASE_TTL), so a lease ending later was written by no master and
-- would otherwise hold its job for as long as it says.
WITH x AS (
    SELECT id, lease_token, lease_owner, task, attempts, max_attempts, cancel_requested,
           lease_expires_at > now() + make_interval(secs => %(max_lease)s::float8) AS too_long
      FROM {schema}.jobs
     WHERE status = 'leased'
       AND (lease_expires_at < now() OR lease_expires_at IS NULL
            OR lease_expires_at > now() + make_interval(secs => %(max_lease)s::float8))
     ORDER BY lease_expires_at NULLS FIRST
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), d AS (
    SELECT x.id, x.lease_token,
           CASE WHEN x.cancel_requested THEN 'cancelled'
                WHEN x.attempts >= x.max_attempts THEN 'dead'
                ELSE 'queued' END AS status,
           random() * {schema}.retry_ceiling(x.attempts, coalesce(p.base, %(base)s::float8),
                                             coalesce(p.factor, %(factor)s::float8),
                                             coalesce(p.cap, %(cap)s::float8)) AS delay,
           CASE WHEN x.too_long
                THEN 'lease ends later than any master takes one (' || coalesce(x.lease_owner, '?')
                     || '): no master wrote it'
                ELSE 'lease expired: its holder (' || coalesce(x.lease_owner, '?')
                     || ') stopped renewing it' END AS error
      FROM x
      LEFT JOIN unnest(%(tasks)s::text[], %(bases)s::float8[], %(factors)s::float8[],
                       %(caps)s::float8[]) AS p(task, base, factor, cap) ON p.task = x.task
), a AS (
    SELECT array_agg(d.id) AS ids, array_agg(d.lease_token) AS tokens,
           array_agg(d.status) AS statuses, array_agg(d.delay) AS delays,
           array_agg(d.error) AS errors, array_agg('lease_expired'::text) AS outcomes
      FROM d
)
SELECT f.job_id
  FROM a, {schema}.finish_jobs(ids => a.ids, tokens => a.tokens, statuses => a.statuses,
                               outcomes => a.outcomes, channel => {ready_channel},
                               delays => a.delays, errors => a.errors) AS f(job_id)

-- ===== transactional handlers (run by the child, on its own connection) ==================

-- name: effect_claim
-- Reserve the effect key of a transactional job in the open transaction; no row: its effects already committed.
INSERT INTO {schema}.processed_effects (task, effect_key, job_id)
VALUES (%(task)s, %(key)s, %(id)s)
ON CONFLICT (task, effect_key) DO NOTHING
RETURNING job_id

-- name: complete_transactional
-- Succeed one job inside the handler's transaction through finish_jobs, guarded by owner, token and status; no row: the lease was lost.
SELECT f.job_id
  FROM {schema}.finish_jobs(
           ids => ARRAY[%(id)s::bigint], tokens => ARRAY[%(token)s::bigint],
           statuses => ARRAY['succeeded'], outcomes => ARRAY['succeeded'],
           channel => {ready_channel}, owner => %(owner)s::text, results => ARRAY[%(result)s::text],
           children => ARRAY[%(child)s::integer], logs => ARRAY[%(log)s::text],
           host => %(host)s::text, pid => %(pid)s::integer) AS f(job_id)

-- ===== written by the master for observers ================================================

-- name: registry_upsert
-- Insert or refresh this master's row in the worker registry.
INSERT INTO {schema}.workers (owner, host, pid, app, queues, concurrency, busy, version, inflight,
                             tasks, held, db_failures, db_error, db_host, slots)
VALUES (%(owner)s, %(host)s, %(pid)s, %(app)s, %(queues)s, %(concurrency)s, %(busy)s,
        %(version)s, %(inflight)s::jsonb, %(tasks)s, %(held)s::jsonb, %(db_failures)s, %(db_error)s,
        %(db_host)s, %(slots)s)
ON CONFLICT (owner) DO UPDATE
   SET queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency, busy = EXCLUDED.busy,
       slots = EXCLUDED.slots,
       inflight = EXCLUDED.inflight, tasks = EXCLUDED.tasks, held = EXCLUDED.held,
       db_failures = EXCLUDED.db_failures, db_error = EXCLUDED.db_error,
       db_host = EXCLUDED.db_host, last_seen = now()

-- name: registry_delete
-- Remove this master's row at shutdown.
DELETE FROM {schema}.workers WHERE owner = %(owner)s

-- name: registry_purge_stale
-- Drop registry rows of masters not seen for `stale` seconds (they died without saying so); returns how many masters are live.
WITH gone AS (
    DELETE FROM {schema}.workers WHERE last_seen < now() - make_interval(secs => %(stale)s)
)
SELECT count(*) AS live FROM {schema}.workers
 WHERE last_seen >= now() - make_interval(secs => %(stale)s)

-- name: registry_live
-- How many masters are live (seen in the last `stale` seconds).
SELECT count(*) AS live FROM {schema}.workers
 WHERE last_seen >= now() - make_interval(secs => %(stale)s)

-- name: metrics_queue_depth
-- Waiting, queued (runnable and scheduled) and leased jobs per declared queue, counted through the partial indexes; the queue's limits; the masters seen in the last `stale` s that serve it; the workflows with a member not finished (the same on every row).
SELECT k.name AS queue, k.concurrency, k.rate_limit AS rate,
       extract(epoch FROM k.rate_period)::float8 AS rate_period_seconds, k.key_concurrency,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'waiting' AND j.queue = k.name) AS waiting,
       (SELECT count(DISTINCT j.workflow_id) FROM {schema}.jobs j
         WHERE j.status IN ('waiting', 'queued', 'leased') AND j.workflow_id IS NOT NULL)
           AS workflows_running,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'queued' AND j.queue = k.name AND j.run_at <= now()) AS queued,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'queued' AND j.queue = k.name AND j.run_at > now()) AS scheduled,
       (SELECT count(*) FROM {schema}.jobs j
         WHERE j.status = 'leased' AND j.queue = k.name) AS leased,
       (SELECT count(*) FROM {schema}.workers w
         WHERE k.name = ANY (w.queues)
           AND w.last_seen >= now() - make_interval(secs => %(stale)s)) AS masters
  FROM {schema}.queues k

-- name: unclaim
-- Give back jobs this master claimed but no child started (none could take them, or they
-- waited in a child that exited): their attempts are not counted.
WITH upd AS (
    UPDATE {schema}.jobs j
       SET status = 'queued', attempts = j.attempts - 1, lease_owner = NULL,
           lease_expires_at = NULL, started_at = NULL, version = j.version + 1
      FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS u(id, token)
     WHERE j.id = u.id AND j.lease_token = u.token AND j.lease_owner = %(owner)s
       AND j.status COLLATE "C" = 'leased'  -- lookups by id: see "Guards by id" above
    RETURNING j.id, j.queue, j.counted, j.concurrency_key
), freed AS (
    -- Counted leases and keys given back (docs/dispatch.md); nothing for other jobs.
    SELECT {schema}.release_limits(array_agg(queue), array_agg(counted), array_agg(concurrency_key),
                                   array_agg(id), {ready_channel})
      FROM upd WHERE counted OR concurrency_key IS NOT NULL
)
SELECT count(*) AS given_back FROM upd CROSS JOIN freed

-- name: server_identity
-- Which server a new connection of a master reached: its cluster and, on a primary, the timeline it writes (a promoted replica writes a new one); a replica gives its cluster and '' (docs/operations.md, "Failover").
SELECT system_identifier::text || ':'
       || CASE WHEN pg_is_in_recovery() THEN ''
               ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END AS identity
  FROM pg_control_system()
