-- consume.sql — pgbench script for tests/bench/approvals.sh: the consume
-- transaction of POST /approve/{token} as three bare statements in
-- one transaction, copied from the responder with the table names changed:
--   1. gate.c st_consume: the single-use UPDATE of the challenge;
--   2. ledger.c st_decide: the run to 'approved' with its run_events row;
--   3. outbox.c st_enqueue: the effect row, with pg_notify.
-- Parameters sit where the responder's $n are (pgbench -M prepared sends
-- them as parameters too). Runs on the scratch tables approvals.sh creates
-- (bench_approvals, bench_runs, bench_run_events, bench_outbox) with
--   -D per=ROWS_PER_CLIENT -D n=0 -D cid=CLIENT_ID -D decision=approve
--   -D subject=SUBJECT -D reason=bench -D etype=TYPE -D etarget=TARGET
--   -D payload=JSON -D phash=HASH -D delay=0
-- Client C consumes rows C*per+1 .. C*per+per, one per transaction, in
-- order (n counts per client); row I has idempotency_key I (as text) and
-- token_hash the 32-byte big-endian I, decoded from hex as the responder
-- decodes the hex of the token's SHA-256. Both \gset need exactly one row,
-- so a transaction that finds no pending challenge or no awaiting run
-- fails: every transaction counted did the whole job. The notification goes
-- to channel oncegate_bench (same cost; no dispatcher listens there).
\set n :n + 1
\set id :client_id * :per + :n
BEGIN;
UPDATE bench_approvals
   SET state = 'decided', consumed_at = now(), decision = :decision,
       approver_subject = :subject, reason = :reason
 WHERE token_hash = decode(lpad(to_hex(:id::bigint), 64, '0'), 'hex') AND state = 'pending'
   AND expires_at > now() AND :decision = ANY (allowed_decisions)
 RETURNING id AS approval_id
\gset
WITH moved AS (
  UPDATE bench_runs
     SET state = CASE WHEN :decision = 'approve' THEN 'approved' ELSE 'failed_terminal' END,
         decision = :decision, decided_by = :subject, decided_at = now(),
         error_class = CASE WHEN :decision = 'approve' THEN error_class ELSE 'rejected' END,
         reason = CASE WHEN :decision = 'approve' THEN reason ELSE :reason END,
         version = version + 1, updated_at = now()
   WHERE client_id = :cid AND idempotency_key = :id AND state = 'awaiting_human'
  RETURNING client_id, idempotency_key, state, version, attempt
), ev AS (
  INSERT INTO bench_run_events (client_id, idempotency_key, event, state_from,
      state_to, version, attempt, actor, reason)
  SELECT client_id, idempotency_key, 'run.decided', 'awaiting_human', state,
         version, attempt, :subject, :reason FROM moved
)
SELECT state AS run_state, version AS run_version, attempt AS run_attempt FROM moved
\gset
WITH ins AS (
  INSERT INTO bench_outbox (client_id, idempotency_key, effect_type, target,
      payload, payload_hash, provider_key, not_before, next_attempt_at,
      approval_id)
  VALUES (:cid, :id, :etype, :etarget, :payload::jsonb, :phash, :id || '/' || :etype,
      now() + make_interval(secs => :delay::int),
      now() + make_interval(secs => :delay::int), :approval_id::uuid)
  RETURNING id, not_before
)
SELECT id, og_ts(not_before) AS not_before,
       pg_notify('oncegate_bench', id::text) FROM ins;
COMMIT;
