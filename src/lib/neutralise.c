/*
 * neutralise.c — quoted text made inert for notices; see neutralise.h.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "neutralise.h"
#include "utf8.h"

/* Rule 2: bidi controls and characters that show nothing. */
static bool
hidden(long cp)
{
	return cp == 0x00ad || cp == 0x034f || cp == 0x061c || cp == 0x115f || cp == 0x1160 ||
	       cp == 0x17b4 || cp == 0x17b5 || cp == 0x180e || (cp >= 0x200b && cp <= 0x200f) ||
	       (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2064) ||
	       (cp >= 0x2066 && cp <= 0x2069) || cp == 0x3164 || cp == 0xfeff || cp == 0xffa0 ||
	       (cp >= 0xe0000 && cp <= 0xe007f);
}

/* Rule 1: what becomes a space. */
static bool
blank(long cp)
{
	return (cp >= 0 && cp <= 0x20) || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) ||
	       cp == 0x2028 || cp == 0x2029;
}

static bool
digit(long cp)
{
	return cp >= '0' && cp <= '9';
}

/* A character a host name or a word is made of: a dot between two of
 * these may start a link. */
static bool
wordish(long cp)
{
	if (cp < 0x80)
		return digit(cp) || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
		       cp == '-' || cp == '_';
	return cp >= 0xc0 && !hidden(cp) && !(cp >= 0x2000 && cp <= 0x2bff) &&
	       !(cp >= 0x3000 && cp <= 0x303f) && !(cp >= 0xfe00 && cp <= 0xfe0f) &&
	       !(cp >= 0xff00 && cp <= 0xff0f);
}

static bool
dot(long cp)
{
	return cp == '.' || cp == 0xff0e || cp == 0xff61;
}

/* Is the dot at s[at] one of three or more in a run of digits and dots? */
static bool
dotted_quad(const char *s, size_t n, size_t at)
{
	size_t i = at, dots = 0;

	while (i > 0 && (digit((unsigned char)s[i - 1]) || s[i - 1] == '.'))
		i--;
	for (; i < n && (digit((unsigned char)s[i]) || s[i] == '.'); i++)
		dots += s[i] == '.';
	return dots >= 3;
}

/* The code point at s[i..n) (-1 past the end), its length in *len. */
static long
cp_at(const char *s, size_t n, size_t i, size_t *len)
{
	long cp = -1;

	*len = i < n ? utf8_decode((const unsigned char *)s + i, n - i, &cp) : 0;
	return i < n ? cp : -2;
}

struct out {
	struct buf *b;
	enum neutralise_to to;
	bool bracket; /* the last byte written was a "]" */
};

/* Text of our own making (ASCII), with the chat escapes of rule 4. */
static int
put(struct out *o, const char *s)
{
	int rc = 0;

	for (; *s != '\0' && rc == 0; s++) {
		if (o->to == NEUTRALISE_CHAT && *s == '<')
			rc = buf_puts(o->b, "&lt;");
		else if (o->to == NEUTRALISE_CHAT && *s == '>')
			rc = buf_puts(o->b, "&gt;");
		else
			rc = buf_append(o->b, s, 1);
		o->bracket = *s == ']';
	}
	return rc;
}

/* One character of s that no rule rewrites, or an ASCII one rule 4 escapes. */
static int
put_char(struct out *o, const char *p, size_t len, long cp)
{
	const char *esc = NULL;
	bool bracket = o->bracket;

	o->bracket = false;
	if (o->to == NEUTRALISE_CHAT) {
		switch (cp) {
		case '&': esc = "&amp;"; break;
		case '<': esc = "&lt;"; break;
		case '>': esc = "&gt;"; break;
		case '\\': esc = "\\\\"; break;
		case '[': esc = "\\["; break;
		case ']': esc = "\\]"; o->bracket = true; break;
		case '(': esc = bracket ? "\\(" : NULL; break;
		default: break;
		}
	}
	if (esc != NULL)
		return buf_puts(o->b, esc);
	if (cp < 0)
		return buf_puts(o->b, "\xef\xbf\xbd");
	return buf_append(o->b, p, len);
}

int
neutralise_line(struct buf *b, const char *s, size_t max, enum neutralise_to to)
{
	struct out o = { b, to, false };
	size_t n = s != NULL ? strlen(s) : 0, i = 0, chars = 0, len, nlen;
	long cp, prev = -2, next;
	long kept = -2, prev_kept = -2; /* a character written as itself; -2: none */
	bool space = false;
	char esc[32];

	while (i < n) {
		cp = cp_at(s, n, i, &len);
		next = cp_at(s, n, i + len, &nlen);
		if (chars >= max)
			return put(&o, "\xe2\x80\xa6");
		if (blank(cp)) {
			if (!space && chars > 0 && put(&o, " ") != 0)
				return -1;
			space = true;
			kept = -2;
			goto next;
		}
		space = false;
		/* a joiner stays only between two visible letters past U+0300 as
		 * written (Persian, Indic, emoji sequences): after a blank or an
		 * escape it would join nothing the reader sees */
		kept = -2;
		if (hidden(cp) && !((cp == 0x200c || cp == 0x200d) && prev_kept >= 0x300 &&
		                    !hidden(prev_kept) && next >= 0x300 && !hidden(next))) {
			snprintf(esc, sizeof(esc), "<U+%04lX>", (unsigned long)cp);
			if (put(&o, esc) != 0)
				return -1;
		} else if ((cp == 'h' || cp == 'H') &&
		           (strncasecmp(s + i, "http:", 5) == 0 ||
		            strncasecmp(s + i, "https:", 6) == 0)) {
			/* the four letters count as four characters */
			if (put(&o, "hxxp") != 0)
				return -1;
			chars += 3;
			len = 4;
			cp = 'p';
		} else if (cp == ':' && next == '/' && i + 2 < n && s[i + 2] == '/') {
			if (put(&o, "[:]") != 0)
				return -1;
		} else if (dot(cp) && wordish(prev) && wordish(next) &&
		           (!digit(prev) || !digit(next) || dotted_quad(s, n, i))) {
			if (put(&o, "[.]") != 0)
				return -1;
		} else if (put_char(&o, s + i, len, cp) != 0) {
			return -1;
		} else {
			kept = cp;
		}
	next:
		prev_kept = kept;
		prev = cp;
		chars++;
		i += len;
	}
	return 0;
}
