/*
 * api_ops.c — what operators and monitors read: GET /healthz (the
 * database answers) and GET /metrics (Prometheus text).
 */
#include "api_int.h"
#include "db.h"
#include "metrics.h"
#include "log.h"

static const struct db_stmt st_ping = { "api_ping", "SELECT 1", 0, true };

void
api_ops_healthz(struct api_call *c)
{
	PGresult *res;
	enum db_rc rc;

	rc = db_exec(c->ctx->db, &st_ping, NULL, &res);
	if (rc != DB_OK) {
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
	PQclear(res);
	http_json(c->resp, 200, json_pack("{s:s}", "status", "ok"));
}

/* GET /metrics: text, not JSON, so it sets its own headers. */
void
api_ops_metrics(struct api_call *c)
{
	struct log_fields f = { 0 };
	enum og_rc rc;

	rc = metrics_text(c->ctx->db, &c->resp->body);
	if (rc != OG_OK) {
		api_json_headers(c);
		if (rc == OG_UNAVAILABLE)
			api_fail(c, OG_UNAVAILABLE);
		else
			api_internal(c, "the metrics could not be computed");
		return;
	}
	c->resp->status = 200;
	(void)http_header(c->resp, "Content-Type", METRICS_CONTENT_TYPE);
	(void)http_header(c->resp, "Cache-Control", "no-store");
	api_log(c, LOG_LEVEL_DEBUG, "metrics.read", &f);
}
