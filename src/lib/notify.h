/*
 * notify.h — telling approvers: one approval.notify effect per challenge
 * (and per reminder, escalation or resend), sent by the dispatcher like any
 * effect (kill switch, retries, dead letters, metrics).
 *
 * What the outbox holds is the notice without its link: whom (the approver
 * entry's notify: "to" addresses on a mail target, or a chat webhook
 * target), what is asked (the card's summary: the effect's type, target and
 * subject, and from the run's context the subject it answers and the
 * customer — never their message), who asked, the expiry and why this notice (new, reminder,
 * escalation, resend). No token is ever at rest: right before each send the
 * dispatcher mints one, stores its SHA-256 as the challenge's (the link of
 * the notice before stops working) and makes the message with the link
 * (notice_message, notice.h); the raw token lives only in that message.
 */
#ifndef OG_NOTIFY_H
#define OG_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "contract.h"
#include "db.h"
#include "gate.h"
#include "outbox.h"
#include "rc.h"

#define NOTIFY_EFFECT_TYPE "approval.notify"

enum notify_why { NOTIFY_NEW = 0, NOTIFY_REMINDER, NOTIFY_ESCALATION, NOTIFY_RESEND };

const char *notify_why_name(enum notify_why why);

/* Enqueues the notice of challenge n (its notify entry must be set) in the
 * caller's transaction, in the run's next free notification slot. */
enum og_rc notify_enqueue(struct db *db, const struct gate_notice *n, enum notify_why why,
                          char effect_id[OUTBOX_ID_LEN]) __attribute__((warn_unused_result));

/* A new challenge as notify_challenge needs it (borrowed strings); effect
 * is the run's effect as JSON text (the card's summary is made of it). */
struct notify_challenge {
	const char *id, *key, *approver, *requested_by, *expires_at, *effect;
	const char *context;     /* the run's context (JSON text), or NULL */
	long long client_id;
};

/* Whom a new challenge tells, in the caller's transaction: its approver's
 * notify entry, the contract's reminder and escalation, and (when the
 * approver has a notify entry) its first notice queued. The one way a
 * challenge gets its notice, whether an output or a replay created it. */
enum og_rc notify_challenge(struct db *db, const struct contract *k,
                            const struct notify_challenge *c) __attribute__((warn_unused_result));

#endif
