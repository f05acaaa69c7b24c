/*
 * api_decide.c — the decision API: POST /v1/approvals/{id}/decisions.
 *
 * An API client holding the decide scope for the challenge's contract and
 * approver entry (`oncegatectl client grant`) records the decision of a
 * person it vouches for — a chat integration, a team's own tool. The
 * client decides on its own runs only. The person is the body's subject
 * (and groups, for an approver entry "group:NAME"); from there the rules
 * are the approval page's (api_decision.c): the decisions the challenge
 * allows, approvers, separation of duties, one vote per person, the draft
 * read, the editable members, quorum and expiry, one transaction, one
 * effect when decisions race. The vote records the client it came
 * through: "decided by SUBJECT via client NAME". A request for changes
 * (decision changes_requested, where the contract allows it) carries the
 * person's feedback, which goes back to the workflow for a new draft.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "api_decision.h"
#include "clients.h"
#include "contract.h"
#include "log.h"
#include "utf8.h"

/* The groups a client vouches for, joined by the site's separator (the
 * form nginx passes them in), into out; false when one is not acceptable. */
static bool
groups_text(struct api_call *c, char *out, size_t cap)
{
	json_t *groups = json_object_get(c->body, "groups"), *g;
	char sep = c->ctx->cfg->auth_groups_separator[0];
	size_t i, len = 0;

	out[0] = '\0';
	if (groups == NULL || json_is_null(groups))
		return true;
	if (!json_is_array(groups) || json_array_size(groups) > OG_GROUPS_MAX)
		goto bad;
	json_array_foreach(groups, i, g) {
		const char *s = json_string_value(g);
		size_t n = s != NULL ? strlen(s) : 0;

		if (n == 0 || n != json_string_length(g) || utf8_chars(s) > OG_GROUP_MAX_CHARS ||
		    !api_printable(s) || strchr(s, sep) != NULL || len + n + 2 > cap)
			goto bad;
		if (len > 0)
			out[len++] = sep;
		memcpy(out + len, s, n + 1);
		len += n;
	}
	return true;
bad:
	api_reject(c, "invalid_field",
	           "groups must be an array of at most 64 group names (printable text of at "
	           "most 256 characters, without the site's group separator)", "groups");
	return false;
}

/* The corrections: an object of editable member names to text. */
static bool
edits_read(struct api_call *c, const json_t **out)
{
	json_t *edits = json_object_get(c->body, "edits"), *v;
	const char *name;

	*out = NULL;
	if (edits == NULL || json_is_null(edits))
		return true;
	if (!json_is_object(edits) || json_object_size(edits) > 64)
		goto bad;
	json_object_foreach(edits, name, v)
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
			goto bad;
	*out = edits;
	return true;
bad:
	api_reject(c, "invalid_field",
	           "edits must be an object of the contract's editable members, each a text",
	           "edits");
	return false;
}

/* The feedback of a request for changes: a JSON string, taken with its
 * length (decision_take checks its text). False when it is not one. */
static bool
feedback_read(struct api_call *c, struct decision_in *in)
{
	json_t *v = json_object_get(c->body, "feedback");

	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_string(v)) {
		api_reject(c, "invalid_field", "feedback must be a string", "feedback");
		return false;
	}
	in->feedback = json_string_value(v);
	in->feedback_len = json_string_length(v);
	return true;
}

/* A decision refused, as a problem document, and one approval.refused
 * line. */
static void
refused(struct api_call *c, const struct decision_refusal *r, struct decision_out *out,
        struct log_fields *f)
{
	json_t *ext = json_object();
	const char *code = decision_refusal_code(r);

	if (r == &DECISION_UNAVAILABLE) {
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
	if (r == &DECISION_INTERNAL) {
		api_internal(c, "the decision could not be taken");
		return;
	}
	if (r->status == 410 || strcmp(code, "not_awaiting") == 0) {
		/* closed: decided, voided, revoked, expired, or the run moved on */
		json_object_set_new(ext, "reason", json_string(code));
		code = "approval_closed";
	}
	if (r == &DECISION_INVALID_EDIT && out->edit_errors != NULL)
		json_object_set(ext, "errors", out->edit_errors);
	api_answer_problem(c, code, r->message, ext);
	f->reason = decision_refusal_code(r);
	f->status = c->resp->status;
	api_log(c, LOG_LEVEL_NOTICE, "approval.refused", f);
}

/* The decision taken: what it did. False when it could not be said (the
 * answer is a 500; the decision stands). */
static bool
answer(struct api_call *c, const struct gate_approval *a, const struct decision_out *out)
{
	const struct decide_approval *d = &out->d;
	json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:i, s:i}", "approval_id", a->id,
	                        "key", a->key, "decision", d->decision, "decided_by", d->subject,
	                        "via_client", c->client.name, "final", d->final, "approvals",
	                        d->approvals, "needed", d->needed);

	if (doc == NULL) {
		api_internal(c, "out of memory");
		return false;
	}
	json_object_set_new(doc, "state",
	                    json_string(ledger_state_name(d->final ? out->run.state
	                                                           : RUN_AWAITING_HUMAN)));
	json_object_set_new(doc, "round", json_integer(a->round));
	if (d->final && out->run.state == RUN_PROCESSING)
		/* changes requested: the workflow drafts again in the next round */
		json_object_set_new(doc, "next_round", json_integer(out->run.round));
	if (d->effect_id[0] != '\0')
		json_object_set_new(doc, "effect_id", json_string(d->effect_id));
	if (d->edit_hash[0] != '\0')
		json_object_set_new(doc, "edited_output_hash", json_string(d->edit_hash));
	http_json(c->resp, 200, doc);
	return true;
}

/* The scope: the client decides on its own runs, for approver entries of
 * the run's contract it holds a grant for. NULL when it may; else the
 * message of the 403. */
static const char *
scope_refusal(struct api_call *c, const struct gate_approval *a, const json_t *run)
{
	const char *contract = json_string_value(json_object_get(run, "contract"));
	enum og_rc rc;

	if (contract == NULL)
		return "the run has no contract to hold a grant for";
	rc = clients_may_decide(c->ctx->db, c->client.id, contract, a->approver);
	if (rc == OG_OK)
		return NULL;
	if (rc == OG_UNAVAILABLE)
		return "";
	return "this client holds no decide grant for this contract and approver "
	       "(oncegatectl client grant)";
}

/* The challenge found and its run loaded: the checks and the decision. */
static void
decide(struct api_call *c, const unsigned char hash[32], struct gate_approval *a,
       const struct decision_in *in, struct log_fields *f)
{
	const struct decision_refusal *r;
	struct api_card_draft dr = { 0 };
	struct decision_out out = { 0 };
	json_t *run = NULL;
	const char *why;
	enum og_rc rc;

	if ((rc = api_card_load(c, a, &run, &dr)) != OG_OK) {
		api_fail(c, rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR);
		goto out;
	}
	if ((why = scope_refusal(c, a, run)) != NULL) {
		if (why[0] == '\0') {
			api_fail(c, OG_UNAVAILABLE);
			goto out;
		}
		api_answer_problem(c, "forbidden", why, NULL);
		f->reason = "scope";
		f->status = 403;
		api_log(c, LOG_LEVEL_NOTICE, "approval.refused", f);
		goto out;
	}
	if ((r = decision_open(a, run)) == NULL)
		r = decision_take(c, hash, a, run, &dr, in, f, &out);
	if (r != NULL)
		refused(c, r, &out, f);
	else if (answer(c, a, &out))
		decision_logged(c, a, in, &out, f);
out:
	decision_out_clear(&out);
	api_card_draft_clear(&dr);
	json_decref(run);
}

void
api_approvals_decide(struct api_call *c)
{
	static const char *const fields[] = { "subject", "groups", "decision", "reason", "draft",
		                              "edits", "feedback", NULL };
	const struct http_request *door = c->req;
	struct http_request vouched = *c->req;
	struct gate_approval a = { 0 };
	struct decision_in in = { 0 };
	struct log_fields f = { 0 };
	const char *subject, *decision;
	/* every name at its longest: 4 bytes a character, and a separator */
	char id[sizeof(c->key)], groups[OG_GROUPS_MAX * (OG_GROUP_MAX_CHARS * 4 + 1) + 1];
	unsigned char hash[32];
	enum og_rc grc = OG_NOT_FOUND;

	snprintf(id, sizeof(id), "%s", c->key);
	c->key[0] = '\0';
	if (!api_only_fields(c, fields) ||
	    !api_opt_string(c, "subject", OG_SUBJECT_MAX_CHARS, &subject) ||
	    !api_opt_string(c, "decision", 32, &decision) || !feedback_read(c, &in) ||
	    !api_opt_string(c, "reason", OG_TEXT_MAX_CHARS, &in.reason) ||
	    !api_opt_string(c, "draft", 128, &in.draft) || !groups_text(c, groups, sizeof(groups)) ||
	    !edits_read(c, &in.values))
		return;
	if (subject == NULL || subject[0] == '\0' || decision == NULL) {
		api_reject(c, "invalid_field", "subject (the person deciding, as the approver "
		           "entries name people) and decision (approve, reject or "
		           "changes_requested) are required",
		           subject == NULL || subject[0] == '\0' ? "subject" : "decision");
		return;
	}
	if (ledger_uuid_valid(id))
		grc = gate_find_id(c->ctx->db, id, hash, &a);
	if (grc == OG_UNAVAILABLE) {
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
	/* another client's challenge does not exist for this one */
	if (grc != OG_OK || a.client_id != c->client.id) {
		api_answer_problem(c, "approval_not_found", "no such approval among this client's runs",
		                   NULL);
		f.reason = "unknown_approval";
		f.status = 404;
		api_log(c, LOG_LEVEL_NOTICE, "approval.refused", &f);
		goto out;
	}
	snprintf(c->key, sizeof(c->key), "%s", a.key);
	/* from here the request acts for the person the client vouches for */
	vouched.remote_user = subject;
	vouched.auth_groups = groups[0] != '\0' ? groups : NULL;
	c->req = &vouched;
	in.decision = decision;
	in.via_client = c->client.id;
	f.approval_id = a.id;
	f.actor = subject;
	f.decision = decision;
	decide(c, hash, &a, &in, &f);
	c->req = door;
out:
	digest_wipe(hash, sizeof(hash));
	gate_approval_clear(&a);
}
