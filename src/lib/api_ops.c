/*
 * api_ops.c — what operators, monitors and tools read: GET /healthz (the
 * database answers), GET /metrics (Prometheus text) and GET
 * /v1/openapi.json (the description of the workflow API).
 */
#include "api_int.h"
#include "db.h"
#include "metrics.h"
#include "log.h"

void
api_ops_healthz(struct api_call *c)
{
	if (db_ping(c->ctx->db) != DB_OK) {
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
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
	c->resp->content_type = METRICS_CONTENT_TYPE;
	(void)http_header(c->resp, "Cache-Control", "no-store");
	api_log(c, LOG_LEVEL_DEBUG, "metrics.read", &f);
}

/* GET /v1/openapi.json: the document compiled into this program, so that
 * it always describes the code that answers. No authentication: it holds
 * nothing but the shape of the API. */
void
api_ops_openapi(struct api_call *c)
{
	buf_reset(&c->resp->body);
	if (buf_append(&c->resp->body, api_openapi_json, api_openapi_json_len) != 0) {
		api_json_headers(c);
		api_internal(c, "the OpenAPI document does not fit the response buffer");
		return;
	}
	c->resp->status = 200;
	c->resp->content_type = "application/json";
	(void)http_header(c->resp, "Cache-Control", "max-age=300");
}
