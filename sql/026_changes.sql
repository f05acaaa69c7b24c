-- 026_changes.sql — "request changes": an approver may send the draft
-- back to the workflow with feedback, for a new draft within the same run.
--
-- Rounds. A run's draft is decided in rounds: round 1 is the first output's,
-- and each changes_requested decision that the run's repair budget still
-- allows opens the next one (the run goes back to processing, its workflow
-- hands in a new output, which gets new challenges). Every challenge and
-- every vote belongs to one round; a person votes once per round, and each
-- round has at most one final vote (its quorum starts again). A challenge
-- takes its run's round when it is created (the trigger below), so the
-- responder's and the dispatcher's inserts (escalations included) need not
-- name it. Rows made before this migration are in round 1.
ALTER TABLE workflow_runs
    ADD COLUMN round integer NOT NULL DEFAULT 1 CHECK (round >= 1);
ALTER TABLE approvals
    ADD COLUMN round integer NOT NULL DEFAULT 1 CHECK (round >= 1);
ALTER TABLE approval_votes
    ADD COLUMN round integer NOT NULL DEFAULT 1 CHECK (round >= 1);

-- The decision changes_requested, on a challenge and as a vote; its
-- feedback is the vote's reason (free text, purged by retention like one).
ALTER TABLE approvals DROP CONSTRAINT approvals_decision_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_decision_check
    CHECK (decision IN ('approve', 'reject', 'changes_requested'));
ALTER TABLE approval_votes DROP CONSTRAINT approval_votes_decision_check;
ALTER TABLE approval_votes ADD CONSTRAINT approval_votes_decision_check
    CHECK (decision IN ('approve', 'reject', 'changes_requested'));

DROP INDEX approval_votes_one_per_person;
CREATE UNIQUE INDEX approval_votes_one_per_person ON approval_votes
    (client_id, idempotency_key, round,
     translate(subject, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'));
DROP INDEX approval_votes_one_final;
CREATE UNIQUE INDEX approval_votes_one_final ON approval_votes
    (client_id, idempotency_key, round) WHERE final;

CREATE FUNCTION og_approval_round() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, public
AS $$
BEGIN
    NEW.round := coalesce((SELECT r.round FROM workflow_runs r
                            WHERE r.client_id = NEW.client_id
                              AND r.idempotency_key = NEW.idempotency_key), 1);
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION og_approval_round() FROM PUBLIC;

CREATE TRIGGER approval_round
    BEFORE INSERT ON approvals FOR EACH ROW
    EXECUTE FUNCTION og_approval_round();

-- The responder opens the next round (round, and the run back to
-- processing under its lease owner with a fresh lease); the dispatcher
-- never does (run_dispatch_moves already refuses its moving a run there).
-- The responder's grant on workflow_runs is table-wide (015), so it
-- covers the new column.
