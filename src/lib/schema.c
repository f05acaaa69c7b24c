/*
 * schema.c — the JSON Schema subset of contracts (schema.h).
 *
 * The schema is compiled into a small tree of struct schema so that the
 * validator works on typed fields the compiler already vetted instead of
 * re-reading (and re-checking) JSON per request. Strings and values in the
 * tree are borrowed from the compiled document.
 *
 * Every recursion is bounded: the caller refuses documents nested deeper
 * than OG_JSON_DEPTH_MAX, the validator only descends where the schema
 * does, and JSON equality stops at the shallower of its two operands.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "canon.h"
#include "schema.h"
#include "schema_format.h"

/* enum / const values are quoted in error messages up to this many bytes. */
#define SHOW_VALUE_MAX 200

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
	enum schema_format format;    /* SCHEMA_FORMAT_NONE: none */
};

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
		return T_NUMBER | (jload_real_integral(json_real_value(v)) ? T_INTEGER : 0);
	case JSON_TRUE:
	case JSON_FALSE: return T_BOOLEAN;
	case JSON_NULL: return T_NULL;
	}
	return 0;
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

/* ---- schema compiler -------------------------------------------------------- */

static const char *const schema_keywords[] = {
	"type", "properties", "required", "additionalProperties", "enum", "const",
	"minLength", "maxLength", "minimum", "maximum", "items", "minItems",
	"maxItems", "format", "$schema", "$id", "$comment", "title", "description",
	"examples", "default", NULL,
};

/* Annotations that must be strings; "examples" must be an array and
 * "default" may be anything. */
static const char *const string_annotations[] = {
	"$schema", "$id", "$comment", "title", "description",
};

void
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
compile_types(struct jload *ld, const json_t *t, unsigned *out)
{
	const json_t *names[NTYPES];
	struct jptr_mark m;
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
		return jload_fail_at(ld, "type", "must be a type name or an array of 1..%zu "
		                "distinct type names", NTYPES);
	}
	*out = 0;
	m = jptr_push_str(&ld->at, "type");
	for (i = 0; i < n; i++) {
		struct jptr_mark mi = { ld->at.len, ld->at.cut };

		if (json_is_array(t))
			mi = jptr_push_index(&ld->at, i);
		for (k = 0; k < NTYPES; k++)
			if (json_is_string(names[i]) &&
			    strcmp(json_string_value(names[i]), type_names[k].name) == 0)
				break;
		if (k == NTYPES)
			return jload_fail(ld, "unknown type (expected string, number, integer, "
			             "boolean, object, array or null)");
		if (*out & type_names[k].bit)
			return jload_fail(ld, "type listed twice");
		*out |= type_names[k].bit;
		jptr_pop(&ld->at, mi);
	}
	jptr_pop(&ld->at, m);
	return true;
}

/* A count keyword (minLength, …): absent → -1. */
static bool
compile_count(struct jload *ld, const json_t *s, const char *name, long long *out)
{
	json_t *v = json_object_get(s, name);

	*out = -1;
	if (v == NULL)
		return true;
	if (!jload_integral(v, out) || *out < 0)
		return jload_fail_at(ld, name, "must be a non-negative integer");
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


static bool
compile_properties(struct jload *ld, struct schema *s, const json_t *props)
{
	const char *key;
	size_t key_len, i = 0;
	struct jptr_mark m;
	json_t *v;
	bool ok = false;

	if (!json_is_object(props))
		return jload_fail_at(ld, "properties", "must be an object of schemas");
	s->props_obj = props;
	if (json_object_size(props) == 0)
		return true;
	s->props = calloc(json_object_size(props), sizeof(*s->props));
	if (s->props == NULL)
		return jload_nomem(ld);
	m = jptr_push_str(&ld->at, "properties");
	json_object_keylen_foreach((json_t *)(uintptr_t)props, key, key_len, v) {
		struct jptr_mark mk = jptr_push(&ld->at, key, key_len);

		s->props[i].name = key;
		s->props[i].name_len = key_len;
		s->props[i].schema = schema_compile(ld, v);
		if (s->props[i].schema == NULL)
			goto out;
		s->nprops = ++i;
		jptr_pop(&ld->at, mk);
	}
	ok = true;
out:
	jptr_pop(&ld->at, m);
	return ok;
}

static bool
compile_required(struct jload *ld, struct schema *s, const json_t *req)
{
	struct jptr_mark m;
	size_t i, j;
	json_t *v;

	if (!json_is_array(req))
		return jload_fail_at(ld, "required", "must be an array of member names");
	m = jptr_push_str(&ld->at, "required");
	json_array_foreach(req, i, v) {
		struct jptr_mark mi = jptr_push_index(&ld->at, i);

		if (!json_is_string(v))
			return jload_fail(ld, "must be a string, not %s", jload_type_word(v));
		for (j = 0; j < i; j++)
			if (json_same(json_array_get(req, j), v, 0))
				return jload_fail(ld, "duplicate of entry %zu", j);
		if (!s->additional &&
		    (s->props_obj == NULL ||
		     json_object_getn(s->props_obj, json_string_value(v),
		                      json_string_length(v)) == NULL))
			return jload_fail(ld, "names no member of \"properties\", and "
			             "additionalProperties is false");
		jptr_pop(&ld->at, mi);
	}
	jptr_pop(&ld->at, m);
	s->required = req;
	return true;
}

static bool
compile_bound(struct jload *ld, const json_t *j, const char *name,
              const json_t **out)
{
	json_t *v = json_object_get(j, name);

	*out = v;
	if (v != NULL && !json_is_number(v))
		return jload_fail_at(ld, name, "must be a number, not %s", jload_type_word(v));
	return true;
}

/* A format this validator checks; any other is refused, since a schema
 * author who writes one believes it is checked. */
static bool
compile_format(struct jload *ld, const json_t *v, enum schema_format *out)
{
	char shown[JLOAD_SHOW_NAME_MAX + 8];

	if (!json_is_string(v))
		return jload_fail_at(ld, "format", "must be a string, not %s", jload_type_word(v));
	*out = schema_format_named(json_string_value(v), json_string_length(v));
	if (*out != SCHEMA_FORMAT_NONE)
		return true;
	jload_show(json_string_value(v), json_string_length(v), shown, sizeof(shown),
	           JLOAD_SHOW_NAME_MAX);
	return jload_fail_at(ld, "format", "unsupported format \"%s\" (supported: "
	                     "email, uri, date-time)", shown);
}

/* Compiles the schema object j (the loader's pointer is at j). NULL on
 * error, with the error recorded. */
struct schema *
schema_compile(struct jload *ld, const json_t *j)
{
	struct schema *s = NULL;
	json_t *v;
	size_t i;
	bool ok = false;
	struct jptr_mark m;

	if (!json_is_object(j)) {
		jload_fail(ld, "a schema must be an object, not %s", jload_type_word(j));
		return NULL;
	}
	if (!jload_members(ld, j, schema_keywords, "unsupported schema keyword"))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		jload_nomem(ld);
		return NULL;
	}
	s->additional = true;

	for (i = 0; i < sizeof(string_annotations) / sizeof(string_annotations[0]); i++) {
		v = json_object_get(j, string_annotations[i]);
		if (v != NULL && !json_is_string(v)) {
			jload_fail_at(ld, string_annotations[i], "must be a string");
			goto out;
		}
	}
	if ((v = json_object_get(j, "examples")) != NULL && !json_is_array(v)) {
		jload_fail_at(ld, "examples", "must be an array");
		goto out;
	}
	if ((v = json_object_get(j, "format")) != NULL && !compile_format(ld, v, &s->format))
		goto out;
	if ((v = json_object_get(j, "type")) != NULL && !compile_types(ld, v, &s->types))
		goto out;

	if ((v = json_object_get(j, "additionalProperties")) != NULL) {
		if (!json_is_boolean(v)) {
			jload_fail_at(ld, "additionalProperties", "must be true or false "
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
			jload_fail_at(ld, "enum", "must be a non-empty array");
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
			jload_nomem(ld);
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
		jload_fail_at(ld, "minLength", "is greater than maxLength");
		goto out;
	}
	if (s->max_items >= 0 && s->min_items > s->max_items) {
		jload_fail_at(ld, "minItems", "is greater than maxItems");
		goto out;
	}
	if (s->minimum != NULL && s->maximum != NULL && num_cmp(s->minimum, s->maximum) > 0) {
		jload_fail_at(ld, "minimum", "is greater than maximum");
		goto out;
	}

	if ((v = json_object_get(j, "items")) != NULL) {
		if (json_is_array(v)) {
			jload_fail_at(ld, "items", "must be one schema (the tuple form is not "
			         "supported)");
			goto out;
		}
		m = jptr_push_str(&ld->at, "items");
		s->items = schema_compile(ld, v);
		jptr_pop(&ld->at, m);
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
/* The walk of schema_allows: false when the pointer is ruled out; else
 * *at is the schema of the value it names, NULL when none constrains it. */
static bool
schema_walk(const struct schema *s, const char *rest, const struct schema **at)
{
	char seg[OG_CONTRACT_POINTER_MAX + 1];
	size_t n, idx, i;
	const struct schema *next;

	*at = NULL;
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
	*at = s;
	return true;
}

bool
schema_allows(const struct schema *s, const char *rest)
{
	const struct schema *at;

	return schema_walk(s, rest, &at);
}

bool
schema_allows_string(const struct schema *s, const char *rest)
{
	const struct schema *at;

	return schema_walk(s, rest, &at) && (at == NULL || at->types == 0 || (at->types & T_STRING));
}


struct vstate {
	json_t *errors;
	size_t count;
	bool nomem;
	struct jptr_buf path;
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

/* minLength/maxLength, minItems/maxItems: n against min and max (-1: none).
 * "must be at least 3 characters long", "must have at most 5 items". */
static void
check_count(struct vstate *vs, size_t n, long long min, long long max, const char *kw,
            const char *verb, const char *unit)
{
	char rule[16];

	if (min >= 0 && n < (unsigned long long)min) {
		snprintf(rule, sizeof(rule), "min%s", kw);
		verr(vs, rule, "must %s at least %lld %s, not %zu", verb, min, unit, n);
	}
	if (max >= 0 && n > (unsigned long long)max) {
		snprintf(rule, sizeof(rule), "max%s", kw);
		verr(vs, rule, "must %s at most %lld %s, not %zu", verb, max, unit, n);
	}
}

static void
validate(struct vstate *vs, const struct schema *s, const json_t *v)
{
	char a[64], b[64];
	const char *key;
	size_t key_len, i, n;
	struct jptr_mark m;
	json_t *e;

	if (vfull(vs))
		return;
	if (s->types != 0 && (s->types & type_bits(v)) == 0) {
		type_list(s->types, a, sizeof(a));
		verr(vs, "type", "must be %s %s, not %s",
		     (a[0] == 'a' || a[0] == 'i' || a[0] == 'o') ? "an" : "a", a,
		     jload_type_word(v));
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
		check_count(vs, n, s->min_length, s->max_length, "Length", "be", "characters long");
		if (s->format != SCHEMA_FORMAT_NONE &&
		    !schema_format_check(s->format, json_string_value(v), json_string_length(v)))
			verr(vs, "format", "%s", schema_format_expected(s->format));
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
		check_count(vs, n, s->min_items, s->max_items, "Items", "have", "items");
		if (s->items == NULL)
			break;
		for (i = 0; i < n && !vfull(vs); i++) {
			m = jptr_push_index(&vs->path, i);
			validate(vs, s->items, json_array_get(v, i));
			jptr_pop(&vs->path, m);
		}
		break;
	case JSON_OBJECT:
		/* A missing member is reported at its own path: that is what a
		 * reader (or a model repairing its output) has to add. */
		for (i = 0; s->required != NULL && i < json_array_size(s->required); i++) {
			e = json_array_get(s->required, i);
			if (json_object_getn(v, json_string_value(e), json_string_length(e)) != NULL)
				continue;
			m = jptr_push(&vs->path, json_string_value(e), json_string_length(e));
			verr(vs, "required", "is required but missing");
			jptr_pop(&vs->path, m);
		}
		for (i = 0; i < s->nprops && !vfull(vs); i++) {
			e = json_object_getn(v, s->props[i].name, s->props[i].name_len);
			if (e == NULL)
				continue;
			m = jptr_push(&vs->path, s->props[i].name, s->props[i].name_len);
			validate(vs, s->props[i].schema, e);
			jptr_pop(&vs->path, m);
		}
		if (s->additional)
			break;
		json_object_keylen_foreach((json_t *)(uintptr_t)v, key, key_len, e) {
			if (vfull(vs))
				break;
			if (s->props_obj != NULL && json_object_getn(s->props_obj, key, key_len) != NULL)
				continue;
			m = jptr_push(&vs->path, key, key_len);
			verr(vs, "additionalProperties", "is not allowed (no such property "
			     "in the schema)");
			jptr_pop(&vs->path, m);
		}
		break;
	default:
		break;
	}
}

json_t *
schema_validate(const struct schema *s, const json_t *instance, const char *at,
                const char *what)
{
	struct vstate *vs;
	json_t *errors = NULL;
	size_t n = strlen(at);

	/* The path buffer is a few KiB: on the heap, not a worker's stack. */
	vs = calloc(1, sizeof(*vs));
	if (vs == NULL)
		return NULL;
	vs->errors = json_array();
	if (vs->errors == NULL)
		goto out;
	if (n < sizeof(vs->path.s)) {
		memcpy(vs->path.s, at, n + 1);
		vs->path.len = n;
	} else {
		vs->path.cut = true;
	}
	if (instance == NULL)
		verr(vs, "type", "no %s", what);
	else
		validate(vs, s, instance);
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
schema_equal(const json_t *a, const json_t *b)
{
	return json_same(a, b, 0);
}

int
schema_num_cmp(const json_t *a, const json_t *b)
{
	return num_cmp(a, b);
}
