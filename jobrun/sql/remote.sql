-- The worker protocol of `jobrun web` (jobrun/web/routes_workers.py): remote workers, which
-- hold no database connection, claim with claim_jobs, renew with heartbeat and end attempts
-- through finish_jobs, as masters do; what is here is theirs alone. A remote worker's row in
-- `workers` is a master's row with pid 0, its address as host and its credits as
-- concurrency, so that `jobrun workers`, `top`, the console and /metrics show it beside them;
-- its owner ('remote:NAME:ID') is the lease owner of the jobs it holds.

-- name: remote_register
-- Add a remote worker's row to the registry (owner: remote:NAME:ID, new at each registration).
INSERT INTO {schema}.workers (owner, host, pid, app, queues, concurrency, busy, version, tasks)
VALUES (%(owner)s, %(host)s, 0, %(name)s, %(queues)s, %(credits)s, 0, %(version)s, %(tasks)s)

-- name: remote_seen
-- Mark a remote worker seen now (and how many jobs it holds, when given) if the caller's `scope` (NULL: any) covers its queues; returns its queues, credits and whether it was allowed, no row if it is unknown (never registered, or purged as stale).
UPDATE {schema}.workers w
   SET last_seen = CASE WHEN %(scope)s::text[] IS NULL OR w.queues <@ %(scope)s::text[]
                        THEN now() ELSE w.last_seen END,
       busy = CASE WHEN %(scope)s::text[] IS NULL OR w.queues <@ %(scope)s::text[]
                   THEN coalesce(%(busy)s::integer, w.busy) ELSE w.busy END
 WHERE w.owner = %(owner)s AND w.pid = 0
RETURNING w.queues, w.concurrency AS credits,
          %(scope)s::text[] IS NULL OR w.queues <@ %(scope)s::text[] AS allowed

-- name: remote_forget
-- Remove a remote worker's row (it said goodbye); returns it if there was one.
DELETE FROM {schema}.workers WHERE owner = %(owner)s AND pid = 0 RETURNING owner

-- name: remote_finish
-- End a remote worker's attempts through finish_jobs, all or none: each guarded by owner, token and status, its fate decided here as policy.decide would (failed: queued after the hint or the default backoff, dead at max_attempts or when permanent); returns each id with whether it was accepted, and when any lease is not held (stale) none is finished.
-- kinds: succeeded, failed, retry, timeout (a failure: its time limit ran out), cancelled or
-- released (the worker stopped before it ran to its end: back at once, the attempt given back). The held leases are locked (in id order)
-- as they are read, so none can be reaped between that read and finish_jobs: the answer is
-- exact, and one statement (no transaction block) is all the call costs.
WITH r AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(kinds)s::text[],
                         %(permanents)s::boolean[], %(delays)s::float8[], %(errors)s::text[],
                         %(tracebacks)s::text[], %(results)s::text[], %(logs)s::text[])
           AS r(id, token, kind, permanent, delay, error, traceback, result, log)
), d AS MATERIALIZED (
    SELECT r.*,
           CASE WHEN r.kind IN ('succeeded', 'cancelled') THEN r.kind
                WHEN r.kind = 'released' THEN 'queued'
                WHEN r.permanent OR j.attempts >= j.max_attempts THEN 'dead'
                ELSE 'queued' END AS status,
           CASE WHEN r.kind = 'released' THEN 0
                WHEN r.delay IS NOT NULL THEN greatest(0, r.delay)
                ELSE random() * {schema}.retry_ceiling(j.attempts, %(base)s::float8,
                                                       %(factor)s::float8, %(cap)s::float8)
           END AS wait,
           CASE WHEN r.kind = 'released' THEN 1 END AS refund
      FROM r JOIN {schema}.jobs j
        ON j.id = r.id AND j.lease_token = r.token AND j.lease_owner = %(owner)s
       AND j.status COLLATE "C" = 'leased'  -- lookups by id: see "Guards by id" in queries.sql
     ORDER BY j.id
       FOR UPDATE OF j
), a AS (
    SELECT array_agg(id) AS ids, array_agg(token) AS tokens, array_agg(status) AS statuses,
           array_agg(kind) AS outcomes, array_agg(wait) AS delays, array_agg(error) AS errors,
           array_agg(traceback) AS tracebacks, array_agg(result) AS results,
           array_agg(log) AS logs, array_agg(refund) AS refunds
      FROM d
     WHERE (SELECT count(*) FROM d) = (SELECT count(*) FROM r)  -- all held, or none finished
)
SELECT f.job_id, true AS accepted
  FROM a, {schema}.finish_jobs(
              ids => a.ids, tokens => a.tokens, statuses => a.statuses, outcomes => a.outcomes,
              channel => {ready_channel}, owner => %(owner)s::text, delays => a.delays,
              errors => a.errors, tracebacks => a.tracebacks, results => a.results,
              logs => a.logs, refunds => a.refunds, host => %(owner)s::text) AS f(job_id)
UNION ALL
SELECT r.id, false FROM r WHERE NOT EXISTS (SELECT FROM d WHERE d.id = r.id)
