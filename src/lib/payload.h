/*
 * payload.h — the rules an effect's payload meets before any contract:
 * whether it can become one mail message (and the addresses in it), with
 * errors as {"path", "rule", "message"} into the /output request body
 * ("/effect/payload/to/3"), as effect.h reports them. A leaf: the
 * providers, the contracts and effect.h use it; it uses none of them.
 */
#ifndef OG_PAYLOAD_H
#define OG_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Appends {"path": "/effect/payload[/member]", "rule", "message"} to
 * errors (member NULL: the payload itself); false when out of memory. */
bool payload_error(json_t *errors, const char *member, const char *rule, const char *message);

/* The first of errors (as payload_error and effect.h append them) in one
 * line, "PATH message", into out: how a refusal names what is wrong. */
void payload_error_text(const json_t *errors, char *out, size_t len);

/* Can this payload become one mail message? {"to": ADDRESS or [ADDRESS, …]
 * (1..OG_MAIL_RCPT_MAX), "subject": one line of text (≤ OG_MAIL_SUBJECT_MAX
 * characters), "body": text without NUL (≤ OG_MAIL_BODY_MAX bytes),
 * "in_reply_to"?: a message id "<…@…>" (≤ OG_MAIL_MSGID_MAX bytes, ASCII)};
 * other members are the workflow's
 * own and are not sent. Appends an error per problem; true when none. */
bool payload_mail_check(const json_t *payload, json_t *errors);
/* The same check for a provider, which needs only the first problem: true
 * when payload makes one message, else false with it in why
 * (payload_error_text; "out of memory" when it could not check). */
bool payload_mail_ok(const json_t *payload, char *why, size_t whylen);

/* A plain addr-spec, local@domain in ASCII, as RCPT TO and To: carry it. */
bool payload_mail_address_ok(const char *s);

#endif
