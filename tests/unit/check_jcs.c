/*
 * check_jcs.c — RFC 8785 (JCS) canonical JSON, ECMAScript number form and
 * the shortest round-trip numbers written back, against the published
 * test data of the RFC's reference implementation (tests/data/jcs, from
 * github.com/cyberphone/json-canonicalization, Apache-2.0, see LICENSE
 * there). No database.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "canon.h"
#include "digest.h"
#include "utf8.h"
#include "testlib.h"

/* tests/data/jcs/<name>, malloc'd. */
static char *
jcs_file(const char *name, size_t *len)
{
	char rel[256];

	snprintf(rel, sizeof(rel), "jcs/%s", name);
	return tl_data_slurp(rel, len);
}

static char *
jcs(const char *in)
{
	char *out = NULL;
	enum canon_rc rc = canon_json(CANON_JCS, in, strlen(in), &out, NULL);

	ck_assert_msg(rc == CANON_OK, "%s: %s", in, canon_strerror(rc));
	return out;
}

/* ---- the RFC 8785 reference vectors ---------------------------------------- */

static const char *const vectors[] = {
	"arrays.json", "french.json", "structures.json", "unicode.json", "values.json",
	"weird.json",
};

START_TEST(rfc8785_vectors)
{
	char name[64], *in, *want, *got = NULL, *again = NULL;
	size_t in_len, want_len, got_len, again_len;
	int matched = 0;
	size_t i;

	for (i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		snprintf(name, sizeof(name), "input/%s", vectors[i]);
		in = jcs_file(name, &in_len);
		snprintf(name, sizeof(name), "output/%s", vectors[i]);
		want = jcs_file(name, &want_len);
		ck_assert_int_eq(canon_json(CANON_JCS, in, in_len, &got, &got_len), CANON_OK);
		ck_assert_msg(got_len == want_len && memcmp(got, want, want_len) == 0,
		              "%s:\n got  %s\n want %s", vectors[i], got, want);
		/* the canonical form is a fixed point */
		ck_assert_int_eq(canon_json(CANON_JCS, got, got_len, &again, &again_len), CANON_OK);
		ck_assert_str_eq(again, got);
		matched++;
		free(in);
		free(want);
		free(got);
		free(again);
	}
	printf("check_jcs: RFC 8785 vectors matched: %d of %zu\n", matched,
	       sizeof(vectors) / sizeof(vectors[0]));
	ck_assert_int_eq(matched, 6);
}
END_TEST

/* The old rule is kept for runs hashed with it: numbers as written,
 * members by code point, so the hashes stored before stay reproducible. */
START_TEST(as_written_rule_unchanged)
{
	const char *in = "{\"total\": 19.90, \"\\ue000\": 1, \"\xf0\x9f\x98\x80\": 2, \"n\": 1E0}";
	char *out = NULL, hash[CANON_HASH_LEN], h2[CANON_HASH_LEN];
	size_t len;

	ck_assert_int_eq(canon_json(CANON_AS_WRITTEN, in, strlen(in), &out, &len), CANON_OK);
	ck_assert_str_eq(out, "{\"n\":1E0,\"total\":19.90,\"\xee\x80\x80\":1,"
	                      "\"\xf0\x9f\x98\x80\":2}");
	canon_hash(out, len, hash);
	ck_assert_int_eq(canon_hash_as(CANON_AS_WRITTEN, in, strlen(in), h2), CANON_OK);
	ck_assert_str_eq(hash, h2);
	free(out);
	out = jcs(in);
	ck_assert_str_eq(out, "{\"n\":1,\"total\":19.9,\"\xf0\x9f\x98\x80\":2,"
	                      "\"\xee\x80\x80\":1}");
	ck_assert_int_eq(canon_hash_as(CANON_JCS, in, strlen(in), h2), CANON_OK);
	ck_assert_str_ne(hash, h2);
	free(out);
	ck_assert_str_eq(canon_rule_name(CANON_JCS), "jcs");
	ck_assert_str_eq(canon_rule_name(CANON_AS_WRITTEN), "og1");
	ck_assert_int_eq(canon_rule_parse("og1"), CANON_AS_WRITTEN);
	ck_assert_int_eq(canon_rule_parse("jcs"), CANON_JCS);
}
END_TEST

/* ---- numbers ---------------------------------------------------------------- */

static const struct {
	const char *in, *want;
} numbers[] = {
	{ "19.90", "19.9" },
	{ "0.8", "0.8" },
	{ "1E0", "1" },
	{ "1.0", "1" },
	{ "-0", "0" },
	{ "-0.0e-5", "0" },
	{ "1e21", "1e+21" },
	{ "1e20", "100000000000000000000" },
	{ "123456789012345678901", "123456789012345680000" },
	{ "1e-7", "1e-7" },
	{ "0.000001", "0.000001" },
	{ "0.0000012345", "0.0000012345" },
	{ "9007199254740992", "9007199254740992" },
	{ "9007199254740993", "9007199254740992" },
	{ "-9007199254740991", "-9007199254740991" },
	{ "0.30000000000000004", "0.30000000000000004" },
	{ "0.1e1", "1" },
	{ "100e-2", "1" },
	{ "12.3400e2", "1234" },
	{ "5e-324", "5e-324" },
	{ "4.9406564584124654e-324", "5e-324" },
	{ "2.2250738585072014e-308", "2.2250738585072014e-308" },
	{ "1.7976931348623157e308", "1.7976931348623157e+308" },
	{ "-1.5e300", "-1.5e+300" },
	{ "333333333.33333329", "333333333.3333333" },
	{ "1e-6", "0.000001" },
	{ "1.2e-6", "0.0000012" },
	{ "0.00000999999999999999", "0.00000999999999999999" },
	{ "0.000009999999999999999999", "0.00001" },
	{ "9.999999999999997e-7", "9.999999999999997e-7" },
	{ "295147905179352830000", "295147905179352830000" },
};

START_TEST(number_form)
{
	char in[64], *out;
	size_t i;

	for (i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
		snprintf(in, sizeof(in), "[%s]", numbers[i].in);
		out = jcs(in);
		ck_assert_msg(strlen(out) == strlen(numbers[i].want) + 2 &&
		                  strncmp(out + 1, numbers[i].want, strlen(numbers[i].want)) == 0,
		              "%s: got %s, want [%s]", numbers[i].in, out, numbers[i].want);
		free(out);
	}
}
END_TEST

START_TEST(number_out_of_range)
{
	static const char *const bad[] = { "1e400", "-1e400", "1e-400", "1.8e308",
		                           "{\"amount\":1e400}", "[2e-324]" };
	char *out = NULL;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(canon_json(CANON_JCS, bad[i], strlen(bad[i]), &out, NULL),
		                 CANON_NUMBER_RANGE);
		ck_assert_ptr_null(out);
	}
	ck_assert_ptr_nonnull(strstr(canon_strerror(CANON_NUMBER_RANGE), "IEEE 754 double"));
}
END_TEST

/* es6numbers-1000.txt: the first 1000 lines of the reference
 * implementation's number test file ("hex of the IEEE 754 bits,expected"),
 * made by numgen.js with Node.js (SHA-256 be18b62b... as its README
 * publishes). */
static double
bits_double(const char *hex)
{
	uint64_t u = strtoull(hex, NULL, 16);
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

START_TEST(es6_number_file)
{
	char *text = jcs_file("es6numbers-1000.txt", NULL), *line, *save = NULL, *comma;
	char num[CANON_NUMBER_LEN], doc[64], *out, *dumped;
	int lines = 0;
	double v;
	json_t *real;

	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		comma = strchr(line, ',');
		ck_assert_ptr_nonnull(comma);
		*comma = '\0';
		v = bits_double(line);
		canon_number(v, num);
		ck_assert_msg(strcmp(num, comma + 1) == 0, "%s: got %s, want %s", line, num,
		              comma + 1);
		/* the same through the parser: from the expected text (the digits
		 * as written) and from 17 digits (the digits from the double) */
		out = jcs(comma + 1);
		ck_assert_str_eq(out, comma + 1);
		free(out);
		snprintf(doc, sizeof(doc), "%.17g", v);
		out = jcs(doc);
		ck_assert_msg(strcmp(out, comma + 1) == 0, "%s: got %s, want %s", doc, out,
		              comma + 1);
		free(out);
		/* written back by jansson: shortest, reads back as v, still a real */
		real = json_real(v);
		dumped = canon_dumps(real, JSON_ENCODE_ANY);
		ck_assert_ptr_nonnull(dumped);
		ck_assert_msg(strtod(dumped, NULL) == v, "%s read back from %s", num, dumped);
		ck_assert_msg(strncmp(dumped, num, strlen(num)) == 0, "%s written as %s", num,
		              dumped);
		free(dumped);
		json_decref(real);
		lines++;
	}
	ck_assert_int_eq(lines, 1000);
	free(text);
}
END_TEST

/* The reference test file's sequence, generated as numgen.js does: its
 * static edge cases (read from numgen.js itself), 2000 doubles from the
 * smallest normal up, then SHA-256 chained blocks read as doubles. The
 * SHA-256 of the first 1,000,000 lines is the one the reference
 * implementation's README publishes. */
struct numgen {
	uint64_t statics[256];
	size_t nstatic;
	size_t idx;
	unsigned char block[32];
	size_t left; /* doubles not yet used from block */
};

static void
numgen_init(struct numgen *g)
{
	char *js = jcs_file("numgen.js", NULL);
	char *p = strstr(js, "staticU64s = new BigUint64Array([");
	char *end;

	memset(g, 0, sizeof(*g));
	ck_assert_ptr_nonnull(p);
	end = strstr(p, "])");
	ck_assert_ptr_nonnull(end);
	while ((p = strstr(p, "0x")) != NULL && p < end) {
		ck_assert(g->nstatic < sizeof(g->statics) / sizeof(g->statics[0]));
		g->statics[g->nstatic++] = strtoull(p + 2, &p, 16);
	}
	free(js);
	ck_assert_uint_eq(g->nstatic, 168);
}

static double
numgen_next(struct numgen *g)
{
	double f = 0.0;

	if (g->idx < g->nstatic) {
		memcpy(&f, &g->statics[g->idx], sizeof(f));
	} else if (g->idx < g->nstatic + 2000) {
		uint64_t u = 0x0010000000000000ULL + (g->idx - g->nstatic);

		memcpy(&f, &u, sizeof(f));
	} else {
		while (f == 0.0 || !isfinite(f)) {
			if (g->left == 0) {
				unsigned char next[DIGEST_SHA256_LEN];

				digest_sha256(g->block, sizeof(g->block), next);
				memcpy(g->block, next, sizeof(next));
				g->left = 4;
			}
			/* Float64Array over the digest: little-endian, as this machine */
			memcpy(&f, g->block + 8 * (4 - g->left), sizeof(f));
			g->left--;
		}
	}
	g->idx++;
	return f;
}

START_TEST(es6_number_sequence)
{
	static const struct {
		int lines;
		const char *sha256;
	} published[] = {
		{ 1000, "be18b62b6f69cdab33a7e0dae0d9cfa869fda80ddc712221570f9f40a5878687" },
		{ 10000, "b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892" },
		{ 100000, "22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7" },
		{ 1000000, "49415fee2c56c77864931bd3624faad425c3c577d6d74e89a83bc725506dad16" },
	};
	EVP_MD_CTX *ctx = EVP_MD_CTX_new(), *snap = EVP_MD_CTX_new();
	struct numgen g;
	char line[64], num[CANON_NUMBER_LEN], hex[DIGEST_HEX_LEN];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen;
	size_t next = 0;
	int i, n;
	uint64_t u;
	double v;

	numgen_init(&g);
	ck_assert(ctx != NULL && snap != NULL);
	ck_assert(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1);
	for (i = 1; i <= published[3].lines; i++) {
		v = numgen_next(&g);
		memcpy(&u, &v, sizeof(u));
		canon_number(v, num);
		n = snprintf(line, sizeof(line), "%llx,%s\n", (unsigned long long)u, num);
		ck_assert(EVP_DigestUpdate(ctx, line, (size_t)n) == 1);
		if (i == published[next].lines) {
			ck_assert(EVP_MD_CTX_copy_ex(snap, ctx) == 1);
			ck_assert(EVP_DigestFinal_ex(snap, md, &mdlen) == 1);
			digest_hex(md, mdlen, hex);
			ck_assert_msg(strcmp(hex, published[next].sha256) == 0,
			              "the first %d numbers differ from the reference file",
			              published[next].lines);
			next++;
		}
	}
	printf("check_jcs: ES6 number vectors matched: %d doubles (published SHA-256 of "
	       "the reference file)\n", published[3].lines);
	EVP_MD_CTX_free(ctx);
	EVP_MD_CTX_free(snap);
}
END_TEST

/* ---- member order -------------------------------------------------------------- */

START_TEST(utf16_member_order)
{
	/* U+1F600 (D83D DE00 in UTF-16) sorts before U+E000 and U+FFFD in UTF-16
	 * code units, after them by code point; Cyrillic, CJK, Arabic, Hebrew as
	 * usual */
	char *out = jcs("{\"\xef\xbf\xbd\":1,\"\xee\x80\x80\":2,\"\xf0\x9f\x98\x80\":3,"
	                "\"\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7\":4,\"\xe6\xb3\xa8\":5,"
	                "\"\xd8\xb9\":6,\"\xd7\xa9\":7,\"a\":8,\"\xf0\x9f\x98\x80z\":9}");

	ck_assert_str_eq(out, "{\"a\":8,\"\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7\":4,"
	                      "\"\xd7\xa9\":7,\"\xd8\xb9\":6,\"\xe6\xb3\xa8\":5,"
	                      "\"\xf0\x9f\x98\x80\":3,\"\xf0\x9f\x98\x80z\":9,"
	                      "\"\xee\x80\x80\":2,\"\xef\xbf\xbd\":1}");
	free(out);
}
END_TEST

START_TEST(string_escapes)
{
	/* RFC 8785 3.2.2.2: \b \t \n \f \r \" \\ as two characters, other
	 * controls as \u00xx (lowercase hex), everything else as itself: "/",
	 * DEL, U+2028 and non-ASCII are not escaped */
	char *out = jcs("[\"\\u0008\\u0009\\u000A\\u000c\\u000D\\u0022\\u005C\\u0001\\u001F"
	                "\\/\\u007f\\u2028\\u00e9\\uD83D\\uDE00\"]");

	ck_assert_str_eq(out, "[\"\\b\\t\\n\\f\\r\\\"\\\\\\u0001\\u001f/\x7f\xe2\x80\xa8"
	                      "\xc3\xa9\xf0\x9f\x98\x80\"]");
	free(out);
}
END_TEST

/* ---- numbers written back ---------------------------------------------------- */

START_TEST(dumps_shortest)
{
	json_t *doc = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:s, s:[f, f]}", "a", 0.8,
	                        "b", 0.1 + 0.2, "c", 3.0, "d", 1e21, "e", 5e-324, "f",
	                        DBL_MAX, "g", (json_int_t)9007199254740993LL, "h",
	                        "0.80000000000000004 stays in a string", "i", -0.0, 1e-7);
	char *s = canon_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));

	ck_assert_str_eq(s, "{\"a\":0.8,\"b\":0.30000000000000004,\"c\":3.0,\"d\":1e+21,"
	                    "\"e\":5e-324,\"f\":1.7976931348623157e+308,\"g\":9007199254740993,"
	                    "\"h\":\"0.80000000000000004 stays in a string\",\"i\":[0.0,1e-7]}");
	free(s);
	json_decref(doc);
}
END_TEST

/* ---- the one UTF-8 decoder ------------------------------------------------------- */

START_TEST(utf8_decoder)
{
	long cp;

	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp), 4);
	ck_assert_int_eq(cp, 0x1F600);
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xd0\x97", 2, &cp), 2);
	ck_assert_int_eq(cp, 0x417);
	/* truncated: the valid prefix is one bad character */
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xf0\x9f\x98", 3, &cp), 3);
	ck_assert_int_eq(cp, -1);
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xf0\x9f\x98\x80", 2, &cp), 2);
	ck_assert_int_eq(cp, -1);
	/* surrogates, overlongs, beyond U+10FFFF, a lone continuation byte */
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xed\xa0\xbd", 3, &cp), 1);
	ck_assert_int_eq(cp, -1);
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xc0\xaf", 2, &cp), 1);
	ck_assert_int_eq(cp, -1);
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\xf4\x90\x80\x80", 4, &cp), 1);
	ck_assert_int_eq(cp, -1);
	ck_assert_uint_eq(utf8_decode((const unsigned char *)"\x80", 1, &cp), 1);
	ck_assert_int_eq(cp, -1);
	ck_assert(utf8_valid("\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7 \xf0\x9f\x9a\x9a "
	                     "\xe6\xb3\xa8\xe6\x96\x87", 23));
	ck_assert(!utf8_valid("\xce\xf2\xea\xe0\xe7", 5));
	ck_assert_int_eq(utf8_hex_digit('F'), 15);
	ck_assert_int_eq(utf8_hex_digit('g'), -1);
}
END_TEST

TL_SUITE(jcs_suite, "jcs",
         {"rfc8785", 0,
          .tests = TL_LIST(rfc8785_vectors, as_written_rule_unchanged, utf16_member_order,
                           string_escapes)},
         /* a limit for a hang, not a speed: a million numbers under ASan
          * took over 120 s with ten jobs on two cores */
         {"numbers", 300,
          .tests = TL_LIST(number_form, number_out_of_range, es6_number_file,
                           es6_number_sequence, dumps_shortest)},
         {"utf8", 0, .tests = TL_LIST(utf8_decoder)})

TL_SUITE_MAIN(jcs_suite, false)
