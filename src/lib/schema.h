/*
 * schema.h — the JSON Schema subset of contracts: compile a schema once,
 * validate instances against it many times.
 *
 * Each schema is an object (no boolean schemas, no $ref) with only these
 * keywords:
 *   type                  "string" | "number" | "integer" | "boolean" |
 *                         "object" | "array" | "null", or a non-empty array
 *                         of distinct ones
 *   properties            object of schemas
 *   required              array of distinct strings; with additionalProperties
 *                         false each must be one of properties
 *   additionalProperties  boolean only
 *   enum                  non-empty array
 *   const                 any value
 *   minLength, maxLength  non-negative integers, counted in Unicode code points
 *   minimum, maximum      numbers (inclusive)
 *   items                 one schema (no tuple form)
 *   minItems, maxItems    non-negative integers
 *   format                "email" (RFC 5321 mailbox, ASCII), "uri" (RFC 3986
 *                         absolute URI, ASCII) or "date-time" (RFC 3339);
 *                         checked on strings, other values pass
 *   annotations, accepted and ignored: $schema, $id, $comment, title,
 *                         description (strings), examples (array), default
 * Numbers follow JSON Schema: 1.0 is an integer (an integral value is an
 * integer whatever its spelling) and 1 equals 1.0 for enum and const.
 * Anything else — another keyword, another format, a bad value, a minimum
 * above its maximum — fails the compile at the JSON Pointer of the problem.
 *
 * Compiled schemas are immutable and borrow strings and values from the
 * document they were compiled from, which must outlive them.
 */
#ifndef OG_SCHEMA_H
#define OG_SCHEMA_H

#include <stdbool.h>
#include <jansson.h>

#include "jload.h"

struct schema;

/* Compiles the schema j; ld->at is j's pointer in its document. NULL on
 * failure, recorded in ld. Recursion follows j, which the caller has
 * checked for depth (OG_JSON_DEPTH_MAX). */
struct schema *schema_compile(struct jload *ld, const json_t *j)
	__attribute__((warn_unused_result));
void schema_free(struct schema *s);

/* Validates instance. Returns a new JSON array of errors, each {"path":
 * JSON Pointer (RFC 6901) of the value, prefixed with at (an escaped
 * pointer, "" for none), "rule": the keyword that failed, "message": short
 * English}; empty when valid; NULL only when out of memory. At most
 * OG_CONTRACT_ERRORS_MAX errors. Within one value "type" is checked first
 * and, when it fails, nothing else about that value is. A NULL instance is
 * one "type" error "no WHAT". */
json_t *schema_validate(const struct schema *s, const json_t *instance, const char *at,
                        const char *what) __attribute__((warn_unused_result));

/* Can the pointer `rest` name a value the schema allows? Only a member that
 * additionalProperties false rules out is refused: anything the schema
 * leaves open might exist. */
bool schema_allows(const struct schema *s, const char *rest);
/* Can the value at `rest` be a string? As schema_allows, and the schema of
 * that value, when there is one, has no "type" or one that lists
 * "string". */
bool schema_allows_string(const struct schema *s, const char *rest);

/* Equality as JSON Schema defines it for enum and const: numbers by value
 * (1 == 1.0), objects regardless of member order. */
bool schema_equal(const json_t *a, const json_t *b);
/* Compares two numbers by value: <0, 0, >0. */
int schema_num_cmp(const json_t *a, const json_t *b);

#endif
