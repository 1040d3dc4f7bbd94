-- Named queries that end stale sessions and recover rows no claim could have made.

-- name: handler_session_settings
-- Server-side limits for a transactional handler's session: idle-in-transaction timeout and TCP keepalives.
SELECT set_config('idle_in_transaction_session_timeout', %(idle)s, false),
       set_config('tcp_keepalives_idle', %(keepidle)s, false),
       set_config('tcp_keepalives_interval', %(keepinterval)s, false),
       set_config('tcp_keepalives_count', %(keepcount)s, false)

-- name: record_handler_session
-- Record this session as the one running the attempt's transaction (guarded by lease); no row: the lease was lost.
UPDATE {schema}.jobs
   SET handler_pid = pg_backend_pid(), handler_token = lease_token,
       handler_since = (SELECT a.backend_start FROM pg_stat_activity a WHERE a.pid = pg_backend_pid())
 WHERE id = %(id)s AND lease_token = %(token)s AND lease_owner = %(owner)s
   AND status COLLATE "C" = 'leased'  -- lookups by id: see "Guards by id" in queries.sql
RETURNING id

-- name: end_stale_handler_sessions
-- End the database sessions of transactional attempts whose lease expired (they may hold effect keys); waits up to 1 s for each.
SELECT j.id AS job_id, a.pid, pg_terminate_backend(a.pid, 1000) AS ended
  FROM {schema}.jobs j
  JOIN pg_stat_activity a ON a.pid = j.handler_pid AND a.backend_start = j.handler_since
 WHERE j.status = 'leased' AND j.lease_expires_at < now() AND j.handler_token = j.lease_token
   AND a.pid <> pg_backend_pid()
