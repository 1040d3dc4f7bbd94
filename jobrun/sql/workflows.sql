-- Workflows: jobs that wait for other jobs (migration 0019; jobrun/workflows.py, docs/workflows.md).

-- name: enqueue_workflow
-- Enqueue a workflow's jobs and edges in one call (the SQL function enqueue_workflow); returns its id, its jobs' ids in order and whether it was created.
SELECT workflow_id, ids, created
  FROM {schema}.enqueue_workflow(%(tasks)s::text[], %(payloads)s::text[]::jsonb[],
                                 %(queues)s::text[], %(priorities)s::integer[],
                                 %(attempt_limits)s::integer[], %(on_parent_failure)s::text[],
                                 %(edge_dependents)s::integer[], %(parent_items)s::integer[],
                                 %(parent_jobs)s::bigint[], %(idempotency_key)s::text,
                                 %(shape)s::text, %(traceparent)s::text)

-- name: get_workflow
-- A workflow's row with its members (id, task, queue, status, attempts, cancel_reason, finished_at) and each member's parents, in id order; no row if there is none.
SELECT w.id, w.shape, w.idempotency_key, w.created_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                     'id', j.id, 'task', j.task, 'queue', j.queue, 'status', j.status,
                     'attempts', j.attempts, 'cancel_reason', j.cancel_reason,
                     'finished_at', j.finished_at,
                     'after', coalesce((SELECT jsonb_agg(e.parent ORDER BY e.parent)
                                          FROM {schema}.job_deps e WHERE e.dependent = j.id),
                                       '[]'::jsonb))
                     ORDER BY j.id)
                   FROM {schema}.jobs j WHERE j.workflow_id = w.id), '[]'::jsonb) AS jobs
  FROM {schema}.workflows w WHERE w.id = %(id)s

-- name: cancel_workflow
-- Cancel every member of a workflow not finished: waiting and queued ones at once, leased ones by cancel_requested (their dependents follow through settle_dependents); returns the members changed.
WITH m AS (
    SELECT j.id FROM {schema}.jobs j
     WHERE j.workflow_id = %(id)s AND j.status IN ('waiting', 'queued', 'leased')
     ORDER BY j.id FOR UPDATE
)
UPDATE {schema}.jobs j
   SET status = CASE WHEN j.status = 'leased' THEN j.status ELSE 'cancelled' END,
       finished_at = CASE WHEN j.status = 'leased' THEN j.finished_at ELSE now() END,
       cancel_requested = (j.status = 'leased'), version = j.version + 1
  FROM m WHERE j.id = m.id
RETURNING j.id, j.status

-- name: workflow_exists
-- Whether a workflow exists.
SELECT EXISTS (SELECT FROM {schema}.workflows WHERE id = %(id)s) AS found

-- name: purge_workflows
-- Delete up to `batch` workflows as wholes (jobs, attempts, effects, edges) whose every member finished more than a duration ago; a row per workflow, n the jobs deleted in all.
WITH w AS (
    SELECT w.id FROM {schema}.workflows w
     WHERE w.created_at < now() - make_interval(secs => %(older_than)s)
       AND NOT EXISTS (SELECT FROM {schema}.jobs j
                        WHERE j.workflow_id = w.id
                          AND (j.status NOT IN ('succeeded', 'dead', 'cancelled')
                               OR j.finished_at >= now() - make_interval(secs => %(older_than)s)))
     ORDER BY w.id
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
), d AS (
    DELETE FROM {schema}.jobs j USING w WHERE j.workflow_id = w.id RETURNING j.id
), a AS (
    DELETE FROM {schema}.job_attempts t USING d WHERE t.job_id = d.id
), e AS (
    DELETE FROM {schema}.processed_effects t USING d WHERE t.job_id = d.id
), x AS (
    DELETE FROM {schema}.job_deps t USING d WHERE t.dependent = d.id OR t.parent = d.id
), f AS (
    DELETE FROM {schema}.workflows f USING w WHERE f.id = w.id RETURNING f.id
)
SELECT f.id, (SELECT count(*) FROM d) AS n FROM f
