/*
 * notify.c — an approval notice: what the outbox holds (notify_enqueue, a
 * use case over the outbox's functions) and the message the dispatcher
 * makes of it with a fresh link (notify_message). See notify.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "neutralise.h"
#include "contract.h"
#include "notify.h"

static const char *const why_names[] = { "new", "reminder", "escalation", "resend" };

const char *
notify_why_name(enum notify_why why)
{
	return (unsigned)why < sizeof(why_names) / sizeof(why_names[0]) ? why_names[why] : "new";
}

static int
set_str(json_t *o, const char *name, const char *v)
{
	return v != NULL ? json_object_set_new(o, name, json_string(v)) : 0;
}

/* The card's summary: the effect's type, target and (mail) subject. */
static json_t *
summary_of(const json_t *effect)
{
	const json_t *payload = json_object_get(effect, "payload");
	const json_t *subject = json_object_get(payload, "subject");
	json_t *s = json_object();

	if (s == NULL)
		return NULL;
	if (set_str(s, "type", json_string_value(json_object_get(effect, "type"))) != 0 ||
	    set_str(s, "target", json_string_value(json_object_get(effect, "target"))) != 0 ||
	    (json_is_string(subject) && set_str(s, "subject", json_string_value(subject)) != 0)) {
		json_decref(s);
		return NULL;
	}
	return s;
}

enum og_rc
notify_enqueue(struct db *db, const struct gate_notice *n, enum notify_why why,
               char effect_id[OUTBOX_ID_LEN])
{
	const json_t *to = json_object_get(n->notify, "to");
	const char *target = json_string_value(json_object_get(n->notify, "target"));
	json_t *p = json_object(), *summary = summary_of(n->effect);
	char hash[CANON_HASH_LEN], nb[OUTBOX_TS_LEN];
	char *dumped = NULL, *canon = NULL;
	struct outbox_effect e = { 0 };
	enum og_rc rc = OG_ERROR;
	size_t clen = 0;
	int slot;

	if (p == NULL || summary == NULL || target == NULL)
		goto out;
	if (set_str(p, "approval_id", n->id) != 0 || set_str(p, "approver", n->approver) != 0 ||
	    set_str(p, "why", notify_why_name(why)) != 0 ||
	    set_str(p, "contract", n->contract) != 0 || set_str(p, "key", n->key) != 0 ||
	    set_str(p, "requested_by", n->requested_by) != 0 ||
	    set_str(p, "expires_at", n->expires_at) != 0 ||
	    json_object_set(p, "summary", summary) != 0 ||
	    (to != NULL && json_object_set_new(p, "to", json_deep_copy(to)) != 0))
		goto out;
	dumped = canon_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
	if (dumped == NULL ||
	    canon_json(CANON_AS_WRITTEN, dumped, strlen(dumped), &canon, &clen) != CANON_OK)
		goto out;
	canon_hash(canon, clen, hash);
	if ((rc = outbox_next_slot(db, n->client_id, n->key, NOTIFY_EFFECT_TYPE, &slot)) != OG_OK)
		goto out;
	e.client_id = n->client_id;
	e.key = n->key;
	e.type = NOTIFY_EFFECT_TYPE;
	e.target = target;
	e.payload = canon;
	e.payload_hash = hash;
	e.approval_id = n->id;
	e.slot = slot;
	rc = outbox_enqueue(db, &e, effect_id, nb);
out:
	json_decref(p);
	json_decref(summary);
	free(dumped);
	free(canon);
	return rc;
}

/* The approver entries an escalation adds, with their notify entries:
 * [{"approver", "notify"?}], or NULL when the contract escalates to nobody. */
static json_t *
escalation_entries(const struct contract *k)
{
	json_t *a;
	size_t i;

	if (contract_escalate_count(k) == 0)
		return NULL;
	a = json_array();
	for (i = 0; a != NULL && i < contract_escalate_count(k); i++) {
		const char *who = contract_escalate_to(k, i);
		const json_t *n = contract_notify_entry(k, who);
		json_t *e = n != NULL ? json_pack("{s:s, s:O}", "approver", who, "notify", n)
		                      : json_pack("{s:s}", "approver", who);

		if (e == NULL || json_array_append_new(a, e) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

enum og_rc
notify_challenge(struct db *db, const struct contract *k, const struct notify_challenge *c)
{
	const json_t *entry = contract_notify_entry(k, c->approver);
	json_t *escalate = escalation_entries(k), *effect = NULL;
	struct gate_notice n = { 0 };
	char eid[OUTBOX_ID_LEN];
	enum og_rc rc;

	if (contract_escalate_count(k) > 0 && escalate == NULL)
		return OG_ERROR;
	rc = gate_set_notify(db, c->id, entry, contract_remind_after_seconds(k),
	                     contract_escalate_after_seconds(k), escalate);
	json_decref(escalate);
	if (rc != OG_OK || entry == NULL)
		return rc;
	effect = c->effect != NULL ? json_loads(c->effect, 0, NULL) : NULL;
	n.id = c->id;
	n.client_id = c->client_id;
	n.key = c->key;
	n.approver = c->approver;
	n.requested_by = c->requested_by;
	n.expires_at = c->expires_at;
	n.contract = contract_name(k);
	n.notify = json_deep_copy(entry);
	n.effect = effect;
	rc = n.notify != NULL ? notify_enqueue(db, &n, NOTIFY_NEW, eid) : OG_ERROR;
	json_decref(n.notify);
	json_decref(effect);
	return rc;
}

/* An effect type or target: a name the contract and the configuration
 * admit ([a-z0-9_.-], "email.send") as it is; anything else neutralised. */
static int
put_name(struct buf *b, const char *s, enum neutralise_to to)
{
	size_t n = strlen(s);

	if (n > 0 && n <= 64 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_.-") == n)
		return buf_puts(b, s);
	return neutralise_line(b, s, 64, to);
}

/* "email.send to demo_smtp: “subject”" (cut at max characters of the
 * subject), the subject (the model's) neutralised. */
static int
put_what(struct buf *b, const json_t *summary, size_t max, enum neutralise_to to)
{
	const char *type = json_string_value(json_object_get(summary, "type"));
	const char *target = json_string_value(json_object_get(summary, "target"));
	const char *subject = json_string_value(json_object_get(summary, "subject"));

	if (put_name(b, type != NULL ? type : "an effect", to) != 0 || buf_puts(b, " to ") != 0 ||
	    put_name(b, target != NULL ? target : "?", to) != 0)
		return -1;
	if (subject == NULL)
		return 0;
	return buf_puts(b, ": \xe2\x80\x9c") != 0 || neutralise_line(b, subject, max, to) != 0 ||
	               buf_puts(b, "\xe2\x80\x9d") != 0
	           ? -1
	           : 0;
}

/* The chat body's summary: the card's, each text neutralised. */
static json_t *
chat_summary(const json_t *summary)
{
	json_t *out = json_object(), *v;
	const char *name;
	struct buf t;
	int bad = 0;

	if (out == NULL)
		return NULL;
	buf_init(&t, 16384);
	json_object_foreach((json_t *)(uintptr_t)summary, name, v) {
		if (!json_is_string(v))
			continue;
		buf_reset(&t);
		bad |= (strcmp(name, "subject") == 0
		            ? neutralise_line(&t, json_string_value(v), 1000, NEUTRALISE_CHAT)
		            : put_name(&t, json_string_value(v), NEUTRALISE_CHAT)) != 0 ||
		       json_object_set_new(out, name, json_string(t.data != NULL ? t.data : "")) != 0;
	}
	buf_free(&t);
	if (bad) {
		json_decref(out);
		return NULL;
	}
	return out;
}

static const char *
lead_of(const char *why)
{
	if (why != NULL && strcmp(why, "reminder") == 0)
		return "Reminder: approval needed";
	if (why != NULL && strcmp(why, "escalation") == 0)
		return "Escalated to you: approval needed";
	return "Approval needed";
}

json_t *
notify_message(const json_t *notice, const char *link, const char *client, bool mail,
               char *why, size_t whylen)
{
	const json_t *to = json_object_get(notice, "to"), *summary = json_object_get(notice, "summary");
	const char *reason = json_string_value(json_object_get(notice, "why"));
	const char *approver = json_string_value(json_object_get(notice, "approver"));
	const char *asked = json_string_value(json_object_get(notice, "requested_by"));
	const char *expires = json_string_value(json_object_get(notice, "expires_at"));
	const char *contract = json_string_value(json_object_get(notice, "contract"));
	const char *key = json_string_value(json_object_get(notice, "key"));
	enum neutralise_to how = mail ? NEUTRALISE_MAIL : NEUTRALISE_CHAT;
	struct buf subject, body;
	json_t *out = NULL, *shown = NULL;
	int bad = 0;

	if (!json_is_object(summary) || link == NULL || approver == NULL || key == NULL) {
		snprintf(why, whylen, "the notice lacks its summary, approver or run key");
		return NULL;
	}
	if (mail && !json_is_array(to)) {
		snprintf(why, whylen, "a mail target needs the notify entry's \"to\" addresses");
		return NULL;
	}
	if (!mail && to != NULL) {
		snprintf(why, whylen, "\"to\" addresses need a mail target, not a webhook");
		return NULL;
	}
	buf_init(&subject, 4096);
	buf_init(&body, 65536);
	/* The link first, alone on its line, before any quoted text: whatever
	 * the model wrote comes after it, neutralised (neutralise.h). */
	bad |= buf_puts(&subject, lead_of(reason)) != 0 || buf_puts(&subject, ": ") != 0 ||
	       put_what(&subject, summary, NOTIFY_SUBJECT_QUOTE_MAX, NEUTRALISE_MAIL) != 0;
	bad |= buf_puts(&body, lead_of(reason)) != 0 || buf_puts(&body, ".\n\n") != 0 ||
	       buf_puts(&body, "Read the request and decide here (sign-in required):\n") != 0 ||
	       buf_puts(&body, link) != 0 || buf_puts(&body, "\n\n") != 0;
	bad |= buf_puts(&body, "What:       ") != 0 || put_what(&body, summary, 1000, how) != 0 ||
	       buf_puts(&body, "\n") != 0;
	bad |= buf_puts(&body, "Asked by:   ") != 0 ||
	       neutralise_line(&body, asked != NULL ? asked : "the workflow", 256, how) != 0;
	if (client != NULL && client[0] != '\0')
		bad |= buf_puts(&body, " (API client ") != 0 ||
		       neutralise_line(&body, client, 72, how) != 0 || buf_puts(&body, ")") != 0;
	bad |= buf_puts(&body, "\nRun:        ") != 0 || neutralise_line(&body, key, 256, how) != 0;
	if (contract != NULL)
		bad |= buf_puts(&body, " (contract ") != 0 ||
		       neutralise_line(&body, contract, 64, how) != 0 || buf_puts(&body, ")") != 0;
	bad |= buf_puts(&body, "\nFor:        ") != 0 ||
	       neutralise_line(&body, approver, 256, how) != 0;
	bad |= buf_puts(&body, "\nExpires:    ") != 0 ||
	       neutralise_line(&body, expires != NULL ? expires : "?", 64, how) != 0;
	if (reason != NULL && strcmp(reason, "reminder") == 0)
		bad |= buf_puts(&body, "\n\nThe request still waits for a decision. This reminder "
		                       "carries a new link; the link of the earlier message no "
		                       "longer works.") != 0;
	else if (reason != NULL && strcmp(reason, "escalation") == 0)
		bad |= buf_puts(&body, "\n\nThe request was not decided in time, so it now comes to "
		                       "you as well.") != 0;
	else if (reason != NULL && strcmp(reason, "resend") == 0)
		bad |= buf_puts(&body, "\n\nThis message was sent again with a new link; the link "
		                       "of the earlier message no longer works.") != 0;
	bad |= buf_puts(&body, "\n\nOnly the link at the top is oncegate's: links and markup in "
	                       "the quoted request are shown inert (hxxps[:]//, [.]). Opening the "
	                       "link changes nothing; only the buttons on the page decide. "
	                       "Approving sends the effect once. The link is for you alone: do "
	                       "not forward it.\n") != 0;
	if (bad || subject.overflow || body.overflow) {
		snprintf(why, whylen, "the message could not be made");
		goto out;
	}
	if (mail)
		out = json_pack("{s:O, s:s, s:s}", "to", to, "subject", subject.data, "body",
		                body.data);
	else
		out = (shown = chat_summary(summary)) == NULL
		          ? NULL
		          : json_pack("{s:s, s:O, s:s}", "text", body.data, "summary", shown, "link",
		                      link);
	if (out == NULL)
		snprintf(why, whylen, "out of memory");
out:
	json_decref(shown);
	buf_free(&subject);
	buf_free(&body);
	return out;
}
