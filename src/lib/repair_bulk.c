/*
 * repair_bulk.c — bulk resume: a job of many resumes (resume_job_items),
 * checked first, then run one item at a time by the CLI's job runner; each
 * item is one repair_resume_one transaction that also marks the item done.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "ledger.h"
#include "outbox.h"
#include "repair.h"
#include "repair_int.h"

enum og_rc
repair_bulk_check(struct db *db, struct repair_bulk_item *items, int n)
{
	const char **ids = calloc((size_t)n + 1, sizeof(*ids));
	struct jobs_resume_check res;
	enum og_rc rc;
	int i;

	if (ids == NULL)
		return OG_ERROR;
	for (i = 0; i < n; i++) {
		if (!repair_is_uuid(items[i].given)) {
			free(ids);
			return OG_BAD_INPUT;
		}
		ids[i] = items[i].given;
	}
	rc = jobs_resume_check(db, ids, n, &res);
	free(ids);
	if (rc != OG_OK)
		return rc;
	if (res.n != n) {
		jobs_resume_check_clear(&res);
		return OG_ERROR;
	}
	for (i = 0; i < n; i++) {
		struct repair_bulk_item *it = &items[i];
		const struct jobs_resume_seen *seen = &res.v[i];
		const char *eid = seen->effect_id;
		int run = seen->run_state;
		const char *replayed_as = seen->replayed_as;
		bool callback;
		int state;

		it->ok = false;
		if (eid == NULL) {
			repair_copy(it->effect_id, sizeof(it->effect_id), "");
			snprintf(it->why, sizeof(it->why), "no effect or dead letter has the id %s",
			         it->given);
			continue;
		}
		repair_copy(it->effect_id, sizeof(it->effect_id), eid);
		repair_copy(it->client_name, sizeof(it->client_name), seen->client_name);
		repair_copy(it->key, sizeof(it->key), seen->idempotency_key);
		repair_copy(it->target, sizeof(it->target), seen->target);
		repair_copy(it->type, sizeof(it->type), seen->effect_type);
		repair_copy(it->state, sizeof(it->state), seen->state);
		callback = strcmp(it->type, "decision.callback") == 0;
		state = outbox_state_parse(it->state);
		/* the order of repair_resume's checks, so the verdicts agree */
		if (state != EFFECT_FAILED)
			snprintf(it->why, sizeof(it->why), "not known undelivered: the effect is %s%s",
			         it->state,
			         state == EFFECT_UNKNOWN     ? " (reconcile first)"
			         : state == EFFECT_COMPLETED ? " (it was delivered)"
			         : state == EFFECT_CANCELLED ? " (it was rejected)"
			                                     : " (nothing to resume)");
		else if (replayed_as != NULL)
			snprintf(it->why, sizeof(it->why), "the run was replayed as \"%.200s\": never "
			         "resumed", replayed_as);
		else if (!callback && run != RUN_APPROVED)
			snprintf(it->why, sizeof(it->why), "the run is %s, not approved",
			         run >= 0 ? ledger_state_name((enum run_state)run) : "?");
		else if (!seen->undelivered)
			snprintf(it->why, sizeof(it->why), "not known undelivered: a send attempt may "
			         "have reached the provider (reconcile first)");
		else {
			it->ok = true;
			snprintf(it->why, sizeof(it->why), "would resume, same key %s",
			         seen->provider_key);
		}
	}
	jobs_resume_check_clear(&res);
	return OG_OK;
}

enum og_rc
repair_bulk_create(struct db *db, const char *source, double rate, const struct repair_who *who,
                   const struct repair_bulk_item *items, int n, long long *job_id)
{
	struct repair_out out;
	json_t *details = NULL;
	enum og_rc rc;
	int i;

	memset(&out, 0, sizeof(out));
	*job_id = 0;
	if (db_begin(db) != DB_OK)
		return OG_UNAVAILABLE;
	if ((rc = jobs_resume_create(db, who->reason, source, rate, job_id)) != OG_OK)
		goto out;
	for (i = 0; i < n; i++)
		if ((rc = jobs_resume_item(db, *job_id, items[i].seq, items[i].effect_id,
		                           items[i].given)) != OG_OK)
			goto out;
	details = json_pack("{s:I, s:s, s:i, s:f}", "job_id", (json_int_t)*job_id, "source",
	                    source, "items", n, "rate_per_second", rate);
	rc = repair_record_action(db, who, "resume.job_created", &out, details);
out:
	json_decref(details);
	return repair_finish(db, rc);
}

enum og_rc
repair_bulk_next(struct db *db, long long job_id, int *seq, char effect_id[REPAIR_ID_LEN],
                 bool *stop)
{
	return jobs_resume_next(db, job_id, seq, effect_id, stop);
}

enum og_rc
repair_bulk_resume(struct db *db, long long job_id, int seq, const char *effect_id,
                   const struct repair_who *who, struct repair_out *out)
{
	return repair_resume_one(db, effect_id, NULL, who, job_id, seq, out);
}

enum og_rc
repair_bulk_refuse(struct db *db, long long job_id, int seq, const char *why)
{
	return jobs_resume_refuse(db, job_id, seq, why);
}
