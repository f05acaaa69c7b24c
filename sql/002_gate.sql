-- 002_gate.sql — model outputs, approval challenges and the effect outbox
-- (SPEC 3.5, 4, 5, 6). State lists mirror enum approval_state (gate.h) and
-- enum effect_state (outbox.h) one for one.

-- What the workflow handed in for a run (owned by the ledger).
ALTER TABLE workflow_runs
    ADD COLUMN contract         text,
    ADD COLUMN contract_hash    text,
    ADD COLUMN output           jsonb,     -- purged by retention, hash kept
    ADD COLUMN output_hash      text,
    ADD COLUMN model            jsonb,
    ADD COLUMN effect           jsonb,     -- the proposed effect
    ADD COLUMN source_url       text,
    ADD COLUMN requested_by     text,
    ADD COLUMN callback_url     text,
    ADD COLUMN invalid_outputs  integer NOT NULL DEFAULT 0,
    ADD COLUMN validation       jsonb,     -- errors of the last invalid output
    ADD COLUMN decided_by       text,
    ADD COLUMN decision         text CHECK (decision IN ('approve', 'reject', 'auto', 'expired')),
    ADD COLUMN decided_at       timestamptz;

-- One challenge per named approver. The raw token is never stored: only
-- its SHA-256. A challenge is used once: consumed_at, decision and
-- approver_subject are set together by one UPDATE … WHERE consumed_at IS
-- NULL, and at most one challenge per run can carry a decision.
CREATE TABLE approvals (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    client_id         bigint NOT NULL,
    idempotency_key   text NOT NULL,
    token_hash        bytea NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    approver          text NOT NULL,             -- a subject or group:NAME
    allowed_decisions text[] NOT NULL,
    requested_by      text,
    separation_of_duties boolean NOT NULL,
    expires_at        timestamptz NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    state             text NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'decided', 'voided', 'revoked', 'expired')),
    consumed_at       timestamptz,
    decision          text CHECK (decision IN ('approve', 'reject')),
    approver_subject  text,
    reason            text,
    CHECK ((state = 'decided') = (consumed_at IS NOT NULL)),
    CHECK ((state = 'decided') = (decision IS NOT NULL AND approver_subject IS NOT NULL)),
    FOREIGN KEY (client_id, idempotency_key)
        REFERENCES workflow_runs (client_id, idempotency_key)
);

CREATE INDEX approvals_run_idx ON approvals (client_id, idempotency_key);
CREATE UNIQUE INDEX approvals_one_decision ON approvals (client_id, idempotency_key)
    WHERE state = 'decided';
CREATE INDEX approvals_pending_idx ON approvals (expires_at) WHERE state = 'pending';

-- Effects to perform, drained by oncegate-dispatch. One row per (run,
-- effect type, target). provider_key is the idempotency key the provider
-- sees on every attempt.
CREATE TABLE effect_outbox (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    client_id        bigint NOT NULL,
    idempotency_key  text NOT NULL,
    effect_type      text NOT NULL,
    target           text NOT NULL,
    payload          jsonb,                      -- purged by retention
    payload_hash     text NOT NULL,
    provider_key     text NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'sending', 'completed', 'unknown',
                                      'failed', 'cancelled')),
    not_before       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    attempt          integer NOT NULL DEFAULT 0,
    provider_id      text,
    approval_id      uuid REFERENCES approvals (id),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (client_id, idempotency_key, effect_type, target),
    FOREIGN KEY (client_id, idempotency_key)
        REFERENCES workflow_runs (client_id, idempotency_key)
);

CREATE INDEX effect_outbox_due_idx ON effect_outbox (next_attempt_at)
    WHERE state = 'pending';
