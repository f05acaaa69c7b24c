-- 024_decide_grants.sql — the decision API: which API clients may record
-- a decision for a person they vouch for, and the record of it.
--
-- client_decide_grants: one row per (client, contract, approver entry) the
-- client may decide for. The approver entry is written as the contract
-- writes it (a subject such as "alice@example.com", or "group:NAME"); "*"
-- stands for every approver entry of that contract. Set by
-- `oncegatectl client grant` / `client ungrant`; read by the responder.
-- Owned by src/lib/clients.c, with api_clients.
CREATE TABLE client_decide_grants (
    client_id   bigint NOT NULL REFERENCES api_clients (id),
    contract    text NOT NULL CHECK (contract ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    approver    text NOT NULL CHECK (char_length(approver) BETWEEN 1 AND 320),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (client_id, contract, approver)
);

-- The client a decision came through: NULL for the approval page (the
-- person signed in themselves), else the API client that vouched for the
-- person. "decided by SUBJECT via client NAME".
ALTER TABLE approval_votes ADD COLUMN via_client_id bigint;
ALTER TABLE approvals ADD COLUMN decided_via_client_id bigint;

GRANT SELECT ON client_decide_grants TO oncegate_fcgi, oncegate_auditor;
GRANT SELECT, INSERT, DELETE ON client_decide_grants TO oncegate_operator;

-- A decided challenge keeps who decided it and through what; it may lose
-- only its reason (retention).
DROP TRIGGER approval_final ON approvals;
CREATE TRIGGER approval_final
    BEFORE UPDATE ON approvals FOR EACH ROW
    WHEN (OLD.state <> 'pending'
          AND (ROW(NEW.state, NEW.consumed_at, NEW.decision, NEW.approver_subject,
                   NEW.decided_via_client_id)
                   IS DISTINCT FROM
                   ROW(OLD.state, OLD.consumed_at, OLD.decision, OLD.approver_subject,
                       OLD.decided_via_client_id)
               OR (NEW.reason IS DISTINCT FROM OLD.reason AND NEW.reason IS NOT NULL)))
    EXECUTE FUNCTION og_refuse('change a challenge that is no longer pending');
