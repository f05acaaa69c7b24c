/*
 * buf.c — growable byte buffer with a hard cap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

void
buf_init(struct buf *b, size_t cap)
{
	memset(b, 0, sizeof(*b));
	b->cap = cap;
}

void
buf_free(struct buf *b)
{
	if (b == NULL)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->alloc = 0;
	b->overflow = false;
}

void
buf_reset(struct buf *b)
{
	b->len = 0;
	b->overflow = false;
	if (b->data != NULL)
		b->data[0] = '\0';
}

static int
buf_grow(struct buf *b, size_t need)
{
	size_t n;
	char *p;

	if (need > b->cap) {
		b->overflow = true;
		return -1;
	}
	if (need + 1 <= b->alloc)
		return 0;
	n = b->alloc ? b->alloc : 256;
	while (n < need + 1)
		n *= 2;
	if (n > b->cap + 1)
		n = b->cap + 1;
	p = realloc(b->data, n);
	if (p == NULL)
		return -1;
	b->data = p;
	b->alloc = n;
	return 0;
}

int
buf_append(struct buf *b, const void *data, size_t len)
{
	if (len > b->cap - b->len) {
		b->overflow = true;
		return -1;
	}
	if (buf_grow(b, b->len + len) != 0)
		return -1;
	if (len > 0)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int
buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int
buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	if (buf_grow(b, b->len + (size_t)n) != 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *
buf_steal(struct buf *b)
{
	char *p;

	if (b->data == NULL && buf_grow(b, 0) != 0)
		return NULL;
	p = b->data;
	b->data = NULL;
	b->len = b->alloc = 0;
	b->overflow = false;
	return p;
}
