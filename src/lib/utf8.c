/*
 * utf8.c — the one UTF-8 decoder; see utf8.h.
 */
#include <string.h>

#include "utf8.h"

size_t
utf8_decode(const unsigned char *s, size_t n, long *cp)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;
	long v;

	*cp = -1;
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		need = 2;
		v = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		v = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		v = c & 0x07;
	} else {
		return 1; /* continuation byte, overlong lead C0/C1, or > U+10FFFF */
	}
	/* the second byte's range rules out overlongs and surrogates */
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	for (i = 1; i < need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi)
			return i;
		v = v << 6 | (s[i] & 0x3F);
		lo = 0x80;
		hi = 0xBF;
	}
	*cp = v;
	return need;
}

bool
utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	long cp;

	while (p < end) {
		p += utf8_decode(p, (size_t)(end - p), &cp);
		if (cp < 0)
			return false;
	}
	return true;
}

size_t
utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

size_t
utf8_encode(unsigned long cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

int
utf8_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

size_t
utf8_json_escape(unsigned char c, char out[6])
{
	static const char hex[] = "0123456789abcdef";

	out[0] = '\\';
	switch (c) {
	case '"': out[1] = '"'; return 2;
	case '\\': out[1] = '\\'; return 2;
	case '\b': out[1] = 'b'; return 2;
	case '\f': out[1] = 'f'; return 2;
	case '\n': out[1] = 'n'; return 2;
	case '\r': out[1] = 'r'; return 2;
	case '\t': out[1] = 't'; return 2;
	default:
		memcpy(out + 1, "u00", 3);
		out[4] = hex[c >> 4];
		out[5] = hex[c & 0xF];
		return 6;
	}
}
