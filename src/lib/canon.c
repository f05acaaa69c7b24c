/*
 * canon.c — strict JSON parser and canonical serialiser.
 *
 * Two passes: a recursive-descent parser builds a tree in an arena (numbers
 * keep their input text, strings are decoded to UTF-8), then the tree is
 * written out under a rule (canon.h): RFC 8785, or as written. Everything
 * lives in one arena that is freed at once, so no error path can leak a
 * node.
 *
 * Strictness is deliberate: two inputs must hash alike exactly when they
 * are the same JSON value, so anything a lenient parser would "repair"
 * (trailing commas, comments, NaN, leading zeros, duplicate names, invalid
 * UTF-8) is refused instead of guessed at.
 *
 * Over 1,000 lines on purpose: the parser, the two rules' writers and the
 * ECMAScript number form share the node tree, its arena and the output
 * buffer, and none of them is used without the others; split, each part
 * would have to export those internals to the rest.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "canon.h"
#include "digest.h"
#include "caps.h"
#include "utf8.h"

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

/* Reads the 4 hex digits of a \u escape at p (p + 4 <= end checked by the
 * caller); -1 if they are not hex. */
static long
read_hex4(const char *p)
{
	long v = 0;
	int i, h;

	for (i = 0; i < 4; i++) {
		h = utf8_hex_digit(p[i]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
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
			n = utf8_decode((const unsigned char *)q, (size_t)(close - q), &cp);
			if (cp < 0)
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

/* Past the '[' or '{' and the blanks after it; true when close follows at
 * once (an empty container, consumed whole). */
static bool
container_open(struct parser *ps, char close)
{
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		return true;
	}
	return false;
}

/* Counts the member just parsed at **tail, moves *tail past it and steps
 * over what follows: a ',' (*closed false: another member comes) or close
 * (*closed true); anything else is a syntax error. */
static enum canon_rc
container_next(struct parser *ps, struct node *n, struct node ***tail, char close,
               bool *closed)
{
	*tail = &(**tail)->next;
	n->count++;
	skip_ws(ps);
	if (ps->p >= ps->end || (*ps->p != close && *ps->p != ','))
		return CANON_SYNTAX;
	*closed = *ps->p++ == close;
	return CANON_OK;
}

static enum canon_rc
parse_array(struct parser *ps, struct node *n)
{
	struct node **tail = &n->child;
	enum canon_rc rc;
	bool closed = false;

	n->type = NODE_ARRAY;
	if (container_open(ps, ']'))
		return CANON_OK;
	while (!closed)
		if ((rc = parse_value(ps, tail)) != CANON_OK ||
		    (rc = container_next(ps, n, &tail, ']', &closed)) != CANON_OK)
			return rc;
	return CANON_OK;
}

static enum canon_rc
parse_object(struct parser *ps, struct node *n)
{
	struct node *first = NULL, **tail = &first, *m;
	const char *key;
	size_t key_len, i;
	enum canon_rc rc;
	bool closed = false;

	n->type = NODE_OBJECT;
	if (container_open(ps, '}'))
		return CANON_OK;
	while (!closed) {
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
		if ((rc = container_next(ps, n, &tail, '}', &closed)) != CANON_OK)
			return rc;
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
		esc_len = utf8_json_escape(c, esc);
		if (!out_put(o, esc, esc_len))
			return false;
		run = p + 1;
	}
	return out_put(o, run, (size_t)(end - run)) && out_put(o, "\"", 1);
}

/* ---- numbers in ECMAScript form (RFC 8785 section 3.2.2.3) --------------- */

/* The shortest decimal digits of v (finite, non-zero, positive): k digits
 * in d (no trailing zeros), v ~ 0.d x 10^n. ECMAScript Number::toString
 * wants the fewest digits that read back as v and, of those, the closest
 * to v. The correctly rounded p-digit form (glibc's printf is exact) reads
 * back for every p from some p0 on, so p0 is found by bisection; below p0
 * only the decimal on the other side of v may still read back (at powers
 * of two the gap below v is half the gap above), and it is tried too. */
struct digits {
	char d[24];
	int k;
	int n;
};

static bool
reads_back(const char *text, double v)
{
	return strtod(text, NULL) == v;
}

/* The p-digit correctly rounded form of v: mantissa m (p digits) and the
 * power of ten e of its last digit. */
static void
rounded(double v, int p, unsigned long long *m, int *e)
{
	char buf[40], *x;
	unsigned long long acc = 0;
	const char *c;

	snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
	x = strchr(buf, 'e');
	for (c = buf; c < x; c++)
		if (*c >= '0' && *c <= '9')
			acc = acc * 10 + (unsigned long long)(*c - '0');
	*m = acc;
	*e = atoi(x + 1) - (p - 1);
}

static void
digits_set(struct digits *dg, unsigned long long m, int e)
{
	char buf[24];
	int len;

	while (m % 10 == 0) {
		m /= 10;
		e++;
	}
	len = snprintf(buf, sizeof(buf), "%llu", m);
	memcpy(dg->d, buf, (size_t)len + 1);
	dg->k = len;
	dg->n = e + len;
}

static void
shortest_digits(double v, struct digits *dg)
{
	char buf[48];
	unsigned long long m, other;
	int lo = 1, hi = 17, mid, e;

	while (lo < hi) {
		mid = (lo + hi) / 2;
		rounded(v, mid, &m, &e);
		snprintf(buf, sizeof(buf), "%llue%d", m, e);
		if (reads_back(buf, v))
			hi = mid;
		else
			lo = mid + 1;
	}
	rounded(v, lo, &m, &e);
	digits_set(dg, m, e);
	if (lo == 1)
		return;
	rounded(v, lo - 1, &m, &e);
	snprintf(buf, sizeof(buf), "%llue%d", m, e);
	other = strtod(buf, NULL) < v ? m + 1 : m - 1;
	snprintf(buf, sizeof(buf), "%llue%d", other, e);
	if (other > 0 && reads_back(buf, v))
		digits_set(dg, other, e);
}

/* The digits of a number as written, when they are v's shortest form: at
 * most 15 significant digits (DBL_DIG) name exactly one double in the
 * normal range, so no shorter decimal reads back as it. false: work from
 * the double instead. */
static bool
written_digits(const char *text, size_t len, double v, struct digits *dg)
{
	const char *p, *end = text + len, *mant_end;
	long ip = 0, idx = 0, first = -1, last = -1, exp = 0;
	bool neg = false;

	if (fabs(v) < DBL_MIN)
		return false;
	mant_end = text;
	while (mant_end < end && *mant_end != 'e' && *mant_end != 'E')
		mant_end++;
	/* the digits of the mantissa as one sequence D, ip of them before the
	 * point: the value is 0.D x 10^ip */
	for (p = text; p < mant_end; p++) {
		if (*p == '-')
			continue;
		if (*p == '.') {
			ip = idx;
			continue;
		}
		if (*p != '0') {
			if (first < 0)
				first = idx;
			last = idx;
		}
		idx++;
	}
	if (memchr(text, '.', (size_t)(mant_end - text)) == NULL)
		ip = idx;
	if (first < 0 || last - first + 1 > 15)
		return false;
	if (mant_end < end) {
		for (p = mant_end + 1; p < end && (*p == '+' || *p == '-'); p++)
			neg = *p == '-';
		for (; p < end; p++)
			exp = exp * 10 + (*p - '0'); /* at most OG_JSON_EXPONENT_MAX */
	}
	dg->k = 0;
	for (p = text, idx = 0; p < mant_end; p++) {
		if (*p < '0' || *p > '9')
			continue;
		if (idx >= first && idx <= last)
			dg->d[dg->k++] = *p;
		idx++;
	}
	dg->d[dg->k] = '\0';
	dg->n = (int)(ip - first + (neg ? -exp : exp));
	return true;
}

/* ECMAScript Number::toString of the number with digits dg and sign neg. */
static size_t
es_format(const struct digits *dg, bool neg, char *out)
{
	char *w = out;
	int k = dg->k, n = dg->n, e;

	if (neg)
		*w++ = '-';
	if (k <= n && n <= 21) {
		memcpy(w, dg->d, (size_t)k);
		w += k;
		memset(w, '0', (size_t)(n - k));
		w += n - k;
	} else if (0 < n && n <= 21) {
		memcpy(w, dg->d, (size_t)n);
		w += n;
		*w++ = '.';
		memcpy(w, dg->d + n, (size_t)(k - n));
		w += k - n;
	} else if (-6 < n && n <= 0) {
		*w++ = '0';
		*w++ = '.';
		memset(w, '0', (size_t)-n);
		w += -n;
		memcpy(w, dg->d, (size_t)k);
		w += k;
	} else {
		*w++ = dg->d[0];
		if (k > 1) {
			*w++ = '.';
			memcpy(w, dg->d + 1, (size_t)(k - 1));
			w += k - 1;
		}
		e = n - 1;
		w += sprintf(w, "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
	*w = '\0';
	return (size_t)(w - out);
}

size_t
canon_number(double v, char out[CANON_NUMBER_LEN])
{
	struct digits dg;

	if (v == 0.0 || !isfinite(v)) {
		/* -0 is 0; JSON has no NaN or Infinity (JSON.stringify: null) */
		strcpy(out, v == 0.0 ? "0" : "null");
		return strlen(out);
	}
	shortest_digits(fabs(v), &dg);
	return es_format(&dg, v < 0, out);
}

/* A number as written (valid syntax, in range) in ECMAScript form. */
static size_t
jcs_number(const char *text, size_t len, char out[CANON_NUMBER_LEN])
{
	char buf[OG_JSON_NUMBER_MAX + 1];
	struct digits dg;
	double v;

	memcpy(buf, text, len);
	buf[len] = '\0';
	v = strtod(buf, NULL);
	if (v == 0.0)
		return canon_number(v, out);
	if (!written_digits(text, len, v, &dg))
		shortest_digits(fabs(v), &dg);
	return es_format(&dg, v < 0, out);
}

/* ---- member order by UTF-16 code units (RFC 8785 section 3.2.3) ---------- */

/* UTF-8 byte order is code point order; UTF-16 differs only where a
 * character beyond U+FFFF (a surrogate pair, D800-DBFF first) meets one in
 * U+E000-U+FFFF: the pair sorts first. */
static int
utf16_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
	const unsigned char *xe = x + alen, *ye = y + blen;
	long cx, cy;

	while (x < xe && y < ye) {
		x += utf8_decode(x, (size_t)(xe - x), &cx);
		y += utf8_decode(y, (size_t)(ye - y), &cy);
		if (cx == cy)
			continue;
		if ((cx > 0xFFFF) != (cy > 0xFFFF)) {
			if (cx > 0xFFFF)
				cx = 0xD800;
			else
				cy = 0xD800;
		}
		return cx < cy ? -1 : 1;
	}
	return (x < xe) - (y < ye);
}

static int
member_cmp_utf16(const void *a, const void *b)
{
	const struct node *x = *(struct node *const *)a;
	const struct node *y = *(struct node *const *)b;

	return utf16_cmp(x->key, x->key_len, y->key, y->key_len);
}

/* Whether members sorted by code point need another order in UTF-16: only
 * with keys beyond U+FFFF (lead byte F0-F4) and keys with U+E000-U+FFFF
 * (lead byte EE or EF) in the same object. */
static bool
needs_utf16_order(const struct node *n)
{
	bool astral = false, high = false;
	size_t i, j;

	for (i = 0; i < n->count; i++)
		for (j = 0; j < n->members[i]->key_len; j++) {
			unsigned char c = (unsigned char)n->members[i]->key[j];

			astral |= c >= 0xF0;
			high |= c == 0xEE || c == 0xEF;
		}
	return astral && high;
}

static bool
emit(struct out *o, const struct node *n, enum canon_rule rule)
{
	struct node **order = n->members;
	const struct node *c;
	char num[CANON_NUMBER_LEN];
	size_t i;
	bool ok = true;

	switch (n->type) {
	case NODE_NULL:
		return out_put(o, "null", 4);
	case NODE_TRUE:
		return out_put(o, "true", 4);
	case NODE_FALSE:
		return out_put(o, "false", 5);
	case NODE_NUMBER:
		if (rule == CANON_JCS)
			return out_put(o, num, jcs_number(n->text, n->text_len, num));
		return out_put(o, n->text, n->text_len);
	case NODE_STRING:
		return emit_string(o, n->text, n->text_len);
	case NODE_ARRAY:
		if (!out_put(o, "[", 1))
			return false;
		for (c = n->child; c != NULL; c = c->next)
			if ((c != n->child && !out_put(o, ",", 1)) || !emit(o, c, rule))
				return false;
		return out_put(o, "]", 1);
	case NODE_OBJECT:
		if (rule == CANON_JCS && needs_utf16_order(n)) {
			order = malloc(n->count * sizeof(*order));
			if (order == NULL)
				return false;
			memcpy(order, n->members, n->count * sizeof(*order));
			qsort(order, n->count, sizeof(*order), member_cmp_utf16);
		}
		ok = out_put(o, "{", 1);
		for (i = 0; ok && i < n->count; i++) {
			c = order[i];
			ok = (i == 0 || out_put(o, ",", 1)) && emit_string(o, c->key, c->key_len) &&
			     out_put(o, ":", 1) && emit(o, c, rule);
		}
		if (order != n->members)
			free(order);
		return ok && out_put(o, "}", 1);
	}
	return false;
}

/* Serialises n into a new string. The canonical form is rarely longer than
 * the input it came from, so hint (the input length) makes one allocation
 * the common case; the buffer grows when it is longer (1e21 as
 * 1000000000000000000000 under RFC 8785). */
static enum canon_rc
emit_document(const struct node *n, enum canon_rule rule, size_t hint, char **out,
              size_t *out_len)
{
	struct out o = { NULL, 0, 0 };

	if (!out_reserve(&o, hint) || !emit(&o, n, rule)) {
		free(o.data);
		return CANON_NOMEM;
	}
	*out = o.data;
	if (out_len != NULL)
		*out_len = o.len;
	return CANON_OK;
}

enum canon_rc
canon_json(enum canon_rule rule, const char *in, size_t len, char **out, size_t *out_len)
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
	rc = emit_document(root, rule, len, out, out_len);
out:
	arena_free(&ps.arena);
	return rc;
}

enum canon_rc
canon_member(enum canon_rule rule, const char *in, size_t len, const char *name, char **out,
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
	rc = emit_document(*found, rule, len, out, out_len);
out:
	arena_free(&ps.arena);
	return rc;
}

enum canon_rc
canon_hash_as(enum canon_rule rule, const char *in, size_t len, char out[CANON_HASH_LEN])
{
	char *canon = NULL;
	size_t n = 0;
	enum canon_rc rc = canon_json(rule, in, len, &canon, &n);

	if (rc == CANON_OK)
		canon_hash(canon, n, out);
	free(canon);
	return rc;
}

const char *
canon_rule_name(enum canon_rule rule)
{
	return rule == CANON_JCS ? "jcs" : "og1";
}

enum canon_rule
canon_rule_parse(const char *name)
{
	/* every run stored before the marker existed was hashed as written */
	return name != NULL && strcmp(name, "jcs") == 0 ? CANON_JCS : CANON_AS_WRITTEN;
}

/* ---- numbers in what jansson writes -------------------------------------- */

char *
canon_dumps(const json_t *v, size_t flags)
{
	/* jansson writes reals with 17 significant digits (0.8 as
	 * 0.80000000000000004), or fewer with JSON_REAL_PRECISION, which does
	 * not read back for every double. 17 digits always read back, so each
	 * real in its output is rewritten in its shortest form. */
	char *text = json_dumps(v, flags & ~(size_t)JSON_REAL_PRECISION(0x1F));
	struct out o = { NULL, 0, 0 };
	const char *p, *run, *tok;
	char num[CANON_NUMBER_LEN + 2], buf[64];
	bool in_string = false, real;
	size_t n;

	if (text == NULL)
		return NULL;
	if (!out_reserve(&o, strlen(text) + 16))
		goto fail;
	for (p = run = text; *p != '\0'; p++) {
		if (in_string) {
			if (*p == '\\' && p[1] != '\0')
				p++;
			else if (*p == '"')
				in_string = false;
			continue;
		}
		if (*p == '"') {
			in_string = true;
			continue;
		}
		if (*p != '-' && (*p < '0' || *p > '9'))
			continue;
		tok = p;
		real = false;
		while (*p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E' ||
		       (*p >= '0' && *p <= '9')) {
			real |= *p == '.' || *p == 'e' || *p == 'E';
			p++;
		}
		n = (size_t)(p - tok);
		p--;
		if (!real || n >= sizeof(buf))
			continue;
		memcpy(buf, tok, n);
		buf[n] = '\0';
		n = canon_number(strtod(buf, NULL), num);
		/* a real stays a real for whoever reads it with jansson */
		if (strpbrk(num, ".e") == NULL) {
			memcpy(num + n, ".0", 3);
			n += 2;
		}
		if (!out_put(&o, run, (size_t)(tok - run)) || !out_put(&o, num, n))
			goto fail;
		run = p + 1;
	}
	if (!out_put(&o, run, (size_t)(p - run)))
		goto fail;
	free(text);
	return o.data;
fail:
	free(text);
	free(o.data);
	return NULL;
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
	return utf8_valid(s, len);
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

/* Whether the integer literal s[0..n) (optional '-', digits, no leading
 * zero) lies beyond int64_t, which jansson refuses. */
static bool
int_beyond_64(const char *s, size_t n)
{
	const char *limit = "9223372036854775807";

	if (*s == '-') {
		s++;
		n--;
		limit = "9223372036854775808";
	}
	return n > 19 || (n == 19 && memcmp(s, limit, 19) > 0);
}

/* A copy of valid JSON text with ".0" after every integer beyond 64 bits:
 * the same number, which jansson reads as a real. */
static char *
widen_integers(const char *in, size_t len, size_t *outlen)
{
	struct buf b;
	size_t i = 0, start, n;
	bool integer;

	buf_init(&b, 2 * len + 16);
	while (i < len) {
		if (in[i] == '"') {
			/* a string, escapes and all */
			for (start = i++; i < len && in[i] != '"'; i++)
				if (in[i] == '\\')
					i++;
			if (++i > len)
				i = len;
			if (buf_append(&b, in + start, i - start) != 0)
				goto fail;
			continue;
		}
		if (in[i] != '-' && (in[i] < '0' || in[i] > '9')) {
			if (buf_append(&b, in + i++, 1) != 0)
				goto fail;
			continue;
		}
		integer = true;
		for (start = i; i < len && in[i] != '\0' && strchr("-+0123456789.eE", in[i]) != NULL;
		     i++)
			integer = integer && in[i] != '.' && in[i] != 'e' && in[i] != 'E';
		n = i - start;
		if (buf_append(&b, in + start, n) != 0 ||
		    (integer && int_beyond_64(in + start, n) && buf_append(&b, ".0", 2) != 0))
			goto fail;
	}
	*outlen = b.len;
	return buf_steal(&b);
fail:
	buf_free(&b);
	return NULL;
}

json_t *
canon_json_loadb(const char *s, size_t len, size_t flags, json_error_t *err)
{
	json_t *v = json_loadb(s, len, flags, err);
	size_t wlen;
	char *wide;

	if (v != NULL || strncmp(err->text, "too big", 7) != 0 ||
	    (wide = widen_integers(s, len, &wlen)) == NULL)
		return v;
	v = json_loadb(wide, wlen, flags, err);
	free(wide);
	return v;
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
