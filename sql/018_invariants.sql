-- 018_invariants.sql — the invariants PostgreSQL holds whatever role
-- connects: a program's role can do only what its program's statements
-- do, with the values those statements write.
--
-- Two mechanisms, the cheapest that holds each rule:
--
-- * Column grants, which cost nothing at run time: the dispatcher may
--   update only the columns of a send (state, lease, attempt, schedule,
--   result), never an effect's payload, its hash, its type, its target or
--   its provider key, nor a run's decided_by; the responder may update an
--   effect only to cancel it (state, updated_at); nobody but the responder
--   casts a vote, and nobody updates one.
-- * Triggers for the rules that depend on the values written. Each has a
--   WHEN condition PostgreSQL evaluates without calling a function: on the
--   paths the programs take (the claim, the output, a decision, an
--   enqueue, a send and its settle) the condition is false and no
--   PL/pgSQL runs; a function runs only for what is refused, for the
--   dispatcher's rare inserts (a reminder, an escalation, an expiry's
--   callback: one SQL function each checks them against the rows they must
--   come from) and at an operator's commit.
--
-- The rules:
--
--   effects      completed and cancelled are final; the responder moves an
--                effect only from pending to cancelled (never back to
--                pending); the dispatcher enqueues only an approver's
--                notice (to the challenge's own recipients, while it is
--                pending) and an expired run's callback (to the run's own
--                callback URL, saying "expired").
--   challenges   only a pending challenge changes state, and a decided
--                one keeps its decision and who took it; the dispatcher
--                moves one only from pending to expired once it has
--                expired, and adds only the challenges an escalation names:
--                an entry of the run's escalate_to, with the run's
--                challenge's expiry, decisions and quorum, once.
--   runs         a decision, once taken, stays as taken; only the
--                responder sets a decision other than "expired" or moves a
--                run to approved; the dispatcher moves a run only from
--                approved to completed, or from awaiting_human to
--                failed_terminal as expired; what the dispatcher adds to a
--                run's timeline is the dispatcher's (actor "dispatcher").
--   operators    a transaction in which an operator's session writes a
--                run, its timeline, a challenge, a vote, an effect or a
--                dead letter commits only with an operator_actions row of
--                its own, whose operator is the session's role
--                (session_user) and whose ts is the transaction's.
--
-- The schema's owner (and a superuser) are not bound: migrations and
-- repairs by the database administrator are theirs. A refusal is SQLSTATE
-- 42501 (insufficient_privilege), as a missing grant's is.

-- Whether the role in force is the schema's owner (or a superuser).
CREATE FUNCTION og_unbound() RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, public
    RETURN pg_has_role(current_user,
                       (SELECT relowner FROM pg_class WHERE oid = 'public.workflow_runs'::regclass),
                       'MEMBER');

-- A row trigger's refusal; TG_ARGV[0] says what was refused.
CREATE FUNCTION og_refuse() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, public
AS $$
BEGIN
    IF og_unbound() THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'role % may not %', session_user, TG_ARGV[0]
        USING ERRCODE = 'insufficient_privilege', TABLE = TG_TABLE_NAME;
END
$$;

-- ---- effects ----------------------------------------------------------------

-- The dispatcher: every column of a send, none of what is sent (computed, so
-- that a column added to effect_outbox before this migration is the
-- dispatcher's too; one added after grants its own).
DO $$
DECLARE
    cols text;
BEGIN
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
      FROM pg_attribute
     WHERE attrelid = 'public.effect_outbox'::regclass AND attnum > 0 AND NOT attisdropped
       AND attname NOT IN ('id', 'client_id', 'idempotency_key', 'effect_type', 'target',
                           'payload', 'payload_hash', 'provider_key', 'approval_id', 'slot',
                           'not_before', 'created_at');
    REVOKE UPDATE ON effect_outbox FROM oncegate_dispatch;
    EXECUTE format('GRANT UPDATE (%s) ON effect_outbox TO oncegate_dispatch', cols);
END
$$;

-- The responder cancels an effect inside its window; that is all it changes.
REVOKE UPDATE ON effect_outbox FROM oncegate_fcgi;
GRANT UPDATE (state, updated_at) ON effect_outbox TO oncegate_fcgi;

CREATE TRIGGER effect_final
    BEFORE UPDATE OF state ON effect_outbox FOR EACH ROW
    WHEN (OLD.state IN ('completed', 'cancelled') AND NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION og_refuse('change a completed or cancelled effect');

CREATE TRIGGER effect_fcgi_cancel_only
    BEFORE UPDATE ON effect_outbox FOR EACH ROW
    WHEN (NEW.state IS DISTINCT FROM OLD.state
          AND NOT (OLD.state = 'pending' AND NEW.state = 'cancelled')
          AND pg_has_role('oncegate_fcgi', 'MEMBER'))
    EXECUTE FUNCTION og_refuse('move an effect other than from pending to cancelled');

-- What the dispatcher may enqueue: a notice of a pending challenge to that
-- challenge's recipients, or the callback of a run that expired.
CREATE FUNCTION og_enqueue_named(e effect_outbox) RETURNS boolean
    LANGUAGE sql STABLE
    RETURN (e.effect_type = 'approval.notify' AND EXISTS (
                SELECT 1 FROM approvals a
                 WHERE a.id = e.approval_id AND a.client_id = e.client_id
                   AND a.idempotency_key = e.idempotency_key AND a.state = 'pending'
                   AND a.notify->>'target' = e.target
                   AND (e.payload->'to') IS NOT DISTINCT FROM (a.notify->'to')
                   AND e.payload->>'approval_id' = a.id::text))
        OR (e.effect_type = 'decision.callback' AND e.target = 'callback' AND EXISTS (
                SELECT 1 FROM workflow_runs r
                 WHERE r.client_id = e.client_id AND r.idempotency_key = e.idempotency_key
                   AND r.decision = 'expired' AND e.payload->>'decision' = 'expired'
                   AND e.payload->>'url' = r.callback_url
                   AND e.payload->>'key' = r.idempotency_key));

CREATE TRIGGER effect_dispatch_enqueue
    BEFORE INSERT ON effect_outbox FOR EACH ROW
    WHEN (pg_has_role('oncegate_dispatch', 'MEMBER') AND NOT og_enqueue_named(NEW))
    EXECUTE FUNCTION og_refuse('enqueue an effect other than a pending challenge''s notice '
                               'to its recipients or an expired run''s callback');

-- ---- challenges and votes -----------------------------------------------------

-- The dispatcher mints links, takes reminders and escalations and expires
-- challenges; whom a challenge tells and escalates to is set by the
-- responder when it creates it (and by an operator's replay).
REVOKE UPDATE (notify, escalate_to) ON approvals FROM oncegate_dispatch;

CREATE TRIGGER approval_final
    BEFORE UPDATE ON approvals FOR EACH ROW
    WHEN (OLD.state <> 'pending'
          AND ROW(NEW.state, NEW.consumed_at, NEW.decision, NEW.approver_subject, NEW.reason)
              IS DISTINCT FROM
              ROW(OLD.state, OLD.consumed_at, OLD.decision, OLD.approver_subject, OLD.reason))
    EXECUTE FUNCTION og_refuse('change a challenge that is no longer pending');

CREATE TRIGGER approval_dispatch_expire_only
    BEFORE UPDATE OF state ON approvals FOR EACH ROW
    WHEN (NEW.state IS DISTINCT FROM OLD.state
          AND NOT (OLD.state = 'pending' AND NEW.state = 'expired' AND OLD.expires_at <= now())
          AND pg_has_role('oncegate_dispatch', 'MEMBER'))
    EXECUTE FUNCTION og_refuse('move a challenge other than from pending to expired once it expired');

-- An escalation's challenge: an entry of escalate_to of a pending challenge
-- of the same run (its approver, and its notify when one is given), with
-- that challenge's expiry, decisions, requester, separation of duties,
-- effect, callback and quorum; added once per approver and run.
CREATE FUNCTION og_escalation_named(n approvals) RETURNS boolean
    LANGUAGE sql STABLE
    RETURN n.escalated AND n.state = 'pending' AND n.consumed_at IS NULL
       AND EXISTS (
           SELECT 1
             FROM approvals t,
                  jsonb_array_elements(CASE WHEN jsonb_typeof(t.escalate_to) = 'array'
                                            THEN t.escalate_to END) AS e(entry)
            WHERE t.client_id = n.client_id AND t.idempotency_key = n.idempotency_key
              AND t.state = 'pending' AND NOT t.escalated
              AND e.entry->>'approver' = n.approver
              AND (n.notify IS NULL OR e.entry->'notify' = n.notify)
              AND t.expires_at = n.expires_at
              AND t.allowed_decisions = n.allowed_decisions
              AND t.requested_by IS NOT DISTINCT FROM n.requested_by
              AND t.separation_of_duties = n.separation_of_duties
              AND t.effect IS NOT DISTINCT FROM n.effect
              AND t.callback_url IS NOT DISTINCT FROM n.callback_url
              AND t.min_approvals = n.min_approvals)
       AND NOT EXISTS (
           SELECT 1 FROM approvals d
            WHERE d.client_id = n.client_id AND d.idempotency_key = n.idempotency_key
              AND d.escalated AND d.approver = n.approver);

CREATE TRIGGER approval_dispatch_escalation_only
    BEFORE INSERT ON approvals FOR EACH ROW
    WHEN (pg_has_role('oncegate_dispatch', 'MEMBER') AND NOT og_escalation_named(NEW))
    EXECUTE FUNCTION og_refuse('add a challenge other than one the run''s escalation names, '
                               'once');

-- A vote is cast by the responder, in the decision's transaction, and never
-- changed.
REVOKE INSERT, UPDATE ON approval_votes FROM oncegate_operator;
REVOKE UPDATE ON approval_votes FROM oncegate_fcgi;

-- ---- runs ---------------------------------------------------------------------

-- The dispatcher completes runs and expires them; nothing else of a run is
-- its to write.
REVOKE UPDATE ON workflow_runs FROM oncegate_dispatch;
GRANT UPDATE (state, version, updated_at, error_class, reason, decision, decided_at)
    ON workflow_runs TO oncegate_dispatch;

CREATE TRIGGER run_decision_final
    BEFORE UPDATE ON workflow_runs FOR EACH ROW
    WHEN ((OLD.decision IS NOT NULL
           AND ROW(NEW.decision, NEW.decided_by, NEW.decided_at)
               IS DISTINCT FROM ROW(OLD.decision, OLD.decided_by, OLD.decided_at))
          OR (OLD.decision IS NULL AND NEW.decided_by IS NOT NULL
              AND NOT pg_has_role('oncegate_fcgi', 'MEMBER'))
          OR (NEW.decision IS DISTINCT FROM OLD.decision AND NEW.decision <> 'expired'
              AND NOT pg_has_role('oncegate_fcgi', 'MEMBER'))
          OR (NEW.state = 'approved' AND OLD.state <> 'approved'
              AND NOT pg_has_role('oncegate_fcgi', 'MEMBER')))
    EXECUTE FUNCTION og_refuse('decide a run (only a person, through the responder, does)');

CREATE TRIGGER run_dispatch_moves
    BEFORE UPDATE ON workflow_runs FOR EACH ROW
    WHEN (pg_has_role('oncegate_dispatch', 'MEMBER')
          AND NOT ((OLD.state = 'approved' AND NEW.state = 'completed'
                    AND NEW.decided_at IS NOT DISTINCT FROM OLD.decided_at)
                   OR (OLD.state = 'awaiting_human' AND NEW.state = 'failed_terminal'
                       AND NEW.decision = 'expired')))
    EXECUTE FUNCTION og_refuse('move a run other than to completed, or to expired');

CREATE TRIGGER run_event_dispatch_actor
    BEFORE INSERT ON run_events FOR EACH ROW
    WHEN (NEW.actor IS DISTINCT FROM 'dispatcher' AND pg_has_role('oncegate_dispatch', 'MEMBER'))
    EXECUTE FUNCTION og_refuse('write a run event under another actor than the dispatcher');

-- ---- operators ------------------------------------------------------------------

-- An operator_actions row is the session's: its operator is session_user
-- and its ts the transaction's, whatever the INSERT says. The transaction
-- remembers its newest row (a transaction-local setting); the check at
-- commit looks that row up by its id and accepts it only if this
-- transaction wrote it (its xmin), so a setting made by hand proves
-- nothing.
CREATE FUNCTION og_oplog_stamp() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, public
AS $$
BEGIN
    IF NOT og_unbound() THEN
        NEW.operator := session_user;
        NEW.ts := now();
    END IF;
    PERFORM set_config('oncegate.operator_action', NEW.id::text, true);
    RETURN NEW;
END
$$;

CREATE TRIGGER operator_action_stamp
    BEFORE INSERT ON operator_actions FOR EACH ROW
    EXECUTE FUNCTION og_oplog_stamp();

CREATE FUNCTION og_oplog_required() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, public
AS $$
DECLARE
    act text := current_setting('oncegate.operator_action', true);
BEGIN
    IF og_unbound() THEN
        RETURN NULL;
    END IF;
    IF act ~ '^[0-9]{1,18}$' AND EXISTS (
           SELECT 1 FROM operator_actions o
            WHERE o.id = act::bigint
              AND o.xmin = pg_current_xact_id()::xid) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'role % changed % without an operator_actions row in the same transaction',
                    session_user, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege', TABLE = TG_TABLE_NAME,
              HINT = 'operators change runs, challenges and effects through oncegatectl, '
                     'which records each change';
END
$$;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['workflow_runs', 'run_events', 'approvals', 'approval_votes',
                             'effect_outbox', 'dead_letters'] LOOP
        EXECUTE format('CREATE CONSTRAINT TRIGGER %I AFTER INSERT OR UPDATE ON %I'
                       ' DEFERRABLE INITIALLY DEFERRED FOR EACH ROW'
                       ' WHEN (pg_has_role(''oncegate_operator'', ''MEMBER''))'
                       ' EXECUTE FUNCTION og_oplog_required()',
                       t || '_operator_recorded', t);
    END LOOP;
END
$$;

-- The trigger functions are not for calling (a trigger runs its function
-- whatever the grants); og_unbound stays callable, as they call it.
REVOKE ALL ON FUNCTION og_refuse(), og_oplog_stamp(), og_oplog_required() FROM PUBLIC;
