/*
 * api_runs.c — the workflow's own calls on a run: claim (POST /v1/runs),
 * status, lease renewal, transition and cancel within the window.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "canon.h"
#include "gate.h"
#include "ledger.h"
#include "metrics.h"
#include "outbox.h"
#include "replay.h"
#include "caps.h"
#include "log.h"

static void
json_set_opt(json_t *o, const char *name, const char *v)
{
	if (v != NULL && v[0] != '\0')
		json_object_set_new(o, name, json_string(v));
}

/* lease_seconds of a claim or a renewal: 1 to the configured maximum,
 * the configured default when absent. */
static bool
opt_lease_seconds(struct api_call *c, long long *lease)
{
	const struct config *cfg = c->ctx->cfg;

	return api_opt_int(c, "lease_seconds", 1, cfg->lease_max_seconds,
	                   cfg->lease_default_seconds, lease);
}

/* The claim's key: the body's "key", or the Idempotency-Key header's; given
 * both, they must be equal. Into c->key; false after answering 400. */
static bool
claim_run_key(struct api_call *c)
{
	json_t *key = json_object_get(c->body, "key");
	const char *k, *problem;
	size_t len;

	if (c->idem_problem != NULL) {
		api_reject(c, "invalid_idempotency_key", c->idem_problem, "Idempotency-Key");
		return false;
	}
	if (key == NULL && c->idem_len < 0) {
		api_reject(c, "invalid_key",
		           "key is required, in the body or in the Idempotency-Key header", "key");
		return false;
	}
	if (key == NULL) {
		k = c->idem;
		len = (size_t)c->idem_len;
	} else if (json_is_string(key) &&
	           strlen(json_string_value(key)) == json_string_length(key)) {
		k = json_string_value(key);
		len = json_string_length(key);
		if (c->idem_len >= 0 && ((size_t)c->idem_len != len || memcmp(c->idem, k, len) != 0)) {
			api_reject(c, "key_mismatch",
			           "the Idempotency-Key header and the body's key differ: send the "
			           "key once, or the same in both",
			           "Idempotency-Key");
			return false;
		}
	} else {
		api_reject(c, "invalid_key", "key must be a string of 1 to 200 printable characters",
		           "key");
		return false;
	}
	if ((problem = api_key_claim_problem(k, len)) != NULL) {
		api_reject(c, "invalid_key", problem, key != NULL ? "key" : "Idempotency-Key");
		return false;
	}
	snprintf(c->key, sizeof(c->key), "%s", k);
	return true;
}

/*
 * A key whose run finished longer ago than duplicate_window_days is
 * spent: its claim answers 410 key_expired instead of duplicate (or a
 * payload mismatch), and nothing changes. The run is never claimed again
 * under it: an old event must not act twice, so a new event needs a new
 * key. True when it answered.
 */
static bool
claim_past_window(struct api_call *c, const struct ledger_run *run, struct log_fields *f)
{
	int days = c->ctx->cfg->duplicate_window_days;
	char detail[160];

	if (!ledger_past_window(run, days))
		return false;
	snprintf(detail, sizeof(detail),
	         "this key's run finished %lld days ago, beyond the duplicate window of %d "
	         "days; nothing was changed: a new event needs a new key",
	         run->finished_seconds / 86400, days);
	api_answer_problem(c, "key_expired", detail,
	                   json_pack("{s:s, s:s, s:i}", "key", c->key, "state",
	                             ledger_state_name(run->state), "duplicate_window_days", days));
	f->state_from = ledger_state_name(run->state);
	f->version = run->version;
	f->reason = "key_expired";
	f->detail = detail;
	api_log(c, LOG_LEVEL_NOTICE, "run.key_expired", f);
	return true;
}

/* A claim as read from its request: the ledger's input, and the payload it
 * points into (kept as written, so freed by the caller). */
struct claim_request {
	struct ledger_claim lc;
	char hash[CANON_HASH_LEN];
	char hash_as_written[CANON_HASH_LEN];
	char *payload;
	long long lease;
};

/* The claim's fields, its resume URL and its payload: into *r, or false
 * after answering 400 (nothing claimed). */
static bool
claim_read(struct api_call *c, struct claim_request *r)
{
	static const char *const fields[] = { "key", "payload", "workflow_version", "trigger",
		                              "correlation_id", "event_id", "lease_seconds",
		                              "callback_url", NULL };
	struct ledger_claim *lc = &r->lc;
	const char *callback = NULL;
	char why[1280];
	size_t payload_len;
	enum canon_rc crc;

	if (!api_only_fields(c, fields) || !claim_run_key(c))
		return false;
	if (json_object_get(c->body, "payload") == NULL) {
		api_reject(c, "invalid_field", "payload is required", "payload");
		return false;
	}
	if (!api_opt_string(c, "workflow_version", OG_CLAIM_FIELD_MAX_CHARS,
	                    &lc->workflow_version) ||
	    !api_opt_string(c, "trigger", OG_CLAIM_FIELD_MAX_CHARS, &lc->trigger) ||
	    !api_opt_string(c, "correlation_id", OG_CLAIM_FIELD_MAX_CHARS, &lc->correlation_id) ||
	    !api_opt_string(c, "event_id", OG_CLAIM_FIELD_MAX_CHARS, &lc->event_id) ||
	    !opt_lease_seconds(c, &r->lease) ||
	    !api_opt_string(c, "callback_url", OG_URL_MAX_CHARS, &callback))
		return false;
	/* The resume URL the workflow will hand in with its output, checked
	 * before anything is claimed: refused here, before the model is paid
	 * for, rather than at the output. */
	if (callback != NULL &&
	    config_callback_refusal(c->ctx->cfg, callback, why, sizeof(why))) {
		api_reject(c, "callback_not_allowed", why, "callback_url");
		return false;
	}

	/* The payload is kept as written (numbers as given, which jansson
	 * cannot reproduce, hence our own canonicaliser) and hashed under RFC
	 * 8785; a run hashed before that is compared under its own rule. */
	crc = canon_member(CANON_AS_WRITTEN, c->req->body, c->req->body_len, "payload",
	                   &r->payload, &payload_len);
	if (crc == CANON_OK)
		crc = canon_hash_as(CANON_JCS, r->payload, payload_len, r->hash);
	if (crc != CANON_OK) {
		api_reject(c, "invalid_json", canon_strerror(crc), "payload");
		return false;
	}
	canon_hash(r->payload, payload_len, r->hash_as_written);

	lc->client_key_hash = c->auth_deferred ? c->auth_hash : NULL;
	lc->client = &c->client;
	lc->expect_new = c->ctx->claim_was_new;
	lc->client_id = c->client.id;
	lc->key = c->key;
	lc->payload = r->payload;
	lc->payload_hash = r->hash;
	lc->payload_hash_as_written = r->hash_as_written;
	lc->lease_seconds = (int)r->lease;
	lc->cap_seconds = c->ctx->cfg->lease_cap_seconds;
	return true;
}

/* 201: the run is the caller's, new or taken over from an expired lease. */
static void
claim_answer_claimed(struct api_call *c, const struct ledger_run *run, struct log_fields *f)
{
	char loc[API_RUN_PATH_MAX], prev_owner[CANON_HASH_LEN];
	json_t *out;

	out = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:i, s:s}", "outcome", "claimed", "key",
	                c->key, "state", ledger_state_name(RUN_PROCESSING), "lease_owner",
	                run->lease_owner, "version", (json_int_t)run->version, "lease_expires_at",
	                run->lease_expires_at, "attempt", run->attempt, "payload_hash",
	                run->payload_hash);
	http_json(c->resp, 201, out);
	api_run_path(c, loc);
	(void)http_header(c->resp, "Location", loc);
	metrics_count(METRICS_CLAIM_CLAIMED);
	f->state_to = ledger_state_name(RUN_PROCESSING);
	f->version = run->version;
	f->attempt = run->attempt;
	if (!run->lease_reclaimed) {
		api_log(c, LOG_LEVEL_INFO, "run.claimed", f);
		return;
	}
	/* taken over from a worker whose lease ran out: that worker may still
	 * be running, so the line names it — by a fingerprint, since a lease
	 * owner is a capability and never logged */
	metrics_count(METRICS_RUN_LEASE_RECLAIMED);
	f->state_from = ledger_state_name(RUN_PROCESSING);
	if (run->reclaimed_from[0] != '\0') {
		canon_hash(run->reclaimed_from, strlen(run->reclaimed_from), prev_owner);
		prev_owner[7 + 16] = '\0';
		f->previous_owner = prev_owner;
	}
	f->detail = "lease expired; claimed again";
	api_log(c, LOG_LEVEL_NOTICE, "run.reclaimed", f);
}

/* 200: the key was claimed before with this payload; the run as it stands,
 * whole when finished (its result and who decided). */
static void
claim_answer_duplicate(struct api_call *c, const struct ledger_run *run, struct log_fields *f)
{
	json_t *out;

	out = json_pack("{s:s, s:s, s:s, s:I}", "outcome", "duplicate", "key", c->key, "state",
	                ledger_state_name(run->state), "version", (json_int_t)run->version);
	if (run->result != NULL)
		json_object_set(out, "result", run->result);
	if (run->decision != NULL)
		json_object_set(out, "decision", run->decision);
	if (run->lease_live)
		json_set_opt(out, "lease_expires_at", run->lease_expires_at);
	http_json(c->resp, 200, out);
	metrics_count(METRICS_CLAIM_DUPLICATE);
	f->state_from = ledger_state_name(run->state);
	f->version = run->version;
	f->attempt = run->attempt;
	api_log(c, LOG_LEVEL_INFO, "run.duplicate", f);
}

/* 409: the key was claimed with another payload; nothing changes. */
static void
claim_answer_mismatch(struct api_call *c, const struct ledger_run *run, struct log_fields *f)
{
	api_refuse(c, OG_MISMATCH,
	           "this key was claimed with a different payload; nothing was changed",
	           json_pack("{s:s, s:s, s:s}", "key", c->key, "payload_hash", f->payload_hash,
	                     "stored_payload_hash", run->payload_hash));
	metrics_count(METRICS_CLAIM_MISMATCH);
	f->state_from = ledger_state_name(run->state);
	f->version = run->version;
	f->reason = "payload_mismatch";
	f->hint = "the same business key arrived with changed input: investigate "
	          "upstream; a correction is a new key (oncegatectl replay)";
	api_log(c, LOG_LEVEL_ALERT, "run.payload_mismatch", f);
}

void
api_runs_claim(struct api_call *c)
{
	struct claim_request r = { 0 };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	enum og_rc rc;

	if (!claim_read(c, &r))
		goto out;
	rc = ledger_claim(c->ctx->db, &r.lc, &run);
	if (r.lc.client_key_hash != NULL && rc != OG_UNAVAILABLE && rc != OG_ERROR)
		api_claim_authenticated(c, rc == OG_DENIED);
	if (rc == OG_DENIED)
		goto out;
	if (rc != OG_CLAIMED && rc != OG_DUPLICATE && rc != OG_MISMATCH) {
		api_fail(c, rc);
		goto out;
	}
	c->ctx->claim_was_new = rc == OG_CLAIMED && run.version == 1;

	/* one of the three answers of a claim, the log line naming the hash
	 * comparable with the run's (the one a reclaim or a mismatch names) */
	f.correlation_id = r.lc.correlation_id;
	f.workflow_version = r.lc.workflow_version;
	f.trigger = r.lc.trigger;
	f.payload_hash = ledger_claim_hash(&r.lc, &run);
	if (rc != OG_CLAIMED && claim_past_window(c, &run, &f))
		goto out;
	if (rc == OG_CLAIMED)
		claim_answer_claimed(c, &run, &f);
	else if (rc == OG_DUPLICATE)
		claim_answer_duplicate(c, &run, &f);
	else
		claim_answer_mismatch(c, &run, &f);
out:
	ledger_run_clear(&run);
	free(r.payload);
}

void
api_runs_status(struct api_call *c)
{
	struct log_fields f = { 0 };
	json_t *run = NULL;
	enum og_rc rc;

	json_t *approvals = NULL, *effects = NULL, *replay_of = NULL, *replayed_by = NULL;
	json_t *votes = NULL;
	int needed = 1;

	rc = ledger_status(c->ctx->db, c->client.id, c->key, true, &run);
	if (rc != OG_OK) {
		api_fail(c, rc);
		return;
	}
	if (gate_list(c->ctx->db, c->client.id, c->key, &approvals) != OG_OK ||
	    gate_votes(c->ctx->db, c->client.id, c->key, &votes, &needed) != OG_OK ||
	    outbox_list(c->ctx->db, c->ctx->cfg, c->client.id, c->key,
	                json_string_value(json_object_get(run, "correlation_id")),
	                json_string_value(json_object_get(run, "workflow_version")),
	                &effects) != OG_OK) {
		json_decref(approvals);
		json_decref(votes);
		json_decref(run);
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
	if (replay_links(c->ctx->db, c->client.id, c->key, &replay_of, &replayed_by) !=
	    OG_OK) {
		json_decref(approvals);
		json_decref(votes);
		json_decref(effects);
		json_decref(run);
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
	json_object_set_new(run, "approvals", approvals);
	/* the people's decisions so far, and how many approvals the run needs */
	json_object_set_new(run, "min_approvals", json_integer(needed));
	json_object_set_new(run, "votes", votes);
	json_object_set_new(run, "effects", effects);
	json_object_set_new(run, "replay_of", replay_of);
	json_object_set_new(run, "replayed_by", replayed_by);
	http_json(c->resp, 200, run);
	api_log(c, LOG_LEVEL_DEBUG, "run.read", &f);
}

/* A lease renewal or transition that did not take: 409 when the claim's
 * lease was lost (or its lifetime spent), with the run's state now;
 * otherwise rc's own answer. */
static void
not_taken(struct api_call *c, enum og_rc rc, const struct ledger_run *run, struct log_fields *f)
{
	if (rc != OG_LEASE_LOST && rc != OG_CAP_REACHED) {
		api_fail(c, rc);
		return;
	}
	f->state_from = ledger_state_name(run->state);
	api_lease_lost(c, f);
}

void
api_runs_lease(struct api_call *c)
{
	static const char *const fields[] = { "lease_owner", "version", "lease_seconds", NULL };
	const struct config *cfg = c->ctx->cfg;
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	const char *owner;
	long long version, lease;
	enum og_rc rc;

	if (!api_only_fields(c, fields) || !api_req_owner(c, &owner) ||
	    !api_req_int(c, "version", 1, (long long)1 << 53, &version) ||
	    !opt_lease_seconds(c, &lease))
		goto out;
	rc = ledger_renew(c->ctx->db, c->client.id, c->key, owner, version, (int)lease,
	                  cfg->lease_cap_seconds, &run);
	f.version = run.version;
	f.attempt = run.attempt;
	switch (rc) {
	case OG_OK:
		http_json(c->resp, 200,
		          json_pack("{s:I, s:s}", "version", (json_int_t)run.version,
		                    "lease_expires_at", run.lease_expires_at));
		api_log(c, LOG_LEVEL_INFO, "lease.renewed", &f);
		break;
	case OG_CAP_REACHED:
		api_refuse(c, OG_CAP_REACHED,
		           "this claim reached its total lease lifetime; finish or let it expire",
		           json_pack("{s:s}", "lease_expires_at", run.lease_expires_at));
		f.reason = "lease_cap_reached";
		api_log(c, LOG_LEVEL_WARNING, "lease.cap_reached", &f);
		break;
	default:
		not_taken(c, rc, &run, &f);
		break;
	}
out:
	ledger_run_clear(&run);
}

static bool
error_class_valid(const char *s)
{
	for (; *s != '\0'; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      *s == '.' || *s == '-'))
			return false;
	return true;
}

void
api_runs_transition(struct api_call *c)
{
	static const char *const fields[] = { "lease_owner", "version", "to", "result",
		                              "error_class", "reason", NULL };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	const char *owner, *to_name, *error_class, *reason;
	char *result = NULL;
	long long version;
	json_t *to, *res;
	enum og_rc rc;
	int state;

	if (!api_only_fields(c, fields) || !api_req_owner(c, &owner) ||
	    !api_req_int(c, "version", 1, (long long)1 << 53, &version))
		goto out;
	to = json_object_get(c->body, "to");
	to_name = json_is_string(to) ? json_string_value(to) : NULL;
	state = ledger_state_parse(to_name);
	if (state != RUN_COMPLETED && state != RUN_FAILED_RETRYABLE &&
	    state != RUN_FAILED_TERMINAL) {
		api_reject(c, "invalid_field",
		           "to must be completed, failed_retryable or failed_terminal", "to");
		goto out;
	}
	if (!api_opt_string(c, "error_class", OG_ERROR_CLASS_MAX, &error_class) ||
	    !api_opt_string(c, "reason", OG_TEXT_MAX_CHARS, &reason))
		goto out;
	if (error_class != NULL && !error_class_valid(error_class)) {
		api_reject(c, "invalid_field",
		           "error_class may hold only a-z, 0-9, '_', '.' and '-'", "error_class");
		goto out;
	}
	res = json_object_get(c->body, "result");
	if (res != NULL && !json_is_null(res)) {
		result = canon_dumps(res, JSON_COMPACT | JSON_ENCODE_ANY);
		if (result == NULL || strlen(result) > OG_RESULT_MAX) {
			api_reject(c, "invalid_field", "result must be at most 64 KiB of JSON",
			           "result");
			goto out;
		}
	}
	rc = ledger_transition(c->ctx->db, c->client.id, c->key, owner, version,
	                       (enum run_state)state, result, error_class, reason, &run);
	f.error_class = error_class;
	f.reason = reason;
	switch (rc) {
	case OG_OK:
		http_json(c->resp, 200,
		          json_pack("{s:s, s:I}", "state", ledger_state_name(run.state), "version",
		                    (json_int_t)run.version));
		f.state_from = ledger_state_name(run.state_from);
		f.state_to = ledger_state_name(run.state);
		f.version = run.version;
		f.attempt = run.attempt;
		api_log(c, LOG_LEVEL_INFO, "run.transitioned", &f);
		break;
	default:
		f.state_to = ledger_state_name((enum run_state)state);
		f.version = run.version;
		not_taken(c, rc, &run, &f);
		break;
	}
out:
	free(result);
	ledger_run_clear(&run);
}

/* Cancel within the window: the delayed effects are withdrawn and the
 * run ends, in one transaction. */
void
api_runs_cancel(struct api_call *c)
{
	static const char *const fields[] = { "reason", NULL };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	const char *reason;
	json_t *ids = NULL;
	enum og_rc orc;
	enum og_rc lrc;

	if (!api_only_fields(c, fields) || !api_opt_string(c, "reason", OG_TEXT_MAX_CHARS, &reason))
		goto out;
	if (reason == NULL || reason[0] == '\0') {
		api_reject(c, "invalid_field", "reason is required", "reason");
		goto out;
	}
	f.reason = reason;
	if (db_begin(c->ctx->db) != DB_OK) {
		api_fail(c, OG_UNAVAILABLE);
		goto out;
	}
	orc = outbox_cancel_window(c->ctx->db, c->client.id, c->key, &ids);
	if (orc != OG_OK) {
		db_rollback(c->ctx->db);
		api_fail(c, OG_UNAVAILABLE);
		goto out;
	}
	lrc = json_array_size(ids) > 0
	          ? ledger_cancel(c->ctx->db, c->client.id, c->key, reason, &run)
	          : OG_LEASE_LOST;
	if (lrc != OG_OK) {
		db_rollback(c->ctx->db);
		if (lrc == OG_UNAVAILABLE) {
			api_fail(c, OG_UNAVAILABLE);
			goto out;
		}
		{
			json_t *probe = NULL;
			enum og_rc src = ledger_status(c->ctx->db, c->client.id, c->key, false,
			                                   &probe);

			json_decref(probe);
			if (src == OG_NOT_FOUND) {
				api_fail(c, OG_NOT_FOUND);
				goto out;
			}
		}
		api_refuse(c, OG_WINDOW_CLOSED,
		           "nothing is waiting inside its cancellation window: the effect went "
		           "out, is going out, or was never delayed",
		           NULL);
		f.reason = "window_closed";
		api_log(c, LOG_LEVEL_WARNING, "run.cancel_refused", &f);
		goto out;
	}
	if (db_commit(c->ctx->db) != DB_OK) {
		api_fail(c, OG_UNAVAILABLE);
		goto out;
	}
	http_json(c->resp, 200,
	          json_pack("{s:s, s:I, s:O}", "state", ledger_state_name(run.state), "version",
	                    (json_int_t)run.version, "cancelled_effects", ids));
	f.state_from = ledger_state_name(RUN_APPROVED);
	f.state_to = ledger_state_name(run.state);
	f.version = run.version;
	f.error_class = ledger_error_name(RUN_ERROR_CANCELLED);
	f.effect_id = json_string_value(json_array_get(ids, 0));
	api_log(c, LOG_LEVEL_INFO, "run.cancelled", &f);
out:
	json_decref(ids);
	ledger_run_clear(&run);
}
