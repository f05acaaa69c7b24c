-- 016_run_domains.sql — the rules of workflow_runs' single columns become
-- domains; the two rules that join columns stay on the table.
--
-- Why: PostgreSQL prepares a table's CHECK constraints from their stored
-- text on every INSERT or UPDATE statement it executes (parse, simplify,
-- compile), while a domain's constraints are kept prepared in the type
-- cache. Every new key inserts a workflow_runs row, and preparing its ten
-- CHECK constraints was an eighth of the database's work for a claim. The
-- rules are the same as before, value for value.
--
-- How, without rewriting the table: the columns first take domains that
-- have no constraint yet (a change of type PostgreSQL need not rewrite the
-- table for, and the indexes on them are kept); each domain then gets its
-- rule, which checks every existing row (a scan, not a rewrite); the
-- table's own CHECK constraints go first, so nothing is checked twice.
-- All of it in the migration's one transaction. A statement that assigns
-- a parameter to one of these columns and also compares it as text casts
-- it ("$5::text"): PostgreSQL would otherwise deduce two types for it.

ALTER TABLE workflow_runs
    DROP CONSTRAINT workflow_runs_idempotency_key_check,
    DROP CONSTRAINT workflow_runs_state_check,
    DROP CONSTRAINT workflow_runs_version_check,
    DROP CONSTRAINT workflow_runs_attempt_check,
    DROP CONSTRAINT workflow_runs_decision_check,
    DROP CONSTRAINT workflow_runs_sample_draw_check,
    DROP CONSTRAINT workflow_runs_sample_rate_check,
    DROP CONSTRAINT workflow_runs_payload_canon_check,
    DROP CONSTRAINT workflow_runs_edit_whole;

CREATE DOMAIN og_idempotency_key AS text;
CREATE DOMAIN og_run_state AS text;
CREATE DOMAIN og_run_version AS bigint;
CREATE DOMAIN og_run_attempt AS integer;
CREATE DOMAIN og_run_decision AS text;
CREATE DOMAIN og_sample_draw AS double precision;
CREATE DOMAIN og_sample_rate AS double precision;
CREATE DOMAIN og_payload_canon AS text;

ALTER TABLE workflow_runs
    ALTER COLUMN idempotency_key TYPE og_idempotency_key,
    ALTER COLUMN state TYPE og_run_state,
    ALTER COLUMN version TYPE og_run_version,
    ALTER COLUMN attempt TYPE og_run_attempt,
    ALTER COLUMN decision TYPE og_run_decision,
    ALTER COLUMN sample_draw TYPE og_sample_draw,
    ALTER COLUMN sample_rate TYPE og_sample_rate,
    ALTER COLUMN payload_canon TYPE og_payload_canon;

ALTER DOMAIN og_idempotency_key ADD CONSTRAINT og_idempotency_key_length
    CHECK (char_length(VALUE) BETWEEN 1 AND 200);
ALTER DOMAIN og_run_state ADD CONSTRAINT og_run_state_known
    CHECK (VALUE IN ('processing', 'awaiting_human', 'approved', 'completed',
                     'failed_retryable', 'failed_terminal'));
ALTER DOMAIN og_run_version ADD CONSTRAINT og_run_version_positive CHECK (VALUE >= 1);
ALTER DOMAIN og_run_attempt ADD CONSTRAINT og_run_attempt_positive CHECK (VALUE >= 1);
ALTER DOMAIN og_run_decision ADD CONSTRAINT og_run_decision_known
    CHECK (VALUE IN ('approve', 'reject', 'auto', 'expired'));
ALTER DOMAIN og_sample_draw ADD CONSTRAINT og_sample_draw_range
    CHECK (VALUE >= 0 AND VALUE < 1);
ALTER DOMAIN og_sample_rate ADD CONSTRAINT og_sample_rate_range
    CHECK (VALUE >= 0 AND VALUE <= 1);
ALTER DOMAIN og_payload_canon ADD CONSTRAINT og_payload_canon_known
    CHECK (VALUE IN ('og1', 'jcs'));

-- An edit is recorded whole or not at all: its hash, editor, time and
-- fields are all set or all null (the same rule as before, shorter to
-- prepare).
ALTER TABLE workflow_runs
    ADD CONSTRAINT workflow_runs_edit_whole
    CHECK (num_nulls(edited_output_hash, edited_by, edited_at, edited_fields) IN (0, 4));
