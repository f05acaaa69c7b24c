-- claim.sql — the claim tests/bench/claims.sh times with pgbench: the bare
-- atomic claim of the seed (INSERT … ON CONFLICT DO UPDATE … WHERE …
-- RETURNING). claims_lib.sh (claim_script) writes a pgbench script of it
-- for each kind of key, its \set line first and the key's expression where
-- @KEY@ stands:
--   new       bench:RUN:CLIENT:N, a key nobody used before; run with
--             -D run=RUN -D n=0 -D hash=HASH (n counts per client, so the
--             key never repeats);
--   existing  bench:done:K for K in 1..COUNT, the keys claims.sh put in
--             bench_claims in state 'completed' with payload_hash HASH; run
--             with -D count=COUNT -D hash=HASH. The WHERE is false, so no row
--             comes back, but ON CONFLICT DO UPDATE still locks the row (and
--             so writes WAL and waits for its flush at commit).
-- pgbench takes every ":name" as a variable, even inside a string literal:
-- hence 'bench:' || 'done:' rather than one literal.
INSERT INTO bench_claims (idempotency_key, state, payload_hash, lease_owner, lease_expires_at)
VALUES (@KEY@, 'processing',
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
