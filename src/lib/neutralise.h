/*
 * neutralise.h — text someone else wrote (a model's draft, a caller's
 * requested_by or run key), quoted in a notice that carries a real
 * approval link, made inert: the reader sees what was written, but nothing
 * of it is a link, a mention, markup or hidden text.
 *
 * The rules, in the order they apply to each character:
 *
 *  1. One line: C0 and C1 controls, DEL, U+2028, U+2029 and spaces become
 *     one space; leading ones are dropped. A byte sequence that is not
 *     UTF-8 becomes U+FFFD.
 *  2. Bidi and invisible characters are shown as escapes "<U+XXXX>"
 *     (upper-case hex, at least four digits): the bidi marks and
 *     overrides U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069, and
 *     U+00AD, U+034F, U+115F, U+1160, U+17B4, U+17B5, U+180E, U+200B–U+200D,
 *     U+2060–U+2064, U+3164, U+FEFF, U+FFA0 and the tags U+E0000–U+E007F.
 *     A zero-width non-joiner or joiner (U+200C, U+200D) between two
 *     visible non-Latin characters (both U+0300 or above: Persian words,
 *     emoji sequences) is kept, since there it only joins or parts letters.
 *  3. Links, in the defanging convention of incident reports: a scheme's
 *     "://" is written "[:]//", and "http" and "https" before a ":" (any
 *     case) "hxxp" and "hxxps"; a dot (".", U+FF0E, U+FF61) between two word characters is
 *     written "[.]" — except between two digits ("1.5", "12.50") unless
 *     it is one of three or more such dots in a row of digits and dots (an
 *     IPv4 address). So "https://evil.example/x" reads
 *     "hxxps[:]//evil[.]example/x" and "bob@evil.example" reads
 *     "bob@evil[.]example": no mail client or chat autolinks them.
 *  4. For chat (NEUTRALISE_CHAT), the text goes into Slack's mrkdwn or a
 *     Teams/Markdown message: "&", "<" and ">" become "&amp;", "&lt;" and
 *     "&gt;" (Slack's documented escaping: "<!channel>", "<@U123>" and
 *     "<https://x|text>" are then plain text), and "\", "[" and "]" are
 *     escaped with a backslash, as is "(" right after a "]", so that no
 *     Markdown link "[text](url)" or image can form.
 *  5. At most max characters of s are written (an escape counts as one);
 *     a cut ends in "…".
 *
 * Pure: no I/O, no global state.
 */
#ifndef OG_NEUTRALISE_H
#define OG_NEUTRALISE_H

#include <stddef.h>

#include "buf.h"

enum neutralise_to {
	NEUTRALISE_MAIL = 0, /* a plain-text mail (body or Subject) */
	NEUTRALISE_CHAT,     /* a chat webhook's text (Slack mrkdwn, Markdown) */
};

/* Appends s, neutralised for `to`, to b as one line of at most max
 * characters of s. 0, or -1 when b's cap refused it. */
int neutralise_line(struct buf *b, const char *s, size_t max, enum neutralise_to to)
	__attribute__((warn_unused_result));

#endif
