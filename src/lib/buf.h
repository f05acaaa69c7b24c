/*
 * buf.h — a growable byte buffer with a hard cap fixed at creation.
 */
#ifndef OG_BUF_H
#define OG_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct buf {
	char *data;     /* always NUL-terminated when non-NULL */
	size_t len;
	size_t alloc;
	size_t cap;     /* len never exceeds cap */
	bool overflow;  /* an append was refused because of the cap */
};

void buf_init(struct buf *b, size_t cap);
void buf_free(struct buf *b);
void buf_reset(struct buf *b);
int buf_append(struct buf *b, const void *data, size_t len)
	__attribute__((warn_unused_result));
int buf_puts(struct buf *b, const char *s) __attribute__((warn_unused_result));
int buf_printf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), warn_unused_result));
/* Hands the data to the caller (never NULL on success) and resets the buffer. */
char *buf_steal(struct buf *b);

#endif
