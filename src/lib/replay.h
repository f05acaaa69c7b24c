/*
 * replay.h — controlled replay: a correction is a NEW run under a
 * key issued upstream, linked both ways to the original (run_replays), with
 * a fresh approval and, once approved through the normal page, a fresh
 * outbox row. The original run and everything hanging off it are never
 * written.
 *
 * What the new run starts as:
 *  - awaiting_human, carrying the original's model output, effect and model
 *    record, with fresh challenges for the contract's approvers — when the
 *    payload is the original's and the output still meets the contract as
 *    loaded now. A replay always goes to a person, whatever the gate mode:
 *    an operator's correction is never auto-approved.
 *  - failed_retryable, with no output — when the payload is a corrected one
 *    (the old draft was written for another input), or the original has no
 *    valid output left (rejected as invalid, purged by retention, or no
 *    longer valid under the contract). The workflow then claims the new key
 *    with the same payload (a reclaim) and drafts again through the API.
 *
 * Bulk replay runs a stored job (replay_jobs / replay_job_items): each item
 * is marked done in the transaction that replays it.
 */
#ifndef OG_REPLAY_H
#define OG_REPLAY_H

#include <stdbool.h>
#include <jansson.h>

#include "canon.h"
#include "contract.h"
#include "db.h"
#include "rc.h"

#define REPLAY_MSG_LEN 512
#define REPLAY_STATE_LEN 24

struct replay_req {
	const char *client;          /* API client name, or NULL: the key's only client */
	long long client_id;         /* or the client by id (a bulk job's), 0: by name */
	const char *key;             /* the original */
	const char *new_key;         /* issued upstream, never invented here */
	const char *operator_name;
	const char *reason;
	const char *payload;         /* corrected payload as canonical JSON, or NULL */
	const char *payload_hash;    /* its hash (canon_hash), with payload */
	const struct contract_set *contracts;
	const char *public_url;      /* base of approval links */
	long long job_id;            /* bulk: the job and item this replay settles; 0 */
	int job_seq;
	bool dry_run;                /* check everything, write nothing */
	/* Replay although a business effect of the original was sent, is
	 * being sent, is unknown, or was resumed by an operator: the operator
	 * takes responsibility for a second business effect (recorded as
	 * forced, with the reason). Never for bulk jobs; never past an effect
	 * still pending. */
	bool force;
};

struct replay_result {
	long long client_id;
	char start_state[REPLAY_STATE_LEN];
	char payload_hash[CANON_HASH_LEN];
	/* [{approval_id, approver, expires_at, url}]: url holds the raw token,
	 * to be shown once and never stored; instead of url "notified": true
	 * when the contract tells its approvers (their notices carry the
	 * links); NULL when none */
	json_t *approvals;
	char note[REPLAY_MSG_LEN];   /* why the new run starts as it does */
	char forced_past[REPLAY_MSG_LEN / 2]; /* force: the effects it went past, or "" */
	int letters;                 /* dead letters of the original now linked to it */
	char message[REPLAY_MSG_LEN];/* why it was refused */
};

void replay_result_clear(struct replay_result *r);

/* One replay in one transaction: the new run, its timeline entry, its
 * challenges, the link, the original's dead letters (replay_count, linked
 * to the new run), the job item (if any) and the operator_actions row
 * commit together or not at all. The original's row is locked (FOR UPDATE)
 * while the rules are checked, the lock `resume`, `reject` and `cancel`
 * take too: an operator path racing this one waits, then sees the replay.
 * Refused (nothing written): the original still live; an effect of it
 * still pending; OG_NEEDS_FORCE when a business effect of it was sent,
 * is sending or unknown, or was resumed, and force is not set. */
enum og_rc replay_run(struct db *db, const struct replay_req *req,
                      struct replay_result *out) __attribute__((warn_unused_result));

/* ---- bulk jobs ------------------------------------------------------------ */

struct replay_item {
	int seq;
	char *key;
	char *new_key;
	char *state;                 /* pending | done | refused (job items) */
	char *detail;
};

/* Creates the job with its items (all pending) and the operator_actions
 * row, in one transaction. Jobs and their operator_actions rows name the
 * session's role (session_user) as the operator. */
enum og_rc replay_job_create(struct db *db, long long client_id, const char *source,
                             double rate, const char *reason, const struct replay_item *items, int n, long long *job_id)
	__attribute__((warn_unused_result));
/* Takes the job for this session (advisory lock, so two runners never
 * share one job) and marks it running again; a stopped job needs resume.
 * kind is "replay" or "resume" (sql/008): a job of the other kind is
 * OG_NOT_FOUND. OG_NOT_FINISHED when another process holds it or
 * it is completed. The take, stop, finish and counts below serve both
 * kinds; operator_actions name the kind ("resume.job_stopped"). */
enum og_rc replay_job_take(struct db *db, long long job_id, const char *kind, bool resume,
                           const char *reason, long long *client_id, double *rate, char *msg, size_t msglen)
	__attribute__((warn_unused_result));
/* The next pending item (seq 0 when none) and whether a stop was asked. */
enum og_rc replay_job_next(struct db *db, long long job_id, struct replay_item *item,
                           bool *stop_requested) __attribute__((warn_unused_result));
/* An item that could not be replayed: refused, with why; nothing else. */
enum og_rc replay_job_refuse(struct db *db, long long job_id, int seq, const char *detail)
	__attribute__((warn_unused_result));
/* The job ends: `stopped` (resumable) or `completed`. */
enum og_rc replay_job_finish(struct db *db, long long job_id, bool completed,
                             const char *why)
	__attribute__((warn_unused_result));
/* `oncegatectl stop JOB`: asks the runner to stop before its next item;
 * kind gets the job's kind (to say how it is continued). */
enum og_rc replay_job_stop(struct db *db, long long job_id, const char *reason, char *kind, size_t kindlen, char *msg,
                           size_t msglen)
	__attribute__((warn_unused_result));
/* Counts of the job's items by state: done, refused, pending. */
enum og_rc replay_job_counts(struct db *db, long long job_id, int *done, int *refused,
                             int *pending) __attribute__((warn_unused_result));
void replay_item_clear(struct replay_item *it);

/* The status API's links: *replay_of the original's key (JSON
 * null when this run is no replay), *replayed_by the keys that correct it
 * (an array, oldest first). New references on OG_OK. */
enum og_rc replay_links(struct db *db, long long client_id, const char *key,
                        json_t **replay_of, json_t **replayed_by)
	__attribute__((warn_unused_result));

/* The client id of an API client name; OG_NOT_FOUND when none. */
enum og_rc replay_client_id(struct db *db, const char *name, long long *id)
	__attribute__((warn_unused_result));

#endif
