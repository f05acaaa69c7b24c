-- claim_existing.sql — pgbench script for tests/bench/claims.sh: the same
-- bare atomic claim as claim_new.sql, for one of the COUNT keys
-- bench:done:1..COUNT that claims.sh put in bench_claims in state
-- 'completed' with payload_hash HASH. Run with -D count=COUNT -D hash=HASH.
-- The WHERE is false, so no row comes back, but ON CONFLICT DO UPDATE still
-- locks the row (and so writes WAL and waits for its flush at commit).
-- pgbench takes every ":name" as a variable, even inside a string literal:
-- hence 'bench:' || 'done:' rather than one literal.
\set k random(1, :count)
INSERT INTO bench_claims (idempotency_key, state, payload_hash, lease_owner, lease_expires_at)
VALUES ('bench:' || 'done:' || :k::text, 'processing',
        :hash, gen_random_uuid(), now() + interval '5 minutes')
ON CONFLICT (idempotency_key) DO UPDATE
SET lease_owner = EXCLUDED.lease_owner,
    lease_expires_at = EXCLUDED.lease_expires_at,
    state = 'processing',
    version = bench_claims.version + 1,
    updated_at = now()
WHERE bench_claims.payload_hash = EXCLUDED.payload_hash
  AND (bench_claims.state = 'failed_retryable'
       OR (bench_claims.state = 'processing'
           AND bench_claims.lease_expires_at < now()))
RETURNING idempotency_key, lease_owner, version;
