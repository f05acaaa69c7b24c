-- 015_roles.sql — least privilege: one group role per program and two for
-- people, each granted only what its program's statements need. The
-- login roles the programs and people connect as are members of these
-- (GRANT oncegate_fcgi TO "oncegate-fcgi"); the schema owner, which runs
-- these migrations, keeps everything.
--
--   oncegate_fcgi      the responder: claims, outputs, approvals and their
--                      votes, the effects an approval enqueues, metrics.
--                      No dead letters, no operator actions, no kill switch.
--   oncegate_dispatch  the dispatcher: the outbox, attempts, dead letters,
--                      notifications, expiry. It cannot decide or consume
--                      an approval (no vote, none of the decision's columns).
--   oncegate_operator  oncegatectl: repairs, replays, clients, the kill
--                      switch; every change it makes is recorded under
--                      the session's role.
--   oncegate_auditor   read-only: explain, report, status.
--
-- Roles belong to the cluster, not to this database: when they exist
-- already (another oncegate database on the same server, or created by an
-- administrator beforehand) they are used as they are. Creating them needs
-- CREATEROLE; an owner without it is told what to run.
--
-- Nothing is granted to PUBLIC, and nobody may DELETE: old data is purged
-- by UPDATE (payloads nulled). A later migration that adds a table grants
-- its privileges in the same file.

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['oncegate_fcgi', 'oncegate_dispatch',
                             'oncegate_operator', 'oncegate_auditor'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                WHEN duplicate_object THEN
                    NULL; -- created meanwhile by another database's migration
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'role % does not exist and role % may not create it', r,
                        current_user
                        USING HINT = format('as a superuser: CREATE ROLE %I NOLOGIN; '
                                            'then run oncegatectl migrate again', r);
            END;
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC;

-- Everyone reads the schema version (healthz, migrate --status).
GRANT SELECT ON schema_migrations
    TO oncegate_fcgi, oncegate_dispatch, oncegate_operator, oncegate_auditor;

-- The auditor reads everything and writes nothing.
GRANT SELECT ON ALL TABLES IN SCHEMA public TO oncegate_auditor;

-- oncegatectl: reads everything; no DELETE anywhere; the record of what
-- operators did is append-only; the kill switch's single row is changed,
-- never added or removed.
GRANT SELECT, INSERT, UPDATE ON
    api_clients, workflow_runs, approvals, approval_votes, approval_replaced_links,
    effect_outbox, effect_attempts, dead_letters, run_replays, replay_jobs,
    replay_job_items, resume_job_items, metric_counters, metric_route_latency,
    metric_attempts
    TO oncegate_operator;
GRANT SELECT, INSERT ON run_events, operator_actions TO oncegate_operator;
GRANT SELECT, UPDATE ON dispatch_control TO oncegate_operator;

-- The responder.
GRANT SELECT ON api_clients, effect_attempts, dead_letters, dispatch_control,
    operator_actions, run_replays
    TO oncegate_fcgi;
GRANT SELECT, INSERT, UPDATE ON workflow_runs, approvals, effect_outbox,
    metric_counters, metric_route_latency, metric_attempts
    TO oncegate_fcgi;
GRANT SELECT, INSERT ON run_events, approval_votes, approval_replaced_links
    TO oncegate_fcgi;

-- The dispatcher. Approvals: it reads them, expires them, mints the links
-- it mails (token_hash, notified_at), takes reminders and escalations, and
-- adds the escalation's challenges, which start pending; the columns of a
-- decision (consumed_at, decision, approver_subject, reason) are not its
-- to write, so the table's CHECKs keep every challenge it touches
-- undecided, and it casts no vote.
GRANT SELECT ON api_clients, approval_votes TO oncegate_dispatch;
GRANT SELECT ON approvals TO oncegate_dispatch;
GRANT INSERT (client_id, idempotency_key, token_hash, approver, allowed_decisions,
              requested_by, separation_of_duties, expires_at, effect, callback_url,
              min_approvals, notify, escalated)
    ON approvals TO oncegate_dispatch;
GRANT UPDATE (state, token_hash, notified_at, notify, remind_at, escalate_at, escalate_to)
    ON approvals TO oncegate_dispatch;
GRANT SELECT, INSERT ON run_events, approval_replaced_links, effect_attempts
    TO oncegate_dispatch;
GRANT SELECT, UPDATE ON workflow_runs TO oncegate_dispatch;
GRANT SELECT, INSERT, UPDATE ON effect_outbox, dead_letters, metric_counters,
    metric_route_latency, metric_attempts
    TO oncegate_dispatch;
-- The switch itself is the operators'; the dispatcher counts the sends it held.
GRANT SELECT ON dispatch_control TO oncegate_dispatch;
GRANT UPDATE (blocked_sends) ON dispatch_control TO oncegate_dispatch;
