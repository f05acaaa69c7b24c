-- 012_payload_canon.sql — the rule each run's payload hash was computed
-- under, so that a run keeps being compared under the rule it was hashed
-- with when the canonical form changes.
--
-- 'og1': canonical JSON with numbers exactly as written and members in
-- code point order (every run claimed before this migration).
-- 'jcs': RFC 8785 (numbers in ECMAScript form, members in UTF-16 order),
-- every run created since: a claim names it, and any other insert (a
-- replay's new run, hashed the same way) gets it by default.
-- Owned by the ledger.
ALTER TABLE workflow_runs ADD COLUMN payload_canon text NOT NULL DEFAULT 'og1'
    CHECK (payload_canon IN ('og1', 'jcs'));
ALTER TABLE workflow_runs ALTER COLUMN payload_canon SET DEFAULT 'jcs';
