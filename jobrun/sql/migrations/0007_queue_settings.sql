-- 0007 queue settings: a queue becomes a full object. Its settings change live: masters read
-- them with each claim (limits) or each sweep (aging), never from their own configuration.
--
--   concurrency       (since 0001) at most this many of the queue's jobs leased across all
--                     masters at any instant; NULL: no cluster-wide limit
--   rate_limit, rate_period
--                     at most rate_limit starts per rate_period, cluster-wide; both NULL: none
--   aging             a queued job's priority improves by one step per interval of waiting;
--                     NULL: no aging (the claim plan and speed of a queue without it)
--   priority_default  the priority of a job enqueued without one
--   max_attempts      the attempt limit of a job enqueued without one; NULL: 5
--   retention         finished jobs older than this are purged; NULL: the purge's default
--   key_concurrency   at most this many running jobs per concurrency key
--   version           bumped by every change of the row (optimistic concurrency in the API)
ALTER TABLE {schema}.queues
    ADD COLUMN rate_limit integer
        CONSTRAINT rate_limit_positive CHECK (rate_limit > 0),
    ADD COLUMN rate_period interval
        CONSTRAINT rate_period_range CHECK (rate_period > interval '0' AND rate_period <= interval '1 day'),
    ADD COLUMN aging interval
        CONSTRAINT aging_range CHECK (aging >= interval '1 millisecond' AND aging <= interval '365 days'),
    ADD COLUMN priority_default smallint NOT NULL DEFAULT 0
        CONSTRAINT priority_default_range CHECK (priority_default BETWEEN -100 AND 100),
    ADD COLUMN max_attempts integer
        CONSTRAINT max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    ADD COLUMN retention interval
        CONSTRAINT retention_positive CHECK (retention > interval '0'),
    ADD COLUMN key_concurrency integer NOT NULL DEFAULT 1
        CONSTRAINT key_concurrency_positive CHECK (key_concurrency > 0),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN version bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT rate_complete CHECK ((rate_limit IS NULL) = (rate_period IS NULL));

-- A job's concurrency key ("customer:42"): at most its queue's key_concurrency jobs with one
-- key run at a time. NULL: no key.
ALTER TABLE {schema}.jobs
    ADD COLUMN concurrency_key text
        CONSTRAINT concurrency_key_valid
        CHECK (length(concurrency_key) BETWEEN 1 AND 200 AND concurrency_key !~ '[[:cntrl:]]');
