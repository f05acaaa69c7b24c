/*
 * canon.h — canonical JSON and the payload hash.
 *
 * Two rules, both with no insignificant whitespace and strings re-escaped
 * minimally as UTF-8, so that two documents that differ only in member
 * order, whitespace or how a string is escaped canonicalise alike:
 *
 *  - RFC 8785 (JCS), the payload hash of every run claimed since it was
 *    adopted: members sorted by UTF-16 code units, numbers as ECMAScript
 *    writes them (19.90 is 19.9, 1E0 is 1, -0 is 0, 1e21 is 1e+21), so any
 *    client computes the same hash with a stock JCS library.
 *  - As written (stored as "og1"), the rule runs hashed before: members by
 *    code point, numbers exactly as given in the input text. Lossless, so
 *    it is also the text kept in the database.
 *
 * The parser is our own (not jansson) because jansson turns numbers into
 * int/double and cannot give them back "as given".
 */
#ifndef OG_CANON_H
#define OG_CANON_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

/* "sha256:" + 64 hex digits + NUL */
#define CANON_HASH_LEN 72

enum canon_rc {
	CANON_OK = 0,
	CANON_SYNTAX,        /* not JSON */
	CANON_DEPTH,         /* nested deeper than OG_JSON_DEPTH_MAX */
	CANON_DUPLICATE_KEY, /* an object names the same member twice */
	CANON_BAD_UTF8,      /* invalid UTF-8 */
	CANON_LONE_SURROGATE, /* a \\u escape of half a surrogate pair */
	CANON_CONTROL,       /* a raw control character in a string */
	CANON_NUL,           /* \\u0000 */
	CANON_NUMBER_RANGE,  /* beyond IEEE 754 double range (1e400, 1e-20000) */
	CANON_NUMBER_LONG,   /* more than OG_JSON_NUMBER_MAX characters */
	CANON_NOT_OBJECT,    /* canon_member: the document is not an object */
	CANON_NOT_FOUND,     /* canon_member: no such top-level member */
	CANON_NOMEM,
};

/* The rule a payload hash was computed under, stored with each run. */
enum canon_rule {
	CANON_JCS = 0,    /* "jcs": RFC 8785 */
	CANON_AS_WRITTEN, /* "og1": numbers as written, members by code point */
};

/* "og1" or "jcs" */
const char *canon_rule_name(enum canon_rule rule);
/* The rule a stored name stands for; a run without one is as written. */
enum canon_rule canon_rule_parse(const char *name);

/* Canonical form under rule of the JSON text in[0..len) into a new
 * NUL-terminated string (*out, *out_len), malloc'd; the caller frees it. */
enum canon_rc canon_json(enum canon_rule rule, const char *in, size_t len, char **out,
                         size_t *out_len)
	__attribute__((warn_unused_result));

/* Canonical form of the value of top-level member `name` of the JSON object
 * in[0..len). The whole document is validated. */
enum canon_rc canon_member(enum canon_rule rule, const char *in, size_t len,
                           const char *name, char **out, size_t *out_len)
	__attribute__((warn_unused_result));

/* out = "sha256:" + lowercase hex SHA-256 of canon[0..len) */
void canon_hash(const char *canon, size_t len, char out[CANON_HASH_LEN]);

/* The hash of the JSON text in[0..len) canonicalised under rule. */
enum canon_rc canon_hash_as(enum canon_rule rule, const char *in, size_t len,
                            char out[CANON_HASH_LEN])
	__attribute__((warn_unused_result));

/* The longest number canon_number writes, with its NUL. */
#define CANON_NUMBER_LEN 32

/* v as ECMAScript's Number::toString writes it: the fewest digits that
 * read back as v (0.8, 1e+21, 1e-7, 9007199254740993 as
 * 9007199254740992); -0 is 0, NaN and infinities null. Returns the
 * length. */
size_t canon_number(double v, char out[CANON_NUMBER_LEN]);

/* json_dumps(v, flags), with every real in its shortest round-trip form
 * (canon_number; an integral real keeps ".0"). JSON_REAL_PRECISION in
 * flags is ignored: fewer than 17 digits do not read back for every
 * double. malloc'd; NULL when jansson fails. */
char *canon_dumps(const json_t *v, size_t flags);

/* Where a document failed to parse: byte offset, line and column (in
 * characters, from 1), and for CANON_LONE_SURROGATE the escape's value. */
struct canon_where {
	size_t offset;
	unsigned line;
	unsigned column;
	long surrogate;
};

/* Parses in[0..len) as one JSON value under the rules above without
 * building anything; where (may be NULL) says where it failed. */
enum canon_rc canon_validate(const char *in, size_t len, struct canon_where *where)
	__attribute__((warn_unused_result));

/* Whether s[0..len) is well-formed UTF-8 (RFC 3629). */
bool canon_utf8_valid(const char *s, size_t len);

/* A short English description, for error messages. */
const char *canon_strerror(enum canon_rc rc);

/* The problem and where it is ("... at line L column C"), into out. */
void canon_describe(enum canon_rc rc, const struct canon_where *where, char *out,
                    size_t outlen);

/* json_loadb(s, len, flags, err) for text canon_validate accepted, with
 * one rule on numbers: an integer beyond the 64-bit range, which jansson
 * refuses, is read as the JSON number it is (a double, as every JSON
 * number RFC 8785 hashes; 2^64 is 18446744073709552000), never refused.
 * A member that must be an integer then finds a number that is not one. */
json_t *canon_json_loadb(const char *s, size_t len, size_t flags, json_error_t *err);

/* jansson's error text (json_error_t.text) in plain words: the one place
 * that maps what jansson says to what the writer of the JSON understands.
 * NULL for a text it does not know (its syntax messages read plainly). */
const char *canon_jansson_problem(const char *text);

#endif
