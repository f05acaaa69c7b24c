/*
 * check_canon.c — canonical JSON and the payload hash.
 *
 * Mostly one table: input, expected result code, expected canonical text.
 * Every accepted input is also canonicalised a second time, because the
 * canonical form must be a fixed point or hashes would drift.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "caps.h"
#include "testlib.h"

struct canon_case {
	const char *name;
	const char *in;
	size_t len;             /* 0: strlen(in) */
	enum canon_rc rc;
	const char *want;       /* when rc == CANON_OK */
	size_t want_len;        /* 0: strlen(want) */
};

#define OK(n, i, w)    { n, i, 0, CANON_OK, w, 0 }
#define BAD(n, i, r)   { n, i, 0, r, NULL, 0 }

static const struct canon_case cases[] = {
	/* key order */
	OK("sorted keys", "{\"b\":1,\"a\":2}", "{\"a\":2,\"b\":1}"),
	OK("prefix sorts first", "{\"ab\":1,\"b\":3,\"a\":2}",
	   "{\"a\":2,\"ab\":1,\"b\":3}"),
	OK("upper before lower before non-ascii",
	   "{\"\xc3\xa9\":1,\"z\":2,\"Z\":3}", "{\"Z\":3,\"z\":2,\"\xc3\xa9\":1}"),
	/* UTF-16 order would put the astral character first. */
	OK("code point order, not UTF-16",
	   "{\"\\ud83d\\ude00\":1,\"\\uff61\":2}",
	   "{\"\xef\xbd\xa1\":2,\"\xf0\x9f\x98\x80\":1}"),
	OK("keys compared decoded", "{\"b\":2,\"\\u0061\":1}", "{\"a\":1,\"b\":2}"),
	OK("case differs is no duplicate", "{\"a\":1,\"A\":1}", "{\"A\":1,\"a\":1}"),

	/* nesting and arrays */
	OK("nested objects",
	   "{\"b\":{\"d\":1,\"c\":[3,{\"f\":1,\"e\":2}]},\"a\":null}",
	   "{\"a\":null,\"b\":{\"c\":[3,{\"e\":2,\"f\":1}],\"d\":1}}"),
	OK("array keeps order", "[3,1,2,\"b\",\"a\"]", "[3,1,2,\"b\",\"a\"]"),
	OK("empty containers", "[{},[],{\"a\":[]}]", "[{},[],{\"a\":[]}]"),

	/* whitespace */
	OK("whitespace removed",
	   " \t\r\n{ \"a\" :\n[ 1 ,\t2 ] , \"b\" : { } }\r\n", "{\"a\":[1,2],\"b\":{}}"),
	OK("whitespace in strings kept", "{\"a b\":\" x \"}", "{\"a b\":\" x \"}"),

	/* numbers as given */
	OK("numbers kept", "[1.0,1e2,-0,0.5E-3,1E+2,-12.34e10,0,-0.0,100]",
	   "[1.0,1e2,-0,0.5E-3,1E+2,-12.34e10,0,-0.0,100]"),
	OK("big number kept", "123456789012345678901234567890.000000000000000001",
	   "123456789012345678901234567890.000000000000000001"),

	/* top-level scalars */
	OK("top-level true", "true", "true"),
	OK("top-level false", " false ", "false"),
	OK("top-level null", "null", "null"),
	OK("top-level string", "\"x\"", "\"x\""),
	OK("top-level number", " 42\n", "42"),

	/* unicode */
	OK("escaped e-acute", "\"\\u00e9\"", "\"\xc3\xa9\""),
	OK("raw e-acute", "\"\xc3\xa9\"", "\"\xc3\xa9\""),
	OK("uppercase hex escape", "\"\\u00E9\"", "\"\xc3\xa9\""),
	OK("surrogate pair", "\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\""),
	OK("surrogate pair upper", "\"\\uD83D\\uDE00\"", "\"\xf0\x9f\x98\x80\""),
	OK("raw 4-byte", "\"\xf0\x9f\x98\x80\"", "\"\xf0\x9f\x98\x80\""),
	OK("highest code point", "\"\\udbff\\udfff\"", "\"\xf4\x8f\xbf\xbf\""),
	OK("raw U+10FFFF", "\"\xf4\x8f\xbf\xbf\"", "\"\xf4\x8f\xbf\xbf\""),
	OK("escaped 3-byte", "\"\\u20ac\"", "\"\xe2\x82\xac\""),

	/* escapes in output */
	OK("solidus unescaped", "\"a\\/b/c\"", "\"a/b/c\""),
	OK("quote and backslash", "\"\\u0022\\u005c\\\"\\\\\"",
	   "\"\\\"\\\\\\\"\\\\\""),
	OK("short escapes", "\"\\u0008\\u000c\\u000a\\u000d\\u0009\"",
	   "\"\\b\\f\\n\\r\\t\""),
	OK("short escapes kept", "\"\\b\\f\\n\\r\\t\"", "\"\\b\\f\\n\\r\\t\""),
	OK("other controls lowercase", "\"\\u0001\\u001F\\u001b\"",
	   "\"\\u0001\\u001f\\u001b\""),
	OK("DEL raw", "\"\\u007f\"", "\"\x7f\""),
	OK("non-ascii escapes decoded", "\"\\u00E9\\u4E2D\"",
	   "\"\xc3\xa9\xe4\xb8\xad\""),
	/* jsonb cannot store U+0000: refused, not hashed and then failed on */
	BAD("NUL escape", "\"a\\u0000b\"", CANON_NUL),
	OK("escaped key", "{\"a\\nb\":1}", "{\"a\\nb\":1}"),

	/* duplicate keys */
	BAD("duplicate key", "{\"a\":1,\"a\":2}", CANON_DUPLICATE_KEY),
	BAD("duplicate same value", "{\"a\":1,\"b\":0,\"a\":1}", CANON_DUPLICATE_KEY),
	BAD("duplicate after decoding", "{\"a\":1,\"\\u0061\":2}", CANON_DUPLICATE_KEY),
	BAD("duplicate nested", "[{\"x\":{\"b\":1,\"b\":[]}}]", CANON_DUPLICATE_KEY),
	BAD("duplicate empty key", "{\"\":1,\"\":2}", CANON_DUPLICATE_KEY),

	/* not JSON */
	BAD("empty input", "", CANON_SYNTAX),
	BAD("only whitespace", " \n\t ", CANON_SYNTAX),
	BAD("trailing comma array", "[1,2,]", CANON_SYNTAX),
	BAD("trailing comma object", "{\"a\":1,}", CANON_SYNTAX),
	BAD("leading comma", "[,1]", CANON_SYNTAX),
	BAD("double comma", "[1,,2]", CANON_SYNTAX),
	BAD("leading zero", "01", CANON_SYNTAX),
	BAD("leading zero negative", "-01", CANON_SYNTAX),
	BAD("leading zeros in array", "[00]", CANON_SYNTAX),
	BAD("plus sign", "+1", CANON_SYNTAX),
	BAD("bare minus", "-", CANON_SYNTAX),
	BAD("dot first", ".5", CANON_SYNTAX),
	BAD("dot last", "1.", CANON_SYNTAX),
	BAD("dot before exponent", "1.e2", CANON_SYNTAX),
	BAD("empty exponent", "1e", CANON_SYNTAX),
	BAD("signed empty exponent", "1e+", CANON_SYNTAX),
	BAD("hex number", "0x10", CANON_SYNTAX),
	BAD("NaN", "NaN", CANON_SYNTAX),
	BAD("Infinity", "[-Infinity]", CANON_SYNTAX),
	BAD("bare word", "hello", CANON_SYNTAX),
	BAD("capital True", "True", CANON_SYNTAX),
	BAD("short literal", "nul", CANON_SYNTAX),
	BAD("long literal", "nulll", CANON_SYNTAX),
	BAD("single quotes", "'a'", CANON_SYNTAX),
	BAD("unquoted key", "{a:1}", CANON_SYNTAX),
	BAD("number key", "{1:2}", CANON_SYNTAX),
	BAD("missing colon", "{\"a\" 1}", CANON_SYNTAX),
	BAD("missing value", "{\"a\":}", CANON_SYNTAX),
	BAD("unclosed object", "{\"a\":1", CANON_SYNTAX),
	BAD("unclosed array", "[1", CANON_SYNTAX),
	BAD("mismatched close", "[1}", CANON_SYNTAX),
	BAD("line comment", "{\"a\":1}//x", CANON_SYNTAX),
	BAD("block comment", "/* x */{}", CANON_SYNTAX),
	BAD("unterminated string", "\"abc", CANON_SYNTAX),
	BAD("unterminated after escape", "\"abc\\", CANON_SYNTAX),
	BAD("escaped closing quote", "\"abc\\\"", CANON_SYNTAX),
	BAD("raw tab in string", "\"a\tb\"", CANON_CONTROL),
	BAD("raw newline in string", "\"a\nb\"", CANON_CONTROL),
	BAD("raw control in key", "{\"a\x01\":1}", CANON_CONTROL),
	BAD("unknown escape", "\"\\x41\"", CANON_SYNTAX),
	BAD("short unicode escape", "\"\\u12\"", CANON_SYNTAX),
	BAD("non-hex unicode escape", "\"\\u12g4\"", CANON_SYNTAX),
	BAD("trailing garbage", "{} x", CANON_SYNTAX),
	BAD("two values", "1 2", CANON_SYNTAX),
	BAD("extra close", "{}}", CANON_SYNTAX),
	BAD("byte order mark", "\xef\xbb\xbf{}", CANON_SYNTAX),
	BAD("invalid utf-8 outside string", "\xff", CANON_SYNTAX),
	{ "NUL after value", "{}\0", 3, CANON_SYNTAX, NULL, 0 },
	{ "raw NUL in string", "\"a\0b\"", 5, CANON_CONTROL, NULL, 0 },

	/* invalid UTF-8 and lone surrogates */
	BAD("overlong 2-byte", "\"\xc0\xaf\"", CANON_BAD_UTF8),
	BAD("overlong C1", "\"\xc1\xbf\"", CANON_BAD_UTF8),
	BAD("overlong 3-byte", "\"\xe0\x80\xaf\"", CANON_BAD_UTF8),
	BAD("overlong 4-byte", "\"\xf0\x8f\xbf\xbf\"", CANON_BAD_UTF8),
	BAD("UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", CANON_BAD_UTF8),
	BAD("UTF-8 encoded low surrogate", "\"\xed\xbf\xbf\"", CANON_BAD_UTF8),
	BAD("above U+10FFFF", "\"\xf4\x90\x80\x80\"", CANON_BAD_UTF8),
	BAD("F5 lead byte", "\"\xf5\x80\x80\x80\"", CANON_BAD_UTF8),
	BAD("FF byte", "\"\xff\"", CANON_BAD_UTF8),
	BAD("lone continuation", "\"\x80\"", CANON_BAD_UTF8),
	BAD("truncated sequence", "\"\xc3\"", CANON_BAD_UTF8),
	BAD("truncated 4-byte", "\"\xf0\x9f\x98\"", CANON_BAD_UTF8),
	BAD("bad continuation", "\"\xc3\x28\"", CANON_BAD_UTF8),
	BAD("invalid UTF-8 in key", "{\"\xc3\":1}", CANON_BAD_UTF8),
	BAD("lone high surrogate", "\"\\ud83d\"", CANON_LONE_SURROGATE),
	BAD("lone low surrogate", "\"\\ude00\"", CANON_LONE_SURROGATE),
	BAD("high then letter", "\"\\ud83dx\"", CANON_LONE_SURROGATE),
	BAD("high then non-low", "\"\\ud83d\\u0041\"", CANON_LONE_SURROGATE),
	BAD("high then high", "\"\\ud83d\\ud83d\"", CANON_LONE_SURROGATE),
	BAD("swapped pair", "\"\\ude00\\ud83d\"", CANON_LONE_SURROGATE),

	/* numbers a double cannot hold, or jsonb cannot store as written */
	BAD("underflow", "1e-20000", CANON_NUMBER_RANGE),
	BAD("overflow", "[1e400]", CANON_NUMBER_RANGE),
	BAD("negative overflow", "{\"a\":-1e999}", CANON_NUMBER_RANGE),
	BAD("just past DBL_MAX", "1.8e308", CANON_NUMBER_RANGE),
	BAD("below the least denormal", "2e-324", CANON_NUMBER_RANGE),
	BAD("zero with a huge exponent", "0e-1001", CANON_NUMBER_RANGE),
	BAD("huge exponent digits", "1e-99999999999999999999999", CANON_NUMBER_RANGE),
	OK("DBL_MAX", "[1.7976931348623157e308,-1.7976931348623157E+308]",
	   "[1.7976931348623157e308,-1.7976931348623157E+308]"),
	OK("least denormal", "4.9e-324", "4.9e-324"),
	OK("zero at the largest exponent", "[0e-1000,-0.0E+1000]", "[0e-1000,-0.0E+1000]"),
};

START_TEST(test_table)
{
	const struct canon_case *c = &cases[_i];
	size_t len = c->len ? c->len : strlen(c->in);
	char *out = (char *)1, *again = NULL;
	size_t out_len = 12345, again_len = 0, want_len;
	enum canon_rc rc;

	rc = canon_json(CANON_AS_WRITTEN, c->in, len, &out, &out_len);
	ck_assert_msg(rc == c->rc, "%s: rc %d (%s), want %d", c->name, rc,
	              canon_strerror(rc), c->rc);
	if (c->rc != CANON_OK) {
		ck_assert_msg(out == NULL, "%s: out not NULL on error", c->name);
		return;
	}
	want_len = c->want_len ? c->want_len : strlen(c->want);
	ck_assert_msg(out_len == want_len && memcmp(out, c->want, want_len) == 0,
	              "%s: got '%s', want '%s'", c->name, out, c->want);
	ck_assert_msg(out[out_len] == '\0', "%s: not NUL-terminated", c->name);
	ck_assert_msg(out_len <= len, "%s: canonical form longer than input",
	              c->name);

	/* The canonical form is its own canonical form. */
	rc = canon_json(CANON_AS_WRITTEN, out, out_len, &again, &again_len);
	ck_assert_int_eq(rc, CANON_OK);
	ck_assert_uint_eq(again_len, out_len);
	ck_assert_mem_eq(again, out, out_len);
	free(again);
	free(out);
}
END_TEST

/* n nested containers: "[[[...]]]" or {"a":{"a":...1...}} */
static char *
nested(size_t n, int objects, size_t *len)
{
	size_t per = objects ? 5 : 1, i, o = 0;
	char *s = malloc(n * (per + 1) + 2);

	ck_assert_ptr_nonnull(s);
	for (i = 0; i < n; i++) {
		if (objects) {
			memcpy(s + o, "{\"a\":", 5);
			o += 5;
		} else {
			s[o++] = '[';
		}
	}
	s[o++] = '1';
	for (i = 0; i < n; i++)
		s[o++] = objects ? '}' : ']';
	s[o] = '\0';
	*len = o;
	return s;
}

START_TEST(test_depth)
{
	static const struct {
		size_t n;
		int objects;
		enum canon_rc rc;
	} t[] = {
		{ OG_JSON_DEPTH_MAX, 0, CANON_OK },
		{ OG_JSON_DEPTH_MAX + 1, 0, CANON_DEPTH },
		{ OG_JSON_DEPTH_MAX, 1, CANON_OK },
		{ OG_JSON_DEPTH_MAX + 1, 1, CANON_DEPTH },
		/* deep enough to blow the stack of an unbounded recursive parser */
		{ 1000000, 0, CANON_DEPTH },
	};
	size_t i, len;
	char *s, *out;
	enum canon_rc rc;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		s = nested(t[i].n, t[i].objects, &len);
		out = NULL;
		rc = canon_json(CANON_AS_WRITTEN, s, len, &out, NULL);
		ck_assert_msg(rc == t[i].rc, "depth %zu objects %d: rc %d",
		              t[i].n, t[i].objects, rc);
		if (rc == CANON_OK)
			ck_assert_str_eq(out, s); /* already canonical */
		free(out);
		free(s);
	}
}
END_TEST

START_TEST(test_depth_unclosed)
{
	/* Only opening brackets: must stop at the limit, not at the end. */
	size_t n = 100000;
	char *s = malloc(n), *out = NULL;

	ck_assert_ptr_nonnull(s);
	memset(s, '[', n);
	ck_assert_int_eq(canon_json(CANON_AS_WRITTEN, s, n, &out, NULL), CANON_DEPTH);
	ck_assert_ptr_null(out);
	free(s);
}
END_TEST

static const struct member_case {
	const char *name;
	const char *in;
	const char *member;
	enum canon_rc rc;
	const char *want;
} member_cases[] = {
	{ "object member", "{\"key\":\"k\",\"payload\":{\"b\":1, \"a\":2}}",
	  "payload", CANON_OK, "{\"a\":2,\"b\":1}" },
	{ "scalar member", "{\"payload\": 1.50 ,\"a\":1}", "payload", CANON_OK, "1.50" },
	{ "string member", "{\"payload\":\"\\u00e9\"}", "payload", CANON_OK,
	  "\"\xc3\xa9\"" },
	{ "null member", "{\"a\":1,\"payload\":null,\"z\":2}", "payload", CANON_OK,
	  "null" },
	{ "escaped name", "{\"p\\u0061yload\":[2,1]}", "payload", CANON_OK, "[2,1]" },
	{ "non-ascii name", "{\"\xc3\xa9t\xc3\xa9\":true}", "\xc3\xa9t\xc3\xa9",
	  CANON_OK, "true" },
	{ "not found", "{\"key\":\"k\"}", "payload", CANON_NOT_FOUND, NULL },
	{ "prefix is not a match", "{\"pay\":1}", "payload", CANON_NOT_FOUND, NULL },
	{ "longer is not a match", "{\"payload2\":1}", "payload", CANON_NOT_FOUND, NULL },
	{ "nested is not top-level", "{\"x\":{\"payload\":1}}", "payload",
	  CANON_NOT_FOUND, NULL },
	{ "empty object", "{}", "payload", CANON_NOT_FOUND, NULL },
	{ "array document", "[{\"payload\":1}]", "payload", CANON_NOT_OBJECT, NULL },
	{ "scalar document", "\"payload\"", "payload", CANON_NOT_OBJECT, NULL },
	{ "invalid document", "{\"payload\":1,}", "payload", CANON_SYNTAX, NULL },
	{ "duplicate elsewhere", "{\"payload\":1,\"x\":1,\"x\":2}", "payload",
	  CANON_DUPLICATE_KEY, NULL },
	{ "duplicate member", "{\"payload\":1,\"payload\":1}", "payload",
	  CANON_DUPLICATE_KEY, NULL },
	{ "bad utf-8 after member", "{\"payload\":1,\"x\":\"\xed\xa0\x80\"}",
	  "payload", CANON_BAD_UTF8, NULL },
};

START_TEST(test_member)
{
	const struct member_case *c = &member_cases[_i];
	char *out = (char *)1;
	size_t out_len = 0;
	enum canon_rc rc;

	rc = canon_member(CANON_AS_WRITTEN, c->in, strlen(c->in), c->member, &out, &out_len);
	ck_assert_msg(rc == c->rc, "%s: rc %d (%s), want %d", c->name, rc,
	              canon_strerror(rc), c->rc);
	if (rc != CANON_OK) {
		ck_assert_ptr_null(out);
		return;
	}
	ck_assert_str_eq(out, c->want);
	ck_assert_uint_eq(out_len, strlen(c->want));
	free(out);
}
END_TEST

static void
hash_of(const char *in, char hash[CANON_HASH_LEN])
{
	char *out = NULL;
	size_t len = 0;

	ck_assert_int_eq(canon_json(CANON_AS_WRITTEN, in, strlen(in), &out, &len), CANON_OK);
	canon_hash(out, len, hash);
	free(out);
}

START_TEST(test_hash_known)
{
	/* printf '%s' '{"a":1}' | sha256sum */
	static const char want[] =
	    "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862";
	char hash[CANON_HASH_LEN];

	ck_assert_uint_eq(sizeof(want), CANON_HASH_LEN);
	canon_hash("{\"a\":1}", 7, hash);
	ck_assert_str_eq(hash, want);
	hash_of(" {\n\"a\" : 1 } ", hash);
	ck_assert_str_eq(hash, want);
}
END_TEST

START_TEST(test_hash_same_value)
{
	static const char *const same[] = {
		"{\"a\":\"\xc3\xa9\",\"b\":[1,{\"x\":1,\"y\":2}],\"c\":{}}",
		"{\"c\":{},\"b\":[1,{\"y\":2,\"x\":1}],\"a\":\"\\u00e9\"}",
		" { \"b\" : [ 1 , { \"x\" : 1 , \"y\" : 2 } ] ,\n\"c\":{ },\"a\":\"\\u00E9\"}",
		"{\"\\u0062\":[1,{\"\\u0079\":2,\"x\":1}],\"a\":\"\xc3\xa9\",\"c\":{}}",
	};
	static const char *const different[] = {
		"{\"a\":\"\xc3\xa9\",\"b\":[{\"x\":1,\"y\":2},1],\"c\":{}}", /* array order */
		"{\"a\":\"\xc3\xa9\",\"b\":[1.0,{\"x\":1,\"y\":2}],\"c\":{}}", /* 1 vs 1.0 */
		"{\"a\":\"e\",\"b\":[1,{\"x\":1,\"y\":2}],\"c\":{}}",
	};
	char first[CANON_HASH_LEN], h[CANON_HASH_LEN];
	size_t i;

	hash_of(same[0], first);
	ck_assert_int_eq(strncmp(first, "sha256:", 7), 0);
	ck_assert_uint_eq(strlen(first), CANON_HASH_LEN - 1);
	for (i = 1; i < sizeof(same) / sizeof(same[0]); i++) {
		hash_of(same[i], h);
		ck_assert_msg(strcmp(h, first) == 0, "same[%zu] hashes differently", i);
	}
	for (i = 0; i < sizeof(different) / sizeof(different[0]); i++) {
		hash_of(different[i], h);
		ck_assert_msg(strcmp(h, first) != 0, "different[%zu] hashes alike", i);
	}
}
END_TEST

START_TEST(test_many_members)
{
	/* Big objects sort in O(n log n); 20000 members in reverse order. */
	size_t n = 20000, i, o = 0, cap = n * 16 + 16, len;
	char *s = malloc(cap), *out = NULL, prev[16] = "", key[16];
	const char *p;

	ck_assert_ptr_nonnull(s);
	s[o++] = '{';
	for (i = n; i > 0; i--)
		o += (size_t)snprintf(s + o, cap - o, "%s\"k%06zu\":%zu",
		                      i == n ? "" : ",", i, i);
	s[o++] = '}';
	ck_assert_int_eq(canon_json(CANON_AS_WRITTEN, s, o, &out, &len), CANON_OK);
	/* members come out in ascending order */
	for (p = out + 1, i = 0; *p == '"'; i++) {
		memcpy(key, p + 1, 7);
		key[7] = '\0';
		ck_assert_msg(strcmp(prev, key) < 0, "order at %zu", i);
		memcpy(prev, key, 8);
		p = strchr(p, ',');
		if (p == NULL)
			break;
		p++;
	}
	ck_assert_uint_eq(i + 1, n);
	free(out);
	free(s);
}
END_TEST

START_TEST(test_truncations)
{
	/* Every proper prefix of a document is rejected, cleanly. */
	static const char doc[] =
	    "{\"a\":[1,-2.5e+3,true,false,null,\"x\\u00e9\\ud83d\\ude00\\n\"],"
	    "\"b\":{\"\xc3\xa9\":{}}}";
	size_t len = sizeof(doc) - 1, i;
	char *out, *copy;

	for (i = 0; i < len; i++) {
		/* heap copy of exactly i bytes, so ASan sees any over-read */
		copy = malloc(i ? i : 1);
		ck_assert_ptr_nonnull(copy);
		memcpy(copy, doc, i);
		out = NULL;
		ck_assert_msg(canon_json(CANON_AS_WRITTEN, copy, i, &out, NULL) != CANON_OK,
		              "prefix %zu accepted", i);
		ck_assert_ptr_null(out);
		free(copy);
	}
	out = NULL;
	ck_assert_int_eq(canon_json(CANON_AS_WRITTEN, doc, len, &out, NULL), CANON_OK);
	free(out);
}
END_TEST

START_TEST(test_mutations)
{
	/* Every single-byte substitution either parses or fails cleanly, and
	 * what parses is a fixed point. A tiny fuzzer for the test suite. */
	static const char doc[] =
	    "{\"k\":[0,1.5e-3,\"\\u00e9\\\"\\/\",{\"\\ud83d\\ude00\":null}],\"z\":\"\xc3\xa9\"}";
	static const unsigned char bytes[] = {
		0x00, 0x01, 0x09, 0x0a, ' ', '"', ',', '-', '.', '0', '1', ':',
		'E', '[', '\\', ']', 'e', 'u', '{', '}', 0x7f, 0x80, 0xbf, 0xc0,
		0xc3, 0xed, 0xf0, 0xf4, 0xff,
	};
	size_t len = sizeof(doc) - 1, i, j, out_len, again_len;
	char *copy, *out, *again;

	for (i = 0; i < len; i++) {
		for (j = 0; j < sizeof(bytes); j++) {
			copy = malloc(len);
			ck_assert_ptr_nonnull(copy);
			memcpy(copy, doc, len);
			copy[i] = (char)bytes[j];
			out = NULL;
			if (canon_json(CANON_AS_WRITTEN, copy, len, &out, &out_len) == CANON_OK) {
				again = NULL;
				ck_assert_int_eq(canon_json(CANON_AS_WRITTEN, out, out_len, &again,
				                            &again_len), CANON_OK);
				ck_assert_uint_eq(again_len, out_len);
				ck_assert_mem_eq(again, out, out_len);
				free(again);
			}
			free(out);
			free(copy);
		}
	}
}
END_TEST

START_TEST(test_strerror)
{
	enum canon_rc rc;

	for (rc = CANON_OK; rc <= CANON_NOMEM; rc++) {
		ck_assert_ptr_nonnull(canon_strerror(rc));
		ck_assert_uint_gt(strlen(canon_strerror(rc)), 0);
	}
}
END_TEST

/* Where a document fails, in characters, and the problem in plain words. */
START_TEST(test_where)
{
	static const char half_emoji[] = "{\"text\": \"Заказ\n\",\n \"more\": \"доставлен \\ud83d\"}";
	static const char two_lines[] = "{\"a\": \"x\",\n \"b\": \"доставлен \\ud83d\"}";
	struct canon_where w;
	char msg[512], *num;
	enum canon_rc rc;

	rc = canon_validate(half_emoji, strlen(half_emoji), &w);
	ck_assert_int_eq(rc, CANON_CONTROL);
	ck_assert_uint_eq(w.line, 1);
	ck_assert_uint_eq(w.column, 16); /* the raw newline after "Заказ" */

	rc = canon_validate(two_lines, strlen(two_lines), &w);
	ck_assert_int_eq(rc, CANON_LONE_SURROGATE);
	canon_describe(rc, &w, msg, sizeof(msg));
	/* the column of the backslash, counted in characters */
	ck_assert_msg(strstr(msg, "lone surrogate \\uD83D at line 2 column 18") != NULL, "%s", msg);

	rc = canon_validate("[1,\n  2, 1e-20000]", strlen("[1,\n  2, 1e-20000]"), &w);
	ck_assert_int_eq(rc, CANON_NUMBER_RANGE);
	ck_assert_uint_eq(w.line, 2);
	ck_assert_uint_eq(w.column, 6);

	num = malloc(OG_JSON_NUMBER_MAX + 2);
	ck_assert_ptr_nonnull(num);
	memset(num, '1', OG_JSON_NUMBER_MAX + 1);
	num[0] = '0';
	num[1] = '.';
	num[OG_JSON_NUMBER_MAX + 1] = '\0';
	ck_assert_int_eq(canon_validate(num, OG_JSON_NUMBER_MAX + 1, NULL), CANON_NUMBER_LONG);
	ck_assert_int_eq(canon_validate(num, OG_JSON_NUMBER_MAX, NULL), CANON_OK);
	free(num);

	ck_assert(canon_utf8_valid("Заказ 🚚 注文", strlen("Заказ 🚚 注文")));
	ck_assert(!canon_utf8_valid("\xce\xf2\xea\xe0\xe7", 5));
	ck_assert(!canon_utf8_valid("\xed\xa0\xbd", 3));

	/* jansson's words, never its flag names */
	ck_assert_str_eq(canon_jansson_problem("too big integer"),
	                 "an integer is beyond the 64-bit signed range (write it as a string, or as "
	                 "a decimal number)");
	ck_assert(strstr(canon_jansson_problem("\\u0000 is not allowed without JSON_ALLOW_NUL"),
	                 "JSON_") == NULL);
	ck_assert(strstr(canon_jansson_problem("invalid Unicode '\\uD83D'"), "lone surrogate") != NULL);
	ck_assert_ptr_null(canon_jansson_problem("',' or '}' expected near 'x'"));
}
END_TEST

/* Claim payloads as a mail-to-ticket workflow sends them (tests/data/corpus:
 * long mails in several scripts, nested objects, arrays, member names in
 * Cyrillic, Han, Arabic, Hebrew), written the ways a client writes JSON:
 * UTF-8 as is, every non-ASCII character as \u escapes (surrogate pairs for
 * emoji), indented. Each canonicalises to the text any JCS library
 * computes, and hashes to its payload_hash. */
START_TEST(test_corpus_payloads)
{
	static const size_t flags[] = { JSON_COMPACT, JSON_ENSURE_ASCII | JSON_COMPACT,
		                        JSON_INDENT(2), JSON_ENSURE_ASCII | JSON_INDENT(3) };
	json_t *doc = tl_corpus_load("outputs.json");
	json_t *list = json_object_get(doc, "payloads"), *item;
	char hash[CANON_HASH_LEN];
	size_t i, f, len, len2;

	ck_assert_msg(json_array_size(list) >= 7, "outputs.json: too few payloads");
	json_array_foreach(list, i, item) {
		const char *want = tl_jstr(item, "canonical"), *want_hash = tl_jstr(item, "payload_hash");

		ck_assert_ptr_nonnull(want);
		ck_assert_ptr_nonnull(want_hash);
		for (f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
			char *text = json_dumps(json_object_get(item, "payload"), flags[f]);
			char *out = NULL, *again = NULL;

			ck_assert_ptr_nonnull(text);
			ck_assert_msg(canon_json(CANON_JCS, text, strlen(text), &out, &len) == CANON_OK,
			              "payload %zu (flags %zx) refused", i, flags[f]);
			ck_assert_msg(len == strlen(want) && memcmp(out, want, len) == 0,
			              "payload %zu (flags %zx): canonical text differs:\n"
			              "got  %.300s\nwant %.300s", i, flags[f], out, want);
			ck_assert_int_eq(canon_json(CANON_JCS, out, len, &again, &len2), CANON_OK);
			ck_assert_msg(len2 == len && memcmp(again, out, len) == 0,
			              "payload %zu: the canonical form is not a fixed point", i);
			canon_hash(out, len, hash);
			ck_assert_str_eq(hash, want_hash);
			free(again);
			free(out);
			free(text);
		}
	}
	json_decref(doc);
}
END_TEST

TL_SUITE(canon_suite, "canon",
         {"canon_json", 60, .loops = TL_LOOPS({test_table, sizeof(cases) / sizeof(cases[0])}),
          .tests = TL_LIST(test_depth, test_depth_unclosed, test_many_members, test_truncations,
                           test_mutations, test_strerror, test_where)},
         {"canon_member", 0,
          .loops = TL_LOOPS({test_member, sizeof(member_cases) / sizeof(member_cases[0])})},
         {"canon_hash", 0,
          .tests = TL_LIST(test_hash_known, test_hash_same_value, test_corpus_payloads)})

TL_SUITE_MAIN(canon_suite, false)
