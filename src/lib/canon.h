/*
 * canon.h — canonical JSON and the payload hash.
 *
 * Canonical form: object members sorted by key in Unicode code point order,
 * no insignificant whitespace, strings re-escaped minimally as UTF-8, numbers
 * exactly as given in the input text. Two documents that differ only in
 * member order or whitespace or in how a string is escaped have the same
 * canonical form, hence the same hash.
 *
 * The parser is our own (not jansson) because jansson turns numbers into
 * int/double and cannot give them back "as given".
 */
#ifndef OG_CANON_H
#define OG_CANON_H

#include <stdbool.h>
#include <stddef.h>

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

/* Canonical form of the JSON text in[0..len) into a new NUL-terminated
 * string (*out, *out_len), malloc'd; the caller frees it. */
enum canon_rc canon_json(const char *in, size_t len, char **out, size_t *out_len)
	__attribute__((warn_unused_result));

/* Canonical form of the value of top-level member `name` of the JSON object
 * in[0..len). The whole document is validated. */
enum canon_rc canon_member(const char *in, size_t len, const char *name,
                           char **out, size_t *out_len)
	__attribute__((warn_unused_result));

/* out = "sha256:" + lowercase hex SHA-256 of canon[0..len) */
void canon_hash(const char *canon, size_t len, char out[CANON_HASH_LEN]);

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

/* jansson's error text (json_error_t.text) in plain words: the one place
 * that maps what jansson says to what the writer of the JSON understands.
 * NULL for a text it does not know (its syntax messages read plainly). */
const char *canon_jansson_problem(const char *text);

#endif
