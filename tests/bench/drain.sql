-- drain.sql — pgbench's side of tests/bench/drain.sh: per transaction, the
-- statements oncegate-dispatch runs for one effect, without the provider:
-- claim one due effect (FOR UPDATE SKIP LOCKED, leased), lock its run,
-- settle it completed by compare-and-set with its attempt row, and complete
-- the run. The SQL is dispatch.c's (st_claim, st_lock_run, st_settle,
-- st_run_complete) with pgbench's variables as the parameters (-M prepared).
BEGIN;
WITH due AS (
  SELECT id FROM effect_outbox
   WHERE state = 'pending' AND next_attempt_at <= now() AND not_before <= now()
   ORDER BY next_attempt_at
   LIMIT 1
   FOR UPDATE SKIP LOCKED
)
UPDATE effect_outbox e
   SET state = 'sending', lease_owner = '00000000-0000-4000-8000-000000000000'::uuid,
       lease_expires_at = now() + make_interval(secs => 60),
       attempt = e.attempt + 1, first_attempt_at = coalesce(e.first_attempt_at, now()),
       updated_at = now()
  FROM due WHERE e.id = due.id
RETURNING e.id AS eid, e.client_id AS cid, e.idempotency_key AS ikey \gset
SELECT 1 FROM workflow_runs WHERE client_id = :cid AND idempotency_key = :ikey FOR UPDATE;
WITH moved AS (
  UPDATE effect_outbox
     SET state = 'completed', provider_id = coalesce('bench', provider_id),
         error_class = 'success', reason = 'http_2xx',
         lease_owner = NULL, lease_expires_at = NULL,
         completed_at = now(), updated_at = now()
   WHERE id = :eid::uuid AND state = 'sending' AND lease_owner = '00000000-0000-4000-8000-000000000000'::uuid
  RETURNING id, attempt, client_id, idempotency_key
), att AS (
  INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,
      dispatcher, classification, reason, status, provider_id, evidence)
  SELECT id, 'send', attempt, now(), 1, 'pgbench', 'success', 'http_2xx', 201, 'bench',
         '{"status": 201}'::jsonb FROM moved
)
SELECT attempt FROM moved;
WITH moved AS (
  UPDATE workflow_runs r SET state = 'completed', version = version + 1, updated_at = now()
   WHERE r.client_id = :cid AND r.idempotency_key = :ikey AND r.state = 'approved'
     AND NOT EXISTS (SELECT 1 FROM effect_outbox e
          WHERE e.client_id = r.client_id AND e.idempotency_key = r.idempotency_key
            AND e.state NOT IN ('completed', 'cancelled'))
  RETURNING client_id, idempotency_key, version, attempt
), ev AS (
  INSERT INTO run_events (client_id, idempotency_key, event, state_from, state_to,
      version, attempt, actor)
  SELECT client_id, idempotency_key, 'run.completed', 'approved', 'completed',
         version, attempt, 'dispatcher' FROM moved
)
SELECT version FROM moved;
COMMIT;
