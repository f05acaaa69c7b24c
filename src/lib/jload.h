/*
 * jload.h — loading a JSON document that people write (contracts and the
 * schemas inside them): every problem is reported once, at the JSON Pointer
 * where it is, as "FILE: POINTER: message".
 *
 * A loader walks the document pushing and popping pointer segments on `at`;
 * the first failure records its message and where `at` was, and every later
 * failure is ignored, so callers can simply `return jload_fail(...)` and
 * unwind.
 */
#ifndef OG_JLOAD_H
#define OG_JLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "jptr.h"

/* A name or key quoted in a load error. */
#define JLOAD_SHOW_NAME_MAX 64

struct jload {
	struct jptr_buf at;   /* where the walk is */
	struct jptr_buf where;  /* where the first failure was */
	char msg[512];
	bool failed;
};

/* Records the first failure (at the current pointer); always false. */
bool jload_fail(struct jload *ld, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* jload_fail() at member `name` below the current pointer. */
bool jload_fail_at(struct jload *ld, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool jload_nomem(struct jload *ld);

/* Every member of obj is one of allowed (NULL-terminated); else a failure
 * at the first other member: `what "name" (expected one of: …)`. */
bool jload_members(struct jload *ld, const json_t *obj, const char *const *allowed,
                   const char *what);
/* Optional members of obj: an integer within [lo, hi] (an integral real
 * counts), a boolean. def when absent. */
bool jload_int(struct jload *ld, const json_t *obj, const char *name, long long lo,
               long long hi, int def, int *out);
bool jload_bool(struct jload *ld, const json_t *obj, const char *name, bool def,
                bool *out);

/* A member of obj that is an array of distinct strings. */
struct jload_list {
	const char *name;     /* the member */
	size_t min, max;      /* entries; min 0: optional, absent is an empty list */
	const char *noun;     /* "names": "must be an array of 1..32 names" */
	/* Is v (at its own pointer) a good entry? Fails with its own message. */
	bool (*check)(struct jload *ld, const json_t *v, const void *arg);
	bool (*same)(const char *a, const char *b);   /* NULL: strcmp() == 0 */
	const void *arg;
};

/* Loads list l of obj into out[0..*count) (borrowed strings); an entry the
 * same as an earlier one fails as "duplicate of entry N". */
bool jload_strings(struct jload *ld, const json_t *obj, const struct jload_list *l,
                   const char **out, size_t *count);

/* Is v an integer, or a real with an integral value in the range of long
 * long? (1.0 is an integer, as JSON Schema counts.) */
bool jload_integral(const json_t *v, long long *out);
/* Does a double hold an integral value? */
bool jload_real_integral(double d);
/* "object", "array", "string", "integer", "number", "boolean", "null". */
const char *jload_type_word(const json_t *v);

/* Copies at most max bytes of s[0..n) to out as printable ASCII (anything
 * else becomes '?'; "..." when cut), so a quoted name can never smuggle
 * control characters or half a UTF-8 sequence into a message. */
void jload_show(const char *s, size_t n, char *out, size_t outlen, size_t max);

/* The recorded failure as "FILE: POINTER: message" ("FILE: message" at the
 * root), cut at a whole UTF-8 sequence; nothing when err is NULL. */
void jload_format(const struct jload *ld, const char *file, char *err, size_t errlen);

#endif
