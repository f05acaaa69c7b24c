/*
 * page_text.c — what makes data safe on a page: values cleaned of what
 * must not reach a browser (invalid UTF-8, controls, noncharacters), text
 * and attribute values escaped, attribute names and URLs allowed only from
 * short lists.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "page_int.h"
#include "utf8.h"

#define PAGE_ATTR_NAME_MAX 64

/* Attributes whose value a browser loads or navigates to. */
static const char *const url_attrs[] = {
	"action", "background", "cite", "codebase", "data", "formaction",
	"href", "icon", "longdesc", "manifest", "ping", "poster", "src", NULL,
};

bool
page_in_list(const char *const *list, const char *s)
{
	for (; *list != NULL; list++)
		if (strcmp(*list, s) == 0)
			return true;
	return false;
}

bool
page_url_attr(const char *name)
{
	return page_in_list(url_attrs, name);
}

/* ---- cleaning values --------------------------------------------------- */

/* XML 1.0 cannot carry C0 controls (but tab and newline) nor U+FFFE/FFFF;
 * DEL and C1 controls have no business on a page; bidi embeddings,
 * overrides and isolates would let a model output reorder what the
 * approver reads (a key or a URL shown backwards). */
static bool
char_allowed(long cp)
{
	if (cp == '\t' || cp == '\n')
		return true;
	if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
		return false;
	if ((cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069))
		return false;
	return cp != 0xFFFE && cp != 0xFFFF;
}

/* Writes the cleaned s to out, which has room for 3 * strlen(s) + 1 bytes
 * (one byte becomes at most the three of U+FFFD); returns its length. */
size_t
page_clean_into(char *out, const char *s)
{
	const unsigned char *in = (const unsigned char *)s, *end = in + strlen(s);
	size_t n, o = 0;
	long cp;

	while (in < end) {
		if (*in == '\r') {
			/* as an XML parser would: \r\n and lone \r are \n */
			out[o++] = '\n';
			in += in[1] == '\n' ? 2 : 1;
			continue;
		}
		if (*in >= 0x20 && *in < 0x7F) { /* printable ASCII: as it is */
			out[o++] = (char)*in++;
			continue;
		}
		n = utf8_decode(in, (size_t)(end - in), &cp);
		if (cp >= 0 && char_allowed(cp)) {
			memcpy(out + o, in, n);
			o += n;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
		}
		in += n;
	}
	out[o] = '\0';
	return o;
}

static bool
attr_name_plain(const char *a)
{
	size_t i;

	if (a == NULL || a[0] < 'a' || a[0] > 'z')
		return false;
	for (i = 1; a[i] != '\0'; i++)
		if (i >= PAGE_ATTR_NAME_MAX ||
		    !((a[i] >= 'a' && a[i] <= 'z') || (a[i] >= '0' && a[i] <= '9') ||
		      a[i] == '-'))
			return false;
	return true;
}

/* Names a caller may never set: event handlers run script, style is
 * refused by the CSP anyway, srcdoc is a whole document, srcset a URL list
 * we do not parse, and the slot markers belong to the template. */
bool
page_attr_name_allowed(const char *a)
{
	return attr_name_plain(a) && strncmp(a, "on", 2) != 0 &&
	       strncmp(a, "xmlns", 5) != 0 && strcmp(a, "style") != 0 &&
	       strcmp(a, "srcdoc") != 0 && strcmp(a, "srcset") != 0 &&
	       strcmp(a, PAGE_SLOT) != 0 && strcmp(a, PAGE_REPEAT) != 0;
}

/* Relative URLs and http, https and mailto only. A colon before any of
 * / ? # means a scheme, and whatever stands before it must be exactly one
 * of those: browsers drop tabs and newlines inside a scheme
 * ("java\tscript:") and leading spaces and controls, so anything that is
 * not an exact match is refused rather than second-guessed. */
bool
page_url_allowed(const char *v)
{
	static const char *const schemes[] = { "http", "https", "mailto", NULL };
	const unsigned char *s = (const unsigned char *)v;
	char scheme[8];
	size_t n = 0;

	while (*s == ' ')
		s++;
	for (; *s != '\0'; s++) {
		if (*s == '/' || *s == '?' || *s == '#')
			return true;
		if (*s == ':') {
			if (n >= sizeof(scheme))
				return false; /* longer than any allowed scheme */
			scheme[n] = '\0';
			return page_in_list(schemes, scheme);
		}
		if (n < sizeof(scheme))
			scheme[n] = (char)((*s >= 'A' && *s <= 'Z') ? *s + 32 : *s);
		n++;
	}
	return true;
}


/* ---- escaping ---------------------------------------------------------- */

/* What s becomes in text content (attr false) or a double-quoted
 * attribute value, or NULL when it stays as it is. Tab and newline in
 * attributes become references so an XML parser does not normalise them
 * to spaces. */
static const char *
escape_of(char c, bool attr)
{
	switch (c) {
	case '&': return "&amp;";
	case '<': return "&lt;";
	case '>': return "&gt;";
	case '"': return attr ? "&quot;" : NULL;
	case '\t': return attr ? "&#9;" : NULL;
	case '\n': return attr ? "&#10;" : NULL;
	case '\r': return "&#13;";
	default: return NULL;
	}
}

static size_t
escaped_len(const char *s, size_t len, bool attr)
{
	const char *rep;
	size_t i, n = len;

	for (i = 0; i < len; i++) {
		/* nothing at or above '?' (and no byte of UTF-8) is escaped */
		if ((unsigned char)s[i] >= '?')
			continue;
		if ((rep = escape_of(s[i], attr)) != NULL)
			n += strlen(rep) - 1;
	}
	return n;
}

/* out has room for escaped_len(s, len, attr) + 1 bytes. */
static void
escape_into(char *out, const char *s, size_t len, bool attr)
{
	const char *rep;
	size_t i, o = 0, r;

	for (i = 0; i < len; i++) {
		if ((unsigned char)s[i] >= '?' ||
		    (rep = escape_of(s[i], attr)) == NULL) {
			out[o++] = s[i];
			continue;
		}
		r = strlen(rep);
		memcpy(out + o, rep, r);
		o += r;
	}
	out[o] = '\0';
}

/* s escaped, in arena a (s itself when nothing needs escaping and s is
 * already there: pass in_arena). NULL when memory runs out. */
const char *
page_escape_to(struct arena *a, const char *s, size_t len, bool attr,
          bool in_arena, size_t *outlen)
{
	size_t n = escaped_len(s, len, attr);
	char *e;

	*outlen = n;
	if (n == len && in_arena)
		return s;
	if ((e = page_arena_alloc(a, n + 1)) == NULL)
		return NULL;
	escape_into(e, s, len, attr);
	return e;
}

