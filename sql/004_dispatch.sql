-- 004_dispatch.sql — what oncegate-dispatch keeps (SPEC 6, 7): the sending
-- lease on each effect, the history of every attempt, dead letters with
-- their evidence, and the database half of the kill switch.

-- An effect being sent is leased by one dispatcher (lease_owner, a random id
-- per process) until lease_expires_at. A lease that runs out while still
-- `sending` means the dispatcher died or stalled mid-send: the effect becomes
-- `unknown`, never `pending` (the provider may have acted).
ALTER TABLE effect_outbox
    ADD COLUMN lease_owner       uuid,
    ADD COLUMN lease_expires_at  timestamptz,
    ADD COLUMN first_attempt_at  timestamptz,   -- the retry budget counts from here
    ADD COLUMN error_class       text,          -- the last attempt's class
    ADD COLUMN reason            text,          -- its rule (classify.h reason name)
    ADD COLUMN completed_at      timestamptz,
    ADD COLUMN reconcile_attempts integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT effect_outbox_sending_leased
        CHECK (state <> 'sending' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL));

-- The queue is a hot table: every effect is updated twice within seconds
-- (claimed, then settled), and each update leaves a dead row version and,
-- since `state` decides membership of the partial index, a dead index entry
-- at the head of the queue. Vacuum it early and without throttling so the
-- claim does not walk an ever longer run of dead entries; leave room on each
-- page for the new row versions.
ALTER TABLE effect_outbox SET (fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.0, autovacuum_vacuum_insert_threshold = 5000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);

-- Window effects become due at not_before: the claim orders by
-- next_attempt_at alone, so an effect is never due before its window ends.
UPDATE effect_outbox SET next_attempt_at = not_before
 WHERE state = 'pending' AND next_attempt_at < not_before;

-- Leases to expire, and unknown effects to reconcile.
CREATE INDEX effect_outbox_sending_idx ON effect_outbox (lease_expires_at)
    WHERE state = 'sending';
CREATE INDEX effect_outbox_unknown_idx ON effect_outbox (next_attempt_at)
    WHERE state = 'unknown';

-- One row per delivery attempt and per reconciliation look-up: the attempt
-- history of a dead letter, and the answer to "did we send?".
CREATE TABLE effect_attempts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    effect_id       uuid NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('send', 'lookup')),
    attempt         integer NOT NULL,
    started_at      timestamptz NOT NULL,
    duration_ms     integer NOT NULL,
    dispatcher      text NOT NULL,                -- host:pid
    classification  text NOT NULL
                    CHECK (classification IN ('success', 'transient', 'permanent',
                                              'ambiguous', 'found', 'not_found', 'error')),
    reason          text NOT NULL,
    status          integer,                      -- HTTP status or SMTP reply code
    provider_id     text,
    -- transport error, selected response headers, a bounded body excerpt;
    -- never credentials, never the request payload
    evidence        jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX effect_attempts_effect_idx ON effect_attempts (effect_id, id);

-- When automatic recovery stops (SPEC 7.2). The evidence is a snapshot taken
-- when the letter is written: it stays readable after retention purges the
-- payloads it refers to.
CREATE TABLE dead_letters (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    effect_id        uuid NOT NULL UNIQUE REFERENCES effect_outbox (id),
    client_id        bigint NOT NULL,
    idempotency_key  text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    component        text NOT NULL,               -- who gave up: dispatcher
    error_class      text NOT NULL,               -- permanent | exhausted | unknown
    reason           text NOT NULL,
    evidence         jsonb NOT NULL,
    owner            text,
    next_action      text NOT NULL,
    retention_until  timestamptz NOT NULL,
    replay_count     integer NOT NULL DEFAULT 0,
    resolution       text,
    resolved_at      timestamptz,
    resolved_by      text
);

CREATE INDEX dead_letters_open_idx ON dead_letters (created_at) WHERE resolution IS NULL;

-- The database half of the kill switch (SPEC 6): one row, off until an
-- operator turns it on. A dispatcher sends only while this says on AND its
-- own environment has AI_ACTIONS_ENABLED=true.
CREATE TABLE dispatch_control (
    id               boolean PRIMARY KEY DEFAULT true CHECK (id),
    actions_enabled  boolean NOT NULL DEFAULT false,
    changed_at       timestamptz NOT NULL DEFAULT now(),
    changed_by       text,
    reason           text,
    -- sends refused by the switch, counted by every dispatcher (metrics)
    blocked_sends    bigint NOT NULL DEFAULT 0
);

INSERT INTO dispatch_control (changed_by, reason)
VALUES ('migration', 'installed: deny by default');
