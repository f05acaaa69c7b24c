/*
 * replay.c — controlled replay and bulk replay jobs; see replay.h for what
 * a new run starts as and why.
 *
 * The original run is only ever read here. The new run is written the way
 * the ledger writes runs (its row and its run_events entry in one
 * statement); its challenges are created by gate.c exactly as the output
 * handler creates them; its effect is enqueued later by the approval page,
 * the normal path, so a replay can never reach the outbox without a person.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "clients.h"
#include "deadletter.h"
#include "digest.h"
#include "gate.h"
#include "jobs.h"
#include "ledger.h"
#include "notify.h"
#include "oplog.h"
#include "replay.h"
#include "token.h"

/* The links hold raw tokens: wiped before they are freed. */
static void
wipe_links(struct replay_result *r)
{
	size_t i;
	json_t *a;

	json_array_foreach(r->approvals, i, a) {
		const char *u = json_string_value(json_object_get(a, "url"));

		if (u != NULL)
			digest_wipe((char *)(uintptr_t)u, strlen(u));
	}
	json_decref(r->approvals);
	r->approvals = NULL;
}

void
replay_result_clear(struct replay_result *r)
{
	wipe_links(r);
	memset(r, 0, sizeof(*r));
}

void
replay_item_clear(struct replay_item *it)
{
	free(it->key);
	free(it->new_key);
	free(it->state);
	free(it->detail);
	memset(it, 0, sizeof(*it));
}

/* What the new run will carry, decided from the original before any write. */
struct plan {
	long long client_id;
	char client[24];
	char *payload, *payload_hash, *contract, *output, *output_hash, *model, *effect;
	char *source_url, *workflow_version, *correlation_id;
	char *context;           /* the original's context for the approver, or NULL */
	const struct contract *c;    /* set when the new run goes to a person */
	bool human;
	char sent[REPLAY_MSG_LEN / 2];  /* forced past these effects ("" none) */
};

static void
plan_clear(struct plan *p)
{
	free(p->payload);
	free(p->payload_hash);
	free(p->contract);
	free(p->output);
	free(p->output_hash);
	free(p->model);
	free(p->effect);
	free(p->source_url);
	free(p->context);
	free(p->workflow_version);
	free(p->correlation_id);
	memset(p, 0, sizeof(*p));
}

/* A string of the original, taken over by the plan. */
static char *
take(char **s)
{
	char *v = *s;

	*s = NULL;
	return v;
}

/* The original of req in *o (the caller clears it), its client in p; a
 * refusal with out->message when there is none or several. */
static enum og_rc
plan_original(struct db *db, const struct replay_req *req, struct plan *p,
              struct replay_result *out, struct ledger_original *o)
{
	long long client_id = req->client_id > 0 ? req->client_id : 0;
	enum og_rc rrc;
	int found;

	if (client_id == 0 && req->client != NULL) {
		rrc = clients_id(db, req->client, &client_id);
		if (rrc == OG_NOT_FOUND)
			snprintf(out->message, sizeof(out->message), "no API client named \"%s\"",
			         req->client);
		if (rrc != OG_OK)
			return rrc;
	}
	if ((rrc = ledger_original(db, req->key, client_id, !req->dry_run, o, &found)) != OG_OK)
		return rrc;
	if (found == 0) {
		snprintf(out->message, sizeof(out->message), "no run has the key \"%s\"%s%s",
		         req->key, req->client ? " for client " : "", req->client ? req->client : "");
		return OG_NOT_FOUND;
	}
	if (found > 1) {
		snprintf(out->message, sizeof(out->message),
		         "the key \"%s\" exists for several API clients; name one with --client",
		         req->key);
		return OG_AMBIGUOUS;
	}
	p->client_id = out->client_id = o->client_id;
	snprintf(p->client, sizeof(p->client), "%lld", p->client_id);
	return OG_OK;
}

/* May the original be replayed at all: finished, nothing of it in flight,
 * nothing sent unless forced, a payload to run? */
static enum og_rc
plan_finished(const struct replay_req *req, const struct ledger_original *o, struct plan *p,
              struct replay_result *out)
{
	if (o->state == RUN_PROCESSING || o->state == RUN_AWAITING_HUMAN) {
		snprintf(out->message, sizeof(out->message),
		         "the original is %s: it is still live; let it finish or reject it "
		         "before replaying", ledger_state_name(o->state));
		return OG_NOT_FINISHED;
	}
	if (o->state == RUN_FAILED_RETRYABLE) {
		snprintf(out->message, sizeof(out->message),
		         "the original is failed_retryable: its workflow may still retry it under "
		         "its own key, and a replay would run the event twice; reject it first");
		return OG_NOT_FINISHED;
	}
	if (o->live_effects > 0) {
		snprintf(out->message, sizeof(out->message),
		         "an effect of the original is still pending (or its decision callback is "
		         "in flight): reject or cancel it first, or the business effect could "
		         "happen twice");
		return OG_NOT_FINISHED;
	}
	if (o->sent != NULL) {
		snprintf(p->sent, sizeof(p->sent), "%s", o->sent);
		if (!req->force || req->job_id > 0) {
			snprintf(out->message, sizeof(out->message),
			         "a business effect of the original may have happened (%s): a replay "
			         "could do it a second time; if it must be done again, replay this key "
			         "alone with --force and say why in --reason (a bulk job never forces)",
			         p->sent);
			return OG_NEEDS_FORCE;
		}
	}
	if (req->payload == NULL && o->payload == NULL) {
		snprintf(out->message, sizeof(out->message),
		         "the original's payload was purged by retention; give the corrected "
		         "payload with --payload FILE");
		return OG_NO_PAYLOAD;
	}
	return OG_OK;
}

/* The new run's payload (the corrected one, or the original's hashed under
 * RFC 8785) and what it keeps of the original's request. */
static enum og_rc
plan_payload(const struct replay_req *req, struct ledger_original *o, struct plan *p,
             struct replay_result *out)
{
	p->payload = req->payload ? strdup(req->payload) : take(&o->payload);
	if (req->payload != NULL) {
		p->payload_hash = strdup(req->payload_hash);
	} else if (p->payload != NULL) {
		/* the new run is hashed under RFC 8785, whatever rule the
		 * original's hash was computed with: the workflow's claim of the
		 * new key is compared with it */
		char h[CANON_HASH_LEN];

		if (canon_hash_as(CANON_JCS, p->payload, strlen(p->payload), h) == CANON_OK)
			p->payload_hash = strdup(h);
	}
	if (p->payload == NULL || p->payload_hash == NULL) {
		snprintf(out->message, sizeof(out->message),
		         "the payload could not be copied or hashed");
		return OG_ERROR;
	}
	p->source_url = take(&o->source_url);
	p->context = take(&o->context);
	p->workflow_version = take(&o->workflow_version);
	p->correlation_id = take(&o->correlation_id);
	snprintf(out->payload_hash, sizeof(out->payload_hash), "%s", p->payload_hash);
	return OG_OK;
}

/* Does the original's stored output still meet contract c as loaded now
 * (*meets)? OG_ERROR with out->message when it cannot be read. */
static enum og_rc
draft_meets(const struct ledger_original *o, const struct contract *c, bool *meets,
            struct replay_result *out)
{
	json_t *output = json_loads(o->output, JSON_DECODE_ANY, NULL);
	json_t *errors = output != NULL ? contract_validate(c, output) : NULL;

	*meets = errors != NULL && json_array_size(errors) == 0;
	json_decref(output);
	if (errors == NULL) {
		snprintf(out->message, sizeof(out->message), "the stored output cannot be read");
		return OG_ERROR;
	}
	json_decref(errors);
	return OG_OK;
}

/* Does the original's draft go to a fresh approval (p->human), or does the
 * workflow draft again (the new run starts failed_retryable)? */
static enum og_rc
plan_carry(const struct replay_req *req, struct ledger_original *o, struct plan *p,
           struct replay_result *out)
{
	enum og_rc rrc;
	bool meets;

	if (req->payload != NULL) {
		snprintf(out->note, sizeof(out->note),
		         "corrected payload: the original's draft was written for another input, "
		         "so none is carried; the workflow drafts again when it claims the new "
		         "key with this payload");
		goto retryable;
	}
	if (o->output == NULL || o->effect == NULL || o->contract == NULL) {
		snprintf(out->note, sizeof(out->note),
		         "the original has no valid model output to carry (%s%s); the workflow "
		         "drafts again when it claims the new key",
		         o->output == NULL ? "none stored" : "no effect",
		         o->contract == NULL ? ", no contract" : "");
		goto retryable;
	}
	p->c = req->contracts != NULL ? contract_find(req->contracts, o->contract) : NULL;
	if (p->c == NULL) {
		snprintf(out->message, sizeof(out->message),
		         "the original's contract \"%s\" is not loaded: there is no one to ask for "
		         "the fresh approval", o->contract);
		return OG_NO_APPROVERS;
	}
	/* A draft answers the contract it was written for: once the contract
	 * changed, the old output is never carried, even when it still passes. */
	if (o->contract_hash != NULL && strcmp(o->contract_hash, contract_hash(p->c)) != 0) {
		snprintf(out->note, sizeof(out->note),
		         "contract %s changed since the original's draft (%.20s… now %.20s…); "
		         "the workflow drafts again when it claims the new key",
		         contract_name(p->c), o->contract_hash, contract_hash(p->c));
		p->c = NULL;
		goto retryable;
	}
	if ((rrc = draft_meets(o, p->c, &meets, out)) != OG_OK)
		return rrc;
	if (!meets) {
		snprintf(out->note, sizeof(out->note),
		         "the original's output no longer meets contract %s as loaded now; the "
		         "workflow drafts again when it claims the new key", contract_name(p->c));
		p->c = NULL;
		goto retryable;
	}
	if (contract_gate(p->c)->napprovers == 0) {
		snprintf(out->message, sizeof(out->message),
		         "contract %s names no approver: a replay always goes to a person",
		         contract_name(p->c));
		return OG_NO_APPROVERS;
	}
	p->human = true;
	p->contract = strdup(contract_name(p->c));
	p->output = take(&o->output);
	p->output_hash = take(&o->output_hash);
	p->model = take(&o->model);
	p->effect = take(&o->effect);
	snprintf(out->start_state, sizeof(out->start_state), "%s",
	         ledger_state_name(RUN_AWAITING_HUMAN));
	snprintf(out->note, sizeof(out->note),
	         "the original's model output (output_hash %s) is carried to a fresh approval "
	         "under contract %s; it was drafted for the original event",
	         p->output_hash ? p->output_hash : "?", p->contract);
	return OG_OK;
retryable:
	snprintf(out->start_state, sizeof(out->start_state), "%s",
	         ledger_state_name(RUN_FAILED_RETRYABLE));
	return OG_OK;
}

/* Reads the original and decides; OG_OK with the plan filled, or a
 * refusal with out->message saying why. Writes nothing. */
static enum og_rc
replay_plan(struct db *db, const struct replay_req *req, struct plan *p,
            struct replay_result *out)
{
	struct ledger_original o;
	enum og_rc rrc;

	if ((rrc = plan_original(db, req, p, out, &o)) == OG_OK &&
	    (rrc = plan_finished(req, &o, p, out)) == OG_OK &&
	    (rrc = plan_payload(req, &o, p, out)) == OG_OK)
		rrc = plan_carry(req, &o, p, out);
	ledger_original_clear(&o);
	return rrc;
}

/* Fresh challenges for the contract's approvers, as the output handler
 * creates them: told by their notices (notify_challenge, as an output's)
 * when the contract notifies, else with raw links in out->approvals only. */
static enum og_rc
replay_challenges(struct db *db, const struct replay_req *req, const struct plan *p,
                  struct replay_result *out)
{
	json_t *decisions = contract_allowed_decisions(p->c);
	const struct contract_gate *g = contract_gate(p->c);
	const struct contract_notify *n = contract_notify(p->c);
	enum og_rc rrc = OG_OK;
	size_t i;

	out->approvals = json_array();
	for (i = 0; i < g->napprovers; i++) {
		char token[TOKEN_TEXT_LEN + 1], id[GATE_ID_LEN], expires[GATE_TS_LEN];
		unsigned char hash[TOKEN_HASH_LEN];
		enum og_rc grc;
		struct buf url;

		if (token_new(token, hash) != 0) {
			snprintf(out->message, sizeof(out->message), "the CSPRNG failed");
			rrc = OG_ERROR;
			break;
		}
		grc = gate_create(db, p->client_id, req->new_key, g->approvers[i],
		                  decisions, req->operator_name, g->separation_of_duties,
		                  g->expires_seconds, hash, p->effect, NULL,
		                  g->min_approvals, id, expires);
		if (grc != OG_OK) {
			digest_wipe(token, sizeof(token));
			rrc = grc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
			break;
		}
		if (n->entries != NULL || n->nescalate > 0) {
			const struct notify_challenge c = {
				.id = id, .client_id = p->client_id, .key = req->new_key,
				.approver = g->approvers[i],
				.requested_by = req->operator_name, .expires_at = expires,
				.effect = p->effect, .context = p->context,
			};

			if ((grc = notify_challenge(db, p->c, &c)) != OG_OK) {
				digest_wipe(token, sizeof(token));
				rrc = grc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
				break;
			}
		}
		if (n->entries != NULL) {
			/* told by the notice, with a link the dispatcher mints: this
			 * token is handed to nobody */
			digest_wipe(token, sizeof(token));
			json_array_append_new(out->approvals,
			                      json_pack("{s:s, s:s, s:s, s:b}", "approval_id", id,
			                                "approver", g->approvers[i],
			                                "expires_at", expires, "notified", 1));
			continue;
		}
		buf_init(&url, 4096);
		if (buf_printf(&url, "%s/approve/%s", req->public_url ? req->public_url : "",
		               token) != 0) {
			buf_free(&url);
			digest_wipe(token, sizeof(token));
			rrc = OG_ERROR;
			break;
		}
		json_array_append_new(out->approvals,
		                      json_pack("{s:s, s:s, s:s, s:s}", "approval_id", id, "approver",
		                                g->approvers[i], "expires_at", expires,
		                                "url", url.data));
		digest_wipe(url.data, url.len);
		buf_free(&url);
		digest_wipe(token, sizeof(token));
	}
	json_decref(decisions);
	return rrc;
}

/* The record of what an operator did (action, reason, client, key,
 * details; the operator is the session's role), in the transaction of the
 * change itself. */
static enum og_rc
record_action(struct db *db, const char *const *p)
{
	struct oplog_action a = { .action = p[0], .reason = p[1], .client_id = p[2],
		                  .key = p[3], .details = p[4] };
	enum db_rc rc = oplog_record(db, &a, NULL);

	return rc == DB_OK ? OG_OK : rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
}

/* The replay's writes, in the caller's transaction: the new run, its
 * challenges, the link to the original, the original's dead letters
 * answered, the job item done, the operator's action. */
static enum og_rc
replay_write(struct db *db, const struct replay_req *req, const struct plan *p,
             const char *source, struct replay_result *out)
{
	char *details = NULL, *event_reason = NULL;
	enum og_rc rrc;

	if (asprintf(&event_reason, "replay of %s: %s", req->key, req->reason) < 0)
		event_reason = NULL;
	{
		json_t *d = json_pack("{s:s, s:s, s:s, s:s, s:s}", "original_key", req->key,
		                      "replay_key", req->new_key, "payload_source", source,
		                      "payload_hash", p->payload_hash, "start_state", out->start_state);

		if (d != NULL && req->job_id > 0)
			json_object_set_new(d, "job_id", json_integer(req->job_id));
		if (d != NULL && p->sent[0] != '\0') {
			json_object_set_new(d, "forced", json_true());
			json_object_set_new(d, "forced_past", json_string(p->sent));
		}
		details = d != NULL ? json_dumps(d, JSON_COMPACT) : NULL;
		json_decref(d);
	}
	if (details == NULL || event_reason == NULL) {
		rrc = OG_ERROR;
		goto out;
	}
	{
		bool retry = !p->human;
		const struct ledger_replay r = {
			.client_id = p->client_id, .key = req->new_key, .payload_hash = p->payload_hash,
			.payload = p->payload, .state = out->start_state,
			.workflow_version = p->workflow_version, .correlation_id = p->correlation_id,
			.contract = p->contract, .contract_hash = p->human ? contract_hash(p->c) : NULL,
			.output = p->output, .output_hash = p->output_hash, .model = p->model,
			.effect = p->effect, .source_url = p->source_url, .context = p->context,
			.requested_by = req->operator_name, .error_class = retry ? "replay" : NULL,
			.reason = retry ? out->note : NULL, .event_reason = event_reason,
		};

		if ((rrc = ledger_replay(db, &r)) != OG_OK) {
			if (rrc == OG_EXISTS)
				snprintf(out->message, sizeof(out->message),
				         "the new key \"%s\" exists already (created a moment ago)",
				         req->new_key);
			goto out;
		}
	}
	if (p->human && (rrc = replay_challenges(db, req, p, out)) != OG_OK)
		goto out;
	{
		const struct jobs_link l = {
			.client_id = p->client_id, .key = req->key, .new_key = req->new_key,
			.reason = req->reason, .payload_source = source, .payload_hash = p->payload_hash,
			.start_state = out->start_state, .job = req->job_id,
		};

		if ((rrc = jobs_link(db, &l)) != OG_OK)
			goto out;
	}
	{
		int letters = 0;
		enum db_rc drc = deadletter_replayed(db, p->client_id, req->key, req->new_key,
		                                     &letters);

		if (drc != DB_OK) {
			rrc = drc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
			goto out;
		}
		out->letters = letters;
	}
	if (req->job_id > 0) {
		if ((rrc = jobs_replay_done(db, req->job_id, req->job_seq, out->start_state)) !=
		    OG_OK) {
			snprintf(out->message, sizeof(out->message),
			         "job %lld item %d is no longer pending", req->job_id, req->job_seq);
			goto out;
		}
	}
	{
		const char *params[5] = { "replay", req->reason, p->client, req->new_key, details };

		if ((rrc = record_action(db, params)) != OG_OK)
			goto out;
	}
	rrc = OG_OK;
out:
	free(details);
	free(event_reason);
	return rrc;
}

enum og_rc
replay_run(struct db *db, const struct replay_req *req, struct replay_result *out)
{
	struct plan p = { 0 };
	const char *source = req->payload != NULL ? "corrected" : "original";
	enum og_rc rrc;
	enum db_rc rc;
	bool in_tx = false;

	memset(out, 0, sizeof(out->client_id) + sizeof(out->start_state));
	out->approvals = NULL;
	out->note[0] = out->message[0] = out->forced_past[0] = '\0';
	out->letters = 0;
	if (strcmp(req->key, req->new_key) == 0) {
		snprintf(out->message, sizeof(out->message),
		         "the new key is the original's key: a correction needs a new key issued "
		         "upstream");
		return OG_EXISTS;
	}
	/* The rules are checked under the original's row lock (ledger_original),
	 * held until the replay commits. */
	if (!req->dry_run) {
		if ((rc = db_begin(db)) != DB_OK) {
			rrc = og_rc_of(rc);
			goto out;
		}
		in_tx = true;
	}
	if ((rrc = replay_plan(db, req, &p, out)) != OG_OK)
		goto out;
	snprintf(out->forced_past, sizeof(out->forced_past), "%s", p.sent);
	{
		bool exists = false;

		if ((rrc = ledger_exists(db, p.client_id, req->new_key, &exists)) != OG_OK)
			goto out;
		if (exists) {
			snprintf(out->message, sizeof(out->message),
			         "the new key \"%s\" exists already: a replay never touches an "
			         "existing run; ask upstream for a key that was never used",
			         req->new_key);
			rrc = OG_EXISTS;
			goto out;
		}
	}
	if (req->dry_run)
		goto out;

	if ((rrc = replay_write(db, req, &p, source, out)) != OG_OK)
		goto out;
	if ((rc = db_commit(db)) != DB_OK) {
		in_tx = false;
		rrc = rc == DB_CONFLICT ? OG_EXISTS : og_rc_of(rc);
		snprintf(out->message, sizeof(out->message), "the commit failed: %s", db_error(db));
		goto out;
	}
	in_tx = false;
	rrc = OG_OK;
out:
	if (in_tx)
		db_rollback(db);
	if (rrc != OG_OK)
		wipe_links(out); /* rolled back: those links open nothing; never show them */
	if (rrc != OG_OK && out->message[0] == '\0')
		snprintf(out->message, sizeof(out->message), "%s", db_error(db));
	plan_clear(&p);
	return rrc;
}

/* ---- bulk jobs ------------------------------------------------------------ */

enum og_rc
replay_job_create(struct db *db, long long client_id, const char *source, double rate,
                  const char *reason, const struct replay_item *items, int n, long long *job_id)
{
	char cid[24];
	char *details = NULL;
	enum og_rc rrc;
	enum db_rc rc;
	int i;

	snprintf(cid, sizeof(cid), "%lld", client_id);
	if ((rc = db_begin(db)) != DB_OK)
		return og_rc_of(rc);
	if ((rrc = jobs_replay_create(db, reason, source, client_id, rate, job_id)) != OG_OK)
		goto out;
	for (i = 0; i < n; i++)
		if ((rrc = jobs_replay_item(db, *job_id, items[i].seq, items[i].key,
		                            items[i].new_key)) != OG_OK)
			goto out;
	{
		json_t *d = json_pack("{s:I, s:s, s:i, s:f}", "job_id", (json_int_t)*job_id, "source",
		                      source, "items", n, "rate_per_second", rate);
		const char *params[5] = { "replay.job_created", reason, cid, NULL, NULL };

		details = d != NULL ? json_dumps(d, JSON_COMPACT) : NULL;
		json_decref(d);
		params[4] = details;
		if (details == NULL) {
			rrc = OG_ERROR;
			goto out;
		}
		if ((rrc = record_action(db, params)) != OG_OK)
			goto out;
	}
	if ((rc = db_commit(db)) != DB_OK) {
		free(details);
		return og_rc_of(rc);
	}
	free(details);
	return OG_OK;
out:
	db_rollback(db);
	free(details);
	return rrc;
}

/* Ends a transaction: commits when rrc is OG_OK, else rolls back. */
static enum og_rc
tx_end(struct db *db, enum og_rc rrc)
{
	if (rrc != OG_OK) {
		db_rollback(db);
		return rrc;
	}
	return og_rc_of(db_commit(db));
}

static enum og_rc
job_action(struct db *db, long long job_id, long long client_id, const char *action,
           const char *reason)
{
	char cid[24], *details = NULL;
	json_t *d = json_pack("{s:I}", "job_id", (json_int_t)job_id);
	const char *params[5] = { action, reason, client_id > 0 ? cid : NULL, NULL, NULL };
	enum og_rc rrc;

	snprintf(cid, sizeof(cid), "%lld", client_id);
	details = d != NULL ? json_dumps(d, JSON_COMPACT) : NULL;
	json_decref(d);
	if (details == NULL)
		return OG_ERROR;
	params[4] = details;
	rrc = record_action(db, params);
	free(details);
	return rrc;
}

enum og_rc
replay_job_take(struct db *db, long long job_id, const char *kind, bool resume,
                const char *reason, long long *client_id,
                double *rate, char *msg, size_t msglen)
{
	char action[48];
	struct jobs_job j;
	enum og_rc rrc;
	enum db_rc rc;

	if ((rrc = jobs_lock(db, job_id, &j)) != OG_OK) {
		if (rrc == OG_NOT_FOUND)
			snprintf(msg, msglen, "no job %lld", job_id);
		return rrc;
	}
	if (strcmp(j.kind, kind) != 0) {
		/* the other kind's runner continues it; this session's lock on it
		 * ends with the command */
		snprintf(msg, msglen, "job %lld is a %s job, not a %s job: continue it with "
		         "oncegatectl %s", job_id, j.kind, kind,
		         strcmp(j.kind, "resume") == 0 ? "resume --job JOB" : "replay --resume JOB");
		return OG_NOT_FOUND;
	}
	*client_id = j.client_id;
	*rate = j.rate;
	if (!j.locked) {
		snprintf(msg, msglen, "job %lld is being run by another oncegatectl right now",
		         job_id);
		return OG_NOT_FINISHED;
	}
	if (j.completed) {
		snprintf(msg, msglen, "job %lld is completed: every item was done or refused",
		         job_id);
		return OG_NOT_FINISHED;
	}
	if (!resume)
		return OG_OK;
	/* a resume: the job was stopped, or its runner died while running */
	if ((rc = db_begin(db)) != DB_OK)
		return og_rc_of(rc);
	snprintf(action, sizeof(action), "%s.job_resumed", kind);
	if ((rrc = jobs_run(db, job_id)) == OG_OK)
		rrc = job_action(db, job_id, *client_id, action, reason);
	return tx_end(db, rrc);
}

enum og_rc
replay_job_next(struct db *db, long long job_id, struct replay_item *item, bool *stop)
{
	memset(item, 0, sizeof(*item));
	return jobs_replay_next(db, job_id, &item->seq, &item->key, &item->new_key, stop);
}

enum og_rc
replay_job_refuse(struct db *db, long long job_id, int seq, const char *detail)
{
	return jobs_replay_refuse(db, job_id, seq, detail);
}

enum og_rc
replay_job_finish(struct db *db, long long job_id, bool completed, const char *why)
{
	char action[48] = "replay.job_stopped", kind[JOBS_WORD_LEN];
	long long client_id = 0;
	enum og_rc rrc;
	enum db_rc rc;

	if ((rc = db_begin(db)) != DB_OK)
		return og_rc_of(rc);
	if ((rrc = jobs_finish(db, job_id, completed, &client_id, kind)) != OG_OK) {
		db_rollback(db);
		return rrc;
	}
	if (kind[0] != '\0')
		snprintf(action, sizeof(action), "%s.job_stopped", kind);
	/* a stop is an operator's action too: who stopped it and why */
	return tx_end(db, completed ? OG_OK
	                            : job_action(db, job_id, client_id, action, why));
}

enum og_rc
replay_job_stop(struct db *db, long long job_id, const char *reason,
                char *kind, size_t kindlen, char *msg, size_t msglen)
{
	char action[48], k[JOBS_WORD_LEN], state[JOBS_WORD_LEN];
	long long client_id;
	enum og_rc rrc;
	enum db_rc rc;
	bool stopping;

	if ((rc = db_begin(db)) != DB_OK)
		return og_rc_of(rc);
	if ((rrc = jobs_stop(db, job_id, &client_id, k)) != OG_OK) {
		db_rollback(db);
		if (rrc != OG_NOT_FOUND)
			return rrc;
		if ((rrc = jobs_state(db, job_id, state, k, &stopping)) == OG_NOT_FOUND) {
			snprintf(msg, msglen, "no job %lld", job_id);
			return OG_NOT_FOUND;
		}
		if (rrc != OG_OK)
			return OG_UNAVAILABLE;
		snprintf(kind, kindlen, "%s", k);
		snprintf(msg, msglen, "job %lld is %s%s: nothing to stop", job_id, state,
		         stopping ? " and already asked to stop" : "");
		return OG_NOT_FINISHED;
	}
	snprintf(kind, kindlen, "%s", k);
	snprintf(action, sizeof(action), "%s.job_stop", k);
	return tx_end(db, job_action(db, job_id, client_id, action, reason));
}

enum og_rc
replay_job_counts(struct db *db, long long job_id, int *done, int *refused, int *pending)
{
	struct jobs_item_counts c;
	enum og_rc rc = jobs_counts(db, job_id, &c);

	*done = (int)c.done;
	*refused = (int)c.refused;
	*pending = (int)c.pending;
	return rc;
}
enum og_rc
replay_links(struct db *db, long long client_id, const char *key, json_t **replay_of,
             json_t **replayed_by)
{
	struct jobs_replay_links links;
	enum og_rc rc;
	int i;

	*replay_of = NULL;
	*replayed_by = NULL;
	if ((rc = jobs_links(db, client_id, key, &links)) != OG_OK)
		return rc;
	*replay_of = json_null();
	*replayed_by = json_array();
	for (i = 0; i < links.n; i++) {
		const char *orig = links.v[i].original_key, *rep = links.v[i].replay_key;

		if (strcmp(rep, key) == 0) {
			json_decref(*replay_of);
			*replay_of = json_string(orig);
		} else {
			json_array_append_new(*replayed_by, json_string(rep));
		}
	}
	jobs_replay_links_clear(&links);
	return OG_OK;
}
