-- 0014 one way for a job to finish: finish_jobs ends leases with their attempts' outcomes.
--
-- A master's completion batch, a transactional handler's commit and the reaper's expired
-- leases each wrote the same tail after their update: the lease cleared, the job's limits
-- given back (release_limits), the attempt recorded. Each now hands its rows to finish_jobs,
-- the one statement by which an attempt ends its lease (the statuses and moves it allows:
-- jobrun/states.py; a claim given back unstarted, unclaim, ran no attempt).
-- It stays set-based as the completion was (UPDATE ... FROM unnest, one multi-row insert of
-- attempts, one call per batch), and PL/pgSQL keeps its plan for the session as a prepared
-- statement would: a master's completion connection plans it generically with sequential
-- scans costed out (BY_ID_SETTINGS), and the COLLATE in its guard keeps the partial index
-- on leased rows out of reach ("Guards by id" in queries.sql; tests/db/test_plans.py).
--
-- Rows come as parallel arrays, one element per job. Arrays a caller has no use for may be
-- NULL: their elements read as NULL (no delay, nothing crashed or refunded, no result).
--   ids, tokens  the leases to end, each guarded by its fencing token and status 'leased',
--                and by owner unless owner is NULL (the reaper, which read each token under
--                the row's lock: the token alone names one lease)
--   statuses     where each job goes: succeeded, queued (again, after delays seconds), dead
--                or cancelled; anything else is refused (JR001). A queued job whose cancel
--                was requested meanwhile ends cancelled.
--   outcomes     the attempt's outcome (outcome_valid); errors, tracebacks, results (JSON
--                text), children, logs go with it, host and pid name the master
--   crashed      1 adds a crash to the job (its child died); refunds 1 gives its attempt back
--                (released at shutdown: it does not count)
--   channel      where a queue whose limits were released is announced (release_limits)
-- Returns the ids finished; a row whose guard failed (the lease was lost) is left out.
CREATE FUNCTION {schema}.finish_jobs(
    ids        bigint[],
    tokens     bigint[],
    statuses   text[],
    outcomes   text[],
    channel    text,
    owner      text      DEFAULT NULL,
    delays     float8[]  DEFAULT NULL,
    errors     text[]    DEFAULT NULL,
    tracebacks text[]    DEFAULT NULL,
    results    text[]    DEFAULT NULL,
    children   integer[] DEFAULT NULL,
    crashed    integer[] DEFAULT NULL,
    logs       text[]    DEFAULT NULL,
    refunds    integer[] DEFAULT NULL,
    host       text      DEFAULT NULL,
    pid        integer   DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad text;
BEGIN
    SELECT coalesce(s.v, 'NULL') INTO bad FROM unnest(statuses) AS s(v)
     WHERE s.v IS NULL OR s.v NOT IN ('succeeded', 'queued', 'dead', 'cancelled') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'finish_jobs: a leased job becomes succeeded, queued, dead or cancelled, not %',
            bad USING ERRCODE = 'JR001';
    END IF;
    RETURN QUERY
    WITH r AS (
        SELECT * FROM unnest(ids, tokens, statuses, outcomes, delays, errors, tracebacks, results,
                             children, crashed, logs, refunds)
               AS r(id, token, status, outcome, delay, error, traceback, result, child, crashed,
                    log, refund)
    ), upd AS (
        UPDATE {schema}.jobs j
           SET status = CASE WHEN r.status = 'queued' AND j.cancel_requested THEN 'cancelled'
                             ELSE r.status END,
               run_at = CASE WHEN r.status = 'queued'
                             THEN now() + make_interval(secs => coalesce(r.delay, 0))
                             ELSE j.run_at END,
               finished_at = CASE WHEN r.status = 'queued' AND NOT j.cancel_requested THEN NULL
                                  ELSE now() END,
               crashes = j.crashes + coalesce(r.crashed, 0),
               attempts = j.attempts - coalesce(r.refund, 0),
               lease_owner = NULL, lease_expires_at = NULL, version = j.version + 1
          FROM r
         WHERE j.id = r.id AND j.lease_token = r.token
           AND (finish_jobs.owner IS NULL OR j.lease_owner = finish_jobs.owner)
           AND j.status COLLATE "C" = 'leased'  -- lookups by id: "Guards by id" in queries.sql
        RETURNING j.id, j.lease_token, j.attempts + coalesce(r.refund, 0) AS attempt,
                  j.started_at, j.queue, j.counted, j.concurrency_key, r.outcome, r.error,
                  r.traceback, r.result, r.child, r.log
    ), freed AS (
        -- Counted leases and keys given back (docs/dispatch.md); nothing for other jobs.
        SELECT {schema}.release_limits(array_agg(u.queue), array_agg(u.counted),
                                       array_agg(u.concurrency_key), array_agg(u.id),
                                       finish_jobs.channel)
          FROM upd u WHERE u.counted OR u.concurrency_key IS NOT NULL
    )
    INSERT INTO {schema}.job_attempts AS a
           (job_id, lease_token, attempt, worker_host, worker_pid, worker_child, started_at,
            outcome, error, traceback, result, log)
    SELECT u.id, u.lease_token, u.attempt, finish_jobs.host, finish_jobs.pid, u.child,
           u.started_at, u.outcome, u.error, u.traceback, u.result::jsonb, u.log
      FROM upd u CROSS JOIN freed
    RETURNING a.job_id;
END
$$;

-- The ceiling of a retry's delay after the attempt-th start, min(cap, base * factor^(n-1)),
-- as jobrun.policy.retry.RetryPolicy.ceiling computes it; worked out in logarithms so that
-- no ladder overflows (a delay never errs). A base or cap <= 0 gives 0 (at once), a factor
-- <= 0 the base once and then 0. A branch whose condition is constant false is dropped
-- before the planner folds its constants, so no logarithm of 0 is ever taken.
CREATE FUNCTION {schema}.retry_ceiling(attempt integer, base float8, factor float8,
                                       cap float8) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN base <= 0 OR cap <= 0 THEN 0
                WHEN factor <= 0 THEN CASE WHEN attempt <= 1 THEN least(base, cap) ELSE 0 END
                ELSE exp(greatest(-744, least(ln(cap),
                                              ln(base) + greatest(attempt - 1, 0) * ln(factor))))
           END
$$;
