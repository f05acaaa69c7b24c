/*
 * audit.h — answers from the database for people who must prove what
 * happened: `explain` (the four audit questions about one key,
 * with its timeline), `report` (the weekly figures) and the retention purge
 * that removes payloads and model outputs while keeping every hash, state
 * and decision, so `explain` still answers after it.
 */
#ifndef OG_AUDIT_H
#define OG_AUDIT_H

#include <stdbool.h>
#include <jansson.h>

#include "db.h"
#include "rc.h"

/* The four answers (processed, sent, approved, model), each a short
 * sentence plus the facts behind it, the replay links and the merged
 * timeline (run events, approvals, effects and their attempts, dead
 * letters, operator actions, replays). client may be NULL when the key
 * has one client. *out is a new object. */
enum og_rc audit_explain(struct db *db, const char *client, const char *key, json_t **out,
                         char *msg, size_t msglen) __attribute__((warn_unused_result));


struct audit_purge {
	long long runs;        /* runs whose payload / output / effect payload go */
	long long effects;     /* effect payloads */
	long long approvals;   /* challenge copies of the effect */
	long long attempts;    /* attempt evidence excerpts (effects that are over) */
	long long dead_letters;/* dead letters past retention_until: their snapshots */
};

/* Retention: for runs completed or failed_terminal more than
 * days ago, sets workflow_runs.payload and output to NULL, drops the
 * payload from workflow_runs.effect (type and target stay), and NULLs
 * effect_outbox.payload and approvals.effect; strips the provider's
 * answers (body excerpt, headers, SMTP reply, payload complaints) from the
 * evidence of attempts older than days of effects that are over, and
 * the same plus any payload from the snapshot of every dead letter past its
 * retention_until (marked purged_at). Each purged run gets a
 * `run.purged` timeline entry and the purge one operator_actions row, all
 * in one transaction. dry_run only counts. */
enum og_rc audit_purge(struct db *db, int days, bool dry_run, const char *operator_name,
                       const char *reason, struct audit_purge *out)
	__attribute__((warn_unused_result));

#endif
