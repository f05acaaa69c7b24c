/*
 * jptr.c — JSON Pointer (RFC 6901) evaluation.
 */
#include <stdint.h>
#include <stdio.h>
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

struct jptr_mark
jptr_push(struct jptr_buf *p, const char *seg, size_t n)
{
	struct jptr_mark m = { p->len, p->cut };
	size_t need = 1, i;

	if (p->cut)
		return m;
	for (i = 0; i < n; i++)
		need += (seg[i] == '~' || seg[i] == '/') ? 2 : 1;
	if (need > sizeof(p->s) - 1 - p->len) {
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

struct jptr_mark
jptr_push_str(struct jptr_buf *p, const char *seg)
{
	return jptr_push(p, seg, strlen(seg));
}

struct jptr_mark
jptr_push_index(struct jptr_buf *p, size_t i)
{
	char num[24];
	int n = snprintf(num, sizeof(num), "%zu", i);

	return jptr_push(p, num, (size_t)n);
}

void
jptr_pop(struct jptr_buf *p, struct jptr_mark m)
{
	p->len = m.len;
	p->cut = m.cut;
	p->s[p->len] = '\0';
}
