/*
 * ceiling_claim.c — the ceiling of a new-key claim: a minimal libfcgi
 * responder (ceiling.h) that runs the bare atomic claim statement of
 * claim.sql on the scratch table bench_claims for the body's "key" and
 * answers 201 {"outcome":"claimed"} (200 "duplicate" when the key exists).
 * Built and started by tests/bench/run.sh.
 */
static const char SQL[] =
	"INSERT INTO bench_claims (idempotency_key, state, payload_hash, lease_owner, lease_expires_at)"
	" VALUES ($1, 'processing', 'sha256:0', gen_random_uuid(), now() + interval '5 minutes')"
	" ON CONFLICT (idempotency_key) DO UPDATE"
	" SET lease_owner = EXCLUDED.lease_owner, lease_expires_at = EXCLUDED.lease_expires_at,"
	"     state = 'processing', version = bench_claims.version + 1, updated_at = now()"
	" WHERE bench_claims.payload_hash = EXCLUDED.payload_hash"
	"   AND (bench_claims.state = 'failed_retryable'"
	"        OR (bench_claims.state = 'processing' AND bench_claims.lease_expires_at < now()))"
	" RETURNING idempotency_key, lease_owner, version";

#include "ceiling.h"

static void
answer(FCGX_Request *rq, PGresult *res)
{
	if (PQntuples(res) == 1)
		FCGX_FPrintF(rq->out, "Status: 201\r\nContent-Type: application/json\r\n\r\n"
		             "{\"outcome\":\"claimed\",\"lease_owner\":\"%s\",\"version\":%s}\n",
		             PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
	else
		FCGX_FPrintF(rq->out, "Status: 200\r\nContent-Type: application/json\r\n\r\n"
		             "{\"outcome\":\"duplicate\"}\n");
}
