/*
 * dispatch_int.h — what the dispatcher's library files (dispatch.c,
 * dispatch_effect.c, dispatch_tick.c) share: one claimed effect as a row,
 * the dead letter statement, the log line of an effect, and the small
 * rules more than one of them applies. Only those files include it.
 */
#ifndef OG_DISPATCH_INT_H
#define OG_DISPATCH_INT_H

#include <stdbool.h>

#include "config.h"
#include "db.h"
#include "dispatch.h"
#include "log.h"
#include "outbox.h"
#include "provider.h"

/* Rows per housekeeping statement. */
#define DISPATCH_TICK_BATCH 100
/* A send is started only with at least this much lease left beyond the
 * target's timeout; otherwise the lease is renewed first. */
#define DISPATCH_LEASE_MARGIN_S 10

/* No state, for dispatch_log_effect's from or to. */
#define DISPATCH_NO_STATE (-1)
/* The decision log line of one effect's step: from and to are an enum
 * effect_state, or DISPATCH_NO_STATE. */
void dispatch_log_effect(enum log_level level, const char *event, const struct outbox_job *j,
                         int from, int to, const char *provider_id,
                         const char *error_class, const char *reason, long long duration_ms,
                         const char *hint);
/* Marks and counts effects held back by the kill switch (effect_id: that
 * one, or NULL: any due one); how many were new, -1 on a database error. */
long long dispatch_hold(struct db *db, const char *effect_id);
/* What one send of target t needs of its lease, in seconds. */
int dispatch_send_lease_s(const struct config_target *t);
/* What an operator does about a dead letter of this class. */
const char *dispatch_next_action(const char *dl_class);

/* The housekeeping loop over runs: the runs fetch finds (at most
 * DISPATCH_TICK_BATCH of them), each handed to each, which takes its own
 * transaction; nothing when the fetch fails. */
struct gate_run;
struct gate_runs;
void dispatch_each_run(struct db *db, enum og_rc (*fetch)(struct db *, int, struct gate_runs *),
                       void (*each)(struct db *, const struct gate_run *));

/* dispatch_effect.c: looks up one unknown effect at its target (the send
 * is dispatch.h's). */
void dispatch_effect_reconcile(struct dispatch_shared *s, struct db *db,
                               struct provider_conn *pc, struct outbox_job *j);

/* dispatch_notify.c: right before the send of an approval.notify effect, a
 * fresh link for its challenge (its token in token, its hash now the
 * challenge's: the link of the notice before stops working) and the message
 * with it in *text (wipe both after the send). MOOT: the challenge can no
 * longer be decided (nothing minted); REFUSED: the notice cannot become a
 * message for this target (evidence and reason in *at); RETRY: not now
 * (the database, the CSPRNG, memory). */
enum notify_prep { NOTIFY_PREP_SEND = 0, NOTIFY_PREP_MOOT, NOTIFY_PREP_REFUSED, NOTIFY_PREP_RETRY };
enum notify_prep dispatch_notify_prepare(struct db *db, const struct config *cfg,
                                         const struct provider *pv, const struct outbox_job *j,
                                         char token[44], char **text,
                                         struct provider_attempt *at);
/* Replaces the token in every string of an attempt's evidence (a webhook
 * that echoes the request must not put the link at rest). */
void dispatch_notify_scrub(json_t *evidence, const char *token);
/* A moot notice: cancelled, nothing sent, logged. */
void dispatch_notify_moot(struct dispatch_shared *s, struct db *db, const struct outbox_job *j);

#endif
