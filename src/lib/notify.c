/*
 * notify.c — an approval notice: what the outbox holds (notify_enqueue, a
 * use case over the outbox's functions). The message the dispatcher makes
 * of it with a fresh link is notice.c's. See notify.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
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

/* The card's summary: the effect's type, target and (mail) subject, and
 * from the run's context what it answers (context_subject) and for whom
 * (context_customer); never the customer's message. */
static json_t *
summary_of(const json_t *effect, const json_t *context)
{
	const json_t *payload = json_object_get(effect, "payload");
	const json_t *subject = json_object_get(payload, "subject");
	json_t *s = json_object();

	if (s == NULL)
		return NULL;
	if (set_str(s, "type", json_string_value(json_object_get(effect, "type"))) != 0 ||
	    set_str(s, "target", json_string_value(json_object_get(effect, "target"))) != 0 ||
	    (json_is_string(subject) && set_str(s, "subject", json_string_value(subject)) != 0) ||
	    set_str(s, "context_subject",
	            json_string_value(json_object_get(context, "subject"))) != 0 ||
	    set_str(s, "context_customer",
	            json_string_value(json_object_get(context, "customer"))) != 0) {
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
	json_t *p = json_object(), *summary = summary_of(n->effect, n->context);
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

	if (contract_notify(k)->nescalate == 0)
		return NULL;
	a = json_array();
	for (i = 0; a != NULL && i < contract_notify(k)->nescalate; i++) {
		const char *who = contract_notify(k)->escalate_to[i];
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

	if (contract_notify(k)->nescalate > 0 && escalate == NULL)
		return OG_ERROR;
	rc = gate_set_notify(db, c->id, entry, contract_notify(k)->remind_after_seconds,
	                     contract_notify(k)->escalate_after_seconds, escalate);
	json_decref(escalate);
	if (rc != OG_OK || entry == NULL)
		return rc;
	effect = c->effect != NULL ? json_loads(c->effect, 0, NULL) : NULL;
	n.context = c->context != NULL ? json_loads(c->context, 0, NULL) : NULL;
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
	json_decref(n.context);
	json_decref(effect);
	return rc;
}
