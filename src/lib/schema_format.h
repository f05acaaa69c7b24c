/*
 * schema_format.h — the values of the JSON Schema "format" keyword that
 * contracts may use, checked as the JSON Schema Test Suite reads them:
 *
 *   email      an RFC 5321 Mailbox: local part (dot-atoms or a quoted
 *              string, at most 64 bytes) "@" a domain of letter-digit-hyphen
 *              labels (at most 63 bytes each, 255 in all) or an IPv4 / IPv6
 *              address literal. ASCII only: an internationalized address
 *              ("иван@пример.рф") is the separate format idn-email.
 *   uri        an RFC 3986 URI with a scheme ("https://…", "mailto:…",
 *              "urn:…"); no relative references, no unescaped non-ASCII
 *              (that is the separate format iri).
 *   date-time  an RFC 3339 date-time: "2026-12-01T17:04:49Z", an optional
 *              fraction, a "Z" or ±hh:mm offset; real calendar days, and a
 *              leap second only at 23:59:60 UTC.
 */
#ifndef OG_SCHEMA_FORMAT_H
#define OG_SCHEMA_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

enum schema_format {
	SCHEMA_FORMAT_NONE = 0,
	SCHEMA_FORMAT_EMAIL,
	SCHEMA_FORMAT_URI,
	SCHEMA_FORMAT_DATE_TIME,
};

/* The format called name[0..n); SCHEMA_FORMAT_NONE when not one of ours. */
enum schema_format schema_format_named(const char *name, size_t n);
/* Is s[0..n) a value of format f? (Always true for SCHEMA_FORMAT_NONE.) */
bool schema_format_check(enum schema_format f, const char *s, size_t n);
/* The validation message when it is not: "must be an e-mail address …". */
const char *schema_format_expected(enum schema_format f);

#endif
