/*
 * api_chat_slack.c — POST /v1/chat/slack/interactions: a button of a Slack
 * notice pressed (chat_slack.h, provider_slack.c).
 *
 * The request is Slack's when its v0 signature is the signing secret's of
 * a slack target (signing_secret_file) and its timestamp within five
 * minutes; a request seen before is refused (chat.c keeps what was
 * seen). Anything else is a 401 and changes nothing. The Slack user is
 * then the person the target's user map names (user_map_file): an
 * unmapped user is told, only them, that their account is not linked, and
 * nothing changes. From there the rules are the approval page's and the
 * decision API's (api_decision.c): the decisions the challenge allows,
 * approvers, separation of duties, one vote per person, quorum and expiry,
 * one transaction, one effect when decisions race. The vote records the
 * chat: "decided by SUBJECT via slack". Corrections are made on the page
 * (the notice's Open button).
 *
 * Slack wants its answer within 3 seconds: the answer is the request's,
 * and the message's update (who decided, through the interaction's
 * response_url) is queued once the decision committed and sent by the
 * dispatcher, so a slow Slack neither holds nor loses the decision.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_decision.h"
#include "api_int.h"
#include "canon.h"
#include "caps.h"
#include "chat.h"
#include "chat_slack.h"
#include "digest.h"
#include "log.h"
#include "provider.h"
#include "secret.h"

/* The user map is read whole, at most this much. */
#define SLACK_MAP_MAX (1024 * 1024)

/* The slack target whose signing secret signed the request: NULL with
 * *verdict the reason when none did (CHAT_SLACK_SIGNED with NULL: no
 * slack target has a signing secret). */
static const struct config_target *
signer(struct api_call *c, enum chat_slack_verdict *verdict)
{
	const struct config *cfg = c->ctx->cfg;
	char secret[OG_SECRET_FILE_MAX + 1], why[256];
	int i;

	*verdict = CHAT_SLACK_SIGNED;
	for (i = 0; i < cfg->ntargets; i++) {
		const struct config_target *t = &cfg->targets[i];
		enum chat_slack_verdict v;

		if (provider_of(t) != &provider_slack || t->signing_secret_file[0] == '\0')
			continue;
		if (secret_read("signing_secret_file", t->signing_secret_file, secret, why,
		                sizeof(why)) != 0) {
			api_log(c, LOG_LEVEL_ERROR, "chat.secret_unreadable",
			        &(struct log_fields){ .target = t->name, .detail = why });
			continue;
		}
		v = chat_slack_verify(secret, c->req->slack_timestamp, c->req->slack_signature,
		                      c->req->body, c->req->body_len, (long long)time(NULL));
		digest_wipe(secret, sizeof(secret));
		if (v == CHAT_SLACK_SIGNED)
			return t;
		if (*verdict == CHAT_SLACK_SIGNED || v == CHAT_SLACK_FORGED)
			*verdict = v;
	}
	return NULL;
}

/* 401: not Slack's, or Slack's sent again. */
static void
unsigned_refusal(struct api_call *c, const char *reason, const char *message)
{
	struct log_fields f = { .reason = reason, .detail = message };

	api_answer_problem(c, "invalid_signature", message, NULL);
	f.status = c->resp->status;
	api_log(c, LOG_LEVEL_WARNING, "chat.refused", &f);
}

/* Is the request signed, in time and new? Answers it when not. */
static const struct config_target *
authentic(struct api_call *c)
{
	enum chat_slack_verdict v;
	const struct config_target *t = signer(c, &v);
	unsigned char seen[32];
	enum og_rc rc;

	if (t == NULL && v == CHAT_SLACK_SIGNED) {
		api_answer_problem(c, "not_found", "no Slack app is configured here (a slack target "
		                   "with signing_secret_file)", NULL);
		return NULL;
	}
	if (t == NULL) {
		unsigned_refusal(c, v == CHAT_SLACK_STALE ? "stale" : v == CHAT_SLACK_FORGED
		                                                          ? "forged" : "unsigned",
		                 chat_slack_verdict_text(v));
		return NULL;
	}
	/* the signature names the request: the same one again is a replay */
	digest_sha256(c->req->slack_signature, strlen(c->req->slack_signature), seen);
	rc = chat_seen_note(c->ctx->db, "slack", seen);
	if (rc == OG_DUPLICATE) {
		unsigned_refusal(c, "replayed", "this request was received before: a replay");
		return NULL;
	}
	if (rc != OG_OK) {
		api_fail(c, rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR);
		return NULL;
	}
	return t;
}

/* The map's person for the presser: false when the map does not name
 * them (or cannot be read: said in the log). */
static bool
person(struct api_call *c, const struct config_target *t, const struct chat_slack_press *p,
       char *subject, size_t subjectlen, char *groups, size_t groupslen)
{
	FILE *f = t->user_map_file[0] != '\0' ? fopen(t->user_map_file, "re") : NULL;
	char *map;
	size_t n;
	bool found = false;

	subject[0] = groups[0] = '\0';
	if (f == NULL) {
		api_log(c, LOG_LEVEL_ERROR, "chat.map_unreadable",
		        &(struct log_fields){ .target = t->name,
		                              .detail = "user_map_file is not set or cannot be read",
		                              .hint = "name a file of SLACK_USER SUBJECT [GROUPS] "
		                                      "lines in the target's user_map_file" });
		return false;
	}
	if ((map = malloc(SLACK_MAP_MAX)) != NULL) {
		n = fread(map, 1, SLACK_MAP_MAX, f);
		found = chat_slack_map_find(map, n, p->team, p->user,
		                            c->ctx->cfg->auth_groups_separator[0], subject, subjectlen,
		                            groups, groupslen);
		free(map);
	}
	fclose(f);
	return found;
}

/* Queues reply body for the press's response_url; a reply that cannot be
 * queued is logged (the decision stands). */
static void
reply(struct api_call *c, const struct config_target *t, const struct chat_slack_press *p,
      const char *approval_id, enum chat_slack_reply how, const char *text)
{
	json_t *r = chat_slack_reply(how, text);
	char *body = r != NULL ? canon_dumps(r, JSON_COMPACT) : NULL;

	if (body == NULL ||
	    chat_reply_queue(c->ctx->db, "slack", t->name,
	                     approval_id != NULL && approval_id[0] ? approval_id : NULL,
	                     p->response_url, body) != OG_OK)
		api_log(c, LOG_LEVEL_ERROR, "chat.reply_lost",
		        &(struct log_fields){ .target = t->name, .approval_id = approval_id,
		                              .detail = body == NULL ? "out of memory"
		                                                     : db_error(c->ctx->db) });
	/* the request's own answer says the same (Slack shows it nowhere for
	 * a button; tools and tests read it) */
	if (r != NULL)
		json_object_set_new(r, "ok", json_boolean(how != CHAT_SLACK_EPHEMERAL));
	http_json(c->resp, 200, r != NULL ? r : json_object());
	free(body);
}

/* The words of a decision taken, for the message. */
static void
decided_text(const struct decision_out *out, const char *subject, char *text, size_t len)
{
	const struct decide_approval *d = &out->d;
	bool approve = gate_decision_parse(d->decision) == GATE_APPROVE;

	if (d->final)
		snprintf(text, len, "%s by %s via Slack.%s", approve ? "Approved" : "Rejected",
		         subject, approve ? " The effect goes out once." : " Nothing is sent.");
	else
		snprintf(text, len, "%s approved via Slack: %d of %d approvals.", subject,
		         d->approvals, d->needed);
}

/* The challenge found: the rules and the decision, for the person. */
static void
decide(struct api_call *c, const struct config_target *t, const struct chat_slack_press *p,
       const unsigned char hash[32], struct gate_approval *a, const char *subject)
{
	const struct decision_refusal *r = NULL;
	struct api_card_draft dr = { 0 };
	struct decision_out out = { 0 };
	struct decision_in in = { 0 };
	struct log_fields f = { 0 };
	json_t *run = NULL;
	char text[1024];
	enum og_rc rc;

	in.decision = gate_decision_name(strcmp(p->action, CHAT_SLACK_APPROVE) == 0 ? GATE_APPROVE
	                                                                          : GATE_REJECT);
	in.via_chat = "slack";
	f.approval_id = a->id;
	f.actor = subject;
	f.decision = in.decision;
	if ((rc = api_card_load(c, a, &run, &dr)) != OG_OK) {
		api_fail(c, rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR);
		goto out;
	}
	if ((r = decision_open(a, run)) == NULL)
		r = decision_take(c, hash, a, run, &dr, &in, &f, &out);
	if (r == &DECISION_UNAVAILABLE) {
		api_fail(c, OG_UNAVAILABLE);
	} else if (r == &DECISION_INTERNAL) {
		api_internal(c, "the decision could not be taken");
	} else if (r != NULL) {
		f.reason = decision_refusal_code(r);
		f.status = 200;
		api_log(c, LOG_LEVEL_NOTICE, "approval.refused", &f);
		snprintf(text, sizeof(text), "%s: %s", r->heading, r->message);
		reply(c, t, p, a->id, CHAT_SLACK_EPHEMERAL, text);
	} else {
		decided_text(&out, subject, text, sizeof(text));
		reply(c, t, p, a->id, out.d.final ? CHAT_SLACK_REPLACE : CHAT_SLACK_ADD, text);
		decision_logged(c, a, &in, &out, &f);
	}
out:
	decision_out_clear(&out);
	api_card_draft_clear(&dr);
	json_decref(run);
}

/* A press of Approve or Reject by a signed request. */
static void
pressed(struct api_call *c, const struct config_target *t, const struct chat_slack_press *p)
{
	const struct http_request *door = c->req;
	struct http_request vouched = *c->req;
	struct gate_approval a = { 0 };
	unsigned char hash[32];
	char subject[321], groups[4096];
	enum og_rc grc;

	if (!person(c, t, p, subject, sizeof(subject), groups, sizeof(groups))) {
		api_log(c, LOG_LEVEL_NOTICE, "chat.unlinked",
		        &(struct log_fields){ .target = t->name, .approval_id = p->approval_id,
		                              .reason = "unlinked",
		                              .detail = "a Slack user the user map does not name" });
		reply(c, t, p, NULL, CHAT_SLACK_EPHEMERAL,
		      "Your Slack account is not linked to an approver of oncegate, so nothing was "
		      "decided. Ask the site's operator to add you to the Slack user map, or decide "
		      "on the page (Open).");
		return;
	}
	grc = gate_find_id(c->ctx->db, p->approval_id, hash, &a);
	if (grc == OG_UNAVAILABLE) {
		api_fail(c, OG_UNAVAILABLE);
		return;
	}
	if (grc != OG_OK) {
		api_log(c, LOG_LEVEL_NOTICE, "approval.refused",
		        &(struct log_fields){ .approval_id = p->approval_id, .actor = subject,
		                              .reason = "unknown_approval" });
		reply(c, t, p, NULL, CHAT_SLACK_EPHEMERAL, "This approval does not exist (any more).");
		goto out;
	}
	snprintf(c->key, sizeof(c->key), "%s", a.key);
	/* from here the request acts for the person the map names */
	vouched.remote_user = subject;
	vouched.auth_groups = groups[0] != '\0' ? groups : NULL;
	c->req = &vouched;
	decide(c, t, p, hash, &a, subject);
	c->req = door;
out:
	digest_wipe(hash, sizeof(hash));
	gate_approval_clear(&a);
}

void
api_chat_slack_interactions(struct api_call *c)
{
	const struct config_target *t;
	struct chat_slack_press p;
	char why[160];

	if (c->req->body_too_large || c->req->body_len > (size_t)c->ctx->cfg->max_body_bytes) {
		api_reject(c, "body_too_large", "the body is larger than max_body_bytes", NULL);
		return;
	}
	if ((t = authentic(c)) == NULL)
		return;
	if (!http_is_form(c->req->content_type)) {
		api_reject(c, "unsupported_media_type",
		           "the body must be sent as Content-Type: application/x-www-form-urlencoded",
		           NULL);
		return;
	}
	switch (chat_slack_read(c->req->body, c->req->body_len, &p, why, sizeof(why))) {
	case CHAT_SLACK_MALFORMED:
		api_reject(c, "invalid_field", why, "payload");
		return;
	case CHAT_SLACK_OTHER:
		/* Open (a link), or nothing of ours: nothing to do */
		http_json(c->resp, 200, json_pack("{s:b}", "ok", 1));
		return;
	case CHAT_SLACK_PRESS:
		pressed(c, t, &p);
		break;
	}
	digest_wipe(p.response_url, sizeof(p.response_url));
}
