/*
 * contract_notify.c — whom a contract's gate tells, and when: "notify"
 * (per approver entry: mail addresses on a mail target, or a chat webhook
 * target), "remind_after_seconds" (the approvers who have not decided are
 * told again) and "escalate_after_seconds" with "escalate_to" (approver
 * entries added when nobody decided in time).
 *
 *   "notify": {
 *     "group:support":     {"target": "approvers_mail", "to": ["support-leads@example.com"]},
 *     "lead@example.com":  {"target": "team_chat"}
 *   },
 *   "remind_after_seconds": 3600,
 *   "escalate_after_seconds": 14400,
 *   "escalate_to": ["group:support-managers"]
 *
 * With "notify", every entry of approvers and escalate_to has one (nobody
 * is left untold) and every key names one of them, written the same. "to"
 * (1..OG_NOTIFY_RCPT_MAX plain addresses) makes a mail notification; an
 * entry without it is a chat webhook (the target receives a
 * Slack/Teams-compatible JSON body). The target must be configured with a
 * kind that fits (mail addresses on an smtp target, a chat webhook on an
 * http target): contract_notify_check refuses a contract directory that
 * names a missing or unfitting target where contracts meet the
 * configuration (the responder's start and reload, `oncegatectl config
 * check`), so that no notice becomes a dead letter at send time.
 * Both times must lie before the expiry; escalate_to and
 * escalate_after_seconds come together.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "contract_int.h"
#include "payload.h"
#include "provider.h"

static const char *const entry_members[] = { "target", "to", NULL };

static bool
target_name_ok(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > OG_CONTRACT_NAME_MAX || strlen(s) != n)
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '.' || s[i] == '-'))
			return false;
	return true;
}

static bool
named(const struct contract *c, const char *key)
{
	size_t i;

	for (i = 0; i < c->gate.napprovers; i++)
		if (strcmp(c->gate.approvers[i], key) == 0)
			return true;
	for (i = 0; i < c->notify.nescalate; i++)
		if (strcmp(c->notify.escalate_to[i], key) == 0)
			return true;
	return false;
}

static bool
entry_load(struct jload *ld, const char *key, const json_t *e)
{
	const json_t *target = json_object_get(e, "target"), *to = json_object_get(e, "to"), *v;
	struct jptr_mark m = jptr_push_str(&ld->at, key), mt;
	size_t i, k;

	if (!json_is_object(e))
		return jload_fail(ld, "must be an object {\"target\", \"to\"?}");
	if (!jload_members(ld, e, entry_members, "unknown notify member"))
		return false;
	if (!json_is_string(target) || !target_name_ok(json_string_value(target),
	                                               json_string_length(target)))
		return jload_fail_at(ld, "target", "must name a configured target "
		                     "([a-z0-9_.-], 1..%d bytes; required)", OG_CONTRACT_NAME_MAX);
	if (to != NULL) {
		if (!json_is_array(to) || json_array_size(to) == 0 ||
		    json_array_size(to) > OG_NOTIFY_RCPT_MAX)
			return jload_fail_at(ld, "to", "must be an array of 1..%d mail addresses",
			                     OG_NOTIFY_RCPT_MAX);
		mt = jptr_push_str(&ld->at, "to");
		json_array_foreach(to, i, v) {
			struct jptr_mark mi = jptr_push_index(&ld->at, i);

			if (!json_is_string(v) || !payload_mail_address_ok(json_string_value(v)))
				return jload_fail(ld, "must be a plain address local@domain in ASCII");
			for (k = 0; k < i; k++)
				if (strcmp(json_string_value(json_array_get(to, k)),
				           json_string_value(v)) == 0)
					return jload_fail(ld, "duplicate of entry %zu", k);
			jptr_pop(&ld->at, mi);
		}
		jptr_pop(&ld->at, mt);
	}
	jptr_pop(&ld->at, m);
	return true;
}

bool
contract_notify_load(struct jload *ld, struct contract *c, const json_t *gate)
{
	json_t *notify = json_object_get(gate, "notify"), *e;
	const char *key;
	struct jptr_mark m;
	size_t i;

	if (!jload_int(ld, gate, "remind_after_seconds", 1, c->gate.expires_seconds - 1, 0,
	               &c->notify.remind_after_seconds) ||
	    !jload_int(ld, gate, "escalate_after_seconds", 1, c->gate.expires_seconds - 1, 0,
	               &c->notify.escalate_after_seconds))
		return false;
	if ((c->notify.escalate_after_seconds > 0) != (c->notify.nescalate > 0))
		return jload_fail_at(ld, c->notify.nescalate > 0 ? "escalate_after_seconds"
		                                                 : "escalate_to",
		                     "escalate_to and escalate_after_seconds come together");
	for (i = 0; i < c->notify.nescalate; i++) {
		size_t k;

		for (k = 0; k < c->gate.napprovers; k++)
			if (strcmp(c->gate.approvers[k], c->notify.escalate_to[i]) == 0)
				return jload_fail_at(ld, "escalate_to", "\"%s\" is an approver already",
				                     c->notify.escalate_to[i]);
	}
	if (notify == NULL) {
		if (c->notify.remind_after_seconds > 0)
			return jload_fail_at(ld, "remind_after_seconds",
			                     "reminds nobody without notify");
		return true;
	}
	if (!json_is_object(notify) || json_object_size(notify) == 0)
		return jload_fail_at(ld, "notify", "must be an object of approver entries");
	m = jptr_push_str(&ld->at, "notify");
	json_object_foreach(notify, key, e) {
		if (!named(c, key))
			return jload_fail(ld, "\"%s\" is not an entry of approvers or escalate_to "
			                  "(written the same)", key);
		if (!entry_load(ld, key, e))
			return false;
	}
	for (i = 0; i < c->gate.napprovers; i++)
		if (json_object_get(notify, c->gate.approvers[i]) == NULL)
			return jload_fail(ld, "approver \"%s\" has no entry: nobody would tell them",
			                  c->gate.approvers[i]);
	for (i = 0; i < c->notify.nescalate; i++)
		if (json_object_get(notify, c->notify.escalate_to[i]) == NULL)
			return jload_fail(ld, "escalate_to \"%s\" has no entry: nobody would tell them",
			                  c->notify.escalate_to[i]);
	jptr_pop(&ld->at, m);
	c->notify.entries = notify;
	return true;
}

const struct contract_notify *
contract_notify(const struct contract *c)
{
	return &c->notify;
}

const json_t *
contract_notify_entry(const struct contract *c, const char *approver)
{
	return c->notify.entries != NULL && approver != NULL
	           ? json_object_get(c->notify.entries, approver)
	           : NULL;
}

/* Is entry's target configured with a kind that fits it? If not, why not
 * (into why). */
static bool
entry_fits(const struct config *cfg, const json_t *e, char *why, size_t len)
{
	const char *name = json_string_value(json_object_get(e, "target"));
	const struct config_target *t = name != NULL ? config_target(cfg, name) : NULL;
	bool mail = json_object_get(e, "to") != NULL;
	const struct provider *pv;
	char kinds[128];

	if (t == NULL) {
		snprintf(why, len, "target \"%s\" is not configured (no [target %s] section)",
		         name != NULL ? name : "", name != NULL ? name : "");
		return false;
	}
	pv = provider_of(t);
	if (pv != NULL && pv->mail != mail) {
		provider_kinds(mail, kinds, sizeof(kinds));
		if (mail)
			snprintf(why, len, "target \"%s\" is of kind %s: mail addresses (\"to\") "
			         "need an %s target", name, t->kind, kinds);
		else
			snprintf(why, len, "target \"%s\" is of kind %s: a chat webhook (an entry "
			         "without \"to\") needs an %s target", name, t->kind, kinds);
		return false;
	}
	return true;
}

int
contract_notify_check(const struct contract_set *set, const struct config *cfg, char *err,
                      size_t errlen)
{
	size_t i;

	for (i = 0; i < contract_count(set); i++) {
		const struct contract *c = contract_at(set, i);
		size_t k, n = c->gate.napprovers + c->notify.nescalate;
		char why[512];

		for (k = 0; c->notify.entries != NULL && k < n; k++) {
			const char *who = k < c->gate.napprovers
			                      ? c->gate.approvers[k]
			                      : c->notify.escalate_to[k - c->gate.napprovers];
			const json_t *e = json_object_get(c->notify.entries, who);

			if (e == NULL || entry_fits(cfg, e, why, sizeof(why)))
				continue;
			if (err != NULL && errlen > 0)
				snprintf(err, errlen, "contract \"%s\": gate.notify entry \"%s\": %s",
				         c->name, who, why);
			return -1;
		}
	}
	return 0;
}

int
contract_targets_check(const struct contract_set *set, const struct config *cfg, char *err,
                       size_t errlen)
{
	size_t i, k;

	for (i = 0; i < contract_count(set); i++) {
		const struct contract *c = contract_at(set, i);

		for (k = 0; k < c->ntargets; k++) {
			if (config_target(cfg, c->targets[k]) != NULL)
				continue;
			if (err != NULL && errlen > 0)
				snprintf(err, errlen, "%s.json: /effects/allowed_targets: target \"%s\" "
				         "is not configured (no [target %s] section): every effect "
				         "to it would be refused", c->name, c->targets[k],
				         c->targets[k]);
			return -1;
		}
	}
	return 0;
}
