-- 013_quorum.sql — approvers: a quorum of distinct people, and a draft a
-- person corrected before approving.
--
-- Quorum. A challenge records how many distinct people must approve the
-- run (gate.min_approvals when it was created). Every decision on a
-- challenge is a vote, recorded in the transaction that takes it; a person
-- votes once per run whichever link, group or inbox entry they use (their
-- subject compared ignoring ASCII case, as separation of duties compares
-- it). The vote that makes the quorum, or any reject, settles the run: it
-- is its one final vote. A challenge named for one person is consumed by
-- their vote; a group's challenge stays open to the group's other members
-- until the run is settled. Several challenges of one run may therefore be
-- decided, so the old one-decision index gives way to the final vote's.
ALTER TABLE approvals
    ADD COLUMN min_approvals integer NOT NULL DEFAULT 1
        CHECK (min_approvals BETWEEN 1 AND 20);

DROP INDEX approvals_one_decision;

CREATE TABLE approval_votes (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    approval_id      uuid NOT NULL REFERENCES approvals (id),
    client_id        bigint NOT NULL,
    idempotency_key  text NOT NULL,
    subject          text NOT NULL,
    decision         text NOT NULL CHECK (decision IN ('approve', 'reject')),
    reason           text,
    -- the draft the person decided on: the output's hash, or the edited
    -- output's when one was approved
    output_hash      text,
    edited           boolean NOT NULL DEFAULT false,   -- this vote edited the draft
    final            boolean NOT NULL DEFAULT false,   -- this vote settled the run
    created_at       timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (client_id, idempotency_key)
        REFERENCES workflow_runs (client_id, idempotency_key)
);

CREATE UNIQUE INDEX approval_votes_one_per_person ON approval_votes
    (client_id, idempotency_key,
     translate(subject, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'));
CREATE UNIQUE INDEX approval_votes_one_final ON approval_votes (client_id, idempotency_key)
    WHERE final;

-- Edit before approve (owned by the ledger). output and output_hash stay
-- what the model handed in; the approver's correction is kept beside them
-- and is what the effect is built from. Written once, by the first
-- approving vote, and purged by retention like the output.
ALTER TABLE workflow_runs
    ADD COLUMN edited_output       jsonb,
    ADD COLUMN edited_output_hash  text,
    ADD COLUMN edited_by           text,
    ADD COLUMN edited_at           timestamptz,
    ADD COLUMN edited_fields       text[],
    ADD CONSTRAINT workflow_runs_edit_whole
        CHECK ((edited_output_hash IS NULL) = (edited_by IS NULL)
               AND (edited_by IS NULL) = (edited_at IS NULL)
               AND (edited_at IS NULL) = (edited_fields IS NULL));
