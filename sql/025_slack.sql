-- 025_slack.sql — decisions taken from a chat (Slack's buttons), and what
-- the chat door keeps: the requests it has seen (a replayed request is
-- refused) and the replies it owes the chat (the message updated to say
-- who decided), which the dispatcher sends.
--
-- The chat a vote came through: NULL for the page and the decision API,
-- else the chat ("slack"). "decided by SUBJECT via slack".
ALTER TABLE approval_votes ADD COLUMN via_chat text
    CHECK (via_chat IN ('slack'));

-- chat_requests_seen: the signature of every signed chat request the
-- responder accepted, kept a little longer than the window a signature is
-- good for (5 minutes either side of its timestamp), so that the same
-- request sent again within it is
-- refused. Only its SHA-256 is kept. The responder deletes rows past the
-- window as it adds new ones (a trigger refuses deleting a younger one).
-- Owned by src/lib/chat.c.
CREATE TABLE chat_requests_seen (
    signature_sha256 bytea PRIMARY KEY CHECK (octet_length(signature_sha256) = 32),
    chat             text NOT NULL CHECK (chat IN ('slack')),
    seen_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_requests_seen_at ON chat_requests_seen (seen_at);

CREATE FUNCTION chat_seen_keep() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.seen_at > now() - interval '15 minutes' AND NOT og_unbound() THEN
        RAISE EXCEPTION 'permission denied: a chat request seen within 15 minutes is kept'
            USING ERRCODE = '42501';
    END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER chat_requests_seen_keep
    BEFORE DELETE ON chat_requests_seen FOR EACH ROW
    EXECUTE FUNCTION chat_seen_keep();

-- chat_replies: the message of a chat notice updated after a decision
-- (Slack's response_url), queued by the responder once the decision
-- committed and sent by the dispatcher, so that a slow chat neither holds
-- the decision nor loses the reply. response_url is the chat's short-lived
-- capability: it is cleared once the reply is sent or given up on.
-- Owned by src/lib/chat.c.
CREATE TABLE chat_replies (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chat         text NOT NULL CHECK (chat IN ('slack')),
    target       text NOT NULL CHECK (char_length(target) BETWEEN 1 AND 64),
    approval_id  uuid,
    response_url text CHECK (char_length(response_url) BETWEEN 1 AND 2048),
    body         jsonb NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'sent', 'failed')),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_at      timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    last_status  integer,
    last_error   text,
    CHECK ((state = 'pending') = (response_url IS NOT NULL))
);
CREATE INDEX chat_replies_due ON chat_replies (next_at) WHERE state = 'pending';

GRANT SELECT, INSERT, DELETE ON chat_requests_seen TO oncegate_fcgi;
GRANT SELECT, INSERT ON chat_replies TO oncegate_fcgi;
GRANT SELECT ON chat_replies TO oncegate_dispatch;
GRANT UPDATE (response_url, state, attempts, next_at, updated_at, last_status, last_error)
    ON chat_replies TO oncegate_dispatch;
GRANT SELECT ON chat_requests_seen, chat_replies TO oncegate_operator, oncegate_auditor;
