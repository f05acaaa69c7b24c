-- 014_notify.sql — approvers are told by the product: each challenge may
-- carry whom to tell (its approver entry's notify: mail addresses on a mail
-- target, or a chat webhook target), when to remind them and when to add
-- the escalation approvers. The notification itself is an approval.notify
-- effect in the outbox (one per challenge and per resend, told apart by
-- the outbox's slot); its link's token is minted by the dispatcher right
-- before the send and only its SHA-256 replaces the challenge's token_hash.

ALTER TABLE approvals
    ADD COLUMN notify       jsonb,        -- {"target", "to"?}; NULL: nobody is told
    ADD COLUMN notified_at  timestamptz,  -- the last link minted for a notification
    ADD COLUMN remind_at    timestamptz,  -- one reminder then, while pending
    ADD COLUMN escalate_at  timestamptz,  -- the run's escalation then, if nobody decided
    ADD COLUMN escalate_to  jsonb,        -- [{"approver", "notify"}] added by it
    ADD COLUMN escalated    boolean NOT NULL DEFAULT false; -- created by an escalation

CREATE INDEX approvals_remind_idx ON approvals (remind_at)
    WHERE state = 'pending' AND remind_at IS NOT NULL;
CREATE INDEX approvals_escalate_idx ON approvals (escalate_at)
    WHERE state = 'pending' AND escalate_at IS NOT NULL;

-- Links a newer notification replaced (their hash only), so that an old
-- link is told it is no longer valid instead of "unknown".
CREATE TABLE approval_replaced_links (
    token_hash   bytea PRIMARY KEY CHECK (octet_length(token_hash) = 32),
    approval_id  uuid NOT NULL REFERENCES approvals (id),
    replaced_at  timestamptz NOT NULL DEFAULT now()
);
