/*
 * api_mcp.c — POST /v1/mcp: the workflow API's use cases for an AI agent,
 * as a Model Context Protocol server over the Streamable HTTP transport
 * (JSON-RPC 2.0, one message a POST, JSON answers, no SSE stream).
 *
 * Each contract's allowed effect type is one tool. A call claims a run
 * (the key: the call's idempotency_key, else one derived from the call's
 * content), checks the output like POST /v1/runs/{key}/output and hands
 * it to the same use case (api_output_decide), so the gate, the outbox
 * and the ledger are the REST path's own. The same call again finds the
 * run and answers its outcome; nothing is sent twice. The tool
 * oncegate_run reads a run's outcome later, while a person decides.
 *
 * No session: everything a call leaves is in the ledger under its key, so
 * any responder answers any request, and no Mcp-Session-Id is issued.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api_int.h"
#include "canon.h"
#include "contract.h"
#include "gate.h"
#include "ledger.h"
#include "mcp.h"
#include "outbox.h"
#include "caps.h"
#include "log.h"
#include "utf8.h"

/* The tool that reads a run's outcome. */
#define RUN_TOOL "oncegate_run"

/* ---- answers ----------------------------------------------------------- */

/* Sends a JSON-RPC message (reference taken) with status, and one log
 * line. */
static void
mcp_send(struct api_call *c, int status, json_t *msg, const char *event, const char *reason)
{
	struct log_fields f = { .reason = reason };

	http_json(c->resp, status, msg);
	api_log(c, status >= 500 ? LOG_LEVEL_ERROR
	           : status >= 400 ? LOG_LEVEL_NOTICE : LOG_LEVEL_INFO, event, &f);
}

static void
mcp_fail(struct api_call *c, int status, json_t *id, enum mcp_code code, const char *message)
{
	if (status == 503) {
		char retry[16];

		snprintf(retry, sizeof(retry), "%d", c->ctx->cfg->retry_after_seconds);
		(void)http_header(c->resp, "Retry-After", retry);
	}
	mcp_send(c, status, mcp_error(id, code, message, NULL), "mcp.error", message);
}

/* A tool's result: the structured outcome, and the same as JSON text for
 * clients that read text only; is_error when the model must change
 * something or learn that the action will not happen. */
static json_t *
tool_result(json_t *structured, bool is_error)
{
	char *text = json_dumps(structured, JSON_COMPACT);
	json_t *r = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text",
	                      text != NULL ? text : "{}", "structuredContent", structured,
	                      "isError", is_error);

	free(text);
	return r;
}

/* A tool error the model can read and repair: what is wrong, in words, as
 * status "refused" (or "invalid" with the errors of the output). */
static void
tool_refusal(struct api_call *c, json_t *id, const char *status, const char *code,
             const char *message, json_t *extra)
{
	json_t *s = json_pack("{s:s, s:s, s:s}", "status", status, "error", code, "message",
	                      message);

	if (extra != NULL)
		json_object_update(s, extra);
	json_decref(extra);
	if (c->key[0] != '\0')
		json_object_set_new(s, "key", json_string(c->key));
	mcp_send(c, 200, mcp_result(id, tool_result(s, true)), "mcp.tool_refused", code);
}

/* ---- tools/list -------------------------------------------------------- */

/* A copy of schema for an input schema (NULL: any object): without the
 * document-level $schema and $id, and without the members the contract
 * takes from the output (they are not the caller's to give). */
static json_t *
schema_copy(const json_t *schema, const struct contract *k, const char *type)
{
	json_t *s = json_is_object(schema) ? json_deep_copy(schema) : json_object();
	json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	size_t i, j;

	if (!json_is_object(schema))
		json_object_set_new(s, "type", json_string("object"));
	json_object_del(s, "$schema");
	json_object_del(s, "$id");
	for (i = 0; type != NULL && i < contract_from_output_count(k, type); i++) {
		const char *name = contract_from_output(k, type, i);

		json_object_del(props, name);
		for (j = json_array_size(req); j-- > 0;)
			if (strcmp(json_string_value(json_array_get(req, j)), name) == 0)
				json_array_remove(req, j);
	}
	return s;
}

static json_t *
string_schema(const char *description, int max)
{
	return json_pack("{s:s, s:i, s:i, s:s}", "type", "string", "minLength", 1, "maxLength",
	                 max, "description", description);
}

static json_t *
tool_input_schema(const struct contract *k, const char *type)
{
	const json_t *doc = contract_doc(k), *effects = json_object_get(doc, "effects");
	const json_t *targets = json_object_get(effects, "allowed_targets");
	const json_t *decl = json_object_get(json_object_get(effects, "types"), type);
	json_t *props = json_object(), *req = json_pack("[s, s]", "output", "payload");

	json_object_set_new(props, "output", schema_copy(json_object_get(doc, "schema"), NULL, NULL));
	json_object_set_new(props, "payload", schema_copy(json_object_get(decl, "schema"), k, type));
	json_object_set_new(props, "target",
	                    json_pack("{s:s, s:O, s:s}", "type", "string", "enum", targets,
	                              "description", "where the effect goes (optional when the "
	                                             "contract allows one target)"));
	if (json_array_size(targets) > 1)
		json_array_append_new(req, json_string("target"));
	json_object_set_new(props, "idempotency_key",
	                    string_schema("the run's key: the same key is the same action, done "
	                                  "once; without one, the key is derived from the "
	                                  "call's content",
	                                  OG_KEY_MAX_CHARS));
	json_object_set_new(props, "requested_by",
	                    string_schema("the mail address of the person who asked for this "
	                                  "action (they cannot approve it)",
	                                  OG_TEXT_MAX_CHARS));
	json_object_set_new(props, "source_url",
	                    string_schema("an http(s) link to what the action answers",
	                                  OG_URL_MAX_CHARS));
	if (contract_requester_must_be_person(k))
		json_array_append_new(req, json_string("requested_by"));
	return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required",
	                 req, "additionalProperties", false);
}

static json_t *
tool_of(const struct contract *k, const char *type, const char *name)
{
	const json_t *doc = contract_doc(k);
	const char *what = json_string_value(json_object_get(doc, "description"));
	char desc[2048];

	snprintf(desc, sizeof(desc),
	         "%s%sProposes one %s effect under the contract %s. oncegate checks the output "
	         "against the contract; %s; the effect is sent at most once. The same call "
	         "again returns the same run, never a second send. The result's status is "
	         "completed, queued, awaiting_approval (read it later with " RUN_TOOL "), "
	         "rejected or invalid (fix the arguments and call again).",
	         what != NULL ? what : "", what != NULL ? " " : "", type, contract_name(k),
	         contract_gate(k)->mode == GATE_APPROVE_BEFORE_ACT
	             ? "a person approves it before it is sent"
	         : contract_gate(k)->mode == GATE_ACT_WITH_WINDOW
	             ? "it is sent after a window in which it can be cancelled"
	             : "its rules approve it or a person decides");
	return json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}}", "name", name,
	                 "title", name, "description", desc, "inputSchema",
	                 tool_input_schema(k, type), "annotations", "title", name, "readOnlyHint",
	                 false, "destructiveHint", true, "idempotentHint", false, "openWorldHint",
	                 true);
}

static json_t *
run_tool(void)
{
	return json_pack(
	    "{s:s, s:s, s:s, s:{s:s, s:{s:o}, s:[s], s:b}, s:{s:s, s:b}}", "name", RUN_TOOL,
	    "title", "Read a run's outcome", "description",
	    "Reads the outcome of an earlier call by its key (the result's key): "
	    "awaiting_approval while a person decides, then completed (with the provider's id), "
	    "rejected, expired or failed. Changes nothing.",
	    "inputSchema", "type", "object", "properties", "key",
	    string_schema("the key an earlier call answered with", OG_KEY_MAX_CHARS * 4),
	    "required", "key", "additionalProperties", false, "annotations", "title",
	    "Read a run's outcome", "readOnlyHint", true);
}

/* The contract and effect type of tool name; false when none. */
static bool
tool_find(const struct contract_set *set, const char *name, const struct contract **k,
          const char **type)
{
	char n[MCP_TOOL_NAME_MAX + 1];
	size_t i, j;

	for (i = 0; set != NULL && i < contract_count(set); i++) {
		const json_t *types = json_object_get(
		    json_object_get(contract_doc(contract_at(set, i)), "effects"), "allowed_types");

		for (j = 0; j < json_array_size(types); j++) {
			const char *t = json_string_value(json_array_get(types, j));

			if (mcp_tool_name(contract_name(contract_at(set, i)), t, n, sizeof(n)) &&
			    strcmp(n, name) == 0) {
				*k = contract_at(set, i);
				*type = t;
				return true;
			}
		}
	}
	return false;
}

static void
tools_list(struct api_call *c, json_t *id)
{
	const struct contract_set *set = c->ctx->contracts;
	json_t *tools = json_array();
	char n[MCP_TOOL_NAME_MAX + 1];
	size_t i, j;

	for (i = 0; set != NULL && i < contract_count(set); i++) {
		const struct contract *k = contract_at(set, i);
		const json_t *types =
		    json_object_get(json_object_get(contract_doc(k), "effects"), "allowed_types");

		for (j = 0; j < json_array_size(types); j++) {
			const char *t = json_string_value(json_array_get(types, j));
			const struct contract *k2;
			const char *t2;

			/* a name taken by an earlier type ("a.b" and "a_b") is its */
			if (mcp_tool_name(contract_name(k), t, n, sizeof(n)) &&
			    tool_find(set, n, &k2, &t2) && k2 == k && strcmp(t2, t) == 0)
				json_array_append_new(tools, tool_of(k, t, n));
		}
	}
	json_array_append_new(tools, run_tool());
	mcp_send(c, 200, mcp_result(id, json_pack("{s:o}", "tools", tools)), "mcp.tools_listed",
	         NULL);
}

/* ---- a run's outcome ----------------------------------------------------- */

/* What an agent is told of a run in its state (and its effect's). */
static enum run_outcome
outcome_of(const char *state, const char *error_class, const char *effect_state, bool *is_error)
{
	int run = ledger_state_parse(state);

	*is_error = false;
	if (state == NULL)
		return RUN_OUTCOME_UNKNOWN;
	if (run == RUN_PROCESSING)
		return RUN_OUTCOME_IN_PROGRESS;
	if (run == RUN_AWAITING_HUMAN)
		return RUN_OUTCOME_AWAITING_APPROVAL;
	if (run == RUN_COMPLETED ||
	    (run == RUN_APPROVED && outbox_state_parse(effect_state) == EFFECT_COMPLETED))
		return RUN_OUTCOME_COMPLETED;
	if (run == RUN_APPROVED)
		return RUN_OUTCOME_QUEUED;
	*is_error = true;
	switch (ledger_error_parse(error_class)) {
	case RUN_ERROR_REJECTED:
	case RUN_ERROR_OPERATOR_REJECTED:
		return RUN_OUTCOME_REJECTED;
	case RUN_ERROR_CANCELLED:
		return RUN_OUTCOME_CANCELLED;
	case RUN_ERROR_APPROVAL_EXPIRED:
		return RUN_OUTCOME_EXPIRED;
	case RUN_ERROR_VALIDATION:
		return RUN_OUTCOME_INVALID;
	default:
		return RUN_OUTCOME_FAILED;
	}
}

/* The run c->key of c->client as the agent sees it, in *out; *is_error
 * when it ended without its effect. */
static enum og_rc
run_outcome(struct api_call *c, json_t **out, bool *is_error)
{
	json_t *run = NULL, *effects = NULL, *approvals = NULL, *o, *e, *told;
	const char *state, *ecls;
	enum og_rc rc;
	size_t i;

	*out = NULL;
	rc = ledger_status(c->ctx->db, c->client.id, c->key, false, &run);
	if (rc != OG_OK)
		return rc;
	if (gate_list(c->ctx->db, c->client.id, c->key, &approvals) != OG_OK ||
	    outbox_list(c->ctx->db, c->ctx->cfg, c->client.id, c->key, NULL, NULL, &effects) !=
	        OG_OK) {
		json_decref(run);
		json_decref(approvals);
		return OG_UNAVAILABLE;
	}
	state = json_string_value(json_object_get(run, "state"));
	ecls = json_string_value(json_object_get(run, "error_class"));
	e = json_array_get(effects, 0);
	o = json_pack("{s:s, s:s, s:s*, s:O*}", "status",
	              ledger_outcome_name(outcome_of(state, ecls,
	                                             json_string_value(json_object_get(e, "state")),
	                                             is_error)),
	              "key", c->key, "state", state, "reason", json_object_get(run, "reason"));
	if (e != NULL)
		json_object_set_new(o, "effect",
		                    json_pack("{s:O*, s:O*, s:O*, s:O*, s:O*}", "id",
		                              json_object_get(e, "effect_id"), "state",
		                              json_object_get(e, "state"), "target",
		                              json_object_get(e, "target"), "provider_id",
		                              json_object_get(e, "provider_id"), "not_before",
		                              json_object_get(e, "not_before")));
	/* who decides, never the links: an approval link is a capability that
	 * belongs to the person, not to the agent */
	told = json_array();
	for (i = 0; i < json_array_size(approvals); i++) {
		json_t *a = json_array_get(approvals, i);

		json_array_append_new(told, json_pack("{s:O*, s:O*, s:O*}", "approver",
		                                      json_object_get(a, "approver"), "state",
		                                      json_object_get(a, "state"), "expires_at",
		                                      json_object_get(a, "expires_at")));
	}
	json_object_set_new(o, "approvers", told);
	json_decref(run);
	json_decref(approvals);
	json_decref(effects);
	*out = o;
	return OG_OK;
}

/* Answers the outcome of run c->key; after an automatic approval, waits a
 * moment for the send, so that the common case answers completed. */
static void
answer_outcome(struct api_call *c, json_t *id, bool wait)
{
	struct timespec pause = { 0, 100 * 1000 * 1000 };
	json_t *o = NULL;
	bool is_error = false;
	char status[32];
	enum og_rc rc;
	int waited;

	for (waited = 0;; waited += 100) {
		rc = run_outcome(c, &o, &is_error);
		if (rc != OG_OK || !wait || waited >= OG_MCP_SEND_WAIT_MS ||
		    strcmp(json_string_value(json_object_get(o, "status")), "queued") != 0)
			break;
		json_decref(o);
		o = NULL;
		db_rollback(c->ctx->db);
		nanosleep(&pause, NULL);
	}
	if (rc == OG_NOT_FOUND) {
		tool_refusal(c, id, "refused", "run_not_found", "no run with this key", NULL);
		return;
	}
	if (rc != OG_OK) {
		mcp_fail(c, 503, id, MCP_SERVER_ERROR,
		         "the database is unavailable; nothing was changed, retry later");
		return;
	}
	/* the log line names the status; the answer takes o */
	snprintf(status, sizeof(status), "%s", json_string_value(json_object_get(o, "status")));
	mcp_send(c, 200, mcp_result(id, tool_result(o, is_error)), "mcp.tool_answered", status);
}

/* ---- tools/call ---------------------------------------------------------- */

/* A refusal the use case answered into scratch (a problem document, or
 * the 422 of an invalid output) as a tool error, or a JSON-RPC error for
 * a fault that is not the caller's. */
static void
relay_refusal(struct api_call *c, json_t *id, const struct http_response *scratch)
{
	json_t *doc = json_loadb(scratch->body.data, scratch->body.len, 0, NULL);
	const char *code = json_string_value(json_object_get(doc, "error"));
	const char *detail = json_string_value(json_object_get(doc, "detail"));

	if (scratch->status >= 500 || doc == NULL) {
		mcp_fail(c, scratch->status == 503 ? 503 : 500, id,
		         scratch->status == 503 ? MCP_SERVER_ERROR : MCP_INTERNAL_ERROR,
		         detail != NULL ? detail : "internal error; nothing was changed");
	} else if (json_object_get(doc, "errors") != NULL) {
		tool_refusal(c, id, "invalid", "invalid_output",
		             "the output or the payload does not meet the contract: fix what errors "
		             "name and call again",
		             json_pack("{s:O}", "errors", json_object_get(doc, "errors")));
	} else {
		tool_refusal(c, id, "refused", code != NULL ? code : "refused",
		             detail != NULL ? detail : "refused",
		             json_pack("{s:O*}", "field", json_object_get(doc, "field")));
	}
	json_decref(doc);
}

/* The arguments' canonical text (as written) without idempotency_key: the
 * run's payload, whose hash tells the same call from another. */
static char *
call_payload(const json_t *args, size_t *len)
{
	json_t *a = json_deep_copy(args);
	char *text, *canon = NULL;

	json_object_del(a, "idempotency_key");
	text = canon_dumps(a, JSON_COMPACT);
	json_decref(a);
	if (text == NULL || canon_json(CANON_AS_WRITTEN, text, strlen(text), &canon, len) !=
	                        CANON_OK) {
		free(text);
		free(canon);
		return NULL;
	}
	free(text);
	return canon;
}

/* Reads the call's arguments into in and the effect they propose (*effect,
 * new). NULL when they are acceptable, else what is wrong. */
static const char *
call_arguments(struct api_call *c, const struct contract *k, const char *type,
               json_t *args, struct api_output_in *in, json_t **effect)
{
	static const char *const known[] = { "output", "payload", "target", "idempotency_key",
		                             "requested_by", "source_url", NULL };
	const json_t *targets = json_object_get(json_object_get(contract_doc(k), "effects"),
	                                        "allowed_targets");
	const char *name, *target;
	json_t *v;
	size_t i;

	json_object_foreach(args, name, v) {
		for (i = 0; known[i] != NULL && strcmp(known[i], name) != 0; i++)
			;
		if (known[i] == NULL)
			return "an argument is not one of the tool's: output, payload, target, "
			       "idempotency_key, requested_by, source_url";
		if (i >= 2 && (!json_is_string(v) || json_string_length(v) > 2048 ||
		               strlen(json_string_value(v)) != json_string_length(v) ||
		               !api_printable(json_string_value(v))))
			return "target, idempotency_key, requested_by and source_url must be "
			       "printable strings";
	}
	in->contract = k;
	in->output = json_object_get(args, "output");
	if (in->output == NULL || !json_is_object(json_object_get(args, "payload")))
		return "output and payload (an object) are required";
	target = json_string_value(json_object_get(args, "target"));
	if (target == NULL && json_array_size(targets) == 1)
		target = json_string_value(json_array_get(targets, 0));
	if (target == NULL)
		return "target is required: the contract allows more than one";
	in->requested_by = json_string_value(json_object_get(args, "requested_by"));
	in->source_url = json_string_value(json_object_get(args, "source_url"));
	if (in->requested_by != NULL && utf8_chars(in->requested_by) > OG_TEXT_MAX_CHARS)
		return "requested_by is longer than 512 characters";
	if (in->source_url != NULL && utf8_chars(in->source_url) > OG_URL_MAX_CHARS)
		return "source_url is longer than 2048 characters";
	*effect = json_pack("{s:s, s:s, s:O}", "type", type, "target", target, "payload",
	                    json_object_get(args, "payload"));
	in->effect = *effect;
	(void)c;
	return NULL;
}

/* The run's key: the agent's idempotency_key, else "mcp:" + the tool +
 * ":" + the payload's hash (a retried call is the same run; a different
 * call, another). Into c->key; NULL when acceptable, else why not. */
static const char *
call_key(struct api_call *c, const char *tool, const json_t *args, const char *hash)
{
	const char *k = json_string_value(json_object_get(args, "idempotency_key"));
	const char *problem;

	if (k != NULL) {
		if ((problem = api_key_claim_problem(k, strlen(k))) != NULL)
			return problem;
		snprintf(c->key, sizeof(c->key), "%s", k);
	} else {
		/* "sha256:" + 64 hex digits: 128 bits of it are plenty */
		snprintf(c->key, sizeof(c->key), "mcp:%s:%.32s", tool, hash + 7);
	}
	return NULL;
}

/* Claims the run, then hands the output to the use case; answers. */
static void
call_claim_decide(struct api_call *c, json_t *id, struct api_output_in *in,
                  const char *payload, size_t payload_len, const char *hash,
                  struct http_response *scratch)
{
	struct ledger_claim lc = { 0 };
	struct ledger_run run = { 0 };
	char hash_as_written[CANON_HASH_LEN];
	struct http_response *real = c->resp;
	enum og_rc rc;

	canon_hash(payload, payload_len, hash_as_written);
	lc.client = &c->client;
	lc.client_id = c->client.id;
	lc.key = c->key;
	lc.payload = payload;
	lc.payload_hash = hash;
	lc.payload_hash_as_written = hash_as_written;
	lc.trigger = "mcp";
	lc.lease_seconds = c->ctx->cfg->lease_default_seconds;
	lc.cap_seconds = c->ctx->cfg->lease_cap_seconds;
	rc = ledger_claim(c->ctx->db, &lc, &run);
	if ((rc == OG_DUPLICATE || rc == OG_MISMATCH) &&
	    ledger_past_window(&run, c->ctx->cfg->duplicate_window_days)) {
		tool_refusal(c, id, "refused", "key_expired",
		             "this idempotency_key's run finished before the duplicate window "
		             "(duplicate_window_days); nothing was changed: a new action needs a "
		             "new key",
		             NULL);
	} else if (rc == OG_DUPLICATE) {
		answer_outcome(c, id, false);
	} else if (rc == OG_MISMATCH) {
		tool_refusal(c, id, "refused", "payload_mismatch",
		             "this idempotency_key was used for a different call; nothing was "
		             "changed: a new action needs a new key",
		             NULL);
	} else if (rc != OG_CLAIMED) {
		mcp_fail(c, 503, id, MCP_SERVER_ERROR,
		         "the database is unavailable; nothing was changed, retry later");
	} else {
		struct log_fields f = { .state_to = ledger_state_name(RUN_PROCESSING),
			                .trigger = "mcp" };

		f.version = run.version;
		api_log(c, LOG_LEVEL_INFO, "run.claimed", &f);
		in->owner = run.lease_owner;
		in->version = run.version;
		http_response_reset(scratch);
		c->resp = scratch;
		api_output_decide(c, in);
		c->resp = real;
		if (scratch->status == 202)
			/* sent right away unless a window lets it be cancelled first */
			answer_outcome(c, id, scratch->body.data == NULL ||
			                          strstr(scratch->body.data, "\"not_before\"") == NULL);
		else if (scratch->status == 409)
			answer_outcome(c, id, false);
		else
			relay_refusal(c, id, scratch);
	}
	ledger_run_clear(&run);
}

static void
tool_call_effect(struct api_call *c, json_t *id, const char *tool, const struct contract *k,
                 const char *type, json_t *args)
{
	struct api_output_in in = { 0 };
	struct http_response scratch, *real = c->resp;
	char hash[CANON_HASH_LEN];
	char *payload = NULL, *out_text = NULL;
	size_t payload_len = 0;
	json_t *effect = NULL, *sent = NULL, *errors = NULL;
	const char *problem;
	bool ok;

	http_response_init(&scratch);
	problem = call_arguments(c, k, type, args, &in, &effect);
	if (problem != NULL) {
		tool_refusal(c, id, "refused", "invalid_arguments", problem, NULL);
		goto out;
	}
	payload = call_payload(args, &payload_len);
	out_text = canon_dumps(in.output, JSON_COMPACT);
	if (payload == NULL || out_text == NULL ||
	    canon_hash_as(CANON_JCS, payload, payload_len, hash) != CANON_OK) {
		tool_refusal(c, id, "refused", "invalid_arguments",
		             "the arguments are not JSON oncegate can keep", NULL);
		goto out;
	}
	in.output_text = out_text;
	in.output_len = strlen(out_text);
	if ((problem = call_key(c, tool, args, hash)) != NULL) {
		tool_refusal(c, id, "refused", "invalid_key", problem, NULL);
		goto out;
	}
	/* Checked before the claim: an output the contract refuses leaves no
	 * run behind (a repaired call is another call, with another key). */
	c->resp = &scratch;
	ok = api_output_check(c, &in, &sent, &errors);
	c->resp = real;
	if (!ok) {
		relay_refusal(c, id, &scratch);
	} else if (json_array_size(errors) > 0) {
		tool_refusal(c, id, "invalid", "invalid_output",
		             "the output or the payload does not meet the contract: fix what errors "
		             "name and call again",
		             json_pack("{s:O}", "errors", errors));
	} else {
		call_claim_decide(c, id, &in, payload, payload_len, hash, &scratch);
	}
out:
	http_response_free(&scratch);
	json_decref(effect);
	json_decref(sent);
	json_decref(errors);
	free(payload);
	free(out_text);
}

static void
tool_call_run(struct api_call *c, json_t *id, const json_t *args)
{
	const char *key = json_string_value(json_object_get(args, "key"));

	if (key == NULL || json_object_size(args) != 1 ||
	    !api_key_valid(key, json_string_length(json_object_get(args, "key")))) {
		tool_refusal(c, id, "refused", "invalid_arguments",
		             "key must be the key an earlier call answered with", NULL);
		return;
	}
	snprintf(c->key, sizeof(c->key), "%s", key);
	answer_outcome(c, id, false);
}

static void
tools_call(struct api_call *c, json_t *id, const json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments");
	const struct contract *k;
	const char *type;
	json_t *none = NULL;

	if (name == NULL || (args != NULL && !json_is_object(args))) {
		mcp_fail(c, 200, id, MCP_INVALID_PARAMS,
		         "tools/call takes name (a string) and arguments (an object)");
		return;
	}
	if (args == NULL)
		args = none = json_object();
	if (strcmp(name, RUN_TOOL) == 0)
		tool_call_run(c, id, args);
	else if (tool_find(c->ctx->contracts, name, &k, &type))
		tool_call_effect(c, id, name, k, type, args);
	else
		mcp_fail(c, 200, id, MCP_INVALID_PARAMS, "unknown tool: tools/list names them");
	json_decref(none);
}

/* ---- the transport ------------------------------------------------------- */

static void
initialize(struct api_call *c, json_t *id, const json_t *params)
{
	const char *v = json_string_value(json_object_get(params, "protocolVersion"));

	if (v == NULL) {
		mcp_fail(c, 200, id, MCP_INVALID_PARAMS, "initialize takes protocolVersion");
		return;
	}
	mcp_send(c, 200,
	         mcp_result(id, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}",
	                                  "protocolVersion", mcp_version_negotiate(v),
	                                  "capabilities", "tools", "listChanged", false,
	                                  "serverInfo", "name", "oncegate", "title", "oncegate",
	                                  "version", PACKAGE_VERSION, "instructions",
	                                  "Each tool proposes one action under a contract; "
	                                  "oncegate checks it, a person or the contract's rules "
	                                  "approve it, and it is sent at most once. While a "
	                                  "person decides, read the outcome with " RUN_TOOL ".")),
	         "mcp.initialized", mcp_version_negotiate(v));
}

/* The Origin of a browser's request must be this server's own (DNS
 * rebinding); requests without one (agents, SDKs) pass. */
static bool
origin_ok(const struct api_call *c)
{
	const char *o = c->req->origin, *pub = c->ctx->cfg->public_url, *host;
	size_t n;

	if (o == NULL || o[0] == '\0')
		return true;
	if (pub == NULL || (host = strstr(pub, "://")) == NULL)
		return false;
	n = strcspn(host + 3, "/") + (size_t)(host + 3 - pub);
	return strlen(o) == n && strncasecmp(o, pub, n) == 0;
}

void
api_mcp_handle(struct api_call *c)
{
	const char *pv = c->req->mcp_protocol_version;
	struct mcp_msg m;

	if (!origin_ok(c)) {
		mcp_fail(c, 403, NULL, MCP_INVALID_REQUEST, "the Origin is not this server's");
		return;
	}
	if (!http_is_json(c->req->content_type)) {
		mcp_fail(c, 415, NULL, MCP_INVALID_REQUEST,
		         "the body must be sent as Content-Type: application/json");
		return;
	}
	if (c->req->body_too_large || c->req->body_len > (size_t)c->ctx->cfg->max_body_bytes) {
		mcp_fail(c, 413, NULL, MCP_INVALID_REQUEST, "the body is too large");
		return;
	}
	if (pv != NULL && !mcp_version_supported(pv)) {
		mcp_fail(c, 400, NULL, MCP_INVALID_REQUEST,
		         "MCP-Protocol-Version names a revision this server does not speak");
		return;
	}
	mcp_parse(c->req->body, c->req->body_len, &m);
	switch (m.kind) {
	case MCP_INVALID:
		mcp_fail(c, 400, m.id, m.code, m.message);
		break;
	case MCP_NOTIFICATION:
	case MCP_RESPONSE:
		c->resp->status = 202;
		api_log(c, LOG_LEVEL_DEBUG, "mcp.accepted", &(struct log_fields){ 0 });
		break;
	case MCP_REQUEST:
		if (strcmp(m.method, "initialize") == 0)
			initialize(c, m.id, m.params);
		else if (strcmp(m.method, "ping") == 0)
			mcp_send(c, 200, mcp_result(m.id, NULL), "mcp.ping", NULL);
		else if (strcmp(m.method, "tools/list") == 0)
			tools_list(c, m.id);
		else if (strcmp(m.method, "tools/call") == 0)
			tools_call(c, m.id, m.params);
		else
			mcp_fail(c, 200, m.id, MCP_METHOD_NOT_FOUND, "method not found");
		break;
	}
	mcp_msg_clear(&m);
}
