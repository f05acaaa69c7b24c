-- 011_observe.sql — what operators need to see and what retention removes:
-- the upstream event id of a run, effects held by the kill switch, the
-- purge mark of dead letters, and for /metrics request latency per route
-- and send attempts per target and class.

-- The event id the caller's source gave the event (a webhook delivery id,
-- a message id), when the claim names one. The recovery envelope carries
-- it as event_id (falling back to correlation_id). Owned by the ledger.
ALTER TABLE workflow_runs ADD COLUMN event_id text;

-- Set on a due pending effect the first time a dispatcher holds it back
-- because the kill switch is off, cleared when it is claimed or the switch
-- lets work through again: each held effect is counted once per hold in
-- dispatch_control.blocked_sends, and the marked ones are the held-effects
-- gauge. Written by the dispatcher, which owns the sending columns.
ALTER TABLE effect_outbox ADD COLUMN held_at timestamptz;
CREATE INDEX effect_outbox_held_idx ON effect_outbox (held_at) WHERE held_at IS NOT NULL;

-- When retention removed a dead letter's content (response excerpts,
-- headers, any payload snapshot); ids, hashes, class and resolution stay.
ALTER TABLE dead_letters ADD COLUMN purged_at timestamptz;
CREATE INDEX dead_letters_retention_idx ON dead_letters (retention_until)
    WHERE purged_at IS NULL;

-- Request latency per route of the responder's route table, flushed from
-- each responder's memory at most once a second like metric_counters:
-- buckets[i] counts requests whose latency fell in (bound[i-1], bound[i]]
-- of the bounds in src/lib/metrics.c (the last one: above every bound).
-- Owned by metrics.c.
CREATE TABLE metric_route_latency (
    method       text NOT NULL CHECK (method ~ '^[A-Z]{1,16}$'),
    route        text NOT NULL CHECK (char_length(route) BETWEEN 1 AND 200),
    buckets      bigint[] NOT NULL,
    count        bigint NOT NULL DEFAULT 0 CHECK (count >= 0),
    sum_seconds  float8 NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (method, route)
);

-- Send attempts by target and outcome class (retries: the attempts after an
-- effect's first; lease_expired: sending leases that ran out), counted in
-- each dispatcher's memory and added here at every housekeeping tick, so a
-- scrape reads a handful of rows instead of the whole attempt history.
-- Started from the history already kept. Owned by metrics.c.
CREATE TABLE metric_attempts (
    target         text NOT NULL CHECK (char_length(target) BETWEEN 1 AND 63),
    class          text NOT NULL CHECK (class ~ '^[a-z_]{1,15}$'),
    attempts       bigint NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    retries        bigint NOT NULL DEFAULT 0 CHECK (retries >= 0),
    lease_expired  bigint NOT NULL DEFAULT 0 CHECK (lease_expired >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target, class)
);

INSERT INTO metric_attempts (target, class, attempts, retries, lease_expired)
SELECT e.target, a.classification, count(*), count(*) FILTER (WHERE a.attempt > 1),
       count(*) FILTER (WHERE a.reason = 'lease_expired_while_sending')
  FROM effect_attempts a JOIN effect_outbox e ON e.id = a.effect_id
 WHERE a.kind = 'send' AND char_length(e.target) <= 63
 GROUP BY 1, 2;

INSERT INTO metric_counters (name) VALUES ('runs_lease_reclaimed');
