/*
 * canon.h — canonical JSON and the payload hash (SPEC 3.1).
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

#include <stddef.h>

/* "sha256:" + 64 hex digits + NUL */
#define CANON_HASH_LEN 72

enum canon_rc {
	CANON_OK = 0,
	CANON_SYNTAX,        /* not JSON */
	CANON_DEPTH,         /* nested deeper than OG_JSON_DEPTH_MAX */
	CANON_DUPLICATE_KEY, /* an object names the same member twice */
	CANON_BAD_UTF8,      /* invalid UTF-8 or a lone surrogate escape */
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

/* A short English description, for error messages. */
const char *canon_strerror(enum canon_rc rc);

#endif
