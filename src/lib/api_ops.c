/*
 * api_ops.c — what operators, monitors and tools read: GET /healthz (the
 * database answers: liveness), GET /readyz (that, and nothing degraded:
 * readiness), GET /metrics (Prometheus text) and GET /v1/openapi.json (the
 * description of the workflow API).
 */
#include "api_int.h"
#include "db.h"
#include "metrics_text.h"
#include "log.h"
#include "ready.h"

void
api_ops_healthz(struct api_call *c)
{
	if (db_ping(c->ctx->db) != DB_OK) {
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
	http_json(c->resp, 200, json_pack("{s:s}", "status", "ok"));
}

/* GET /readyz: 200 {"status":"ready"} when the database answers and no
 * readiness reason is set (ready.h); else 503 not_ready naming every
 * reason, with Retry-After. */
void
api_ops_readyz(struct api_call *c)
{
	json_t *reasons = ready_reasons();
	char retry[16];

	if (reasons == NULL) {
		api_internal(c, "out of memory");
		return;
	}
	if (db_ping(c->ctx->db) != DB_OK)
		json_array_insert_new(reasons, 0,
		                      json_pack("{s:s, s:s}", "reason", "database_unavailable",
		                                "detail", "the database does not answer"));
	if (json_array_size(reasons) == 0) {
		json_decref(reasons);
		http_json(c->resp, 200, json_pack("{s:s}", "status", "ready"));
		return;
	}
	http_problem(c->resp, 503, "not_ready", "Not ready",
	             json_string_value(json_object_get(json_array_get(reasons, 0), "detail")),
	             json_pack("{s:o}", "reasons", reasons));
	snprintf(retry, sizeof(retry), "%d", c->ctx->cfg->retry_after_seconds);
	(void)http_header(c->resp, "Retry-After", retry);
}

/* GET /metrics: text, not JSON, so it sets its own headers. */
void
api_ops_metrics(struct api_call *c)
{
	struct log_fields f = { 0 };
	enum og_rc rc;

	/* also while the database is down: the alerts must not resolve */
	rc = metrics_answer(c->ctx->db, &c->resp->body);
	if (rc != OG_OK) {
		api_json_headers(c);
		api_internal(c, "the metrics do not fit the response buffer");
		return;
	}
	/* This process's readiness after the figures shared by all. */
	if (ready_metrics(&c->resp->body) != 0) {
		api_json_headers(c);
		api_internal(c, "the metrics do not fit the response buffer");
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
