/*
 * repair.h — what an operator may do about effects that automatic recovery
 * gave up on: read dead letters, reconcile, resume, reject,
 * and revoke approval challenges.
 *
 * Every change is one transaction that also writes its operator_actions
 * row (sql/005), so a repair and its record cannot exist without each
 * other. Every change is a compare-and-set on the state the operator saw:
 * a dispatcher, an approver or another operator acting at the same moment
 * makes the statement match nothing, and the operator is told instead of
 * being overruled silently.
 *
 * "Known not delivered" — the one condition under which `resume` sends an
 * effect again with its provider key — is defined once, in repair.c
 * (OUTBOX_KNOWN_UNDELIVERED), from the attempt history and the operators'
 * findings; docs/operate.md says it in words.
 */
#ifndef OG_REPAIR_H
#define OG_REPAIR_H

#include <stdbool.h>

#include <jansson.h>

#include "config.h"
#include "db.h"
#include "rc.h"

/* Who acts and why: both go into operator_actions and the decision log. */
struct repair_who {
	const char *operator_name;
	const char *reason;
};

#define REPAIR_ID_LEN 37
#define REPAIR_KEY_MAX 808      /* 200 characters of UTF-8, NUL */
#define REPAIR_WHY_MAX 320

/* What a change did, or why it was refused (why). */
struct repair_out {
	char why[REPAIR_WHY_MAX];
	char effect_id[REPAIR_ID_LEN];
	char approval_id[REPAIR_ID_LEN];
	char dead_letter_id[REPAIR_ID_LEN];
	char callback_id[REPAIR_ID_LEN];   /* reject KEY: the decision callback enqueued */
	char client[24];                   /* client id */
	char client_name[72];
	char key[REPAIR_KEY_MAX];
	char target[72];
	char type[72];                     /* effect type */
	char provider_key[REPAIR_KEY_MAX + 64];
	char from[24], to[24];             /* effect (or approval) state */
	char not_before[40];               /* the effect's not_before */
	char run_from[24], run_to[24];     /* empty: the run did not move */
	long long run_version;
	long long action_id;               /* the operator_actions row */
	int count;                         /* reject KEY: effects cancelled;
	                                      revoke: challenges still pending */
};

/* An effect in `unknown` or `failed`: delivered → `completed` with the
 * provider's id (and its run completed when that was the last effect);
 * not delivered → `failed`, recorded as known not delivered. expect (may
 * be NULL) is the state the operator saw. */
enum og_rc repair_reconcile(struct db *db, const char *effect, bool delivered,
                            const char *provider_id, const char *expect,
                            const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));
/* A `failed` effect known not delivered → `pending`, same provider key,
 * a fresh retry budget; the dispatchers are woken. */
enum og_rc repair_resume(struct db *db, const char *effect, const char *expect,
                         const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));
/* A `pending` or `failed` effect → `cancelled`; its run → failed_terminal
 * (a decision callback's run is completed instead when nothing else is
 * left). */
enum og_rc repair_reject_effect(struct db *db, const char *effect, const char *expect,
                                const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));
/* A run → failed_terminal with its unsent effects cancelled and its
 * pending challenges revoked; a run that was awaiting a human and has a
 * callback tells the workflow `rejected`. client_name may be NULL when the
 * key is one client's only. */
enum og_rc repair_reject_key(struct db *db, const char *client_name, const char *key,
                             const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));

/* A pending, unexpired challenge → `revoked`; out->count is how many of
 * the run's challenges are still pending. When none is left and none was
 * decided, nobody can decide the run any more: it ends as an expired
 * approval does — failed_terminal, decision expired, error_class
 * approval_revoked (out->run_to) — and a workflow waiting on it is told
 * `expired` through its callback (out->callback_id). */
enum og_rc repair_approval_revoke(struct db *db, const char *approval_id,
                                  const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));
/* A pending challenge whose approver entry is told (gate.notify) is told
 * again: a new approval.notify effect (out->effect_id), whose link the
 * dispatcher mints when it sends it, so the previous notice's link stops
 * working then. OG_WRONG_STATE (with why) for a challenge that is not
 * pending or tells nobody. */
enum og_rc repair_approval_resend(struct db *db, const char *approval_id,
                                  const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));

/* ---- bulk resume (sql/008) --------------------------------------------------
 * An explicit selection of effect or dead-letter ids becomes a job of kind
 * "resume" (replay_jobs, resume_job_items) before anything runs; each item
 * is resumed by the rule and in the transaction of repair_resume(), which
 * also marks the item done, so a stopped job is continued without doing
 * an item twice. Taking, stopping and finishing a job: replay_job_*(). */

#define REPAIR_GIVEN_MAX 40

struct repair_bulk_item {
	int seq;                           /* 1.. in the selection's order */
	char given[REPAIR_GIVEN_MAX];      /* the id as named (effect or dead letter) */
	char effect_id[REPAIR_ID_LEN];     /* "" when no such effect */
	char client_name[72];
	char key[REPAIR_KEY_MAX];
	char target[72];
	char type[72];
	char state[24];                    /* the effect's state now */
	bool ok;                           /* would be resumed */
	char why[REPAIR_WHY_MAX];          /* the verdict in words */
};

/* Fills in each item's effect and verdict (same rule as repair_resume),
 * changing nothing. OG_BAD_INPUT when a given id is not a UUID. */
enum og_rc repair_bulk_check(struct db *db, struct repair_bulk_item *items, int n)
	__attribute__((warn_unused_result));
/* Stores the job (kind resume) with its items, all pending, and the
 * operator_actions row, in one transaction. */
enum og_rc repair_bulk_create(struct db *db, const char *source, double rate,
                              const struct repair_who *who,
                              const struct repair_bulk_item *items, int n,
                              long long *job_id) __attribute__((warn_unused_result));
/* The next pending item (*seq 0 when none) and whether a stop was asked. */
enum og_rc repair_bulk_next(struct db *db, long long job_id, int *seq,
                            char effect_id[REPAIR_ID_LEN], bool *stop)
	__attribute__((warn_unused_result));
/* Resumes the item's effect and marks the item done, together or not at
 * all; a refusal changes nothing (out->why says why). */
enum og_rc repair_bulk_resume(struct db *db, long long job_id, int seq, const char *effect_id,
                              const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));
/* An item that was refused when its turn came: marked so, with why. */
enum og_rc repair_bulk_refuse(struct db *db, long long job_id, int seq, const char *why)
	__attribute__((warn_unused_result));

/* `oncegatectl cancel EFFECT`: an act_with_window effect still pending
 * before its not_before → cancelled, with the run's other effects inside
 * the window, and the run → failed_terminal (error_class cancelled), by
 * the statements of the owning client's POST /v1/runs/{key}/cancel.
 * OG_WINDOW_CLOSED after not_before (or for an effect never delayed),
 * OG_WRONG_STATE once it is sending, sent or otherwise settled. */
enum og_rc repair_cancel_window(struct db *db, const char *effect,
                                const struct repair_who *who, struct repair_out *out)
	__attribute__((warn_unused_result));


/* Is s a UUID in its text form (what the ids of effects, dead letters and
 * approvals look like)? */
bool repair_is_uuid(const char *s);

#endif
