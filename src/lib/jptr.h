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

#endif
