/*
 * notice.h — the message an approval notice (notify.h) becomes once the
 * dispatcher has minted its link: text only, no database. A leaf below the
 * providers, which send it (provider.h: a provider's notice).
 */
#ifndef OG_NOTICE_H
#define OG_NOTICE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Characters of the asked-for subject quoted in a mail's Subject line. */
#define NOTICE_SUBJECT_QUOTE_MAX 120

/* Reads string members of object o: after o come pairs of a member's
 * name and a `const char **` that gets its text (NULL where o has no such
 * member or it is not a string), ended by NULL. Borrowed from o. The way a
 * notice and an inbox entry (gate_inbox) are read. */
void notice_strings(const json_t *o, ...) __attribute__((sentinel));

/* The message of a stored notice with its link, as the target's provider
 * sends it: for a mail target (mail) {"to", "subject", "body"} in plain
 * text; for a chat webhook {"text", "summary", "link"} (Slack and Teams
 * incoming webhooks read "text"). The link stands first, alone on its
 * line; the subject of what it answers and the customer (the run's
 * context, in the summary) lead the Subject and have lines of their own in
 * the body; every quoted text (the drafted subject, requested_by, the key,
 * the context's …)
 * is neutralised for the medium (neutralise.h), in "summary" too. NULL with a reason when the notice
 * cannot become one (addresses for a webhook, none for a mail target). */
json_t *notice_message(const json_t *notice, const char *link, const char *client, bool mail,
                       char *why, size_t whylen) __attribute__((warn_unused_result));

#endif
