/*
 * effect.h — an effect's payload as it goes out.
 *
 * What the gate judges must be what is sent. The payload that goes out is
 * built once, at POST /v1/runs/{key}/output, from the caller's payload and
 * the model output as the contract says (effects.types.<type>.from_output:
 * one source per field), checked against the type's schema and, for mail,
 * against what SMTP can carry; that payload is what auto_when rules, the
 * approval page and the outbox hold. The dispatcher builds and checks it
 * again right before sending, so a row that no longer meets its contract
 * is never sent.
 *
 * Errors are {"path", "rule", "message"} like output validation errors,
 * with paths into the /output request body ("/effect/payload/to/3").
 */
#ifndef OG_EFFECT_H
#define OG_EFFECT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "contract.h"

enum effect_when {
	/* A payload member that the contract takes from the output is an
	 * error: the caller may not supply it. */
	EFFECT_AT_OUTPUT,
	/* The stored payload already holds them (added at /output); one that
	 * is missing (an effect queued before the contract said so) is taken
	 * from the output, one that differs from the output is an error. */
	EFFECT_AT_SEND,
};

/* The payload that goes out for an effect of `type` under contract c (NULL:
 * no contract; email.send then takes subject and body from the output, as
 * it does when the contract has no entry for it). mail: the target is an
 * SMTP target, so the payload must make a message (payload_mail_check, payload.h).
 * Returns a new payload when it is sendable; NULL otherwise, with the
 * reasons appended to errors (an array) — or, when errors stayed empty,
 * because memory ran out. */
json_t *effect_build(const struct contract *c, const char *type, bool mail,
                     const json_t *payload, const json_t *output, enum effect_when when,
                     json_t *errors) __attribute__((warn_unused_result));

/* The members a payload of `type` takes from the output under contract c
 * (NULL: none): the contract's from_output, or for an email.send it does
 * not describe, "subject" and "body". Up to max names into names; returns
 * how many. */
size_t effect_from_output(const struct contract *c, const char *type, const char **names,
                          size_t max);

#endif
