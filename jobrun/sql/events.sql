-- The transition log (migration 0017, jobrun/events.py): reads of a job's events, the mode,
-- what a master writes when it loses a lease, and the events stream's read.
-- "{schema}" is the quoted schema name; parameters are psycopg's %(name)s placeholders.

-- name: get_events
-- The events of one job, oldest first; one row of NULL event columns when the job exists with none (no row: no such job).
SELECT j.id AS job_id, e.seq, e.at, e.kind AS event, e.status, e.attempt, e.lease_token, e.owner,
       e.actor, e.outcome, e.detail
  FROM {schema}.jobs j
  LEFT JOIN {schema}.job_events e ON e.job_id = j.id
 WHERE j.id = %(id)s
 ORDER BY e.seq

-- name: events_mode
-- The transition log's mode as its settings value (2 all, 1 terminal, 0 none; NULL: no row, the default).
SELECT (SELECT value FROM {schema}.settings WHERE name = 'job_events') AS level

-- name: set_events_mode
-- Set the transition log's mode for the whole cluster (its settings value); returns it.
INSERT INTO {schema}.settings (name, value) VALUES ('job_events', %(level)s)
ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
RETURNING value AS level

-- name: note_lease_lost
-- Write a lease_lost event for each (id, token) this master found lost (mode all only); returns how many.
SELECT {schema}.note_lease_lost(%(ids)s::bigint[], %(tokens)s::bigint[], %(owner)s::text,
                                %(reason)s::text) AS written

-- name: stream_events
-- The events after `after` (seq), oldest first, at most `limit`, with each job's queue and task (a range of the BRIN index on seq).
SELECT e.seq, e.job_id, e.at, e.kind AS event, e.status, e.attempt, e.owner, e.actor, e.outcome,
       e.detail, j.queue, j.task
  FROM {schema}.job_events e
  LEFT JOIN {schema}.jobs j ON j.id = e.job_id
 WHERE e.seq > %(after)s
 ORDER BY e.seq
 LIMIT %(limit)s

-- name: stream_events_mark
-- The highest event seq now (where a new stream starts).
SELECT coalesce(max(seq), 0) AS seq FROM {schema}.job_events
