/*
 * jload.c — pointer-located errors for documents people write.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "jload.h"

bool
jload_fail(struct jload *ld, const char *fmt, ...)
{
	va_list ap;

	if (ld->failed)
		return false;
	ld->failed = true;
	ld->where = ld->at;
	va_start(ap, fmt);
	vsnprintf(ld->msg, sizeof(ld->msg), fmt, ap);
	va_end(ap);
	return false;
}

bool
jload_fail_at(struct jload *ld, const char *name, const char *fmt, ...)
{
	char msg[sizeof(ld->msg)];
	struct jptr_mark m;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	m = jptr_push_str(&ld->at, name);
	jload_fail(ld, "%s", msg);
	jptr_pop(&ld->at, m);
	return false;
}

bool
jload_nomem(struct jload *ld)
{
	return jload_fail(ld, "out of memory");
}

bool
jload_members(struct jload *ld, const json_t *obj, const char *const *allowed,
              const char *what)
{
	char shown[JLOAD_SHOW_NAME_MAX + 8], list[512];
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
		jload_show(key, key_len, shown, sizeof(shown), JLOAD_SHOW_NAME_MAX);
		jptr_push(&ld->at, key, key_len);
		return jload_fail(ld, "%s \"%s\" (expected one of: %s)", what, shown, list);
	}
	return true;
}

bool
jload_int(struct jload *ld, const json_t *obj, const char *name, long long lo,
          long long hi, int def, int *out)
{
	json_t *v = json_object_get(obj, name);
	long long n;

	*out = def;
	if (v == NULL)
		return true;
	if (!jload_integral(v, &n))
		return jload_fail_at(ld, name, "must be an integer, not %s", jload_type_word(v));
	if (n < lo || n > hi)
		return jload_fail_at(ld, name, "%lld is out of range %lld..%lld", n, lo, hi);
	*out = (int)n;
	return true;
}

bool
jload_bool(struct jload *ld, const json_t *obj, const char *name, bool def, bool *out)
{
	json_t *v = json_object_get(obj, name);

	*out = def;
	if (v == NULL)
		return true;
	if (!json_is_boolean(v))
		return jload_fail_at(ld, name, "must be true or false, not %s",
		                     jload_type_word(v));
	*out = json_is_true(v);
	return true;
}

bool
jload_strings(struct jload *ld, const json_t *obj, const struct jload_list *l,
              const char **out, size_t *count)
{
	json_t *arr = json_object_get(obj, l->name), *v;
	struct jptr_mark m;
	size_t i, j;

	*count = 0;
	if (arr == NULL && l->min > 0)
		return jload_fail_at(ld, l->name, "missing (required)");
	if (arr == NULL)
		return true;
	if (!json_is_array(arr) || json_array_size(arr) < l->min ||
	    json_array_size(arr) > l->max) {
		if (l->min > 0)
			return jload_fail_at(ld, l->name, "must be an array of %zu..%zu %s",
			                     l->min, l->max, l->noun);
		return jload_fail_at(ld, l->name, "must be an array of at most %zu %s",
		                     l->max, l->noun);
	}
	/* On an error the pointer is left where it points: loading stops. */
	m = jptr_push_str(&ld->at, l->name);
	json_array_foreach(arr, i, v) {
		struct jptr_mark mi = jptr_push_index(&ld->at, i);

		if (!l->check(ld, v, l->arg))
			return false;
		for (j = 0; j < i; j++)
			if (l->same != NULL ? l->same(out[j], json_string_value(v))
			                    : strcmp(out[j], json_string_value(v)) == 0)
				return jload_fail(ld, "duplicate of entry %zu", j);
		out[i] = json_string_value(v);
		jptr_pop(&ld->at, mi);
	}
	jptr_pop(&ld->at, m);
	*count = json_array_size(arr);
	return true;
}

bool
jload_real_integral(double d)
{
	/* Every double of magnitude 2^53 or more is integral; below that the
	 * round trip through long long is exact. (No floor(): libog does not
	 * link libm.) */
	if (!isfinite(d))
		return false;
	if (d >= 9007199254740992.0 || d <= -9007199254740992.0)
		return true;
	return (double)(long long)d == d;
}

bool
jload_integral(const json_t *v, long long *out)
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
	if (!jload_real_integral(d) || d < -9223372036854775808.0 ||
	    d >= 9223372036854775808.0)
		return false;
	if (out != NULL)
		*out = (long long)d;
	return true;
}

const char *
jload_type_word(const json_t *v)
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

void
jload_show(const char *s, size_t n, char *out, size_t outlen, size_t max)
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

void
jload_format(const struct jload *ld, const char *file, char *err, size_t errlen)
{
	char where[sizeof(ld->where.s) + 8];
	size_t i;

	if (err == NULL || errlen == 0)
		return;
	/* Pointers hold member names from the file: keep their UTF-8 but not
	 * their control characters. */
	for (i = 0; i < ld->where.len; i++) {
		unsigned char c = (unsigned char)ld->where.s[i];

		where[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	where[i] = '\0';
	if (ld->where.cut)
		strcat(where, "/...");
	if (where[0] != '\0')
		snprintf(err, errlen, "%s: %s: %s", file, where, ld->msg);
	else
		snprintf(err, errlen, "%s: %s", file, ld->msg);
	utf8_trim_tail(err);
}
