/*
 * jptr.c — JSON Pointer (RFC 6901) evaluation.
 */
#include <stdint.h>
#include <string.h>

#include "jptr.h"

/* The longest reference token we evaluate; longer pointers are refused by
 * the callers' own caps long before this. */
#define JPTR_SEGMENT_MAX 4096

bool
jptr_next(const char **pp, char *seg, size_t segcap, size_t *seglen)
{
	const char *p = *pp;
	size_t n = 0;

	if (*p != '/')
		return false;
	for (p++; *p != '\0' && *p != '/'; p++) {
		char c = *p;

		if (c == '~') {
			if (p[1] == '0')
				c = '~';
			else if (p[1] == '1')
				c = '/';
			else
				return false;
			p++;
		}
		if (n + 1 >= segcap)
			return false;
		seg[n++] = c;
	}
	seg[n] = '\0';
	*seglen = n;
	*pp = p;
	return true;
}

bool
jptr_index(const char *s, size_t n, size_t *out)
{
	size_t v = 0, i;

	if (n == 0 || (n > 1 && s[0] == '0'))
		return false;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		if (v > (SIZE_MAX - (size_t)(s[i] - '0')) / 10)
			return false;
		v = v * 10 + (size_t)(s[i] - '0');
	}
	*out = v;
	return true;
}

bool
jptr_valid(const char *p, size_t max)
{
	char seg[JPTR_SEGMENT_MAX + 1];
	size_t n;

	if (p == NULL || strnlen(p, max + 1) > max)
		return false;
	while (*p != '\0')
		if (!jptr_next(&p, seg, sizeof(seg), &n))
			return false;
	return true;
}

json_t *
jptr_get(const json_t *doc, const char *p, size_t max)
{
	char seg[JPTR_SEGMENT_MAX + 1];
	json_t *cur = (json_t *)(uintptr_t)doc; /* jansson getters are not const-correct */
	size_t n, idx;

	if (doc == NULL || p == NULL || strnlen(p, max + 1) > max)
		return NULL;
	while (*p != '\0') {
		if (!jptr_next(&p, seg, sizeof(seg), &n))
			return NULL;
		if (json_is_object(cur))
			cur = json_object_getn(cur, seg, n);
		else if (json_is_array(cur) && jptr_index(seg, n, &idx))
			cur = json_array_get(cur, idx);
		else
			return NULL;
		if (cur == NULL)
			return NULL;
	}
	return cur;
}
