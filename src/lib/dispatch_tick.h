/*
 * dispatch_tick.h — the dispatcher's housekeeping rules, run in this order
 * every poll interval on a connection of their own (oncegate-dispatch's
 * janitor): the kill switch first; when the database does not answer, the
 * rest waits for the next tick.
 */
#ifndef OG_DISPATCH_TICK_H
#define OG_DISPATCH_TICK_H

#include <stdbool.h>

#include "db.h"
#include "dispatch.h"

/* Reads the kill switch's database flag again; while it holds effects
 * back, each due one is counted once (metrics) and the hold is logged at
 * most every 30 s; switched back on, the workers are woken. False when the
 * database is unreachable. */
bool dispatch_tick_switch(struct dispatch_shared *s, struct db *db)
	__attribute__((warn_unused_result));

/* Sending leases that ran out: an effect whose send had started (or may
 * have) becomes unknown (the provider may have acted), never pending;
 * where no lookup URL can settle it, it gets its dead letter in the same
 * transaction. One whose send had not started is pending again, due now,
 * the attempt given back (effect.requeued). */
void dispatch_tick_expire_leases(struct dispatch_shared *s, struct db *db);

/* Runs whose every challenge expired: failed_terminal, and the workflow
 * told through a decision callback, one transaction per run. */
void dispatch_tick_expire_approvals(struct db *db);

/* Reminders that are due (dispatch_notify.c): each pending challenge with a
 * notify entry is told once more, with a new link (its old one stops
 * working), in one transaction per batch; logged (approval.reminded) and
 * counted. */
void dispatch_tick_remind(struct db *db);

/* Escalations that are due: for each run nobody decided in time, every
 * escalate_to entry gets a challenge of its own (same expiry and decisions)
 * and its notice, one transaction per run; logged (approval.escalated) and
 * counted. */
void dispatch_tick_escalate(struct db *db);

/* Replies owed to chats (dispatch_chat.c): the messages of notices
 * decided in a chat, updated to say who decided (chat.h), a few per tick
 * on pc, each bounded to a few seconds; while sends are stopped none goes
 * out. A reply the chat refuses (its URL expired) is given up on; one
 * that found no answer is tried again later, a few times. */
struct provider_conn;
void dispatch_tick_chat_replies(struct dispatch_shared *s, struct db *db,
                                struct provider_conn *pc);

#endif
