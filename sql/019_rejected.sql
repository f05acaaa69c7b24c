-- 019_rejected.sql — what oncegate says reads true: a rejected run has its
-- own state (rejected, no longer failed_terminal); a dead letter keeps its
-- resolution history and counts each spent retry budget; retention may
-- remove the approvers' reasons.
--
-- A person's "no" is a decision, not a failure,
-- and dashboards, the API and workflow tools count it apart.
--
-- The state's domain takes the new value; runs rejected before this
-- migration (failed_terminal with decision reject) become rejected, so
-- old and new rejections read the same. Their error_class (rejected) and
-- reason (the approver's) stay as they were.

ALTER DOMAIN og_run_state DROP CONSTRAINT og_run_state_known;
ALTER DOMAIN og_run_state ADD CONSTRAINT og_run_state_known
    CHECK (VALUE IN ('processing', 'awaiting_human', 'approved', 'completed',
                     'failed_retryable', 'failed_terminal', 'rejected'));

UPDATE workflow_runs SET state = 'rejected'
 WHERE state = 'failed_terminal' AND decision = 'reject';

-- A dead letter keeps the history of what was done about it: every
-- resolution is added (resolution, when, by whom), none overwrites
-- another, and a letter a replay answered stays `replayed` whatever is
-- learnt about the original effect later. Letters resolved before this
-- migration start their history with that resolution.
ALTER TABLE dead_letters ADD COLUMN resolutions jsonb NOT NULL DEFAULT '[]';
UPDATE dead_letters
   SET resolutions = jsonb_build_array(jsonb_build_object(
           'resolution', resolution, 'at', og_ts(resolved_at), 'by', resolved_by))
 WHERE resolution IS NOT NULL;

-- How many times an effect's retry budget was spent: its letter is written
-- once, and each exhaustion after an operator's resume adds one, so the
-- metric counts every one.
ALTER TABLE dead_letters ADD COLUMN exhaustions integer NOT NULL DEFAULT 0
    CHECK (exhaustions >= 0);
UPDATE dead_letters SET exhaustions = 1 WHERE error_class = 'exhausted';

-- Retention drops the approvers' reasons with the rest of a finished run's
-- free text: a decided challenge may lose its reason (and nothing else),
-- and an operator (the purge) may remove a vote's reason, never change a
-- vote otherwise.
DROP TRIGGER approval_final ON approvals;
CREATE TRIGGER approval_final
    BEFORE UPDATE ON approvals FOR EACH ROW
    WHEN (OLD.state <> 'pending'
          AND (ROW(NEW.state, NEW.consumed_at, NEW.decision, NEW.approver_subject)
                   IS DISTINCT FROM
                   ROW(OLD.state, OLD.consumed_at, OLD.decision, OLD.approver_subject)
               OR (NEW.reason IS DISTINCT FROM OLD.reason AND NEW.reason IS NOT NULL)))
    EXECUTE FUNCTION og_refuse('change a challenge that is no longer pending');

GRANT UPDATE (reason) ON approval_votes TO oncegate_operator;
CREATE TRIGGER vote_reason_purge_only
    BEFORE UPDATE OF reason ON approval_votes FOR EACH ROW
    WHEN (NEW.reason IS NOT NULL AND NEW.reason IS DISTINCT FROM OLD.reason)
    EXECUTE FUNCTION og_refuse('change a vote (retention may only remove its reason)');
