/*
 * canon.c — strict JSON parser and canonical serialiser.
 *
 * Two passes: a recursive-descent parser builds a tree in an arena (numbers
 * keep their input text, strings are decoded to UTF-8), then the tree is
 * written out with object members sorted by key. Everything lives in one
 * arena that is freed at once, so no error path can leak a node.
 *
 * Strictness is deliberate: two inputs must hash alike exactly when they
 * are the same JSON value, so anything a lenient parser would "repair"
 * (trailing commas, comments, NaN, leading zeros, duplicate names, invalid
 * UTF-8) is refused instead of guessed at.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "canon.h"
#include "digest.h"
#include "caps.h"

enum node_type {
	NODE_NULL,
	NODE_TRUE,
	NODE_FALSE,
	NODE_NUMBER,
	NODE_STRING,
	NODE_ARRAY,
	NODE_OBJECT,
};

struct node {
	struct node *next;      /* next element / member in input order */
	struct node *child;     /* array: first element */
	struct node **members;  /* object: members sorted by key */
	const char *key;        /* member name (decoded), when inside an object */
	size_t key_len;
	const char *text;       /* number: input span; string: decoded bytes */
	size_t text_len;
	size_t count;           /* array elements / object members */
	enum node_type type;
};

/* Chunks are big enough that a 256 KiB payload needs only a handful. */
#define ARENA_CHUNK (64 * 1024)

struct arena_chunk {
	struct arena_chunk *prev;
	size_t used;
	size_t size;
	max_align_t data[];
};

struct arena {
	struct arena_chunk *top;
};

struct parser {
	const char *p;
	const char *end;
	const char *bad;        /* where the problem is, when parsing fails */
	struct arena arena;
	unsigned depth;
	long surrogate;         /* the lone surrogate, for CANON_LONE_SURROGATE */
};

struct out {
	char *data;
	size_t len;
	size_t alloc;
};

static void *
arena_alloc(struct arena *a, size_t size)
{
	struct arena_chunk *c = a->top;
	size_t align = sizeof(max_align_t);
	size_t need, csize;

	if (size > SIZE_MAX - align)
		return NULL;
	need = (size + align - 1) / align * align;
	if (c == NULL || c->size - c->used < need) {
		csize = need > ARENA_CHUNK ? need : ARENA_CHUNK;
		if (csize > SIZE_MAX - sizeof(*c))
			return NULL;
		c = malloc(sizeof(*c) + csize);
		if (c == NULL)
			return NULL;
		c->prev = a->top;
		c->used = 0;
		c->size = csize;
		a->top = c;
	}
	c->used += need;
	return (char *)c->data + c->used - need;
}

static void
arena_free(struct arena *a)
{
	struct arena_chunk *c = a->top, *prev;

	while (c != NULL) {
		prev = c->prev;
		free(c);
		c = prev;
	}
	a->top = NULL;
}

static void
skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
	                           *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Reads the 4 hex digits of a \u escape at p (p + 4 <= end checked by the
 * caller); -1 if they are not hex. */
static long
read_hex4(const char *p)
{
	long v = 0;
	int i, h;

	for (i = 0; i < 4; i++) {
		h = hex_value(p[i]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0 if it is not
 * one (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
static size_t
utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t len, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4;
	else
		return 0;
	if (n < len)
		return 0;
	/* The second byte carries the range restrictions. */
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return len;
}

static size_t
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

/* Parses the string whose opening quote is at ps->p. The decoded text is
 * never longer than the input span (every escape is at least as long as
 * what it stands for), so one arena block of that size is enough. */
static enum canon_rc
parse_string(struct parser *ps, const char **text, size_t *text_len)
{
	const char *start = ps->p + 1, *q = start, *close;
	char *dst, *w;
	long cp, lo;
	size_t n;

	/* Find the closing quote first; bytes >= 0x80 are never '"' or '\\'. */
	while (q < ps->end && *q != '"') {
		if (*q == '\\' && ++q == ps->end)
			break;
		q++;
	}
	if (q >= ps->end)
		return CANON_SYNTAX;
	close = q;

	dst = arena_alloc(&ps->arena, (size_t)(close - start) + 1);
	if (dst == NULL)
		return CANON_NOMEM;
	w = dst;
	q = start;
	while (q < close) {
		unsigned char c = (unsigned char)*q;

		ps->bad = q;
		if (c < 0x20)
			return CANON_CONTROL;
		if (c >= 0x80) {
			n = utf8_seq_len((const unsigned char *)q, (size_t)(close - q));
			if (n == 0)
				return CANON_BAD_UTF8;
			memcpy(w, q, n);
			w += n;
			q += n;
			continue;
		}
		if (c != '\\') {
			*w++ = (char)c;
			q++;
			continue;
		}
		q++; /* the prescan guarantees a byte after the backslash */
		switch (*q) {
		case '"': *w++ = '"'; q++; continue;
		case '\\': *w++ = '\\'; q++; continue;
		case '/': *w++ = '/'; q++; continue;
		case 'b': *w++ = '\b'; q++; continue;
		case 'f': *w++ = '\f'; q++; continue;
		case 'n': *w++ = '\n'; q++; continue;
		case 'r': *w++ = '\r'; q++; continue;
		case 't': *w++ = '\t'; q++; continue;
		case 'u': break;
		default: return CANON_SYNTAX;
		}
		if (close - q < 5 || (cp = read_hex4(q + 1)) < 0)
			return CANON_SYNTAX;
		q += 5;
		/* jsonb cannot store U+0000, and C strings end there */
		if (cp == 0)
			return CANON_NUL;
		ps->surrogate = cp;
		if (cp >= 0xDC00 && cp <= 0xDFFF)
			return CANON_LONE_SURROGATE;
		if (cp >= 0xD800 && cp <= 0xDBFF) {
			if (close - q < 6 || q[0] != '\\' || q[1] != 'u')
				return CANON_LONE_SURROGATE;
			lo = read_hex4(q + 2);
			if (lo < 0)
				return CANON_SYNTAX;
			if (lo < 0xDC00 || lo > 0xDFFF)
				return CANON_LONE_SURROGATE;
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			q += 6;
		}
		w += utf8_encode((unsigned long)cp, w);
	}
	*w = '\0';
	*text = dst;
	*text_len = (size_t)(w - dst);
	ps->p = close + 1;
	return CANON_OK;
}

/* Whether the number text (valid RFC 8259 syntax) is one an IEEE 754
 * double can hold: not beyond ±DBL_MAX, and not a non-zero value so small
 * it would round to zero. Every consumer (jsonb, JavaScript, jansson)
 * would otherwise turn it into something else or fail on it. */
static bool
number_in_range(const char *text, size_t len)
{
	char buf[OG_JSON_NUMBER_MAX + 1];
	const char *p;
	bool nonzero = false;
	double v;

	if (len > OG_JSON_NUMBER_MAX)
		return false;
	memcpy(buf, text, len);
	buf[len] = '\0';
	for (p = buf; *p != '\0' && *p != 'e' && *p != 'E'; p++)
		if (*p >= '1' && *p <= '9')
			nonzero = true;
	/* Even a zero: jsonb (PostgreSQL numeric) refuses an exponent beyond
	 * this, and no double needs one (at most 1000 characters of digits
	 * around it). */
	if (*p != '\0') {
		long e = 0;

		for (p++; *p == '+' || *p == '-'; p++)
			;
		for (; *p != '\0'; p++)
			if ((e = e * 10 + (*p - '0')) > OG_JSON_EXPONENT_MAX)
				return false;
	}
	errno = 0;
	v = strtod(buf, NULL);
	if (v == HUGE_VAL || v == -HUGE_VAL)
		return false;
	return !(nonzero && v == 0.0);
}

/* RFC 8259 number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)? */
static enum canon_rc
parse_number(struct parser *ps, struct node *n)
{
	const char *p = ps->p, *end = ps->end;

	if (p < end && *p == '-')
		p++;
	if (p >= end || !is_digit(*p))
		return CANON_SYNTAX;
	if (*p == '0')
		p++;
	else
		while (p < end && is_digit(*p))
			p++;
	if (p < end && *p == '.') {
		p++;
		if (p >= end || !is_digit(*p))
			return CANON_SYNTAX;
		while (p < end && is_digit(*p))
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (p >= end || !is_digit(*p))
			return CANON_SYNTAX;
		while (p < end && is_digit(*p))
			p++;
	}
	n->type = NODE_NUMBER;
	n->text = ps->p;
	n->text_len = (size_t)(p - ps->p);
	if (!number_in_range(n->text, n->text_len)) {
		ps->bad = ps->p;
		return n->text_len > OG_JSON_NUMBER_MAX ? CANON_NUMBER_LONG : CANON_NUMBER_RANGE;
	}
	ps->p = p;
	return CANON_OK;
}

static enum canon_rc
parse_literal(struct parser *ps, const char *word, enum node_type type,
              struct node *n)
{
	size_t len = strlen(word);

	if ((size_t)(ps->end - ps->p) < len || memcmp(ps->p, word, len) != 0)
		return CANON_SYNTAX;
	ps->p += len;
	n->type = type;
	return CANON_OK;
}

static int
member_cmp(const void *a, const void *b)
{
	const struct node *x = *(struct node *const *)a;
	const struct node *y = *(struct node *const *)b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = memcmp(x->key, y->key, n);

	if (c != 0)
		return c;
	return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

static enum canon_rc parse_value(struct parser *ps, struct node **out);

static enum canon_rc
parse_array(struct parser *ps, struct node *n)
{
	struct node **tail = &n->child;
	enum canon_rc rc;

	n->type = NODE_ARRAY;
	ps->p++; /* '[' */
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
		return CANON_OK;
	}
	for (;;) {
		rc = parse_value(ps, tail);
		if (rc != CANON_OK)
			return rc;
		tail = &(*tail)->next;
		n->count++;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return CANON_SYNTAX;
		if (*ps->p == ']') {
			ps->p++;
			return CANON_OK;
		}
		if (*ps->p != ',')
			return CANON_SYNTAX;
		ps->p++;
	}
}

static enum canon_rc
parse_object(struct parser *ps, struct node *n)
{
	struct node *first = NULL, **tail = &first, *m;
	const char *key;
	size_t key_len, i;
	enum canon_rc rc;

	n->type = NODE_OBJECT;
	ps->p++; /* '{' */
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		return CANON_OK;
	}
	for (;;) {
		skip_ws(ps);
		if (ps->p >= ps->end || *ps->p != '"')
			return CANON_SYNTAX;
		rc = parse_string(ps, &key, &key_len);
		if (rc != CANON_OK)
			return rc;
		skip_ws(ps);
		if (ps->p >= ps->end || *ps->p != ':')
			return CANON_SYNTAX;
		ps->p++;
		rc = parse_value(ps, tail);
		if (rc != CANON_OK)
			return rc;
		(*tail)->key = key;
		(*tail)->key_len = key_len;
		tail = &(*tail)->next;
		n->count++;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return CANON_SYNTAX;
		if (*ps->p == '}') {
			ps->p++;
			break;
		}
		if (*ps->p != ',')
			return CANON_SYNTAX;
		ps->p++;
	}

	/* Sorting also makes duplicates adjacent: O(n log n), not O(n^2). */
	n->members = arena_alloc(&ps->arena, n->count * sizeof(*n->members));
	if (n->members == NULL)
		return CANON_NOMEM;
	for (i = 0, m = first; m != NULL; m = m->next)
		n->members[i++] = m;
	qsort(n->members, n->count, sizeof(*n->members), member_cmp);
	for (i = 1; i < n->count; i++)
		if (member_cmp(&n->members[i - 1], &n->members[i]) == 0)
			return CANON_DUPLICATE_KEY;
	return CANON_OK;
}

static enum canon_rc
parse_value(struct parser *ps, struct node **out)
{
	struct node *n;
	enum canon_rc rc;

	skip_ws(ps);
	ps->bad = ps->p;
	if (ps->p >= ps->end)
		return CANON_SYNTAX;
	n = arena_alloc(&ps->arena, sizeof(*n));
	if (n == NULL)
		return CANON_NOMEM;
	memset(n, 0, sizeof(*n));
	*out = n;

	switch (*ps->p) {
	case '{':
	case '[':
		if (ps->depth >= OG_JSON_DEPTH_MAX) {
			ps->bad = ps->p;
			return CANON_DEPTH;
		}
		ps->depth++;
		rc = *ps->p == '{' ? parse_object(ps, n) : parse_array(ps, n);
		ps->depth--;
		return rc;
	case '"':
		n->type = NODE_STRING;
		return parse_string(ps, &n->text, &n->text_len);
	case 't':
		return parse_literal(ps, "true", NODE_TRUE, n);
	case 'f':
		return parse_literal(ps, "false", NODE_FALSE, n);
	case 'n':
		return parse_literal(ps, "null", NODE_NULL, n);
	default:
		return parse_number(ps, n);
	}
}

/* Parses the whole of in[0..len) as one JSON value; *root lives in
 * ps->arena, which the caller frees whatever the result. */
static enum canon_rc
parse_document(struct parser *ps, const char *in, size_t len, struct node **root)
{
	enum canon_rc rc;

	ps->arena.top = NULL;
	ps->depth = 0;
	ps->bad = NULL;
	ps->surrogate = 0;
	if (in == NULL)
		return CANON_SYNTAX;
	ps->p = in;
	ps->end = in + len;
	rc = parse_value(ps, root);
	if (rc != CANON_OK)
		return rc;
	skip_ws(ps);
	if (ps->p != ps->end)
		return CANON_SYNTAX;
	return CANON_OK;
}

static bool
out_reserve(struct out *o, size_t more)
{
	size_t want;
	char *p;

	if (o->alloc - o->len > more)
		return true;
	if (more > SIZE_MAX / 2 - o->len)
		return false;
	want = o->alloc * 2;
	if (want < o->len + more + 1)
		want = o->len + more + 1;
	p = realloc(o->data, want);
	if (p == NULL)
		return false;
	o->data = p;
	o->alloc = want;
	return true;
}

static bool
out_put(struct out *o, const char *s, size_t n)
{
	if (!out_reserve(o, n))
		return false;
	memcpy(o->data + o->len, s, n);
	o->len += n;
	o->data[o->len] = '\0';
	return true;
}

static bool
emit_string(struct out *o, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const char *run = s, *end = s + len, *p;
	char esc[6];
	size_t esc_len;

	if (!out_put(o, "\"", 1))
		return false;
	/* Copy unescaped runs whole; only '"', '\\' and controls need work. */
	for (p = s; p < end; p++) {
		unsigned char c = (unsigned char)*p;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		if (!out_put(o, run, (size_t)(p - run)))
			return false;
		esc[0] = '\\';
		esc_len = 2;
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 0xF];
			esc_len = 6;
			break;
		}
		if (!out_put(o, esc, esc_len))
			return false;
		run = p + 1;
	}
	return out_put(o, run, (size_t)(end - run)) && out_put(o, "\"", 1);
}

static bool
emit(struct out *o, const struct node *n)
{
	const struct node *c;
	size_t i;

	switch (n->type) {
	case NODE_NULL:
		return out_put(o, "null", 4);
	case NODE_TRUE:
		return out_put(o, "true", 4);
	case NODE_FALSE:
		return out_put(o, "false", 5);
	case NODE_NUMBER:
		return out_put(o, n->text, n->text_len);
	case NODE_STRING:
		return emit_string(o, n->text, n->text_len);
	case NODE_ARRAY:
		if (!out_put(o, "[", 1))
			return false;
		for (c = n->child; c != NULL; c = c->next)
			if ((c != n->child && !out_put(o, ",", 1)) || !emit(o, c))
				return false;
		return out_put(o, "]", 1);
	case NODE_OBJECT:
		if (!out_put(o, "{", 1))
			return false;
		for (i = 0; i < n->count; i++) {
			c = n->members[i];
			if ((i > 0 && !out_put(o, ",", 1)) ||
			    !emit_string(o, c->key, c->key_len) ||
			    !out_put(o, ":", 1) || !emit(o, c))
				return false;
		}
		return out_put(o, "}", 1);
	}
	return false;
}

/* Serialises n into a new string. The canonical form is never longer than
 * the input it came from, so hint (the input length) makes one allocation
 * the common case; the buffer still grows if that ever stops being true. */
static enum canon_rc
emit_document(const struct node *n, size_t hint, char **out, size_t *out_len)
{
	struct out o = { NULL, 0, 0 };

	if (!out_reserve(&o, hint) || !emit(&o, n)) {
		free(o.data);
		return CANON_NOMEM;
	}
	*out = o.data;
	if (out_len != NULL)
		*out_len = o.len;
	return CANON_OK;
}

enum canon_rc
canon_json(const char *in, size_t len, char **out, size_t *out_len)
{
	struct parser ps;
	struct node *root = NULL;
	enum canon_rc rc;

	*out = NULL;
	if (out_len != NULL)
		*out_len = 0;
	rc = parse_document(&ps, in, len, &root);
	if (rc != CANON_OK)
		goto out;
	rc = emit_document(root, len, out, out_len);
out:
	arena_free(&ps.arena);
	return rc;
}

enum canon_rc
canon_member(const char *in, size_t len, const char *name, char **out,
             size_t *out_len)
{
	struct parser ps;
	struct node *root = NULL, key, *kp = &key, **found;
	enum canon_rc rc;

	*out = NULL;
	if (out_len != NULL)
		*out_len = 0;
	rc = parse_document(&ps, in, len, &root);
	if (rc != CANON_OK)
		goto out;
	if (root->type != NODE_OBJECT) {
		rc = CANON_NOT_OBJECT;
		goto out;
	}
	rc = CANON_NOT_FOUND;
	if (name == NULL || root->count == 0)
		goto out;
	memset(&key, 0, sizeof(key));
	key.key = name;
	key.key_len = strlen(name);
	found = bsearch(&kp, root->members, root->count, sizeof(*root->members),
	                member_cmp);
	if (found == NULL)
		goto out;
	rc = emit_document(*found, len, out, out_len);
out:
	arena_free(&ps.arena);
	return rc;
}

void
canon_hash(const char *canon, size_t len, char out[CANON_HASH_LEN])
{
	static const char prefix[] = "sha256:";

	memcpy(out, prefix, sizeof(prefix) - 1);
	digest_sha256_hex(canon, len, out + sizeof(prefix) - 1);
}

enum canon_rc
canon_validate(const char *in, size_t len, struct canon_where *where)
{
	struct parser ps;
	struct node *root = NULL;
	enum canon_rc rc;
	const char *at, *q;

	memset(&ps, 0, sizeof(ps));
	rc = parse_document(&ps, in, len, &root);
	if (rc != CANON_OK && where != NULL && in != NULL) {
		at = ps.bad != NULL && ps.bad > ps.p ? ps.bad : ps.p;
		if (at == NULL || at < in || at > in + len)
			at = in;
		where->offset = (size_t)(at - in);
		where->line = 1;
		where->column = 1;
		for (q = in; q < at; q++) {
			if (*q == '\n') {
				where->line++;
				where->column = 1;
			} else if (((unsigned char)*q & 0xC0) != 0x80) {
				where->column++; /* characters, not bytes */
			}
		}
		where->surrogate = ps.surrogate;
	}
	arena_free(&ps.arena);
	return rc;
}

bool
canon_utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	size_t n;

	while (p < end) {
		if ((n = utf8_seq_len(p, (size_t)(end - p))) == 0)
			return false;
		p += n;
	}
	return true;
}

void
canon_describe(enum canon_rc rc, const struct canon_where *w, char *out, size_t outlen)
{
	if (w == NULL) {
		snprintf(out, outlen, "%s", canon_strerror(rc));
	} else if (rc == CANON_LONE_SURROGATE) {
		snprintf(out, outlen,
		         "invalid \\u escape: lone surrogate \\u%04lX at line %u column %u "
		         "(half of an emoji or other character outside the Basic Multilingual "
		         "Plane; was the text cut in the middle of one?)",
		         (unsigned long)w->surrogate, w->line, w->column);
	} else {
		snprintf(out, outlen, "%s at line %u column %u", canon_strerror(rc), w->line,
		         w->column);
	}
}

/* The problems jansson names in its own words (some with its flag names),
 * in the words of someone who wrote the JSON. Everything the strict parser
 * above accepts reaches jansson, so only its own limits show up here. */
static const struct {
	const char *prefix;
	const char *plain;
} jansson_texts[] = {
	{ "too big integer", "an integer is beyond the 64-bit signed range (write it as a "
	                     "string, or as a decimal number)" },
	{ "too big negative integer", "an integer is beyond the 64-bit signed range (write it "
	                              "as a string, or as a decimal number)" },
	{ "real number overflow", "a number is beyond the range of an IEEE 754 double" },
	{ "\\u0000 is not allowed", "the escape \\u0000 (the NUL character) is not allowed "
	                            "in strings" },
	{ "NUL byte in object key", "the escape \\u0000 (the NUL character) is not allowed "
	                          "in strings" },
	{ "invalid Unicode", "invalid \\u escape: a lone surrogate (half of an emoji or other "
	                     "character outside the Basic Multilingual Plane)" },
	{ "invalid escape", "a string has an invalid backslash escape" },
	{ "unexpected newline", "a string has a raw line break; write it as \\n" },
	{ "control character", "a string has a raw control character; escape it as \\u00XX" },
	{ "premature end of input", "the JSON text ends too early" },
	{ "end of file expected", "there is text after the end of the JSON value" },
	{ "maximum parsing depth", "JSON nested too deeply" },
	{ "unable to decode byte", "the text is not valid UTF-8" },
	{ "invalid UTF-8", "the text is not valid UTF-8" },
};

const char *
canon_jansson_problem(const char *text)
{
	size_t i, n;

	if (text == NULL)
		return NULL;
	for (i = 0; i < sizeof(jansson_texts) / sizeof(jansson_texts[0]); i++) {
		n = strlen(jansson_texts[i].prefix);
		if (strncasecmp(text, jansson_texts[i].prefix, n) == 0)
			return jansson_texts[i].plain;
	}
	return NULL;
}

const char *
canon_strerror(enum canon_rc rc)
{
	switch (rc) {
	case CANON_OK: return "ok";
	case CANON_SYNTAX: return "not valid JSON";
	case CANON_DEPTH: return "JSON nested too deeply (more than 64 levels)";
	case CANON_DUPLICATE_KEY: return "JSON object has a duplicate member name";
	case CANON_BAD_UTF8: return "invalid UTF-8 in a JSON string";
	case CANON_LONE_SURROGATE:
		return "invalid \\u escape: lone surrogate (half of an emoji or other character "
		       "outside the Basic Multilingual Plane)";
	case CANON_CONTROL:
		return "a JSON string has a raw control character (escape it, e.g. \\n or \\u0001)";
	case CANON_NUL:
		return "the escape \\u0000 (the NUL character) is not allowed in JSON strings";
	case CANON_NUMBER_RANGE:
		return "a number is outside the range of an IEEE 754 double (beyond about "
		       "1.8e308, so close to zero it would round to 0, or with an exponent beyond "
		       "\u00b11000); send it as a string";
	case CANON_NUMBER_LONG:
		return "a number is written with more than 1000 characters; send it as a string";
	case CANON_NOT_OBJECT: return "JSON document is not an object";
	case CANON_NOT_FOUND: return "JSON object has no such member";
	case CANON_NOMEM: return "out of memory";
	}
	return "unknown error";
}
