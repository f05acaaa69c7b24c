-- 001_ledger.sql — API clients and the run ledger (SPEC 2, 3).
--
-- Applied once by `oncegatectl migrate`, inside a transaction, and recorded
-- in schema_migrations. The state lists below mirror enum run_state in
-- src/lib/ledger.h one for one.

CREATE TABLE api_clients (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE
                CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    -- SHA-256 of the API key; the key itself is shown once and never stored.
    key_hash    bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE workflow_runs (
    -- Keys are namespaced per client: the primary key includes the client.
    -- No foreign key: clients are revoked, never deleted, and the responder
    -- writes only ids it has just authenticated; a foreign key would make
    -- every concurrent claim of one client take a KEY SHARE lock on the same
    -- api_clients row (a MultiXact per claim under load).
    client_id        bigint NOT NULL,
    idempotency_key  text NOT NULL
                     CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    -- "sha256:" + 64 hex digits, computed by the responder (canon.c)
    payload_hash     text NOT NULL,
    -- Canonical payload, kept for replay until retention purges it.
    payload          jsonb,
    state            text NOT NULL CHECK (state IN ('processing', 'awaiting_human',
                         'approved', 'completed', 'failed_retryable', 'failed_terminal')),
    lease_owner      uuid,
    lease_expires_at timestamptz,
    -- Start of the current claim: the lease cap counts from here.
    claim_started_at timestamptz NOT NULL,
    version          bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    workflow_version text,
    trigger          text,
    correlation_id   text,
    result           jsonb,
    error_class      text,
    reason           text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (client_id, idempotency_key),
    CHECK (state <> 'processing' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- The timeline of decisions about a run, newest last. Written by the ledger
-- in the same statement as the change it records, which is why it needs no
-- foreign key (and the claim does not pay for one).
CREATE TABLE run_events (
    -- orders a run's events; the index below is the only access path, so
    -- the claim pays for one index entry, not two
    id               bigint GENERATED ALWAYS AS IDENTITY,
    client_id        bigint NOT NULL,
    idempotency_key  text NOT NULL,
    ts               timestamptz NOT NULL DEFAULT now(),
    event            text NOT NULL,
    state_from       text,
    state_to         text,
    version          bigint,
    attempt          integer,
    actor            text,
    reason           text
);

CREATE INDEX run_events_run_idx ON run_events (client_id, idempotency_key, id);

-- RFC 3339 UTC with milliseconds, the one timestamp format of the API.
-- Plain SQL without SET clauses, so the planner inlines it.
CREATE FUNCTION og_ts(t timestamptz) RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
