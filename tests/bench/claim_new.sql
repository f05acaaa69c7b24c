-- claim_new.sql — pgbench script for tests/bench/claims.sh: the bare atomic
-- claim of the seed (INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING) for
-- a key nobody used before. Run with -D run=RUN -D n=0 -D hash=HASH:
-- n counts per client, so bench:RUN:CLIENT:N never repeats.
\set n :n + 1
INSERT INTO bench_claims (idempotency_key, state, payload_hash, lease_owner, lease_expires_at)
VALUES ('bench:' || :run::text || ':' || :client_id::text || ':' || :n::text, 'processing',
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
