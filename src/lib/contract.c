/*
 * contract.c — output contracts: loader, schema validator, gate rules.
 *
 * A contract file is parsed by jansson and then checked member by member
 * against what this file knows; the schema is compiled into a small tree of
 * struct schema so that the validator works on typed fields that the loader
 * already vetted instead of re-reading (and re-checking) JSON per request.
 * Strings and values in the compiled tree are borrowed from the parsed
 * document, which the contract keeps until it is freed.
 *
 * Every recursion is bounded: the loader refuses documents nested deeper
 * than OG_JSON_DEPTH_MAX, the validator only descends where the schema
 * does, and JSON equality stops at the shallower of its two operands.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strnlen, openat, O_CLOEXEC */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "canon.h"
#include "contract.h"
#include "digest.h"
#include "jptr.h"
#include "caps.h"

#define CONTRACT_HASH_LEN (sizeof("sha256:") - 1 + DIGEST_HEX_LEN)
/* enum / const values are quoted in error messages up to this many bytes. */
#define SHOW_VALUE_MAX 200
/* A name or key quoted in a load error. */
#define SHOW_NAME_MAX  64
/* A file name in a load error: all of it (NAME_MAX on Linux). */
#define FILE_SHOW_MAX  255

#define T_STRING  (1u << 0)
#define T_NUMBER  (1u << 1)
#define T_INTEGER (1u << 2)
#define T_BOOLEAN (1u << 3)
#define T_OBJECT  (1u << 4)
#define T_ARRAY   (1u << 5)
#define T_NULL    (1u << 6)

static const struct {
	const char *name;
	unsigned bit;
} type_names[] = {
	{ "string", T_STRING }, { "number", T_NUMBER }, { "integer", T_INTEGER },
	{ "boolean", T_BOOLEAN }, { "object", T_OBJECT }, { "array", T_ARRAY },
	{ "null", T_NULL },
};

#define NTYPES (sizeof(type_names) / sizeof(type_names[0]))

struct prop {
	const char *name;
	size_t name_len;
	struct schema *schema;
};

struct schema {
	unsigned types;               /* 0: any type */
	const json_t *enum_values;    /* array, or NULL */
	const json_t *const_value;    /* NULL: no const (a JSON null is non-NULL) */
	char *enum_text;              /* enum / const as quoted in messages */
	const json_t *minimum, *maximum;
	long long min_length, max_length; /* -1: none */
	long long min_items, max_items;   /* -1: none */
	struct prop *props;
	size_t nprops;
	const json_t *props_obj;      /* the "properties" object, for lookups */
	const json_t *required;       /* array of strings, or NULL */
	bool additional;              /* additionalProperties */
	struct schema *items;
};

enum rule_op { OP_EQ, OP_NE, OP_IN, OP_NOT_IN, OP_LT, OP_LE, OP_GT, OP_GE, OP_EXISTS };

static const char *const op_names[] = {
	"eq", "ne", "in", "not_in", "lt", "le", "gt", "ge", "exists",
};

struct rule {
	bool on_output;               /* else on the effect */
	const char *rest;             /* pointer below /output or /effect */
	enum rule_op op;
	const json_t *value;
	bool want;                    /* exists: present (true) or absent */
};

/* effects.types.<type>: what a payload of that type must meet, and which of
 * its members come from the output instead of the payload. */
struct effect_decl {
	const char *type;
	struct schema *schema;
	const char *from_output[OG_CONTRACT_FROM_OUTPUT_MAX];
	size_t nfrom;
};

struct contract {
	char name[OG_CONTRACT_NAME_MAX + 1];
	char hash[CONTRACT_HASH_LEN];
	json_t *doc;                  /* owns every borrowed pointer below */
	struct schema *schema;
	enum gate_mode mode;
	int window_seconds;
	int expires_seconds;
	int repair_attempts;
	double sample_rate;
	bool separation_of_duties;
	bool allow_approve, allow_reject;
	const char *approvers[OG_CONTRACT_APPROVERS_MAX];
	size_t napprovers;
	struct rule rules[OG_CONTRACT_RULES_MAX];
	size_t nrules;
	const char *types[OG_CONTRACT_ALLOWED_MAX];
	size_t ntypes;
	const char *targets[OG_CONTRACT_ALLOWED_MAX];
	size_t ntargets;
	const char *loggable[OG_CONTRACT_LOGGABLE_MAX];
	size_t nloggable;
	struct effect_decl decls[OG_CONTRACT_ALLOWED_MAX];
	size_t ndecls;
};

struct contract_set {
	struct contract **items;      /* sorted by name */
	size_t count;
};

/* ---- JSON Pointers -------------------------------------------------------- */

/* A pointer being built while walking a document. When a segment does not
 * fit, the pointer stays at the ancestor and `cut` says so. */
struct ptr {
	char s[OG_CONTRACT_POINTER_MAX + 1];
	size_t len;
	bool cut;
};

struct mark {
	size_t len;
	bool cut;
};

static struct mark
ptr_push(struct ptr *p, const char *seg, size_t n)
{
	struct mark m = { p->len, p->cut };
	size_t need = 1, i;

	if (p->cut)
		return m;
	for (i = 0; i < n; i++)
		need += (seg[i] == '~' || seg[i] == '/') ? 2 : 1;
	if (need > OG_CONTRACT_POINTER_MAX - p->len) {
		p->cut = true;
		return m;
	}
	p->s[p->len++] = '/';
	for (i = 0; i < n; i++) {
		if (seg[i] == '~' || seg[i] == '/') {
			p->s[p->len++] = '~';
			p->s[p->len++] = seg[i] == '~' ? '0' : '1';
		} else {
			p->s[p->len++] = seg[i];
		}
	}
	p->s[p->len] = '\0';
	return m;
}

static struct mark
ptr_push_str(struct ptr *p, const char *seg)
{
	return ptr_push(p, seg, strlen(seg));
}

static struct mark
ptr_push_index(struct ptr *p, size_t i)
{
	char num[24];
	int n = snprintf(num, sizeof(num), "%zu", i);

	return ptr_push(p, num, (size_t)n);
}

static void
ptr_pop(struct ptr *p, struct mark m)
{
	p->len = m.len;
	p->cut = m.cut;
	p->s[p->len] = '\0';
}

/* Unescapes the next segment of the pointer at *pp (which is at a '/')
 * into seg; advances *pp past it. False when the pointer is malformed or a
 * segment is longer than segcap - 1. */
/* Syntax check of a pointer as written in a contract. */
static bool
ptr_valid(const char *p)
{
	return jptr_valid(p, OG_CONTRACT_POINTER_MAX);
}

json_t *
contract_pointer_get(const json_t *doc, const char *pointer)
{
	return jptr_get(doc, pointer, OG_CONTRACT_POINTER_MAX);
}

/* ---- JSON values -------------------------------------------------------- */

static long double
num_value(const json_t *v)
{
	if (json_is_integer(v))
		return (long double)json_integer_value(v);
	return (long double)json_real_value(v);
}

/* Both numbers. long double holds every int64 exactly (x86 80-bit and
 * aarch64 128-bit), so integers beyond 2^53 still compare right. */
static int
num_cmp(const json_t *a, const json_t *b)
{
	long double x, y;

	if (json_is_integer(a) && json_is_integer(b)) {
		json_int_t i = json_integer_value(a), j = json_integer_value(b);

		return (i > j) - (i < j);
	}
	x = num_value(a);
	y = num_value(b);
	return (x > y) - (x < y);
}

/* Whether a double holds an integral value. Every double of magnitude
 * 2^53 or more is one; below that the round trip through long long is
 * exact. (No floor(): libog does not link libm.) */
static bool
real_integral(double d)
{
	if (!isfinite(d))
		return false;
	if (d >= 9007199254740992.0 || d <= -9007199254740992.0)
		return true;
	return (double)(long long)d == d;
}

/* An integer, or a real with an integral value in the range of long long:
 * JSON Schema counts 1.0 as an integer. */
static bool
num_integral(const json_t *v, long long *out)
{
	double d;

	if (json_is_integer(v)) {
		if (out != NULL)
			*out = json_integer_value(v);
		return true;
	}
	if (!json_is_real(v))
		return false;
	d = json_real_value(v);
	if (!real_integral(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0)
		return false;
	if (out != NULL)
		*out = (long long)d;
	return true;
}

/* Equality as JSON Schema defines it for enum and const: numbers by value,
 * objects regardless of member order. Recursion is bounded by the shallower
 * operand; the depth guard is for callers that pass two deep values. */
static bool
json_same(const json_t *a, const json_t *b, unsigned depth)
{
	const char *key;
	size_t key_len, i;
	json_t *v;

	if (depth > OG_JSON_DEPTH_MAX)
		return false;
	if (json_is_number(a) && json_is_number(b))
		return num_cmp(a, b) == 0;
	if (json_typeof(a) != json_typeof(b))
		return false;
	switch (json_typeof(a)) {
	case JSON_STRING:
		return json_string_length(a) == json_string_length(b) &&
		       memcmp(json_string_value(a), json_string_value(b),
		              json_string_length(a)) == 0;
	case JSON_ARRAY:
		if (json_array_size(a) != json_array_size(b))
			return false;
		for (i = 0; i < json_array_size(a); i++)
			if (!json_same(json_array_get(a, i), json_array_get(b, i), depth + 1))
				return false;
		return true;
	case JSON_OBJECT:
		if (json_object_size(a) != json_object_size(b))
			return false;
		json_object_keylen_foreach((json_t *)(uintptr_t)a, key, key_len, v) {
			json_t *w = json_object_getn(b, key, key_len);

			if (w == NULL || !json_same(v, w, depth + 1))
				return false;
		}
		return true;
	default:
		return true; /* true, false, null */
	}
}

static unsigned
type_bits(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return T_OBJECT;
	case JSON_ARRAY: return T_ARRAY;
	case JSON_STRING: return T_STRING;
	case JSON_INTEGER: return T_NUMBER | T_INTEGER;
	case JSON_REAL:
		/* 1.0 and 1e300 are integers too: the value counts, not its spelling. */
		return T_NUMBER | (real_integral(json_real_value(v)) ? T_INTEGER : 0);
	case JSON_TRUE:
	case JSON_FALSE: return T_BOOLEAN;
	case JSON_NULL: return T_NULL;
	}
	return 0;
}

static const char *
type_word(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_REAL: return "number";
	case JSON_TRUE:
	case JSON_FALSE: return "boolean";
	case JSON_NULL: return "null";
	}
	return "value";
}

static void
num_text(const json_t *v, char *out, size_t len)
{
	if (json_is_integer(v))
		snprintf(out, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else
		snprintf(out, len, "%.15g", json_real_value(v));
}

/* Code points of valid UTF-8: every byte that is not a continuation byte. */
static size_t
utf8_count(const char *s, size_t n)
{
	size_t i, cp = 0;

	for (i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			cp++;
	return cp;
}

/* Copies at most max bytes of s[0..n) as printable ASCII: anything else
 * becomes '?', so a quoted name can never smuggle control characters or
 * half a UTF-8 sequence into a message. */
static void
show(const char *s, size_t n, char *out, size_t outlen, size_t max)
{
	size_t i, o = 0;

	for (i = 0; i < n && i < max && o + 4 < outlen; i++) {
		unsigned char c = (unsigned char)s[i];

		out[o++] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? (char)c : '?';
	}
	if (i < n && o + 4 <= outlen) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

/* ---- load errors ---------------------------------------------------------- */

struct loader {
	const char *file;    /* as shown in messages */
	char *err;
	size_t errlen;
	bool failed;
	struct ptr ptr;
};

/* Cuts a message truncated by snprintf back to a whole UTF-8 sequence. */
static void
utf8_trim_tail(char *s)
{
	size_t len = strlen(s), i = len, need;
	unsigned char lead;

	while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80 && len - i < 3)
		i--;
	if (i == 0)
		return;
	lead = (unsigned char)s[i - 1];
	if (lead < 0xC0)
		return;
	need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
	if (len - (i - 1) < need)
		s[i - 1] = '\0';
}

static bool lfail(struct loader *ld, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Records the first error as "FILE: POINTER: message" ("FILE: message" at
 * the root) and returns false, so callers can `return lfail(...)`. */
static bool
lfail(struct loader *ld, const char *fmt, ...)
{
	char msg[512], where[OG_CONTRACT_POINTER_MAX + 8];
	size_t i;
	va_list ap;

	if (ld->failed)
		return false;
	ld->failed = true;
	if (ld->err == NULL || ld->errlen == 0)
		return false;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* Pointers hold member names from the file: keep their UTF-8 but not
	 * their control characters. */
	for (i = 0; i < ld->ptr.len; i++) {
		unsigned char c = (unsigned char)ld->ptr.s[i];

		where[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	where[i] = '\0';
	if (ld->ptr.cut)
		strcat(where, "/...");
	if (where[0] != '\0')
		snprintf(ld->err, ld->errlen, "%s: %s: %s", ld->file, where, msg);
	else
		snprintf(ld->err, ld->errlen, "%s: %s", ld->file, msg);
	utf8_trim_tail(ld->err);
	return false;
}

/* lfail() at member `name` of the current pointer. */
static bool lfail_at(struct loader *ld, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool
lfail_at(struct loader *ld, const char *name, const char *fmt, ...)
{
	char msg[512];
	struct mark m;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	m = ptr_push_str(&ld->ptr, name);
	lfail(ld, "%s", msg);
	ptr_pop(&ld->ptr, m);
	return false;
}

static bool
nomem(struct loader *ld)
{
	return lfail(ld, "out of memory");
}

/* Every member of obj must be one of allowed (NULL-terminated). */
static bool
check_members(struct loader *ld, const json_t *obj, const char *const *allowed,
              const char *what)
{
	char shown[SHOW_NAME_MAX + 8], list[512];
	const char *key;
	size_t key_len, i, o = 0;
	json_t *v;

	json_object_keylen_foreach((json_t *)(uintptr_t)obj, key, key_len, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strlen(allowed[i]) == key_len && memcmp(allowed[i], key, key_len) == 0)
				break;
		if (allowed[i] != NULL)
			continue;
		for (i = 0; allowed[i] != NULL && o < sizeof(list); i++)
			o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s",
			                      i > 0 ? ", " : "", allowed[i]);
		show(key, key_len, shown, sizeof(shown), SHOW_NAME_MAX);
		ptr_push(&ld->ptr, key, key_len);
		return lfail(ld, "%s \"%s\" (expected one of: %s)", what, shown, list);
	}
	return true;
}

/* An optional integer member within [lo, hi]; def when absent. */
static bool
get_int(struct loader *ld, const json_t *obj, const char *name, long long lo,
        long long hi, int def, int *out)
{
	json_t *v = json_object_get(obj, name);
	long long n;

	*out = def;
	if (v == NULL)
		return true;
	if (!num_integral(v, &n))
		return lfail_at(ld, name, "must be an integer, not %s", type_word(v));
	if (n < lo || n > hi)
		return lfail_at(ld, name, "%lld is out of range %lld..%lld", n, lo, hi);
	*out = (int)n;
	return true;
}

static bool
get_bool(struct loader *ld, const json_t *obj, const char *name, bool def,
         bool *out)
{
	json_t *v = json_object_get(obj, name);

	*out = def;
	if (v == NULL)
		return true;
	if (!json_is_boolean(v))
		return lfail_at(ld, name, "must be true or false, not %s", type_word(v));
	*out = json_is_true(v);
	return true;
}

/* [a-z0-9_.]{1,64} for effect types and targets; [a-z0-9_]{1,64} for
 * contract names (dots == false). */
static bool
name_ok(const char *s, size_t n, bool dots)
{
	size_t i;

	if (n == 0 || n > OG_CONTRACT_NAME_MAX)
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_' || (dots && s[i] == '.')))
			return false;
	return true;
}

/* A required member: a non-empty array of distinct names. */
static bool
get_names(struct loader *ld, const json_t *obj, const char *name,
          const char **out, size_t *count)
{
	json_t *arr = json_object_get(obj, name), *v;
	struct mark m;
	size_t i, j;

	if (arr == NULL)
		return lfail_at(ld, name, "missing (required)");
	if (!json_is_array(arr) || json_array_size(arr) == 0 ||
	    json_array_size(arr) > OG_CONTRACT_ALLOWED_MAX)
		return lfail_at(ld, name, "must be an array of 1..%d names",
		                OG_CONTRACT_ALLOWED_MAX);
	/* On an error the pointer is left where it points: loading stops. */
	m = ptr_push_str(&ld->ptr, name);
	json_array_foreach(arr, i, v) {
		struct mark mi = ptr_push_index(&ld->ptr, i);

		if (!json_is_string(v) ||
		    !name_ok(json_string_value(v), json_string_length(v), true))
			return lfail(ld, "must be a name of 1..%d characters [a-z0-9_.]",
			             OG_CONTRACT_NAME_MAX);
		for (j = 0; j < i; j++)
			if (strcmp(out[j], json_string_value(v)) == 0)
				return lfail(ld, "duplicate of entry %zu", j);
		out[i] = json_string_value(v);
		ptr_pop(&ld->ptr, mi);
	}
	ptr_pop(&ld->ptr, m);
	*count = json_array_size(arr);
	return true;
}

/* ---- schema compiler -------------------------------------------------------- */

static const char *const schema_keywords[] = {
	"type", "properties", "required", "additionalProperties", "enum", "const",
	"minLength", "maxLength", "minimum", "maximum", "items", "minItems",
	"maxItems", "title", "description", "$comment", NULL,
};

static void
schema_free(struct schema *s)
{
	size_t i;

	if (s == NULL)
		return;
	for (i = 0; i < s->nprops; i++)
		schema_free(s->props[i].schema);
	free(s->props);
	schema_free(s->items);
	free(s->enum_text);
	free(s);
}

static bool
compile_types(struct loader *ld, const json_t *t, unsigned *out)
{
	const json_t *names[NTYPES];
	struct mark m;
	size_t i, k, n;

	if (json_is_string(t)) {
		names[0] = t;
		n = 1;
	} else if (json_is_array(t) && json_array_size(t) >= 1 &&
	           json_array_size(t) <= NTYPES) {
		n = json_array_size(t);
		for (i = 0; i < n; i++)
			names[i] = json_array_get(t, i);
	} else {
		return lfail_at(ld, "type", "must be a type name or an array of 1..%zu "
		                "distinct type names", NTYPES);
	}
	*out = 0;
	m = ptr_push_str(&ld->ptr, "type");
	for (i = 0; i < n; i++) {
		struct mark mi = { ld->ptr.len, ld->ptr.cut };

		if (json_is_array(t))
			mi = ptr_push_index(&ld->ptr, i);
		for (k = 0; k < NTYPES; k++)
			if (json_is_string(names[i]) &&
			    strcmp(json_string_value(names[i]), type_names[k].name) == 0)
				break;
		if (k == NTYPES)
			return lfail(ld, "unknown type (expected string, number, integer, "
			             "boolean, object, array or null)");
		if (*out & type_names[k].bit)
			return lfail(ld, "type listed twice");
		*out |= type_names[k].bit;
		ptr_pop(&ld->ptr, mi);
	}
	ptr_pop(&ld->ptr, m);
	return true;
}

/* A count keyword (minLength, …): absent → -1. */
static bool
compile_count(struct loader *ld, const json_t *s, const char *name, long long *out)
{
	json_t *v = json_object_get(s, name);

	*out = -1;
	if (v == NULL)
		return true;
	if (!num_integral(v, out) || *out < 0)
		return lfail_at(ld, name, "must be a non-negative integer");
	return true;
}

/* The text an enum or const error quotes: compact JSON in ASCII, cut at
 * SHOW_VALUE_MAX bytes (safe to cut: JSON_ENSURE_ASCII). */
static char *
value_text(const json_t *v, bool is_enum)
{
	char *dump = canon_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY);
	char *out;
	size_t n;

	if (dump == NULL)
		return NULL;
	n = strlen(dump);
	out = malloc(SHOW_VALUE_MAX + 32);
	if (out != NULL) {
		if (n > SHOW_VALUE_MAX)
			snprintf(out, SHOW_VALUE_MAX + 32, "%s %.*s...",
			         is_enum ? "must be one of" : "must equal",
			         SHOW_VALUE_MAX, dump);
		else
			snprintf(out, SHOW_VALUE_MAX + 32, "%s %s",
			         is_enum ? "must be one of" : "must equal", dump);
	}
	free(dump);
	return out;
}

static struct schema *compile_schema(struct loader *ld, const json_t *j);

static bool
compile_properties(struct loader *ld, struct schema *s, const json_t *props)
{
	const char *key;
	size_t key_len, i = 0;
	struct mark m;
	json_t *v;
	bool ok = false;

	if (!json_is_object(props))
		return lfail_at(ld, "properties", "must be an object of schemas");
	s->props_obj = props;
	if (json_object_size(props) == 0)
		return true;
	s->props = calloc(json_object_size(props), sizeof(*s->props));
	if (s->props == NULL)
		return nomem(ld);
	m = ptr_push_str(&ld->ptr, "properties");
	json_object_keylen_foreach((json_t *)(uintptr_t)props, key, key_len, v) {
		struct mark mk = ptr_push(&ld->ptr, key, key_len);

		s->props[i].name = key;
		s->props[i].name_len = key_len;
		s->props[i].schema = compile_schema(ld, v);
		if (s->props[i].schema == NULL)
			goto out;
		s->nprops = ++i;
		ptr_pop(&ld->ptr, mk);
	}
	ok = true;
out:
	ptr_pop(&ld->ptr, m);
	return ok;
}

static bool
compile_required(struct loader *ld, struct schema *s, const json_t *req)
{
	struct mark m;
	size_t i, j;
	json_t *v;

	if (!json_is_array(req))
		return lfail_at(ld, "required", "must be an array of member names");
	m = ptr_push_str(&ld->ptr, "required");
	json_array_foreach(req, i, v) {
		struct mark mi = ptr_push_index(&ld->ptr, i);

		if (!json_is_string(v))
			return lfail(ld, "must be a string, not %s", type_word(v));
		for (j = 0; j < i; j++)
			if (json_same(json_array_get(req, j), v, 0))
				return lfail(ld, "duplicate of entry %zu", j);
		if (!s->additional &&
		    (s->props_obj == NULL ||
		     json_object_getn(s->props_obj, json_string_value(v),
		                      json_string_length(v)) == NULL))
			return lfail(ld, "names no member of \"properties\", and "
			             "additionalProperties is false");
		ptr_pop(&ld->ptr, mi);
	}
	ptr_pop(&ld->ptr, m);
	s->required = req;
	return true;
}

static bool
compile_bound(struct loader *ld, const json_t *j, const char *name,
              const json_t **out)
{
	json_t *v = json_object_get(j, name);

	*out = v;
	if (v != NULL && !json_is_number(v))
		return lfail_at(ld, name, "must be a number, not %s", type_word(v));
	return true;
}

/* Compiles the schema object j (the loader's pointer is at j). NULL on
 * error, with the error recorded. */
static struct schema *
compile_schema(struct loader *ld, const json_t *j)
{
	struct schema *s = NULL;
	const char *ann[] = { "title", "description", "$comment" };
	json_t *v;
	size_t i;
	bool ok = false;
	struct mark m;

	if (!json_is_object(j)) {
		lfail(ld, "a schema must be an object, not %s", type_word(j));
		return NULL;
	}
	if (!check_members(ld, j, schema_keywords, "unsupported schema keyword"))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		nomem(ld);
		return NULL;
	}
	s->additional = true;

	for (i = 0; i < sizeof(ann) / sizeof(ann[0]); i++) {
		v = json_object_get(j, ann[i]);
		if (v != NULL && !json_is_string(v)) {
			lfail_at(ld, ann[i], "must be a string");
			goto out;
		}
	}
	if ((v = json_object_get(j, "type")) != NULL && !compile_types(ld, v, &s->types))
		goto out;

	if ((v = json_object_get(j, "additionalProperties")) != NULL) {
		if (!json_is_boolean(v)) {
			lfail_at(ld, "additionalProperties", "must be true or false "
			         "(schemas are not supported here)");
			goto out;
		}
		s->additional = json_is_true(v);
	}
	if ((v = json_object_get(j, "properties")) != NULL &&
	    !compile_properties(ld, s, v))
		goto out;
	if ((v = json_object_get(j, "required")) != NULL && !compile_required(ld, s, v))
		goto out;

	if ((v = json_object_get(j, "enum")) != NULL) {
		if (!json_is_array(v) || json_array_size(v) == 0) {
			lfail_at(ld, "enum", "must be a non-empty array");
			goto out;
		}
		s->enum_values = v;
	}
	if ((v = json_object_get(j, "const")) != NULL)
		s->const_value = v;
	if (s->enum_values != NULL || s->const_value != NULL) {
		/* With both, enum is checked first, so its text is the one shown
		 * first; const's is built on demand (rare, and only ASCII). */
		s->enum_text = value_text(s->enum_values != NULL ? s->enum_values
		                                                 : s->const_value,
		                          s->enum_values != NULL);
		if (s->enum_text == NULL) {
			nomem(ld);
			goto out;
		}
	}

	if (!compile_count(ld, j, "minLength", &s->min_length) ||
	    !compile_count(ld, j, "maxLength", &s->max_length) ||
	    !compile_count(ld, j, "minItems", &s->min_items) ||
	    !compile_count(ld, j, "maxItems", &s->max_items) ||
	    !compile_bound(ld, j, "minimum", &s->minimum) ||
	    !compile_bound(ld, j, "maximum", &s->maximum))
		goto out;
	if (s->max_length >= 0 && s->min_length > s->max_length) {
		lfail_at(ld, "minLength", "is greater than maxLength");
		goto out;
	}
	if (s->max_items >= 0 && s->min_items > s->max_items) {
		lfail_at(ld, "minItems", "is greater than maxItems");
		goto out;
	}
	if (s->minimum != NULL && s->maximum != NULL && num_cmp(s->minimum, s->maximum) > 0) {
		lfail_at(ld, "minimum", "is greater than maximum");
		goto out;
	}

	if ((v = json_object_get(j, "items")) != NULL) {
		if (json_is_array(v)) {
			lfail_at(ld, "items", "must be one schema (the tuple form is not "
			         "supported)");
			goto out;
		}
		m = ptr_push_str(&ld->ptr, "items");
		s->items = compile_schema(ld, v);
		ptr_pop(&ld->ptr, m);
		if (s->items == NULL)
			goto out;
	}
	ok = true;
out:
	if (!ok) {
		schema_free(s);
		s = NULL;
	}
	return s;
}

/* Can `rest` (a pointer into the output) name something the schema allows?
 * Only a member that additionalProperties:false rules out is refused:
 * anything the schema leaves open might exist. */
static bool
schema_allows(const struct schema *s, const char *rest)
{
	char seg[OG_CONTRACT_POINTER_MAX + 1];
	size_t n, idx, i;
	const struct schema *next;

	while (s != NULL && *rest != '\0') {
		if (!jptr_next(&rest, seg, sizeof(seg), &n))
			return false;
		next = NULL;
		for (i = 0; i < s->nprops; i++)
			if (s->props[i].name_len == n && memcmp(s->props[i].name, seg, n) == 0)
				next = s->props[i].schema;
		if (next == NULL && jptr_index(seg, n, &idx) &&
		    (s->types == 0 || (s->types & T_ARRAY)))
			next = s->items;
		else if (next == NULL && !s->additional &&
		         (s->types & ~(unsigned)T_OBJECT) == 0 && s->types != 0)
			return false;
		s = next;
	}
	return true;
}

/* ---- gate ------------------------------------------------------------------- */

static const char *const gate_members[] = {
	"mode", "window_seconds", "auto_when", "sample_rate", "approvers",
	"expires_seconds", "allowed_decisions", "separation_of_duties", NULL,
};

static const char *const rule_members[] = { "path", "op", "value", NULL };

static const char *const mode_names[] = {
	[GATE_APPROVE_BEFORE_ACT] = "approve_before_act",
	[GATE_ACT_WITH_WINDOW] = "act_with_window",
	[GATE_APPROVE_BY_EXCEPTION] = "approve_by_exception",
};

static bool
compile_rule(struct loader *ld, struct contract *c, const json_t *j, struct rule *r)
{
	json_t *path = json_object_get(j, "path"), *op = json_object_get(j, "op");
	char seg[OG_CONTRACT_POINTER_MAX + 1] = "";
	const char *p, *full;
	size_t k, n;

	if (!json_is_object(j))
		return lfail(ld, "a rule must be an object {\"path\", \"op\", \"value\"}");
	if (!check_members(ld, j, rule_members, "unknown rule member"))
		return false;
	if (path == NULL || !json_is_string(path))
		return lfail_at(ld, "path", "must be a JSON Pointer string (required)");
	p = json_string_value(path);
	if (!ptr_valid(p))
		return lfail_at(ld, "path", "is not a valid JSON Pointer");
	/* "output" and "effect" contain neither '~' nor '/', so their escaped
	 * form is the plain one and the rest of the pointer starts 7 bytes in. */
	full = p;
	if (p[0] != '\0' && jptr_next(&p, seg, sizeof(seg), &n) &&
	    strcmp(seg, "output") == 0) {
		r->on_output = true;
		r->rest = full + 7;
		if (!schema_allows(c->schema, r->rest))
			return lfail_at(ld, "path", "names a field the schema does not allow");
	} else if (strcmp(seg, "effect") == 0 && *p != '\0' &&
	           jptr_next(&p, seg, sizeof(seg), &n) &&
	           (strcmp(seg, "type") == 0 || strcmp(seg, "target") == 0 ||
	            strcmp(seg, "payload") == 0)) {
		r->on_output = false;
		r->rest = full + 7;
	} else {
		return lfail_at(ld, "path", "must start with /output or /effect/type, "
		                "/effect/target, /effect/payload");
	}

	if (op == NULL || !json_is_string(op))
		return lfail_at(ld, "op", "must be a string (required)");
	for (k = 0; k < sizeof(op_names) / sizeof(op_names[0]); k++)
		if (strcmp(json_string_value(op), op_names[k]) == 0)
			break;
	if (k == sizeof(op_names) / sizeof(op_names[0]))
		return lfail_at(ld, "op", "unknown op (expected eq, ne, in, not_in, lt, "
		                "le, gt, ge or exists)");
	r->op = (enum rule_op)k;
	r->value = json_object_get(j, "value");

	switch (r->op) {
	case OP_EQ:
	case OP_NE:
		if (r->value == NULL)
			return lfail_at(ld, "value", "missing (required for %s)", op_names[k]);
		break;
	case OP_IN:
	case OP_NOT_IN:
		if (!json_is_array(r->value) || json_array_size(r->value) == 0)
			return lfail_at(ld, "value", "must be a non-empty array for %s",
			                op_names[k]);
		break;
	case OP_LT:
	case OP_LE:
	case OP_GT:
	case OP_GE:
		if (!json_is_number(r->value))
			return lfail_at(ld, "value", "must be a number for %s", op_names[k]);
		break;
	case OP_EXISTS:
		if (r->value != NULL && !json_is_boolean(r->value))
			return lfail_at(ld, "value", "must be true or false for exists");
		r->want = r->value == NULL || json_is_true(r->value);
		break;
	}
	return true;
}

static bool
approver_ok(const char *s, size_t n)
{
	bool group = n > 6 && strncmp(s, "group:", 6) == 0;
	size_t i;

	if (n == 0 || n > OG_CONTRACT_APPROVER_MAX || strlen(s) != n)
		return false;
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		/* Group names as identity providers emit them may hold inner
		 * spaces ("group:customer support"); subjects never do. */
		if (ch == ' ' && group && i > 6 && i < n - 1)
			continue;
		if (ch <= 0x20 || ch == 0x7f || ch == ',')
			return false;
	}
	return !(n == 6 && strncmp(s, "group:", 6) == 0);
}

static bool
approver_same(const char *a, const char *b)
{
	if (strchr(a, '@') != NULL && strchr(b, '@') != NULL &&
	    strncmp(a, "group:", 6) != 0 && strncmp(b, "group:", 6) != 0)
		return strcasecmp(a, b) == 0;
	return strcmp(a, b) == 0;
}

static bool
compile_approvers(struct loader *ld, struct contract *c, const json_t *gate)
{
	json_t *arr = json_object_get(gate, "approvers"), *v;
	struct mark m;
	size_t i, j;

	if (arr == NULL)
		return lfail_at(ld, "approvers", "missing (required)");
	if (!json_is_array(arr) || json_array_size(arr) == 0 ||
	    json_array_size(arr) > OG_CONTRACT_APPROVERS_MAX)
		return lfail_at(ld, "approvers", "must be an array of 1..%d approvers",
		                OG_CONTRACT_APPROVERS_MAX);
	m = ptr_push_str(&ld->ptr, "approvers");
	json_array_foreach(arr, i, v) {
		struct mark mi = ptr_push_index(&ld->ptr, i);

		if (!json_is_string(v) ||
		    !approver_ok(json_string_value(v), json_string_length(v)))
			return lfail(ld, "must be a subject or \"group:NAME\" of 1..%d "
			             "bytes without commas, and without spaces except inside "
			             "a group name", OG_CONTRACT_APPROVER_MAX);
		for (j = 0; j < i; j++)
			if (approver_same(c->approvers[j], json_string_value(v)))
				return lfail(ld, "duplicate of entry %zu", j);
		c->approvers[i] = json_string_value(v);
		ptr_pop(&ld->ptr, mi);
	}
	ptr_pop(&ld->ptr, m);
	c->napprovers = json_array_size(arr);
	return true;
}

static bool
compile_decisions(struct loader *ld, struct contract *c, const json_t *gate)
{
	json_t *arr = json_object_get(gate, "allowed_decisions"), *v;
	struct mark m;
	size_t i;

	if (arr == NULL) {
		c->allow_approve = c->allow_reject = true;
		return true;
	}
	if (!json_is_array(arr) || json_array_size(arr) == 0)
		return lfail_at(ld, "allowed_decisions", "must be a non-empty array of "
		                "\"approve\" and \"reject\"");
	m = ptr_push_str(&ld->ptr, "allowed_decisions");
	json_array_foreach(arr, i, v) {
		struct mark mi = ptr_push_index(&ld->ptr, i);
		bool *slot;

		if (json_is_string(v) && strcmp(json_string_value(v), "approve") == 0)
			slot = &c->allow_approve;
		else if (json_is_string(v) && strcmp(json_string_value(v), "reject") == 0)
			slot = &c->allow_reject;
		else
			return lfail(ld, "must be \"approve\" or \"reject\"");
		if (*slot)
			return lfail(ld, "listed twice");
		*slot = true;
		ptr_pop(&ld->ptr, mi);
	}
	ptr_pop(&ld->ptr, m);
	return true;
}

static bool
compile_gate(struct loader *ld, struct contract *c, const json_t *gate)
{
	json_t *v;
	struct mark m;
	size_t i, k;

	if (!json_is_object(gate))
		return lfail(ld, "must be an object");
	if (!check_members(ld, gate, gate_members, "unknown gate member"))
		return false;

	c->mode = GATE_APPROVE_BEFORE_ACT;
	if ((v = json_object_get(gate, "mode")) != NULL) {
		for (k = 0; k < sizeof(mode_names) / sizeof(mode_names[0]); k++)
			if (json_is_string(v) && strcmp(json_string_value(v), mode_names[k]) == 0)
				break;
		if (k == sizeof(mode_names) / sizeof(mode_names[0]))
			return lfail_at(ld, "mode", "must be \"approve_before_act\", "
			                "\"act_with_window\" or \"approve_by_exception\"");
		c->mode = (enum gate_mode)k;
	}

	/* Settings of another mode are refused rather than ignored: someone who
	 * writes window_seconds believes there is a window. */
	if (c->mode == GATE_ACT_WITH_WINDOW) {
		if (json_object_get(gate, "window_seconds") == NULL)
			return lfail_at(ld, "window_seconds", "missing (required for "
			                "act_with_window)");
		if (!get_int(ld, gate, "window_seconds", 1, OG_CONTRACT_WINDOW_MAX, 0,
		             &c->window_seconds))
			return false;
	} else if (json_object_get(gate, "window_seconds") != NULL) {
		return lfail_at(ld, "window_seconds", "only applies to act_with_window");
	}

	if (c->mode == GATE_APPROVE_BY_EXCEPTION) {
		v = json_object_get(gate, "auto_when");
		if (v == NULL)
			return lfail_at(ld, "auto_when", "missing (required for "
			                "approve_by_exception)");
		if (!json_is_array(v) || json_array_size(v) == 0 ||
		    json_array_size(v) > OG_CONTRACT_RULES_MAX)
			return lfail_at(ld, "auto_when", "must be an array of 1..%d rules",
			                OG_CONTRACT_RULES_MAX);
		m = ptr_push_str(&ld->ptr, "auto_when");
		for (i = 0; i < json_array_size(v); i++) {
			struct mark mi = ptr_push_index(&ld->ptr, i);

			if (!compile_rule(ld, c, json_array_get(v, i), &c->rules[i]))
				return false;
			ptr_pop(&ld->ptr, mi);
		}
		ptr_pop(&ld->ptr, m);
		c->nrules = json_array_size(v);

		c->sample_rate = 0;
		if ((v = json_object_get(gate, "sample_rate")) != NULL) {
			if (!json_is_number(v) || json_number_value(v) < 0 ||
			    json_number_value(v) > 1)
				return lfail_at(ld, "sample_rate", "must be a number from 0 to 1");
			c->sample_rate = json_number_value(v);
		}
	} else {
		if (json_object_get(gate, "auto_when") != NULL)
			return lfail_at(ld, "auto_when", "only applies to approve_by_exception");
		if (json_object_get(gate, "sample_rate") != NULL)
			return lfail_at(ld, "sample_rate", "only applies to approve_by_exception");
	}

	return compile_approvers(ld, c, gate) &&
	       get_int(ld, gate, "expires_seconds", OG_CONTRACT_EXPIRES_MIN,
	               OG_CONTRACT_EXPIRES_MAX, OG_CONTRACT_EXPIRES_DEFAULT,
	               &c->expires_seconds) &&
	       compile_decisions(ld, c, gate) &&
	       get_bool(ld, gate, "separation_of_duties", true, &c->separation_of_duties);
}

/* ---- one contract ------------------------------------------------------------ */

static const char *const top_members[] = {
	"name", "description", "schema", "gate", "effects", "repair_attempts",
	"loggable_fields", NULL,
};

static const char *const effects_members[] = {
	"allowed_types", "allowed_targets", "types", NULL,
};

static const char *const decl_members[] = { "schema", "from_output", NULL };

static void
contract_free(struct contract *c)
{
	size_t i;

	if (c == NULL)
		return;
	for (i = 0; i < c->ndecls; i++)
		schema_free(c->decls[i].schema);
	schema_free(c->schema);
	json_decref(c->doc);
	free(c);
}

/* Deeper than this and the document is refused before anything recurses
 * over it (jansson itself stops at JSON_PARSER_MAX_DEPTH). */
static bool
depth_ok(const json_t *v, unsigned depth)
{
	const char *key;
	size_t i;
	json_t *e;

	if (!json_is_object(v) && !json_is_array(v))
		return true;
	if (depth >= OG_JSON_DEPTH_MAX)
		return false;
	if (json_is_array(v)) {
		json_array_foreach(v, i, e)
			if (!depth_ok(e, depth + 1))
				return false;
	} else {
		json_object_foreach((json_t *)(uintptr_t)v, key, e)
			if (!depth_ok(e, depth + 1))
				return false;
	}
	return true;
}

static bool
compile_loggable(struct loader *ld, struct contract *c, const json_t *arr)
{
	struct mark m;
	size_t i, j;
	json_t *v;

	if (arr == NULL)
		return true;
	if (!json_is_array(arr) || json_array_size(arr) > OG_CONTRACT_LOGGABLE_MAX)
		return lfail_at(ld, "loggable_fields", "must be an array of at most %d "
		                "JSON Pointers", OG_CONTRACT_LOGGABLE_MAX);
	m = ptr_push_str(&ld->ptr, "loggable_fields");
	json_array_foreach(arr, i, v) {
		struct mark mi = ptr_push_index(&ld->ptr, i);

		if (!json_is_string(v) || !ptr_valid(json_string_value(v)) ||
		    json_string_value(v)[0] == '\0')
			return lfail(ld, "must be a JSON Pointer to a field of the output "
			             "(\"/label\"), not the whole output");
		if (!schema_allows(c->schema, json_string_value(v)))
			return lfail(ld, "names a field the schema does not allow");
		for (j = 0; j < i; j++)
			if (strcmp(c->loggable[j], json_string_value(v)) == 0)
				return lfail(ld, "duplicate of entry %zu", j);
		c->loggable[i] = json_string_value(v);
		ptr_pop(&ld->ptr, mi);
	}
	ptr_pop(&ld->ptr, m);
	c->nloggable = json_array_size(arr);
	return true;
}

/* effects.types.<type>.from_output: top-level members of the output that
 * the payload takes from it; the output's schema and the type's schema must
 * both allow each, so a typo cannot name a field that never exists. */
static bool
compile_from_output(struct loader *ld, struct contract *c, struct effect_decl *d,
                    const json_t *arr)
{
	char ptr[OG_CONTRACT_NAME_MAX + 2];
	struct mark m;
	size_t i, j;
	json_t *v;

	if (arr == NULL)
		return true;
	if (!json_is_array(arr) || json_array_size(arr) > OG_CONTRACT_FROM_OUTPUT_MAX)
		return lfail_at(ld, "from_output", "must be an array of at most %d member names",
		                OG_CONTRACT_FROM_OUTPUT_MAX);
	m = ptr_push_str(&ld->ptr, "from_output");
	json_array_foreach(arr, i, v) {
		struct mark mi = ptr_push_index(&ld->ptr, i);
		const char *name = json_string_value(v);

		if (name == NULL || !name_ok(name, json_string_length(v), false))
			return lfail(ld, "must be the name of a top-level member of the output, "
			             "1..%d characters [a-z0-9_]", OG_CONTRACT_NAME_MAX);
		snprintf(ptr, sizeof(ptr), "/%s", name);
		if (!schema_allows(c->schema, ptr))
			return lfail(ld, "names a member the output's schema does not allow");
		if (!schema_allows(d->schema, ptr))
			return lfail(ld, "names a member this type's schema does not allow");
		for (j = 0; j < i; j++)
			if (strcmp(d->from_output[j], name) == 0)
				return lfail(ld, "duplicate of entry %zu", j);
		d->from_output[i] = name;
		ptr_pop(&ld->ptr, mi);
	}
	ptr_pop(&ld->ptr, m);
	d->nfrom = json_array_size(arr);
	return true;
}

/* effects.types: {"<type>": {"schema": {…}, "from_output": [NAME, …]}}, each
 * type one of allowed_types. */
static bool
compile_effect_types(struct loader *ld, struct contract *c, const json_t *types)
{
	const char *key;
	size_t key_len, i;
	struct mark m;
	json_t *v;

	if (types == NULL)
		return true;
	if (!json_is_object(types))
		return lfail_at(ld, "types", "must be an object of effect types");
	m = ptr_push_str(&ld->ptr, "types");
	json_object_keylen_foreach((json_t *)(uintptr_t)types, key, key_len, v) {
		struct mark mt = ptr_push(&ld->ptr, key, key_len);
		struct effect_decl *d = &c->decls[c->ndecls];
		struct mark ms;

		for (i = 0; i < c->ntypes; i++)
			if (strlen(c->types[i]) == key_len && memcmp(c->types[i], key, key_len) == 0)
				break;
		if (i == c->ntypes)
			return lfail(ld, "is not one of allowed_types");
		if (!json_is_object(v))
			return lfail(ld, "must be an object {\"schema\", \"from_output\"}");
		if (!check_members(ld, v, decl_members, "unknown member"))
			return false;
		if (json_object_get(v, "schema") == NULL)
			return lfail_at(ld, "schema", "missing (required)");
		d->type = c->types[i];
		ms = ptr_push_str(&ld->ptr, "schema");
		d->schema = compile_schema(ld, json_object_get(v, "schema"));
		ptr_pop(&ld->ptr, ms);
		if (d->schema == NULL)
			return false;
		c->ndecls++;
		if (!compile_from_output(ld, c, d, json_object_get(v, "from_output")))
			return false;
		ptr_pop(&ld->ptr, mt);
	}
	ptr_pop(&ld->ptr, m);
	return true;
}

/* Builds a contract from the bytes of file `stem`.json. */
static struct contract *
contract_parse(struct loader *ld, const char *stem, const char *data, size_t len)
{
	struct contract *c = NULL;
	json_error_t jerr;
	char shown[sizeof(jerr.text) + 8];
	json_t *v, *eff;
	struct mark m;
	bool ok = false;

	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		nomem(ld);
		return NULL;
	}
	memcpy(c->hash, "sha256:", 7);
	digest_sha256_hex(data, len, c->hash + 7);

	c->doc = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (c->doc == NULL) {
		/* jansson quotes the offending input: keep it printable ASCII. */
		show(jerr.text, strlen(jerr.text), shown, sizeof(shown), sizeof(jerr.text));
		lfail(ld, "not valid JSON at line %d, column %d: %s", jerr.line,
		      jerr.column, canon_jansson_problem(jerr.text) ?: shown);
		goto out;
	}
	if (!json_is_object(c->doc)) {
		lfail(ld, "must be a JSON object");
		goto out;
	}
	if (!depth_ok(c->doc, 0)) {
		lfail(ld, "nested deeper than %d levels", OG_JSON_DEPTH_MAX);
		goto out;
	}
	if (!check_members(ld, c->doc, top_members, "unknown member"))
		goto out;

	v = json_object_get(c->doc, "name");
	if (v == NULL || !json_is_string(v)) {
		lfail_at(ld, "name", "must be a string (required)");
		goto out;
	}
	if (strcmp(json_string_value(v), stem) != 0 ||
	    json_string_length(v) != strlen(stem)) {
		lfail_at(ld, "name", "must equal the file name without .json (\"%s\")", stem);
		goto out;
	}
	snprintf(c->name, sizeof(c->name), "%s", stem);

	v = json_object_get(c->doc, "description");
	if (v != NULL && !json_is_string(v)) {
		lfail_at(ld, "description", "must be a string");
		goto out;
	}

	v = json_object_get(c->doc, "schema");
	if (v == NULL) {
		lfail_at(ld, "schema", "missing (required)");
		goto out;
	}
	m = ptr_push_str(&ld->ptr, "schema");
	c->schema = compile_schema(ld, v);
	ptr_pop(&ld->ptr, m);
	if (c->schema == NULL)
		goto out;

	v = json_object_get(c->doc, "gate");
	if (v == NULL) {
		lfail_at(ld, "gate", "missing (required)");
		goto out;
	}
	m = ptr_push_str(&ld->ptr, "gate");
	ok = compile_gate(ld, c, v);
	ptr_pop(&ld->ptr, m);
	if (!ok)
		goto out;
	ok = false;

	eff = json_object_get(c->doc, "effects");
	if (eff == NULL) {
		lfail_at(ld, "effects", "missing (required)");
		goto out;
	}
	m = ptr_push_str(&ld->ptr, "effects");
	ok = json_is_object(eff) ? true : lfail(ld, "must be an object");
	ok = ok && check_members(ld, eff, effects_members, "unknown member") &&
	     get_names(ld, eff, "allowed_types", c->types, &c->ntypes) &&
	     get_names(ld, eff, "allowed_targets", c->targets, &c->ntargets) &&
	     compile_effect_types(ld, c, json_object_get(eff, "types"));
	ptr_pop(&ld->ptr, m);
	if (!ok)
		goto out;
	ok = false;

	if (!get_int(ld, c->doc, "repair_attempts", 0, OG_CONTRACT_REPAIR_MAX,
	             OG_CONTRACT_REPAIR_DEFAULT, &c->repair_attempts) ||
	    !compile_loggable(ld, c, json_object_get(c->doc, "loggable_fields")))
		goto out;
	ok = true;
out:
	if (!ok) {
		contract_free(c);
		c = NULL;
	}
	return c;
}

/* ---- the directory ------------------------------------------------------------ */

/* Reads a regular file of at most OG_CONTRACT_FILE_MAX bytes. One byte more
 * than the cap is read so a file growing under us is caught too. */
static bool
read_file(struct loader *ld, int dfd, const char *name, char **out, size_t *len)
{
	struct stat st;
	char *data = NULL;
	size_t got = 0;
	ssize_t n;
	int fd;
	bool ok = false;

	*out = NULL;
	/* O_NONBLOCK: a FIFO dropped into the directory must not hang start-up. */
	fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return lfail(ld, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) != 0) {
		lfail(ld, "cannot stat: %s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		lfail(ld, "not a regular file");
		goto out;
	}
	if (st.st_size > OG_CONTRACT_FILE_MAX) {
		lfail(ld, "%lld bytes, over the %d byte cap", (long long)st.st_size,
		      OG_CONTRACT_FILE_MAX);
		goto out;
	}
	data = malloc(OG_CONTRACT_FILE_MAX + 1);
	if (data == NULL) {
		nomem(ld);
		goto out;
	}
	while (got < OG_CONTRACT_FILE_MAX + 1) {
		n = read(fd, data + got, OG_CONTRACT_FILE_MAX + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			lfail(ld, "cannot read: %s", strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got > OG_CONTRACT_FILE_MAX) {
		lfail(ld, "over the %d byte cap", OG_CONTRACT_FILE_MAX);
		goto out;
	}
	*out = data;
	*len = got;
	data = NULL;
	ok = true;
out:
	free(data);
	close(fd);
	return ok;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
contract_cmp(const void *key, const void *elem)
{
	return strcmp(key, (*(struct contract *const *)elem)->name);
}

struct contract_set *
contract_load_dir(const char *dir, char *err, size_t errlen)
{
	struct contract_set *set = NULL;
	struct loader ld;
	struct dirent *de;
	char **names = NULL, file[4096], *data = NULL;
	size_t nnames = 0, i, len, dlen;
	DIR *d = NULL;
	bool ok = false;

	memset(&ld, 0, sizeof(ld));
	ld.err = err;
	ld.errlen = errlen;
	ld.file = dir != NULL ? dir : "(null)";
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (dir == NULL || (d = opendir(dir)) == NULL) {
		lfail(&ld, "cannot open contracts directory: %s",
		      dir == NULL ? "no directory" : strerror(errno));
		goto out;
	}
	names = calloc(OG_CONTRACTS_MAX, sizeof(*names));
	set = calloc(1, sizeof(*set));
	if (names == NULL || set == NULL) {
		nomem(&ld);
		goto out;
	}
	for (;;) {
		/* readdir reports errors only through errno; anything called in
		 * the loop body may have left a stale value there. */
		errno = 0;
		de = readdir(d);
		if (de == NULL)
			break;
		len = strlen(de->d_name);
		/* Dot files are editor and tool debris, not contracts. */
		if (de->d_name[0] == '.' || len < 5 ||
		    strcmp(de->d_name + len - 5, ".json") != 0)
			continue;
		if (nnames == OG_CONTRACTS_MAX) {
			lfail(&ld, "more than %d contract files", OG_CONTRACTS_MAX);
			goto out;
		}
		names[nnames] = strdup(de->d_name);
		if (names[nnames] == NULL) {
			nomem(&ld);
			goto out;
		}
		nnames++;
	}
	if (errno != 0) {
		lfail(&ld, "cannot read contracts directory: %s", strerror(errno));
		goto out;
	}
	/* Name order: loads and their first error are the same on every host. */
	qsort(names, nnames, sizeof(*names), name_cmp);

	set->items = calloc(nnames > 0 ? nnames : 1, sizeof(*set->items));
	if (set->items == NULL) {
		nomem(&ld);
		goto out;
	}
	dlen = strlen(dir);
	for (i = 0; i < nnames; i++) {
		struct contract *c;
		char shown[FILE_SHOW_MAX + 8], stem[OG_CONTRACT_NAME_MAX + 1];

		show(names[i], strlen(names[i]), shown, sizeof(shown), FILE_SHOW_MAX);
		snprintf(file, sizeof(file), "%s%s%s", dir,
		         dlen > 0 && dir[dlen - 1] == '/' ? "" : "/", shown);
		ld.file = file;
		len = strlen(names[i]) - 5;
		if (!name_ok(names[i], len, false)) {
			lfail(&ld, "file name must be [a-z0-9_]{1,%d}.json",
			      OG_CONTRACT_NAME_MAX);
			goto out;
		}
		memcpy(stem, names[i], len);
		stem[len] = '\0';
		if (!read_file(&ld, dirfd(d), names[i], &data, &len))
			goto out;
		c = contract_parse(&ld, stem, data, len);
		free(data);
		data = NULL;
		if (c == NULL)
			goto out;
		set->items[set->count++] = c;
	}
	ok = true;
out:
	if (names != NULL)
		for (i = 0; i < nnames; i++)
			free(names[i]);
	free(names);
	free(data);
	if (d != NULL)
		closedir(d);
	if (!ok) {
		contract_set_free(set);
		set = NULL;
	}
	return set;
}

void
contract_set_free(struct contract_set *set)
{
	size_t i;

	if (set == NULL)
		return;
	for (i = 0; i < set->count; i++)
		contract_free(set->items[i]);
	free(set->items);
	free(set);
}

size_t
contract_count(const struct contract_set *set)
{
	return set != NULL ? set->count : 0;
}

const struct contract *
contract_at(const struct contract_set *set, size_t i)
{
	return set != NULL && i < set->count ? set->items[i] : NULL;
}

const struct contract *
contract_find(const struct contract_set *set, const char *name)
{
	struct contract **found;

	if (set == NULL || name == NULL || set->count == 0)
		return NULL;
	found = bsearch(name, set->items, set->count, sizeof(*set->items), contract_cmp);
	return found != NULL ? *found : NULL;
}

const char *
contract_name(const struct contract *c)
{
	return c->name;
}

const char *
contract_hash(const struct contract *c)
{
	return c->hash;
}

/* ---- validation ----------------------------------------------------------------- */

struct vstate {
	json_t *errors;
	size_t count;
	bool nomem;
	struct ptr path;
};

static bool
vfull(const struct vstate *vs)
{
	return vs->nomem || vs->count >= OG_CONTRACT_ERRORS_MAX;
}

static void verr(struct vstate *vs, const char *rule, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
verr(struct vstate *vs, const char *rule, const char *fmt, ...)
{
	char msg[SHOW_VALUE_MAX + 128];
	json_t *e, *path;
	size_t n;
	va_list ap;

	if (vfull(vs))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = strlen(msg);
	if (vs->path.cut)
		snprintf(msg + n, sizeof(msg) - n, " (at a member below this path)");
	/* Keys from json_loadb are valid UTF-8; one set with _nocheck might not
	 * be, and then the error still goes out, at the root. */
	path = json_stringn(vs->path.s, vs->path.len);
	if (path == NULL)
		path = json_string("");
	e = json_object();
	if (e == NULL) {
		json_decref(path);
		vs->nomem = true;
		return;
	}
	/* The _new setters consume their value even when they fail. */
	if (path == NULL || json_object_set_new(e, "path", path) != 0 ||
	    json_object_set_new(e, "rule", json_string(rule)) != 0 ||
	    json_object_set_new(e, "message", json_string(msg)) != 0) {
		json_decref(e);
		vs->nomem = true;
		return;
	}
	if (json_array_append_new(vs->errors, e) != 0) {
		vs->nomem = true;
		return;
	}
	vs->count++;
}

static void
type_list(unsigned types, char *out, size_t len)
{
	size_t k, o = 0, seen = 0, total = 0;

	for (k = 0; k < NTYPES; k++)
		if (types & type_names[k].bit)
			total++;
	out[0] = '\0';
	for (k = 0; k < NTYPES && o < len; k++) {
		if (!(types & type_names[k].bit))
			continue;
		seen++;
		o += (size_t)snprintf(out + o, len - o, "%s%s",
		                      seen == 1 ? "" : seen == total ? " or " : ", ",
		                      type_names[k].name);
	}
}

static void
validate(struct vstate *vs, const struct schema *s, const json_t *v)
{
	char a[64], b[64];
	const char *key;
	size_t key_len, i, n;
	struct mark m;
	json_t *e;

	if (vfull(vs))
		return;
	if (s->types != 0 && (s->types & type_bits(v)) == 0) {
		type_list(s->types, a, sizeof(a));
		verr(vs, "type", "must be %s %s, not %s",
		     (a[0] == 'a' || a[0] == 'i' || a[0] == 'o') ? "an" : "a", a,
		     type_word(v));
		return;
	}
	if (s->enum_values != NULL) {
		for (i = 0; i < json_array_size(s->enum_values); i++)
			if (json_same(json_array_get(s->enum_values, i), v, 0))
				break;
		if (i == json_array_size(s->enum_values))
			verr(vs, "enum", "%s", s->enum_text);
	}
	if (s->const_value != NULL && !json_same(s->const_value, v, 0)) {
		if (s->enum_values == NULL) {
			verr(vs, "const", "%s", s->enum_text);
		} else {
			char *t = value_text(s->const_value, false);

			if (t == NULL)
				vs->nomem = true;
			else
				verr(vs, "const", "%s", t);
			free(t);
		}
	}

	switch (json_typeof(v)) {
	case JSON_STRING:
		n = utf8_count(json_string_value(v), json_string_length(v));
		if (s->min_length >= 0 && n < (unsigned long long)s->min_length)
			verr(vs, "minLength", "must be at least %lld characters long, not %zu",
			     s->min_length, n);
		if (s->max_length >= 0 && n > (unsigned long long)s->max_length)
			verr(vs, "maxLength", "must be at most %lld characters long, not %zu",
			     s->max_length, n);
		break;
	case JSON_INTEGER:
	case JSON_REAL:
		if (s->minimum != NULL && num_cmp(v, s->minimum) < 0) {
			num_text(s->minimum, a, sizeof(a));
			num_text(v, b, sizeof(b));
			verr(vs, "minimum", "must be at least %s, not %s", a, b);
		}
		if (s->maximum != NULL && num_cmp(v, s->maximum) > 0) {
			num_text(s->maximum, a, sizeof(a));
			num_text(v, b, sizeof(b));
			verr(vs, "maximum", "must be at most %s, not %s", a, b);
		}
		break;
	case JSON_ARRAY:
		n = json_array_size(v);
		if (s->min_items >= 0 && n < (unsigned long long)s->min_items)
			verr(vs, "minItems", "must have at least %lld items, not %zu",
			     s->min_items, n);
		if (s->max_items >= 0 && n > (unsigned long long)s->max_items)
			verr(vs, "maxItems", "must have at most %lld items, not %zu",
			     s->max_items, n);
		if (s->items == NULL)
			break;
		for (i = 0; i < n && !vfull(vs); i++) {
			m = ptr_push_index(&vs->path, i);
			validate(vs, s->items, json_array_get(v, i));
			ptr_pop(&vs->path, m);
		}
		break;
	case JSON_OBJECT:
		/* A missing member is reported at its own path: that is what a
		 * reader (or a model repairing its output) has to add. */
		for (i = 0; s->required != NULL && i < json_array_size(s->required); i++) {
			e = json_array_get(s->required, i);
			if (json_object_getn(v, json_string_value(e), json_string_length(e)) != NULL)
				continue;
			m = ptr_push(&vs->path, json_string_value(e), json_string_length(e));
			verr(vs, "required", "is required but missing");
			ptr_pop(&vs->path, m);
		}
		for (i = 0; i < s->nprops && !vfull(vs); i++) {
			e = json_object_getn(v, s->props[i].name, s->props[i].name_len);
			if (e == NULL)
				continue;
			m = ptr_push(&vs->path, s->props[i].name, s->props[i].name_len);
			validate(vs, s->props[i].schema, e);
			ptr_pop(&vs->path, m);
		}
		if (s->additional)
			break;
		json_object_keylen_foreach((json_t *)(uintptr_t)v, key, key_len, e) {
			if (vfull(vs))
				break;
			if (s->props_obj != NULL && json_object_getn(s->props_obj, key, key_len) != NULL)
				continue;
			m = ptr_push(&vs->path, key, key_len);
			verr(vs, "additionalProperties", "is not allowed (no such property "
			     "in the schema)");
			ptr_pop(&vs->path, m);
		}
		break;
	default:
		break;
	}
}

json_t *
contract_validate(const struct contract *c, const json_t *output)
{
	struct vstate *vs;
	json_t *errors = NULL;

	/* The path buffer is a few KiB: on the heap, not a worker's stack. */
	vs = calloc(1, sizeof(*vs));
	if (vs == NULL)
		return NULL;
	vs->errors = json_array();
	if (vs->errors == NULL)
		goto out;
	if (output == NULL)
		verr(vs, "type", "no output");
	else
		validate(vs, c->schema, output);
	if (vs->nomem)
		goto out;
	errors = vs->errors;
	vs->errors = NULL;
out:
	json_decref(vs->errors);
	free(vs);
	return errors;
}

static const struct effect_decl *
decl_of(const struct contract *c, const char *type)
{
	size_t i;

	for (i = 0; c != NULL && type != NULL && i < c->ndecls; i++)
		if (strcmp(c->decls[i].type, type) == 0)
			return &c->decls[i];
	return NULL;
}

json_t *
contract_validate_effect(const struct contract *c, const char *type, const json_t *payload)
{
	const struct effect_decl *d = decl_of(c, type);
	struct vstate *vs;
	json_t *errors = NULL;

	vs = calloc(1, sizeof(*vs));
	if (vs == NULL)
		return NULL;
	vs->errors = json_array();
	if (vs->errors == NULL)
		goto out;
	(void)ptr_push_str(&vs->path, "effect");
	(void)ptr_push_str(&vs->path, "payload");
	if (d != NULL && payload == NULL)
		verr(vs, "type", "no payload");
	else if (d != NULL)
		validate(vs, d->schema, payload);
	if (vs->nomem)
		goto out;
	errors = vs->errors;
	vs->errors = NULL;
out:
	json_decref(vs->errors);
	free(vs);
	return errors;
}

bool
contract_effect_declared(const struct contract *c, const char *type)
{
	return decl_of(c, type) != NULL;
}

size_t
contract_from_output_count(const struct contract *c, const char *type)
{
	const struct effect_decl *d = decl_of(c, type);

	return d != NULL ? d->nfrom : 0;
}

const char *
contract_from_output(const struct contract *c, const char *type, size_t i)
{
	const struct effect_decl *d = decl_of(c, type);

	return d != NULL && i < d->nfrom ? d->from_output[i] : NULL;
}

/* ---- gate policy ------------------------------------------------------------------ */

enum gate_mode
contract_gate_mode(const struct contract *c)
{
	return c->mode;
}

const char *
contract_gate_mode_name(enum gate_mode mode)
{
	if ((unsigned)mode < sizeof(mode_names) / sizeof(mode_names[0]))
		return mode_names[mode];
	return "unknown";
}

int
contract_window_seconds(const struct contract *c)
{
	return c->window_seconds;
}

int
contract_expires_seconds(const struct contract *c)
{
	return c->expires_seconds;
}

int
contract_repair_attempts(const struct contract *c)
{
	return c->repair_attempts;
}

bool
contract_separation_of_duties(const struct contract *c)
{
	return c->separation_of_duties;
}

bool
contract_decision_allowed(const struct contract *c, const char *decision)
{
	if (decision == NULL)
		return false;
	if (strcmp(decision, "approve") == 0)
		return c->allow_approve;
	if (strcmp(decision, "reject") == 0)
		return c->allow_reject;
	return false;
}

json_t *
contract_allowed_decisions(const struct contract *c)
{
	json_t *a = json_array();

	if (a == NULL)
		return NULL;
	if ((c->allow_approve && json_array_append_new(a, json_string("approve")) != 0) ||
	    (c->allow_reject && json_array_append_new(a, json_string("reject")) != 0)) {
		json_decref(a);
		return NULL;
	}
	return a;
}

size_t
contract_approver_count(const struct contract *c)
{
	return c->napprovers;
}

const char *
contract_approver(const struct contract *c, size_t i)
{
	return i < c->napprovers ? c->approvers[i] : NULL;
}

bool
contract_approver_matches(const char *approver, const char *subject, const char *groups,
                          char sep)
{
	const char *g, *p, *tok, *end, *next;
	size_t glen;

	if (approver == NULL || subject == NULL || subject[0] == '\0')
		return false;
	if (strncmp(approver, "group:", 6) != 0)
		return approver_same(approver, subject) && strncmp(subject, "group:", 6) != 0;
	g = approver + 6;
	glen = strlen(g);
	if (glen == 0 || groups == NULL || sep == '\0')
		return false;
	/* Items split at sep, each trimmed of spaces and tabs and compared
	 * whole and exactly: "customer support" is not "support", nor is
	 * "Support". */
	for (p = groups;; p = next + 1) {
		next = strchr(p, sep);
		end = next != NULL ? next : p + strlen(p);
		tok = p;
		while (tok < end && (*tok == ' ' || *tok == '\t'))
			tok++;
		while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if ((size_t)(end - tok) == glen && memcmp(tok, g, glen) == 0)
			return true;
		if (next == NULL)
			return false;
	}
}

bool
contract_effect_allowed(const struct contract *c, const char *type, const char *target)
{
	size_t i;
	bool type_ok = false, target_ok = false;

	if (type == NULL || target == NULL)
		return false;
	for (i = 0; i < c->ntypes; i++)
		type_ok = type_ok || strcmp(c->types[i], type) == 0;
	for (i = 0; i < c->ntargets; i++)
		target_ok = target_ok || strcmp(c->targets[i], target) == 0;
	return type_ok && target_ok;
}

static bool
rule_holds(const struct rule *r, const json_t *output, const json_t *effect)
{
	const json_t *v = contract_pointer_get(r->on_output ? output : effect, r->rest);
	size_t i;

	if (r->op == OP_EXISTS)
		return (v != NULL) == r->want;
	if (v == NULL)
		return false;
	switch (r->op) {
	case OP_EQ:
		return json_same(v, r->value, 0);
	case OP_NE:
		return !json_same(v, r->value, 0);
	case OP_IN:
	case OP_NOT_IN:
		for (i = 0; i < json_array_size(r->value); i++)
			if (json_same(v, json_array_get(r->value, i), 0))
				return r->op == OP_IN;
		return r->op == OP_NOT_IN;
	case OP_LT:
		return json_is_number(v) && num_cmp(v, r->value) < 0;
	case OP_LE:
		return json_is_number(v) && num_cmp(v, r->value) <= 0;
	case OP_GT:
		return json_is_number(v) && num_cmp(v, r->value) > 0;
	case OP_GE:
		return json_is_number(v) && num_cmp(v, r->value) >= 0;
	case OP_EXISTS:
		break;
	}
	return false;
}

bool
contract_auto_eligible(const struct contract *c, const json_t *output, const json_t *effect)
{
	size_t i;

	if (c->mode != GATE_APPROVE_BY_EXCEPTION || c->nrules == 0)
		return false;
	for (i = 0; i < c->nrules; i++)
		if (!rule_holds(&c->rules[i], output, effect))
			return false;
	return true;
}

int
contract_sample_draw(double *draw)
{
	unsigned char b[8];
	uint64_t x = 0;
	size_t i;

	if (digest_random(b, sizeof(b)) != 0)
		return -1;
	for (i = 0; i < sizeof(b); i++)
		x = x << 8 | b[i];
	/* 53 bits: exactly representable, so the fraction is < 1. */
	*draw = (double)(x >> 11) / 9007199254740992.0;
	return 0;
}

double
contract_sample_rate(const struct contract *c)
{
	return c->mode == GATE_APPROVE_BY_EXCEPTION ? c->sample_rate : 0;
}

bool
contract_sampled(const struct contract *c, double draw)
{
	if (c->sample_rate <= 0)
		return false;
	/* a draw that is not one (NaN, out of range) sends the run to a person */
	if (c->sample_rate >= 1 || !(draw >= 0 && draw < 1))
		return true;
	return draw < c->sample_rate;
}

size_t
contract_loggable_count(const struct contract *c)
{
	return c->nloggable;
}

const char *
contract_loggable(const struct contract *c, size_t i)
{
	return i < c->nloggable ? c->loggable[i] : NULL;
}
