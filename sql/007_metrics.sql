-- 007_metrics.sql — what GET /metrics (SPEC 8) needs beyond the tables that
-- already hold the facts.
--
-- Most metrics are counted from the rows the product keeps anyway (runs,
-- approvals, effects, dead letters, the kill switch). Claim outcomes are not
-- stored anywhere: a duplicate is answered by a read on purpose (README,
-- Performance), so it must not write a row. Each responder counts them in
-- memory and adds its deltas here at most once a second (src/lib/metrics.c),
-- so every responder's /metrics reads the same totals. Owned by metrics.c.

CREATE TABLE metric_counters (
    -- e.g. claims_claimed, claims_duplicate, claims_payload_mismatch
    name        text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    value       bigint NOT NULL DEFAULT 0 CHECK (value >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO metric_counters (name) VALUES
    ('claims_claimed'), ('claims_duplicate'), ('claims_payload_mismatch');

-- The metrics read sums over every run ever decided or handed an invalid
-- output. These partial indexes keep that read an index-only scan of the
-- runs concerned instead of a scan of the whole ledger: a claim inserts its
-- row with decision NULL and invalid_outputs 0, so it adds no entry to
-- either, and each run gains an entry once, when it is decided (or at its
-- first invalid output).
CREATE INDEX workflow_runs_decision_idx ON workflow_runs (decision)
    WHERE decision IS NOT NULL;
CREATE INDEX workflow_runs_invalid_idx ON workflow_runs (invalid_outputs)
    WHERE invalid_outputs > 0;
