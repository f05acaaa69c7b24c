/*
 * jptr.h — JSON Pointer (RFC 6901) over jansson values, shared by the
 * contracts (error paths, auto_when rules) and the outcome classifier
 * (business rejections inside a 2xx body).
 */
#ifndef OG_JPTR_H
#define OG_JPTR_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "caps.h"

/* A pointer being built while walking a document, escaped as RFC 6901
 * says. When a segment does not fit, the pointer stays at the ancestor and
 * `cut` says so. */
struct jptr_buf {
	char s[OG_CONTRACT_POINTER_MAX + 1];
	size_t len;
	bool cut;
};

/* Where a buffer stood before a push; jptr_pop goes back there. */
struct jptr_mark {
	size_t len;
	bool cut;
};

/* Reads the reference token at *pp (which must start with '/') into seg
 * (unescaped, NUL-terminated, at most segcap - 1 bytes) and advances *pp
 * past it. False when malformed (a bad ~ escape) or too long. */
bool jptr_next(const char **pp, char *seg, size_t segcap, size_t *seglen);
/* An array index: "0" or [1-9][0-9]* that fits a size_t. */
bool jptr_index(const char *s, size_t n, size_t *out);
/* Is pointer well-formed and at most max bytes? ("" is the root.) */
bool jptr_valid(const char *pointer, size_t max);
/* The value pointer names in doc (borrowed), or NULL: malformed, longer
 * than max, or nothing there. */
json_t *jptr_get(const json_t *doc, const char *pointer, size_t max);

/* Appends one reference token (n bytes, escaped here) / the token of an
 * array index / a NUL-terminated token; returns the mark to pop back to. */
struct jptr_mark jptr_push(struct jptr_buf *p, const char *seg, size_t n);
struct jptr_mark jptr_push_index(struct jptr_buf *p, size_t i);
struct jptr_mark jptr_push_str(struct jptr_buf *p, const char *seg);
void jptr_pop(struct jptr_buf *p, struct jptr_mark m);

#endif
