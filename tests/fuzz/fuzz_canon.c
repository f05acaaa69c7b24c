/*
 * fuzz_canon.c — canonical JSON (src/lib/canon.c): canon_json, canon_member
 * and canon_hash on arbitrary bytes.
 *
 * Properties, beyond "no crash, no leak": the canonical form is a fixed
 * point (canon_json(canon_json(x)) == canon_json(x)) and so is its hash;
 * whitespace around the document changes nothing, nor does spelling the
 * canonical form differently (characters as \uXXXX escapes or surrogate
 * pairs, "\/", upper-case hex, whitespace between tokens); canon_member fails
 * exactly as canon_json does on a broken document, and the member it
 * returns is canonical and appears verbatim in the whole document's
 * canonical form. RFC 8785 (canon_json(CANON_JCS, ...)) accepts the same
 * documents, and its form is a fixed point too.
 */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "fuzzlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A choice taken from the input, so that a run is reproducible. */
static bool
choose(const uint8_t *data, size_t size, size_t k)
{
	return size > 0 && ((data[k % size] >> (k % 7)) & 1) != 0;
}

static size_t
put_u(char *out, unsigned long cp, bool upper)
{
	return (size_t)sprintf(out, upper ? "\\u%04lX" : "\\u%04lx", cp);
}

/* The same JSON text as the canonical form c[0..len), spelled differently:
 * the canonical form of the result must be c again. */
static char *
respell(const char *c, size_t len, const uint8_t *data, size_t size, size_t *out_len)
{
	const unsigned char *p = (const unsigned char *)c, *end = p + len;
	char *out = malloc(len * 14 + 16), *w = out;
	bool in_string = false;
	size_t k = 0;

	if (out == NULL)
		abort();
	while (p < end) {
		unsigned char ch = *p;
		bool pick = choose(data, size, k++), upper = choose(data, size, k++);

		if (!in_string) {
			*w++ = (char)ch;
			p++;
			if (ch == '"')
				in_string = true;
			else if (pick && (ch == ',' || ch == ':' || ch == '[' || ch == '{'))
				w += sprintf(w, upper ? " \n\t" : "\r ");
			continue;
		}
		if (ch == '"') {
			*w++ = '"';
			p++;
			in_string = false;
		} else if (ch == '\\') {
			/* canonical escapes: \" \\ \b \f \n \r \t and \u00XX */
			size_t n = p[1] == 'u' ? 6 : 2, i;

			FUZZ_ASSERT(p + n <= end);
			for (i = 0; i < n; i++)
				w[i] = (char)(upper && i >= 2 && p[i] >= 'a' && p[i] <= 'f' ? p[i] - 32 : p[i]);
			w += n;
			p += n;
		} else if (ch < 0x80) {
			if (!pick)
				*w++ = (char)ch;
			else if (ch == '/')
				w += sprintf(w, "\\/");
			else
				w += put_u(w, ch, upper);
			p++;
		} else {
			/* the canonical form is valid UTF-8 */
			unsigned long cp;
			size_t n = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2, i;

			FUZZ_ASSERT(p + n <= end);
			cp = ch & (0x3F >> (n - 1));
			for (i = 1; i < n; i++)
				cp = cp << 6 | (p[i] & 0x3F);
			if (!pick) {
				memcpy(w, p, n);
				w += n;
			} else if (cp >= 0x10000) {
				w += put_u(w, 0xD800 + ((cp - 0x10000) >> 10), upper);
				w += put_u(w, 0xDC00 + ((cp - 0x10000) & 0x3FF), upper);
			} else {
				w += put_u(w, cp, upper);
			}
			p += n;
		}
	}
	*w = '\0';
	*out_len = (size_t)(w - out);
	return out;
}

static void
check_hash(const char *canon, size_t len)
{
	char h1[CANON_HASH_LEN], h2[CANON_HASH_LEN];
	size_t i;

	canon_hash(canon, len, h1);
	canon_hash(canon, len, h2);
	FUZZ_ASSERT(strcmp(h1, h2) == 0);
	FUZZ_ASSERT(strlen(h1) == CANON_HASH_LEN - 1);
	FUZZ_ASSERT(strncmp(h1, "sha256:", 7) == 0);
	for (i = 7; i < CANON_HASH_LEN - 1; i++)
		FUZZ_ASSERT((h1[i] >= '0' && h1[i] <= '9') || (h1[i] >= 'a' && h1[i] <= 'f'));
}

static void
check_member(const char *in, size_t len, enum canon_rc whole_rc, const char *whole,
             size_t whole_len, const char *name)
{
	char *m = NULL, *m2 = NULL;
	size_t ml = 0, ml2 = 0;
	enum canon_rc rc = canon_member(CANON_AS_WRITTEN, in, len, name, &m, &ml);

	if (whole_rc != CANON_OK) {
		FUZZ_ASSERT(rc == whole_rc);
	} else if (whole[0] != '{') {
		FUZZ_ASSERT(rc == CANON_NOT_OBJECT);
	} else {
		FUZZ_ASSERT(rc == CANON_OK || rc == CANON_NOT_FOUND);
	}
	if (rc == CANON_OK) {
		FUZZ_ASSERT(m != NULL && strlen(m) == ml);
		FUZZ_ASSERT(memmem(whole, whole_len, m, ml) != NULL);
		FUZZ_ASSERT(canon_json(CANON_AS_WRITTEN, m, ml, &m2, &ml2) == CANON_OK);
		FUZZ_ASSERT(ml2 == ml && memcmp(m, m2, ml) == 0);
		check_hash(m, ml);
	}
	free(m);
	free(m2);
}

static void
check_respelled(const char *c1, size_t l1, const uint8_t *data, size_t size)
{
	size_t lr = 0, l4 = 0;
	char *r = respell(c1, l1, data, size, &lr), *c4 = NULL;

	FUZZ_ASSERT(canon_json(CANON_AS_WRITTEN, r, lr, &c4, &l4) == CANON_OK);
	FUZZ_ASSERT(l4 == l1 && memcmp(c4, c1, l1) == 0);
	free(r);
	free(c4);
}

/* canon_validate agrees with canon_json, and where it points is inside
 * the input; the description names the place. */
static void
check_validate(const char *in, size_t len, enum canon_rc whole_rc)
{
	struct canon_where w;
	char msg[512];
	enum canon_rc rc;

	memset(&w, 0, sizeof(w));
	rc = canon_validate(in, len, &w);
	FUZZ_ASSERT(rc == whole_rc || (whole_rc == CANON_NOMEM && rc == CANON_OK));
	if (rc != CANON_OK) {
		FUZZ_ASSERT(w.offset <= len && w.line >= 1 && w.column >= 1);
		canon_describe(rc, &w, msg, sizeof(msg));
		FUZZ_ASSERT(strstr(msg, " line ") != NULL);
	}
}

/* RFC 8785 accepts exactly what the rule as written accepts (checked by
 * the caller), reaches the same form from the input and from its
 * as-written form, and is a fixed point. */
static void
check_jcs(const char *in, size_t len, const char *written, size_t wlen)
{
	char *j1 = NULL, *j2 = NULL, *j3 = NULL;
	size_t l1 = 0, l2 = 0, l3 = 0;

	FUZZ_ASSERT(canon_json(CANON_JCS, in, len, &j1, &l1) == CANON_OK);
	FUZZ_ASSERT(canon_json(CANON_JCS, written, wlen, &j2, &l2) == CANON_OK);
	FUZZ_ASSERT(l1 == l2 && memcmp(j1, j2, l1) == 0);
	FUZZ_ASSERT(canon_json(CANON_JCS, j1, l1, &j3, &l3) == CANON_OK);
	FUZZ_ASSERT(l1 == l3 && memcmp(j1, j3, l1) == 0);
	free(j1);
	free(j2);
	free(j3);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	char *c1 = NULL, *c2 = NULL, *c3 = NULL, *padded;
	size_t l1 = 0, l2 = 0, l3 = 0;
	enum canon_rc rc, rc3;

	rc = canon_json(CANON_AS_WRITTEN, in, size, &c1, &l1);
	FUZZ_ASSERT(canon_strerror(rc) != NULL);
	if (rc != CANON_OK) {
		FUZZ_ASSERT(canon_json(CANON_JCS, in, size, &c2, &l2) == rc);
		FUZZ_ASSERT(c2 == NULL);
	}
	check_validate(in, size, rc);
	if (rc == CANON_OK) {
		/* no raw NUL or control byte survives: they are escaped */
		FUZZ_ASSERT(c1 != NULL && strlen(c1) == l1 && l1 > 0);
		FUZZ_ASSERT(canon_json(CANON_AS_WRITTEN, c1, l1, &c2, &l2) == CANON_OK);
		FUZZ_ASSERT(l1 == l2 && memcmp(c1, c2, l1) == 0);
		check_hash(c1, l1);
		check_respelled(c1, l1, data, size);
		check_jcs(in, size, c1, l1);
	}

	/* insignificant whitespace around the document */
	padded = malloc(size + 4);
	if (padded == NULL)
		abort();
	memcpy(padded, " \n", 2);
	memcpy(padded + 2, data, size);
	memcpy(padded + 2 + size, "\t\r", 2);
	rc3 = canon_json(CANON_AS_WRITTEN, padded, size + 4, &c3, &l3);
	FUZZ_ASSERT((rc == CANON_OK) == (rc3 == CANON_OK));
	if (rc == CANON_OK)
		FUZZ_ASSERT(l3 == l1 && memcmp(c1, c3, l1) == 0);
	free(padded);

	check_member(in, size, rc, c1, l1, "payload");
	check_member(in, size, rc, c1, l1, "output");
	check_member(in, size, rc, c1, l1, "");

	free(c1);
	free(c2);
	free(c3);
	return 0;
}
