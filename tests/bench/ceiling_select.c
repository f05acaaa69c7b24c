/*
 * ceiling_select.c — the ceiling of a duplicate claim: a minimal libfcgi
 * responder (ceiling.h) that reads the row of the body's "key" from the
 * scratch table bench_claims by its primary key and answers 200
 * {"outcome":"duplicate",...} with its state and result (404 when there is
 * none). Built and started by tests/bench/run.sh.
 */
static const char SQL[] =
	"SELECT state, payload_hash, version, result FROM bench_claims WHERE idempotency_key = $1";

#include "ceiling.h"

static void
answer(FCGX_Request *rq, PGresult *res)
{
	if (PQntuples(res) == 1)
		FCGX_FPrintF(rq->out, "Status: 200\r\nContent-Type: application/json\r\n\r\n"
		             "{\"outcome\":\"duplicate\",\"state\":\"%s\",\"version\":%s,\"result\":%s}\n",
		             PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3));
	else
		FCGX_FPrintF(rq->out, "Status: 404\r\nContent-Type: application/json\r\n\r\n{}\n");
}
