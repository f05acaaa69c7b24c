/*
 * dispatch_notify.c — the dispatcher's side of approval notifications: the
 * link minted right before a notice is sent (its SHA-256 replaces the
 * challenge's, so the link of the notice before stops working, and the raw
 * token lives only in the message that goes out), and the janitor's
 * reminders and escalations. SQL: gate.c and outbox.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "digest.h"
#include "dispatch_int.h"
#include "dispatch_tick.h"
#include "gate.h"
#include "log.h"
#include "metrics.h"
#include "notice.h"
#include "notify.h"
#include "token.h"

enum notify_prep
dispatch_notify_prepare(struct db *db, const struct config *cfg, const struct provider *pv,
                        const struct outbox_job *j, char token[TOKEN_TEXT_LEN + 1],
                        char **text, struct provider_attempt *at)
{
	json_t *notice = j->payload != NULL ? json_loads(j->payload, 0, NULL) : NULL;
	const char *id = json_string_value(json_object_get(notice, "approval_id"));
	unsigned char hash[TOKEN_HASH_LEN];
	json_t *msg = NULL;
	struct buf link;
	enum notify_prep rc = NOTIFY_PREP_RETRY;
	enum og_rc grc;
	char why[160];

	*text = NULL;
	token[0] = '\0';
	buf_init(&link, 4096);
	if (id == NULL) {
		snprintf(why, sizeof(why), "the notice names no challenge");
		goto refuse;
	}
	if (cfg->public_url == NULL || cfg->public_url[0] == '\0') {
		snprintf(why, sizeof(why), "public_url is not configured: no link can be made");
		goto refuse;
	}
	if (token_new(token, hash) != 0)
		goto out;
	grc = gate_mint(db, id, hash);
	digest_wipe(hash, sizeof(hash));
	if (grc == OG_NOT_PENDING) {
		rc = NOTIFY_PREP_MOOT;
		goto out;
	}
	if (grc != OG_OK)
		goto out;
	if (buf_printf(&link, "%s/approve/%s", cfg->public_url, token) != 0) {
		snprintf(why, sizeof(why), "the approval link is too long");
		goto refuse;
	}
	msg = pv->notice != NULL
	          ? pv->notice(notice, link.data, j->client, why, sizeof(why))
	          : notice_message(notice, link.data, j->client, pv->mail, why, sizeof(why));
	if (msg == NULL)
		goto refuse;
	*text = canon_dumps(msg, JSON_COMPACT);
	rc = *text != NULL ? NOTIFY_PREP_SEND : NOTIFY_PREP_RETRY;
	goto out;
refuse:
	snprintf(at->invalid_reason, sizeof(at->invalid_reason), "%s", why);
	at->invalid = true;
	at->duration_ms = 1;
	at->evidence = json_pack("{s:s, s:b}", "invalid", why, "request_sent", 0);
	rc = NOTIFY_PREP_REFUSED;
out:
	if (link.data != NULL)
		digest_wipe(link.data, link.len);
	buf_free(&link);
	json_decref(msg);
	json_decref(notice);
	return rc;
}

/* Replaces every occurrence of token in s (a JSON string's text) with
 * "[link]"; NULL when it holds none. */
static char *
scrub_text(const char *s, const char *token)
{
	size_t tl = strlen(token);
	const char *p = s, *hit;
	struct buf b;

	if (tl == 0 || strstr(s, token) == NULL)
		return NULL;
	buf_init(&b, strlen(s) + 64);
	while ((hit = strstr(p, token)) != NULL) {
		if (buf_append(&b, p, (size_t)(hit - p)) != 0 || buf_puts(&b, "[link]") != 0)
			break;
		p = hit + tl;
	}
	if (buf_puts(&b, p) != 0) {
		buf_free(&b);
		return strdup("[scrubbed]");
	}
	return buf_steal(&b);
}

/* A string member m: scrubbed in place; anything else: walked. */
static void
scrub_value(json_t *m, const char *token)
{
	char *clean;

	if (json_is_string(m)) {
		if ((clean = scrub_text(json_string_value(m), token)) != NULL) {
			json_string_set(m, clean);
			free(clean);
		}
		return;
	}
	dispatch_notify_scrub(m, token);
}

void
dispatch_notify_scrub(json_t *v, const char *token)
{
	const char *k;
	json_t *m;
	size_t i;

	if (token == NULL || token[0] == '\0' || v == NULL)
		return;
	if (json_is_object(v))
		json_object_foreach(v, k, m)
			scrub_value(m, token);
	else if (json_is_array(v))
		json_array_foreach(v, i, m)
			scrub_value(m, token);
}

void
dispatch_notify_moot(struct dispatch_shared *s, struct db *db, const struct outbox_job *j)
{
	if (outbox_cancel_claimed(db, j->id, s->owner, "challenge_not_pending") == OG_OK)
		dispatch_log_effect(LOG_LEVEL_INFO, "approval.notify_skipped", j, EFFECT_SENDING,
		                    EFFECT_CANCELLED, NULL, NULL, "challenge_not_pending", 0,
		                    "the challenge was decided, voided, revoked or expired before "
		                    "its notice went out");
}

/* ---- the janitor: reminders and escalations ------------------------------ */

static void
log_notice(const char *event, const struct gate_notice *n, const char *effect_id,
           const char *detail)
{
	struct log_fields f = { .client = n->client, .key = n->key, .approval_id = n->id,
		                .effect_id = effect_id, .actor = "dispatcher", .detail = detail };

	log_event(LOG_LEVEL_INFO, event, &f);
}

void
dispatch_tick_remind(struct db *db)
{
	struct gate_notices due = { 0 };
	char (*eids)[OUTBOX_ID_LEN] = NULL;
	int i;

	if (db_begin(db) != DB_OK)
		return;
	if (gate_due_reminders(db, DISPATCH_TICK_BATCH, &due) != OG_OK)
		goto fail;
	if (due.n == 0) {
		db_rollback(db);
		goto out;
	}
	if ((eids = calloc((size_t)due.n, sizeof(*eids))) == NULL)
		goto fail;
	for (i = 0; i < due.n; i++)
		if (notify_enqueue(db, &due.v[i], NOTIFY_REMINDER, eids[i]) != OG_OK)
			goto fail;
	if (db_commit(db) != DB_OK)
		goto out;
	for (i = 0; i < due.n; i++) {
		log_notice("approval.reminded", &due.v[i], eids[i],
		           "nobody of this approver entry has decided: told again, with a new "
		           "link");
		metrics_count(METRICS_APPROVAL_REMINDED);
	}
	goto out;
fail:
	db_rollback(db);
	log_event(LOG_LEVEL_ERROR, "approval.remind_failed",
	          &(struct log_fields){ .detail = db_error(db), .actor = "dispatcher" });
out:
	free(eids);
	gate_notices_clear(&due);
}

/* One run's escalation in one transaction: every entry of escalate_to gets
 * a challenge of its own and, when it has a notify entry, its notice. */
static void
escalate_run(struct db *db, const struct gate_run *r)
{
	long long client_id = r->client_id;
	const char *key = r->key;
	struct gate_notices taken = { 0 };
	struct gate_notice *t, added = { 0 };
	const json_t *entry;
	json_t *logged = json_array();
	unsigned char hash[TOKEN_HASH_LEN];
	char token[TOKEN_TEXT_LEN + 1], id[GATE_ID_LEN], exp[GATE_TS_LEN], eid[OUTBOX_ID_LEN];
	size_t i;

	if (logged == NULL || db_begin(db) != DB_OK)
		goto out;
	if (gate_escalate_take(db, client_id, key, &taken) != OG_OK)
		goto fail;
	t = taken.n > 0 ? &taken.v[0] : NULL;
	if (t == NULL || !t->nobody_decided) {
		/* someone decided, or nothing is pending: only taken */
		if (db_commit(db) != DB_OK)
			db_rollback(db);
		goto out;
	}
	json_array_foreach(t->escalate_to, i, entry) {
		const char *approver = json_string_value(json_object_get(entry, "approver"));
		const json_t *notify = json_object_get(entry, "notify");

		if (approver == NULL)
			continue;
		/* the token of a challenge nobody has a link to yet: its first
		 * notice mints the one that works */
		if (token_new(token, hash) != 0)
			goto fail;
		digest_wipe(token, sizeof(token));
		if (gate_create_escalated(db, t->id, approver, json_is_object(notify) ? notify : NULL,
		                          hash, id, exp) != OG_OK)
			goto fail;
		eid[0] = '\0';
		if (json_is_object(notify)) {
			added = *t;
			added.id = id;
			added.approver = approver;
			added.expires_at = exp;
			added.notify = json_deep_copy(notify);
			if (added.notify == NULL ||
			    notify_enqueue(db, &added, NOTIFY_ESCALATION, eid) != OG_OK) {
				json_decref(added.notify);
				goto fail;
			}
			json_decref(added.notify);
		}
		json_array_append_new(logged, json_pack("{s:s, s:s, s:s}", "id", id, "approver",
		                                        approver, "effect", eid));
	}
	if (db_commit(db) != DB_OK)
		goto out;
	json_array_foreach(logged, i, entry) {
		struct log_fields f = {
			.client = t->client, .key = key,
			.approval_id = json_string_value(json_object_get(entry, "id")),
			.actor = "dispatcher",
			.detail = "the run was not decided in time: this approver entry was added",
		};
		const char *e = json_string_value(json_object_get(entry, "effect"));

		f.effect_id = e != NULL && e[0] ? e : NULL;
		log_event(LOG_LEVEL_NOTICE, "approval.escalated", &f);
		metrics_count(METRICS_APPROVAL_ESCALATED);
	}
	goto out;
fail:
	db_rollback(db);
	log_event(LOG_LEVEL_ERROR, "approval.escalate_failed",
	          &(struct log_fields){ .key = key, .detail = db_error(db), .actor = "dispatcher" });
out:
	gate_notices_clear(&taken);
	json_decref(logged);
}

void
dispatch_tick_escalate(struct db *db)
{
	dispatch_each_run(db, gate_due_escalations, escalate_run);
}
