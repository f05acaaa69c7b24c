/*
 * check_contract.c — output contracts and gate policy.
 *
 * Tables, mostly: the validator per keyword (schema, instance, how many
 * errors, the first one's path and rule), load errors (file text, what the
 * message must name), gate rules per op, approver matching. Contracts are
 * written into a scratch directory made once per run; the shipped examples
 * are loaded from the real contracts/ directory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp */
#endif
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "contract.h"
#include "digest.h"
#include "edit.h"
#include "caps.h"
#include "suitelib.h"

static char scratch[] = "/tmp/check_contract.XXXXXX";

/* ---- helpers ------------------------------------------------------------ */

/* A fresh, empty directory under the scratch directory. */
static void
fresh_dir(char *out, size_t len)
{
	snprintf(out, len, "%s/d.XXXXXX", scratch);
	ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp: %s", strerror(errno));
}

static void
write_file(const char *dir, const char *name, const char *data, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* Loads `text` as contracts/t.json; fails the test if it does not load. */
static struct contract_set *
load_text(const char *text, const struct contract **c)
{
	char dir[256], err[1024];
	struct contract_set *set;

	fresh_dir(dir, sizeof(dir));
	write_file(dir, "t.json", text, strlen(text));
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_msg(set != NULL, "contract did not load: %s\n%s", err, text);
	*c = contract_find(set, "t");
	ck_assert_ptr_nonnull(*c);
	return set;
}

#define EFFECTS "\"effects\":{\"allowed_types\":[\"t.do\"],\"allowed_targets\":[\"demo_http\"]}"

/* A contract "t" with this schema and the plainest gate. */
static struct contract_set *
load_schema(const char *schema, const struct contract **c)
{
	char text[8192];

	snprintf(text, sizeof(text), "{\"name\":\"t\",\"schema\":%s,"
	         "\"gate\":{\"approvers\":[\"group:x\"]}," EFFECTS "}", schema);
	return load_text(text, c);
}

/* A contract "t" (approve_by_exception, schema {}) with these rules. */
static struct contract_set *
load_rules(const char *rules, const char *extra_gate, const struct contract **c)
{
	char text[8192];

	snprintf(text, sizeof(text), "{\"name\":\"t\",\"schema\":{},"
	         "\"gate\":{\"mode\":\"approve_by_exception\",\"auto_when\":%s,"
	         "\"approvers\":[\"group:x\"]%s}," EFFECTS "}", rules,
	         extra_gate != NULL ? extra_gate : "");
	return load_text(text, c);
}

static json_t *
parse(const char *text)
{
	json_error_t jerr;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);

	ck_assert_msg(v != NULL, "test JSON %s: %s", text, jerr.text);
	return v;
}

static const char *
err_str(const json_t *errors, size_t i, const char *member)
{
	return json_string_value(json_object_get(json_array_get(errors, i), member));
}

/* The shipped contracts: $ONCEGATE_CONTRACTS_DIR, $srcdir/contracts (make
 * check runs from the build directory), ../contracts, contracts. */
static const char *
shipped_dir(void)
{
	static char buf[4096];
	const char *env = getenv("ONCEGATE_CONTRACTS_DIR"), *srcdir = getenv("srcdir");
	const char *tries[] = { "../contracts", "contracts" };
	char probe[4200];
	size_t i;

	if (env != NULL && env[0] != '\0')
		return env;
	if (srcdir != NULL && srcdir[0] != '\0') {
		snprintf(buf, sizeof(buf), "%s/contracts", srcdir);
		snprintf(probe, sizeof(probe), "%s/support_reply.json", buf);
		if (access(probe, R_OK) == 0)
			return buf;
	}
	for (i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		snprintf(probe, sizeof(probe), "%s/support_reply.json", tries[i]);
		if (access(probe, R_OK) == 0)
			return tries[i];
	}
	return "contracts";
}

static struct contract_set *
load_shipped(void)
{
	char err[1024];
	const char *dir = shipped_dir();
	struct contract_set *set = contract_load_dir(dir, err, sizeof(err));

	ck_assert_msg(set != NULL, "shipped contracts in %s: %s", dir, err);
	return set;
}

/* ---- the validator, per keyword ------------------------------------------ */

struct vcase {
	const char *name;
	const char *schema;
	const char *instance;
	size_t nerrors;
	const char *path;   /* of the first error */
	const char *rule;
};

#define VOK(n, s, i)            { n, s, i, 0, NULL, NULL }
#define VBAD(n, s, i, k, p, r)  { n, s, i, k, p, r }

static const struct vcase vcases[] = {
	/* type */
	VOK("string", "{\"type\":\"string\"}", "\"x\""),
	VBAD("string vs number", "{\"type\":\"string\"}", "1", 1, "", "type"),
	VBAD("string vs null", "{\"type\":\"string\"}", "null", 1, "", "type"),
	VOK("number int", "{\"type\":\"number\"}", "1"),
	VOK("number real", "{\"type\":\"number\"}", "1.5"),
	VBAD("number vs string", "{\"type\":\"number\"}", "\"1\"", 1, "", "type"),
	VBAD("number vs boolean", "{\"type\":\"number\"}", "true", 1, "", "type"),
	VOK("integer", "{\"type\":\"integer\"}", "-7"),
	/* JSON Schema: an integral value is an integer whatever its spelling. */
	VOK("integer 1.0", "{\"type\":\"integer\"}", "1.0"),
	VOK("integer 1e2", "{\"type\":\"integer\"}", "1e2"),
	VOK("integer -0.0", "{\"type\":\"integer\"}", "-0.0"),
	VOK("integer 1e300", "{\"type\":\"integer\"}", "1e300"),
	VBAD("integer vs 1.5", "{\"type\":\"integer\"}", "1.5", 1, "", "type"),
	VBAD("integer vs 1e-1", "{\"type\":\"integer\"}", "1e-1", 1, "", "type"),
	VBAD("integer vs string", "{\"type\":\"integer\"}", "\"1\"", 1, "", "type"),
	VOK("boolean", "{\"type\":\"boolean\"}", "false"),
	VBAD("boolean vs 0", "{\"type\":\"boolean\"}", "0", 1, "", "type"),
	VOK("null", "{\"type\":\"null\"}", "null"),
	VBAD("null vs false", "{\"type\":\"null\"}", "false", 1, "", "type"),
	VOK("object", "{\"type\":\"object\"}", "{}"),
	VBAD("object vs array", "{\"type\":\"object\"}", "[]", 1, "", "type"),
	VOK("array", "{\"type\":\"array\"}", "[]"),
	VBAD("array vs object", "{\"type\":\"array\"}", "{}", 1, "", "type"),
	VOK("type list null", "{\"type\":[\"string\",\"null\"]}", "null"),
	VOK("type list string", "{\"type\":[\"string\",\"null\"]}", "\"a\""),
	VBAD("type list miss", "{\"type\":[\"string\",\"null\"]}", "1", 1, "", "type"),
	VOK("no type: anything", "{}", "[1,{\"a\":null}]"),
	/* a failed type hides the value's other keywords */
	VBAD("type before enum", "{\"type\":\"string\",\"enum\":[\"a\"],\"minLength\":3}",
	     "1", 1, "", "type"),

	/* properties and paths */
	VBAD("nested path", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
	     "\"object\",\"properties\":{\"b\":{\"type\":\"integer\"}}}}}",
	     "{\"a\":{\"b\":\"x\"}}", 1, "/a/b", "type"),
	VOK("absent property is fine", "{\"properties\":{\"a\":{\"type\":\"string\"}}}",
	    "{\"b\":1}"),
	VOK("properties ignore non-objects", "{\"properties\":{\"a\":{\"type\":\"string\"}}}",
	    "[1]"),
	VBAD("slash escaped", "{\"properties\":{\"a/b\":{\"type\":\"string\"}}}",
	     "{\"a/b\":1}", 1, "/a~1b", "type"),
	VBAD("tilde escaped", "{\"properties\":{\"m~n\":{\"type\":\"string\"}}}",
	     "{\"m~n\":1}", 1, "/m~0n", "type"),
	VBAD("tilde then slash", "{\"properties\":{\"~/\":{\"type\":\"string\"}}}",
	     "{\"~/\":1}", 1, "/~0~1", "type"),
	VBAD("literal ~1 escaped", "{\"properties\":{\"~1\":{\"type\":\"string\"}}}",
	     "{\"~1\":1}", 1, "/~01", "type"),
	VBAD("empty key", "{\"properties\":{\"\":{\"type\":\"string\"}}}",
	     "{\"\":1}", 1, "/", "type"),
	VBAD("non-ascii key", "{\"properties\":{\"\xc3\xa9t\xc3\xa9\":{\"type\":\"string\"}}}",
	     "{\"\xc3\xa9t\xc3\xa9\":1}", 1, "/\xc3\xa9t\xc3\xa9", "type"),

	/* required */
	VOK("required present", "{\"required\":[\"a\"]}", "{\"a\":null}"),
	VBAD("required missing", "{\"required\":[\"a\",\"b\"]}", "{\"a\":1}", 1, "/b",
	     "required"),
	VBAD("required both missing", "{\"required\":[\"a\",\"b\"]}", "{}", 2, "/a",
	     "required"),
	VBAD("required escaped", "{\"required\":[\"x/y\"]}", "{}", 1, "/x~1y", "required"),
	VOK("required ignores non-objects", "{\"required\":[\"a\"]}", "\"s\""),
	VBAD("required nested", "{\"properties\":{\"o\":{\"required\":[\"k\"]}}}",
	     "{\"o\":{}}", 1, "/o/k", "required"),

	/* additionalProperties */
	VBAD("additional refused", "{\"properties\":{\"a\":{}},\"additionalProperties\":false}",
	     "{\"a\":1,\"b\":2,\"c\":3}", 2, "/b", "additionalProperties"),
	VOK("additional allowed", "{\"properties\":{\"a\":{}},\"additionalProperties\":true}",
	    "{\"a\":1,\"b\":2}"),
	VOK("additional default", "{\"properties\":{\"a\":{}}}", "{\"b\":2}"),
	VBAD("additional escaped", "{\"additionalProperties\":false}", "{\"a~b\":1}", 1,
	     "/a~0b", "additionalProperties"),

	/* enum and const */
	VOK("enum hit", "{\"enum\":[\"formal\",\"friendly\"]}", "\"friendly\""),
	VBAD("enum miss", "{\"enum\":[\"formal\",\"friendly\"]}", "\"rude\"", 1, "", "enum"),
	VBAD("enum is case-sensitive", "{\"enum\":[\"formal\"]}", "\"Formal\"", 1, "", "enum"),
	VOK("enum 1 == 1.0", "{\"enum\":[1,2]}", "1.0"),
	VOK("enum 2.0 == 2", "{\"enum\":[2.0]}", "2"),
	VBAD("enum 1 != true", "{\"enum\":[1]}", "true", 1, "", "enum"),
	VBAD("enum \"1\" != 1", "{\"enum\":[\"1\"]}", "1", 1, "", "enum"),
	VOK("enum null", "{\"enum\":[null]}", "null"),
	VOK("enum object any order", "{\"enum\":[{\"a\":1,\"b\":[1,2]}]}",
	    "{\"b\":[1,2],\"a\":1}"),
	VBAD("enum object extra member", "{\"enum\":[{\"a\":1}]}", "{\"a\":1,\"b\":1}", 1,
	     "", "enum"),
	VBAD("enum array order matters", "{\"enum\":[[1,2]]}", "[2,1]", 1, "", "enum"),
	VOK("const", "{\"const\":\"x\"}", "\"x\""),
	VBAD("const miss", "{\"const\":\"x\"}", "\"y\"", 1, "", "const"),
	VOK("const object numbers", "{\"const\":{\"a\":1}}", "{\"a\":1.0}"),
	VBAD("const null vs missing-ish", "{\"const\":null}", "false", 1, "", "const"),
	VBAD("enum and const both", "{\"enum\":[\"a\"],\"const\":\"b\"}", "\"c\"", 2, "",
	     "enum"),

	/* minLength / maxLength in code points */
	VOK("minLength ok", "{\"minLength\":2}", "\"ab\""),
	VBAD("minLength", "{\"minLength\":2}", "\"a\"", 1, "", "minLength"),
	VBAD("minLength empty", "{\"minLength\":1}", "\"\"", 1, "", "minLength"),
	VOK("maxLength ok", "{\"maxLength\":3}", "\"abc\""),
	VBAD("maxLength", "{\"maxLength\":3}", "\"abcd\"", 1, "", "maxLength"),
	VOK("maxLength counts 2-byte as one", "{\"maxLength\":3}", "\"h\xc3\xa9\xc3\xa9\""),
	VOK("maxLength counts emoji as one", "{\"maxLength\":3}",
	    "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\""),
	VBAD("maxLength emoji over", "{\"maxLength\":2}",
	     "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\"", 1, "", "maxLength"),
	VOK("maxLength escaped surrogate pair is one", "{\"maxLength\":1}",
	    "\"\\ud83d\\ude00\""),
	/* code points, not graphemes: e + combining acute is two */
	VBAD("maxLength combining mark", "{\"maxLength\":1}", "\"e\xcc\x81\"", 1, "",
	     "maxLength"),
	VOK("minLength ignores non-strings", "{\"minLength\":5}", "1"),
	VOK("maxLength 0 empty", "{\"maxLength\":0}", "\"\""),

	/* minimum / maximum */
	VOK("minimum equal", "{\"minimum\":0}", "0"),
	VBAD("minimum", "{\"minimum\":0}", "-1", 1, "", "minimum"),
	VBAD("minimum real", "{\"minimum\":0}", "-0.5", 1, "", "minimum"),
	VOK("maximum equal real", "{\"maximum\":1}", "1.0"),
	VBAD("maximum", "{\"maximum\":1}", "1.0000001", 1, "", "maximum"),
	VBAD("maximum real bound", "{\"maximum\":0.5}", "1", 1, "", "maximum"),
	/* beyond 2^53 doubles collapse; the comparison must not */
	VBAD("maximum big integer", "{\"maximum\":9007199254740992}", "9007199254740993",
	     1, "", "maximum"),
	VOK("minimum ignores strings", "{\"minimum\":10}", "\"1\""),
	VBAD("min and max both", "{\"minimum\":0,\"maximum\":1}", "2", 1, "", "maximum"),

	/* items / minItems / maxItems */
	VBAD("items", "{\"items\":{\"type\":\"integer\"}}", "[1,\"a\",2,\"b\"]", 2, "/1",
	     "type"),
	VOK("items empty array", "{\"items\":{\"type\":\"integer\"}}", "[]"),
	VBAD("items nested object", "{\"items\":{\"properties\":{\"x\":{\"maximum\":3}}}}",
	     "[{\"x\":1},{\"x\":5}]", 1, "/1/x", "maximum"),
	VBAD("items of items", "{\"items\":{\"items\":{\"type\":\"null\"}}}",
	     "[[null],[null,null,0]]", 1, "/1/2", "type"),
	VOK("minItems ok", "{\"minItems\":1}", "[0]"),
	VBAD("minItems", "{\"minItems\":1}", "[]", 1, "", "minItems"),
	VBAD("maxItems", "{\"maxItems\":1}", "[1,2]", 1, "", "maxItems"),
	VOK("minItems ignores objects", "{\"minItems\":3}", "{}"),

	/* annotations are accepted and ignored */
	VOK("annotations", "{\"title\":\"T\",\"description\":\"D\",\"$comment\":\"C\","
	    "\"type\":\"string\"}", "\"x\""),

	/* several errors, in order: required, then properties, then extras */
	VBAD("support-like", "{\"type\":\"object\",\"required\":[\"subject\",\"body\"],"
	     "\"additionalProperties\":false,\"properties\":{\"subject\":{\"type\":"
	     "\"string\",\"minLength\":1},\"tone\":{\"enum\":[\"formal\"]},\"body\":{}}}",
	     "{\"subject\":\"\",\"tone\":\"x\",\"extra\":1}", 4, "/body", "required"),
};

START_TEST(test_validate_table)
{
	const struct vcase *vc = &vcases[_i];
	const struct contract *c;
	struct contract_set *set;
	json_t *inst, *errors;
	char *dump;

	set = load_schema(vc->schema, &c);
	inst = parse(vc->instance);
	errors = contract_validate(c, inst);
	ck_assert_ptr_nonnull(errors);
	dump = json_dumps(errors, JSON_COMPACT);
	ck_assert_msg(json_array_size(errors) == vc->nerrors,
	              "%s: %zu errors, want %zu: %s", vc->name, json_array_size(errors),
	              vc->nerrors, dump);
	if (vc->nerrors > 0) {
		ck_assert_msg(strcmp(err_str(errors, 0, "path"), vc->path) == 0,
		              "%s: path %s, want %s", vc->name, err_str(errors, 0, "path"),
		              vc->path);
		ck_assert_msg(strcmp(err_str(errors, 0, "rule"), vc->rule) == 0,
		              "%s: rule %s, want %s", vc->name, err_str(errors, 0, "rule"),
		              vc->rule);
		ck_assert_msg(err_str(errors, 0, "message") != NULL &&
		              err_str(errors, 0, "message")[0] != '\0', "%s: no message", dump);
		ck_assert_uint_eq(json_object_size(json_array_get(errors, 0)), 3);
	}
	free(dump);
	json_decref(errors);
	json_decref(inst);
	contract_set_free(set);
}
END_TEST

START_TEST(test_validate_messages)
{
	const struct contract *c;
	struct contract_set *set;
	json_t *inst, *errors;

	set = load_schema("{\"properties\":{\"tone\":{\"enum\":[\"formal\",\"friendly\"]},"
	                  "\"n\":{\"type\":\"integer\",\"maximum\":3},"
	                  "\"s\":{\"maxLength\":2}}}", &c);
	inst = parse("{\"tone\":\"rude\",\"n\":4,\"s\":\"abc\"}");
	errors = contract_validate(c, inst);
	ck_assert_uint_eq(json_array_size(errors), 3);
	/* messages say what is allowed: a model repairing its output needs it */
	ck_assert_str_eq(err_str(errors, 0, "message"),
	                 "must be one of [\"formal\",\"friendly\"]");
	ck_assert_str_eq(err_str(errors, 1, "message"), "must be at most 3, not 4");
	ck_assert_str_eq(err_str(errors, 2, "message"),
	                 "must be at most 2 characters long, not 3");
	json_decref(errors);
	json_decref(inst);

	inst = parse("{\"n\":\"x\"}");
	errors = contract_validate(c, inst);
	ck_assert_str_eq(err_str(errors, 0, "message"), "must be an integer, not string");
	json_decref(errors);
	json_decref(inst);

	/* NULL output: one error at the root, not a crash */
	errors = contract_validate(c, NULL);
	ck_assert_uint_eq(json_array_size(errors), 1);
	ck_assert_str_eq(err_str(errors, 0, "path"), "");
	json_decref(errors);
	contract_set_free(set);
}
END_TEST

START_TEST(test_validate_cap)
{
	const struct contract *c;
	struct contract_set *set;
	json_t *inst, *errors, *obj;
	char key[16];
	size_t i;

	set = load_schema("{\"items\":{\"type\":\"string\"}}", &c);
	inst = json_array();
	for (i = 0; i < 1000; i++)
		json_array_append_new(inst, json_integer((json_int_t)i));
	errors = contract_validate(c, inst);
	ck_assert_uint_eq(json_array_size(errors), 50);
	ck_assert_str_eq(err_str(errors, 49, "path"), "/49");
	json_decref(errors);
	json_decref(inst);
	contract_set_free(set);

	set = load_schema("{\"additionalProperties\":false}", &c);
	obj = json_object();
	for (i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "k%zu", i);
		json_object_set_new(obj, key, json_null());
	}
	errors = contract_validate(c, obj);
	ck_assert_uint_eq(json_array_size(errors), 50);
	json_decref(errors);
	json_decref(obj);
	contract_set_free(set);
}
END_TEST

/* A member name longer than a pointer may be: the error is reported at the
 * deepest ancestor that fits, and says so. */
START_TEST(test_validate_long_key)
{
	const struct contract *c;
	struct contract_set *set;
	json_t *inst, *errors;
	char *key = malloc(5001);

	ck_assert_ptr_nonnull(key);
	memset(key, 'k', 5000);
	key[5000] = '\0';
	set = load_schema("{\"properties\":{\"o\":{\"additionalProperties\":false}}}", &c);
	inst = json_pack("{s:{s:i}}", "o", key, 1);
	errors = contract_validate(c, inst);
	ck_assert_uint_eq(json_array_size(errors), 1);
	ck_assert_str_eq(err_str(errors, 0, "path"), "/o");
	ck_assert_str_eq(err_str(errors, 0, "rule"), "additionalProperties");
	ck_assert_ptr_nonnull(strstr(err_str(errors, 0, "message"), "below"));
	json_decref(errors);
	json_decref(inst);
	contract_set_free(set);
	free(key);
}
END_TEST

/* Instances far deeper than any schema: the validator only goes where the
 * schema goes and equality stops at the shallower side. */
START_TEST(test_validate_deep_instance)
{
	const struct contract *c;
	struct contract_set *set;
	json_t *deep = json_integer(1), *a, *errors;
	int i;

	for (i = 0; i < 5000; i++) {
		a = json_array();
		json_array_append_new(a, deep);
		deep = a;
	}
	set = load_schema("{\"type\":\"array\",\"items\":{\"items\":{\"enum\":[[[1]]]}},"
	                  "\"const\":[[[[1]]]]}", &c);
	errors = contract_validate(c, deep);
	ck_assert_ptr_nonnull(errors);
	ck_assert_uint_eq(json_array_size(errors), 2); /* const at "", enum at /0/0 */
	ck_assert_str_eq(err_str(errors, 0, "rule"), "const");
	ck_assert_str_eq(err_str(errors, 1, "path"), "/0/0");
	json_decref(errors);
	contract_set_free(set);
	/* unwind by hand: a 5000-deep json_decref recursion is fine, but keep
	 * the test independent of jansson's stack use */
	while (json_is_array(deep)) {
		a = json_incref(json_array_get(deep, 0));
		json_decref(deep);
		deep = a;
	}
	json_decref(deep);
}
END_TEST

/* ---- load errors ------------------------------------------------------------ */

struct lcase {
	const char *name;
	const char *file;      /* file name in the directory */
	const char *text;
	const char *want;      /* substring of the message: the pointer or what */
};

#define SCHEMA_OK "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":false}"
#define GATE_OK "\"gate\":{\"approvers\":[\"group:x\"]}"
#define C(...) "{\"name\":\"t\"," __VA_ARGS__ "}"
#define STD(gate) C(SCHEMA_OK "," gate "," EFFECTS)
#define RULES(r) STD("\"gate\":{\"mode\":\"approve_by_exception\",\"auto_when\":" r ",\"approvers\":[\"group:x\"]}")

/* A drafted mail whose recipient comes from the output. */
#define MAIL_SCHEMA "\"schema\":{\"type\":\"object\",\"properties\":{\"to\":{\"type\":" \
	"\"string\"},\"subject\":{\"type\":\"string\"},\"body\":{\"type\":\"string\"}}," \
	"\"additionalProperties\":false}"
#define MAIL_EFFECTS "\"effects\":{\"allowed_types\":[\"email.send\"],\"allowed_targets\":" \
	"[\"demo_smtp\"],\"types\":{\"email.send\":{\"schema\":{\"type\":\"object\"}," \
	"\"from_output\":[\"to\",\"subject\",\"body\"]}}}"
#define MAIL_GATE(extra) C(MAIL_SCHEMA ",\"gate\":{\"approvers\":[\"group:x\"]," extra "}," \
	MAIL_EFFECTS)

static const struct lcase lcases[] = {
	/* the document */
	{ "malformed JSON", "t.json", "{\"name\":\"t\",", "not valid JSON at line 1" },
	{ "trailing garbage", "t.json", STD(GATE_OK) "x", "not valid JSON" },
	{ "duplicate member", "t.json", "{\"name\":\"t\",\"name\":\"t\"}", "duplicate" },
	{ "not an object", "t.json", "[]", "must be a JSON object" },
	{ "empty file", "t.json", "", "not valid JSON" },
	{ "NUL escape", "t.json", "{\"name\":\"t\\u0000\"}",
	  "the escape \\u0000 (the NUL character) is not allowed in strings" },
	{ "half an emoji", "t.json", "{\"name\":\"t\",\"description\":\"\\ud83d\"}",
	  "lone surrogate" },
	{ "unknown top-level member", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"gaet\":{}"), ": /gaet: unknown member \"gaet\"" },
	{ "typo of a member", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"repair_attempt\":1"), "/repair_attempt: unknown member" },
	{ "description not string", "t.json", C("\"description\":5," SCHEMA_OK "," GATE_OK
	  "," EFFECTS), "/description:" },
	{ "name missing", "t.json", "{" SCHEMA_OK "," GATE_OK "," EFFECTS "}", "/name:" },
	{ "name differs from file", "t.json", "{\"name\":\"u\"," SCHEMA_OK "," GATE_OK ","
	  EFFECTS "}", "/name: must equal the file name" },
	{ "name not a string", "t.json", "{\"name\":1," SCHEMA_OK "," GATE_OK "," EFFECTS "}",
	  "/name:" },
	{ "bad file name upper", "Bad.json", STD(GATE_OK), "Bad.json: file name must be" },
	{ "bad file name dash", "a-b.json", STD(GATE_OK), "a-b.json: file name must be" },
	{ "bad file name long", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.json",
	  STD(GATE_OK), "file name must be" },
	{ "bad file name empty stem", "_.json", STD(GATE_OK), "/name: must equal" },
	{ "schema missing", "t.json", C(GATE_OK "," EFFECTS), "/schema: missing" },
	{ "gate missing", "t.json", C(SCHEMA_OK "," EFFECTS), "/gate: missing" },
	{ "effects missing", "t.json", C(SCHEMA_OK "," GATE_OK), "/effects: missing" },

	/* the schema */
	{ "unknown schema keyword", "t.json", STD(GATE_OK) /* placeholder, replaced */, NULL },
	{ "pattern unsupported", "t.json", C("\"schema\":{\"properties\":{\"a\":{\"type\":"
	  "\"string\",\"pattern\":\"x\"}}}," GATE_OK "," EFFECTS),
	  "/schema/properties/a/pattern: unsupported schema keyword \"pattern\"" },
	{ "$ref unsupported", "t.json", C("\"schema\":{\"$ref\":\"#/x\"}," GATE_OK "," EFFECTS),
	  "/schema/$ref: unsupported schema keyword" },
	{ "oneOf unsupported", "t.json", C("\"schema\":{\"oneOf\":[]}," GATE_OK "," EFFECTS),
	  "/schema/oneOf:" },
	{ "keyword pointer escaped", "t.json", C("\"schema\":{\"properties\":{\"a/b~\":"
	  "{\"bogus\":1}}}," GATE_OK "," EFFECTS), "/schema/properties/a~1b~0/bogus:" },
	{ "schema is boolean", "t.json", C("\"schema\":true," GATE_OK "," EFFECTS),
	  "/schema: a schema must be an object" },
	{ "property schema not object", "t.json", C("\"schema\":{\"properties\":{\"a\":5}},"
	  GATE_OK "," EFFECTS), "/schema/properties/a: a schema must be an object" },
	{ "properties not object", "t.json", C("\"schema\":{\"properties\":[]}," GATE_OK ","
	  EFFECTS), "/schema/properties:" },
	{ "unknown type", "t.json", C("\"schema\":{\"type\":\"str\"}," GATE_OK "," EFFECTS),
	  "/schema/type: unknown type" },
	{ "type twice", "t.json", C("\"schema\":{\"type\":[\"string\",\"string\"]}," GATE_OK
	  "," EFFECTS), "/schema/type/1: type listed twice" },
	{ "type empty list", "t.json", C("\"schema\":{\"type\":[]}," GATE_OK "," EFFECTS),
	  "/schema/type:" },
	{ "type number", "t.json", C("\"schema\":{\"type\":1}," GATE_OK "," EFFECTS),
	  "/schema/type:" },
	{ "required not array", "t.json", C("\"schema\":{\"required\":\"a\"}," GATE_OK ","
	  EFFECTS), "/schema/required:" },
	{ "required not strings", "t.json", C("\"schema\":{\"required\":[\"a\",1]}," GATE_OK
	  "," EFFECTS), "/schema/required/1:" },
	{ "required duplicate", "t.json", C("\"schema\":{\"required\":[\"a\",\"a\"]}," GATE_OK
	  "," EFFECTS), "/schema/required/1: duplicate" },
	{ "required unknown when closed", "t.json", C("\"schema\":{\"properties\":{\"a\":{}},"
	  "\"additionalProperties\":false,\"required\":[\"a\",\"b\"]}," GATE_OK "," EFFECTS),
	  "/schema/required/1: names no member" },
	{ "additionalProperties schema", "t.json", C("\"schema\":{\"additionalProperties\":"
	  "{\"type\":\"string\"}}," GATE_OK "," EFFECTS), "/schema/additionalProperties:" },
	{ "enum empty", "t.json", C("\"schema\":{\"enum\":[]}," GATE_OK "," EFFECTS),
	  "/schema/enum:" },
	{ "enum not array", "t.json", C("\"schema\":{\"enum\":\"a\"}," GATE_OK "," EFFECTS),
	  "/schema/enum:" },
	{ "minLength negative", "t.json", C("\"schema\":{\"minLength\":-1}," GATE_OK ","
	  EFFECTS), "/schema/minLength: must be a non-negative integer" },
	{ "maxLength string", "t.json", C("\"schema\":{\"maxLength\":\"2\"}," GATE_OK ","
	  EFFECTS), "/schema/maxLength:" },
	{ "maxLength fraction", "t.json", C("\"schema\":{\"maxLength\":2.5}," GATE_OK ","
	  EFFECTS), "/schema/maxLength:" },
	{ "minLength > maxLength", "t.json", C("\"schema\":{\"minLength\":3,\"maxLength\":2},"
	  GATE_OK "," EFFECTS), "/schema/minLength: is greater than maxLength" },
	{ "minItems negative", "t.json", C("\"schema\":{\"minItems\":-2}," GATE_OK ","
	  EFFECTS), "/schema/minItems:" },
	{ "minItems > maxItems", "t.json", C("\"schema\":{\"minItems\":3,\"maxItems\":2},"
	  GATE_OK "," EFFECTS), "/schema/minItems:" },
	{ "minimum string", "t.json", C("\"schema\":{\"minimum\":\"0\"}," GATE_OK "," EFFECTS),
	  "/schema/minimum: must be a number" },
	{ "minimum > maximum", "t.json", C("\"schema\":{\"minimum\":1,\"maximum\":0.5},"
	  GATE_OK "," EFFECTS), "/schema/minimum: is greater than maximum" },
	{ "items tuple", "t.json", C("\"schema\":{\"items\":[{}]}," GATE_OK "," EFFECTS),
	  "/schema/items: must be one schema" },
	{ "items bad keyword", "t.json", C("\"schema\":{\"items\":{\"format\":\"date\"}},"
	  GATE_OK "," EFFECTS), "/schema/items/format:" },
	{ "title not string", "t.json", C("\"schema\":{\"title\":1}," GATE_OK "," EFFECTS),
	  "/schema/title:" },

	/* the gate */
	{ "gate not object", "t.json", STD("\"gate\":[]"), "/gate: must be an object" },
	{ "unknown gate member", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"approver\":\"x\"}"), "/gate/approver: unknown gate member \"approver\"" },
	{ "bad mode", "t.json", STD("\"gate\":{\"mode\":\"auto\",\"approvers\":[\"group:x\"]}"),
	  "/gate/mode: must be" },
	{ "mode not string", "t.json", STD("\"gate\":{\"mode\":1,\"approvers\":[\"group:x\"]}"),
	  "/gate/mode:" },
	{ "window missing", "t.json", STD("\"gate\":{\"mode\":\"act_with_window\","
	  "\"approvers\":[\"group:x\"]}"), "/gate/window_seconds: missing (required for "
	  "act_with_window)" },
	{ "window zero", "t.json", STD("\"gate\":{\"mode\":\"act_with_window\","
	  "\"window_seconds\":0,\"approvers\":[\"group:x\"]}"), "/gate/window_seconds: 0 is "
	  "out of range 1..604800" },
	{ "window too long", "t.json", STD("\"gate\":{\"mode\":\"act_with_window\","
	  "\"window_seconds\":604801,\"approvers\":[\"group:x\"]}"), "/gate/window_seconds:" },
	{ "window string", "t.json", STD("\"gate\":{\"mode\":\"act_with_window\","
	  "\"window_seconds\":\"60\",\"approvers\":[\"group:x\"]}"), "/gate/window_seconds:" },
	{ "window without the mode", "t.json", STD("\"gate\":{\"window_seconds\":60,"
	  "\"approvers\":[\"group:x\"]}"), "/gate/window_seconds: only applies" },
	{ "auto_when missing", "t.json", STD("\"gate\":{\"mode\":\"approve_by_exception\","
	  "\"approvers\":[\"group:x\"]}"), "/gate/auto_when: missing (required for "
	  "approve_by_exception)" },
	{ "auto_when empty", "t.json", RULES("[]"), "/gate/auto_when: must be an array" },
	{ "auto_when without the mode", "t.json", STD("\"gate\":{\"auto_when\":[{\"path\":"
	  "\"/output/a\",\"op\":\"exists\"}],\"approvers\":[\"group:x\"]}"),
	  "/gate/auto_when: only applies" },
	{ "sample_rate without the mode", "t.json", STD("\"gate\":{\"sample_rate\":0.5,"
	  "\"approvers\":[\"group:x\"]}"), "/gate/sample_rate: only applies" },
	{ "sample_rate above 1", "t.json", STD("\"gate\":{\"mode\":\"approve_by_exception\","
	  "\"auto_when\":[{\"path\":\"/output/a\",\"op\":\"exists\"}],\"sample_rate\":1.5,"
	  "\"approvers\":[\"group:x\"]}"), "/gate/sample_rate:" },
	{ "rule not object", "t.json", RULES("[1]"), "/gate/auto_when/0: a rule must be" },
	{ "rule unknown member", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":\"eq\","
	  "\"vaule\":1}]"), "/gate/auto_when/0/vaule: unknown rule member" },
	{ "rule bad op", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":\"eqq\",\"value\":1}]"),
	  "/gate/auto_when/0/op: unknown op" },
	{ "rule op missing", "t.json", RULES("[{\"path\":\"/output/a\",\"value\":1}]"),
	  "/gate/auto_when/0/op:" },
	{ "rule value missing", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":\"eq\"}]"),
	  "/gate/auto_when/0/value: missing" },
	{ "rule in needs array", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":\"in\","
	  "\"value\":\"x\"}]"), "/gate/auto_when/0/value: must be a non-empty array" },
	{ "rule in empty array", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":\"not_in\","
	  "\"value\":[]}]"), "/gate/auto_when/0/value:" },
	{ "rule ge needs number", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":\"ge\","
	  "\"value\":\"0.9\"}]"), "/gate/auto_when/0/value: must be a number for ge" },
	{ "rule exists non-boolean", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":"
	  "\"exists\",\"value\":1}]"), "/gate/auto_when/0/value:" },
	{ "rule path not a pointer", "t.json", RULES("[{\"path\":\"output.a\",\"op\":"
	  "\"exists\"}]"), "/gate/auto_when/0/path:" },
	{ "rule path bad escape", "t.json", RULES("[{\"path\":\"/output/a~2\",\"op\":"
	  "\"exists\"}]"), "/gate/auto_when/0/path: is not a valid JSON Pointer" },
	{ "rule path outside", "t.json", RULES("[{\"path\":\"/out/a\",\"op\":\"exists\"}]"),
	  "/gate/auto_when/0/path: must start with /output" },
	{ "rule path outputs", "t.json", RULES("[{\"path\":\"/outputs\",\"op\":\"exists\"}]"),
	  "/gate/auto_when/0/path:" },
	{ "rule path effect member", "t.json", RULES("[{\"path\":\"/effect/url\",\"op\":"
	  "\"exists\"}]"), "/gate/auto_when/0/path:" },
	{ "rule path effect alone", "t.json", RULES("[{\"path\":\"/effect\",\"op\":"
	  "\"exists\"}]"), "/gate/auto_when/0/path:" },
	{ "rule path field not in schema", "t.json", RULES("[{\"path\":\"/output/a\",\"op\":"
	  "\"exists\"},{\"path\":\"/output/b\",\"op\":\"exists\"}]"),
	  "/gate/auto_when/1/path: names a field the schema does not allow" },
	{ "approvers missing", "t.json", STD("\"gate\":{}"), "/gate/approvers: missing" },
	{ "approvers empty", "t.json", STD("\"gate\":{\"approvers\":[]}"), "/gate/approvers:" },
	{ "approvers too many", "t.json", STD("\"gate\":{\"approvers\":[\"a1\",\"a2\",\"a3\","
	  "\"a4\",\"a5\",\"a6\",\"a7\",\"a8\",\"a9\",\"a10\",\"a11\",\"a12\",\"a13\",\"a14\","
	  "\"a15\",\"a16\",\"a17\",\"a18\",\"a19\",\"a20\",\"a21\"]}"),
	  "/gate/approvers: must be an array of 1..20" },
	{ "approver with space", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\","
	  "\"a b\"]}"), "/gate/approvers/1:" },
	{ "approver with comma", "t.json", STD("\"gate\":{\"approvers\":[\"a,b\"]}"),
	  "/gate/approvers/0:" },
	{ "approver empty group", "t.json", STD("\"gate\":{\"approvers\":[\"group:\"]}"),
	  "/gate/approvers/0:" },
	{ "approver duplicate e-mail", "t.json", STD("\"gate\":{\"approvers\":"
	  "[\"Lead@Example.com\",\"lead@example.com\"]}"), "/gate/approvers/1: duplicate" },
	{ "approver not string", "t.json", STD("\"gate\":{\"approvers\":[null]}"),
	  "/gate/approvers/0:" },
	{ "expires too short", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"expires_seconds\":59}"), "/gate/expires_seconds: 59 is out of range" },
	{ "expires too long", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"expires_seconds\":2592001}"), "/gate/expires_seconds:" },
	{ "decision unknown", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"allowed_decisions\":[\"approve\",\"maybe\"]}"), "/gate/allowed_decisions/1:" },
	{ "decisions empty", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"allowed_decisions\":[]}"), "/gate/allowed_decisions:" },
	{ "decision twice", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"allowed_decisions\":[\"reject\",\"reject\"]}"), "/gate/allowed_decisions/1:" },
	{ "changes without approve", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"allowed_decisions\":[\"reject\",\"changes_requested\"]}"),
	  "/gate/allowed_decisions: \"changes_requested\" needs \"approve\"" },
	{ "changes twice", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"allowed_decisions\":[\"approve\",\"changes_requested\",\"changes_requested\"]}"),
	  "/gate/allowed_decisions/2: listed twice" },
	{ "sod not boolean", "t.json", STD("\"gate\":{\"approvers\":[\"x\"],"
	  "\"separation_of_duties\":\"yes\"}"), "/gate/separation_of_duties:" },
	/* notify, reminders, escalation */
	{ "notify for nobody named", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"notify\":{\"group:x\":{\"target\":\"m\",\"to\":[\"a@b.example\"]},"
	  "\"group:y\":{\"target\":\"chat\"}}}"), "/gate/notify: \"group:y\" is not an entry" },
	{ "notify leaves an approver untold", "t.json", STD("\"gate\":{\"approvers\":"
	  "[\"group:x\",\"group:служба поддержки\"],\"notify\":{\"group:x\":{\"target\":\"chat\"}}}"),
	  "/gate/notify: approver \"group:служба поддержки\" has no entry" },
	{ "notify address with CRLF", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"notify\":{\"group:x\":{\"target\":\"m\",\"to\":[\"a@b.example\\r\\nBcc: c@d\"]}}}"),
	  "/gate/notify/group:x/to/0:" },
	{ "notify to empty", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"notify\":{\"group:x\":{\"target\":\"m\",\"to\":[]}}}"), "/gate/notify/group:x/to:" },
	{ "notify target a URL", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"notify\":{\"group:x\":{\"target\":\"https://hooks.example/x\"}}}"),
	  "/gate/notify/group:x/target:" },
	{ "notify unknown member", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"notify\":{\"group:x\":{\"target\":\"chat\",\"url\":\"https://x\"}}}"),
	  "/gate/notify/group:x/url: unknown" },
	{ "remind without notify", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"remind_after_seconds\":60}"), "/gate/remind_after_seconds: reminds nobody" },
	{ "remind after expiry", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"expires_seconds\":600,\"remind_after_seconds\":600,"
	  "\"notify\":{\"group:x\":{\"target\":\"chat\"}}}"), "/gate/remind_after_seconds:" },
	{ "escalate without whom", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"escalate_after_seconds\":60}"), "/gate/escalate_to: escalate_to and" },
	{ "escalate to an approver", "t.json", STD("\"gate\":{\"approvers\":[\"group:x\"],"
	  "\"escalate_after_seconds\":60,\"escalate_to\":[\"group:x\"]}"),
	  "/gate/escalate_to: \"group:x\" is an approver already" },

	/* effects, repair, loggable */
	{ "effects not object", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":[]"),
	  "/effects: must be an object" },
	{ "effects unknown member", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"a\"],\"allowed_targets\":[\"b\"],\"allowed_urls\":[]}"),
	  "/effects/allowed_urls: unknown member" },
	{ "types missing", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_targets\":[\"b\"]}"), "/effects/allowed_types: missing" },
	{ "targets empty", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"a\"],\"allowed_targets\":[]}"), "/effects/allowed_targets:" },
	{ "type upper case", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"a\",\"Email.Send\"],\"allowed_targets\":[\"b\"]}"),
	  "/effects/allowed_types/1:" },
	{ "target with slash", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"a\"],\"allowed_targets\":[\"http://x\"]}"),
	  "/effects/allowed_targets/0:" },
	{ "target duplicate", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"a\"],\"allowed_targets\":[\"b\",\"b\"]}"),
	  "/effects/allowed_targets/1: duplicate" },
	{ "internal type approval.notify", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"email.send\",\"approval.notify\"],\"allowed_targets\":[\"b\"]}"),
	  "/effects/allowed_types/1: \"approval.notify\" is one of oncegate's own effect types" },
	{ "internal type approval.other", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"approval.resend\"],\"allowed_targets\":[\"b\"]}"),
	  "/effects/allowed_types/0: \"approval.resend\" is one of oncegate's own" },
	{ "internal type decision.callback", "t.json", C(SCHEMA_OK "," GATE_OK ",\"effects\":"
	  "{\"allowed_types\":[\"crm.tag\",\"decision.callback\"],\"allowed_targets\":[\"b\"]}"),
	  "/effects/allowed_types/1: \"decision.callback\" is one of oncegate's own" },
	{ "editable recipient without allow-list", "t.json",
	  MAIL_GATE("\"editable\":[\"subject\",\"to\"]"),
	  "/gate/editable: \"to\" says where a email.send effect goes" },
	{ "editable_allow of a member not editable", "t.json",
	  MAIL_GATE("\"editable\":[\"subject\"],\"editable_allow\":{\"to\":{\"mail_domains\":"
	            "[\"example.com\"]}}"),
	  "/gate/editable_allow/to: \"to\" is not a member of gate.editable" },
	{ "editable_allow domain upper case", "t.json",
	  MAIL_GATE("\"editable\":[\"to\"],\"editable_allow\":{\"to\":{\"mail_domains\":"
	            "[\"example.com\",\"Example.ORG\"]}}"),
	  "/gate/editable_allow/to/mail_domains/1: must be a mail domain" },
	{ "editable_allow domain with @", "t.json",
	  MAIL_GATE("\"editable\":[\"to\"],\"editable_allow\":{\"to\":{\"mail_domains\":"
	            "[\"@example.com\"]}}"),
	  "/gate/editable_allow/to/mail_domains/0: must be a mail domain" },
	{ "editable_allow domains empty", "t.json",
	  MAIL_GATE("\"editable\":[\"to\"],\"editable_allow\":{\"to\":{\"mail_domains\":[]}}"),
	  "/gate/editable_allow/to/mail_domains: must be an array of 1..32" },
	{ "editable_allow domain twice", "t.json",
	  MAIL_GATE("\"editable\":[\"to\"],\"editable_allow\":{\"to\":{\"mail_domains\":"
	            "[\"example.com\",\"example.com\"]}}"),
	  "/gate/editable_allow/to/mail_domains/1: duplicate" },
	{ "editable_allow two kinds", "t.json",
	  MAIL_GATE("\"editable\":[\"to\"],\"editable_allow\":{\"to\":{\"mail_domains\":"
	            "[\"example.com\"],\"url_prefixes\":[\"https://crm.example/\"]}}"),
	  "/gate/editable_allow/to: must be {\"mail_domains\"" },
	{ "editable_allow url prefix without its slash", "t.json",
	  MAIL_GATE("\"editable\":[\"subject\"],\"editable_allow\":{\"subject\":{\"url_prefixes\":"
	            "[\"https://crm.example\"]}}"),
	  "/gate/editable_allow/subject/url_prefixes/0: must be an http(s) URL prefix" },
	{ "editable recipient with url prefixes", "t.json",
	  MAIL_GATE("\"editable\":[\"to\"],\"editable_allow\":{\"to\":{\"url_prefixes\":"
	            "[\"https://crm.example/\"]}}"),
	  "/gate/editable: \"to\" says where" },
	{ "repair too many", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"repair_attempts\":11"), "/repair_attempts: 11 is out of range 0..10" },
	{ "repair negative", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"repair_attempts\":-1"), "/repair_attempts:" },
	{ "repair fraction", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"repair_attempts\":1.5"), "/repair_attempts: must be an integer" },
	{ "loggable not pointer", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"loggable_fields\":[\"a\"]"), "/loggable_fields/0:" },
	{ "loggable whole output", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"loggable_fields\":[\"\"]"), "/loggable_fields/0:" },
	{ "loggable not in schema", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"loggable_fields\":[\"/a\",\"/b\"]"), "/loggable_fields/1: names a field" },
	{ "loggable duplicate", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"loggable_fields\":[\"/a\",\"/a\"]"), "/loggable_fields/1: duplicate" },
	{ "loggable not array", "t.json", C(SCHEMA_OK "," GATE_OK "," EFFECTS
	  ",\"loggable_fields\":\"/a\""), "/loggable_fields:" },
};

/* A recipient the approver may correct, within the contract's domains:
 * edit_check refuses any other, the model's own recipient stays as it is,
 * other fields are corrected freely. */
START_TEST(test_editable_allow)
{
	static const struct {
		const char *to;
		bool ok;
	} tos[] = {
		{ "olga.petrova@support.example.com", true },
		{ "Olga.Petrova@SUPPORT.Example.com", true },
		{ "kunde@example.org", true },
		{ "attacker@evil.example", false },
		{ "x@support.example.com.evil.example", false },
		{ "x@sub.support.example.com", false },
		{ "Ольга <olga@support.example.com>", false },
		{ "olga@support.example.com, eve@evil.example", false },
		{ "", false },
	};
	const struct contract *c;
	struct contract_set *set = load_text(MAIL_GATE("\"editable\":[\"subject\",\"to\"],"
	                                               "\"editable_allow\":{\"to\":{\"mail_domains\":"
	                                               "[\"support.example.com\",\"example.org\"]}}"),
	                                     &c);
	json_t *draft = json_pack("{s:s, s:s, s:s}", "to", "customer.48213@mail.example.com",
	                          "subject", "Re: заказ №4821-77 — 配送について", "body",
	                          "Здравствуйте! Ваш заказ отправлен. 🙏");
	json_t *proposed = json_pack("{s:s, s:s, s:s}", "to", "customer.48213@mail.example.com",
	                             "subject", "Re: заказ №4821-77 — 配送について", "body",
	                             "Здравствуйте! Ваш заказ отправлен. 🙏");
	size_t i;
	json_t *x = json_string("attacker@evil.example");

	/* a member without an allow-list is judged by the schema alone */
	ck_assert_ptr_null(contract_edit_refusal(c, "subject", x));
	ck_assert_ptr_nonnull(contract_edit_refusal(c, "to", x));
	json_decref(x);
	for (i = 0; i < sizeof(tos) / sizeof(tos[0]); i++) {
		json_t *values = json_pack("{s:s}", "to", tos[i].to), *changed = NULL;
		json_t *errors = json_array(), *out, *sent;

		out = edit_apply(c, draft, values, &changed, errors);
		ck_assert_ptr_nonnull(out);
		sent = edit_check(c, "email.send", true, proposed, out, errors);
		if (tos[i].ok) {
			ck_assert_msg(sent != NULL, "to \"%s\": refused: %s", tos[i].to,
			              json_dumps(errors, 0));
			ck_assert_str_eq(json_string_value(json_object_get(sent, "to")), tos[i].to);
		} else {
			ck_assert_msg(sent == NULL, "to \"%s\" was accepted", tos[i].to);
			ck_assert_msg(json_array_size(errors) >= 1 &&
			              strcmp(json_string_value(json_object_get(json_array_get(errors, 0),
			                                                       "path")), "/to") == 0,
			              "to \"%s\": errors %s", tos[i].to, json_dumps(errors, 0));
		}
		json_decref(sent);
		json_decref(out);
		json_decref(changed);
		json_decref(errors);
		json_decref(values);
	}
	/* the subject alone: the model's recipient is not judged again */
	{
		json_t *values = json_pack("{s:s}", "subject", "Re: ваш заказ отправлен"), *changed;
		json_t *errors = json_array(), *out = edit_apply(c, draft, values, &changed, errors);
		json_t *sent = edit_check(c, "email.send", true, proposed, out, errors);

		ck_assert_msg(sent != NULL, "a subject correction: %s", json_dumps(errors, 0));
		ck_assert_str_eq(json_string_value(json_object_get(sent, "to")),
		                 "customer.48213@mail.example.com");
		json_decref(sent);
		json_decref(out);
		json_decref(changed);
		json_decref(errors);
		json_decref(values);
	}
	json_decref(draft);
	json_decref(proposed);
	contract_set_free(set);
}
END_TEST

START_TEST(test_load_errors)
{
	const struct lcase *lc = &lcases[_i];
	char dir[256], err[1024], path[512];
	const char *text = lc->text, *want = lc->want;
	struct contract_set *set;

	if (lc->want == NULL) { /* the placeholder row: an unknown keyword at the root */
		text = C("\"schema\":{\"type\":\"object\",\"patternProperties\":{}},"
		         GATE_OK "," EFFECTS);
		want = "/schema/patternProperties: unsupported schema keyword";
	}
	fresh_dir(dir, sizeof(dir));
	write_file(dir, lc->file, text, strlen(text));
	memset(err, 'x', sizeof(err));
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_msg(set == NULL, "%s: loaded", lc->name);
	snprintf(path, sizeof(path), "%s/%s", dir, lc->file);
	/* the message names the file, with its directory */
	ck_assert_msg(strncmp(err, path, strlen(path)) == 0, "%s: %s does not start with %s",
	              lc->name, err, path);
	ck_assert_msg(strstr(err, want) != NULL, "%s: \"%s\" lacks \"%s\"", lc->name, err,
	              want);
}
END_TEST

START_TEST(test_load_oversized)
{
	char dir[256], err[1024];
	size_t n = 256 * 1024 + 1;
	char *big = malloc(n);
	struct contract_set *set;

	ck_assert_ptr_nonnull(big);
	/* valid JSON, just too big: the cap, not the parser, refuses it */
	memset(big, ' ', n);
	memcpy(big, STD(GATE_OK), strlen(STD(GATE_OK)));
	fresh_dir(dir, sizeof(dir));
	write_file(dir, "t.json", big, n);
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "/t.json: "));
	ck_assert_ptr_nonnull(strstr(err, "over the 262144 byte cap"));

	/* exactly at the cap loads */
	fresh_dir(dir, sizeof(dir));
	write_file(dir, "t.json", big, n - 1);
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_msg(set != NULL, "%s", err);
	contract_set_free(set);
	free(big);
}
END_TEST

/* Nesting is capped before anything recurses over the document. */
START_TEST(test_load_too_deep)
{
	char dir[256], err[1024], text[1024];
	struct contract_set *set;
	int depth, i, o;

	for (depth = 50; depth <= 200; depth += 150) {
		o = snprintf(text, sizeof(text), "{\"name\":\"t\",\"schema\":{\"const\":");
		for (i = 0; i < depth; i++)
			text[o++] = '[';
		for (i = 0; i < depth; i++)
			text[o++] = ']';
		snprintf(text + o, sizeof(text) - (size_t)o, "}," GATE_OK "," EFFECTS "}");
		fresh_dir(dir, sizeof(dir));
		write_file(dir, "t.json", text, strlen(text));
		set = contract_load_dir(dir, err, sizeof(err));
		if (depth == 50) {
			ck_assert_msg(set != NULL, "%s", err);
			contract_set_free(set);
		} else {
			ck_assert_ptr_null(set);
			ck_assert_ptr_nonnull(strstr(err, "t.json: nested deeper than 64 levels"));
		}
	}
}
END_TEST

START_TEST(test_load_not_regular)
{
	char dir[256], err[1024], path[300];
	struct contract_set *set;

	fresh_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/t.json", dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "t.json: not a regular file"));

	/* a FIFO must not hang the load */
	fresh_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/t.json", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "t.json: not a regular file"));
}
END_TEST

START_TEST(test_load_dir)
{
	char dir[256], err[1024];
	struct contract_set *set;
	const char *b = "{\"name\":\"b_2\"," SCHEMA_OK "," GATE_OK "," EFFECTS "}";
	const char *a = "{\"name\":\"a1\"," SCHEMA_OK "," GATE_OK "," EFFECTS "}";
	char hash[DIGEST_HEX_LEN], want[80];

	/* missing directory: the message names it */
	set = contract_load_dir("/nonexistent/contracts", err, sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/contracts: cannot open"));
	set = contract_load_dir(NULL, err, sizeof(err));
	ck_assert_ptr_null(set);

	/* empty directory: an empty set */
	fresh_dir(dir, sizeof(dir));
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_ptr_nonnull(set);
	ck_assert_uint_eq(contract_count(set), 0);
	ck_assert_ptr_null(contract_find(set, "a1"));
	ck_assert_ptr_null(contract_at(set, 0));
	contract_set_free(set);

	/* other files and dot files are skipped; the rest sorted by name */
	write_file(dir, "b_2.json", b, strlen(b));
	write_file(dir, "a1.json", a, strlen(a));
	write_file(dir, "README.md", "# x", 3);
	write_file(dir, "a1.json.bak", "junk", 4);
	write_file(dir, ".a1.json", "junk", 4);
	write_file(dir, ".json", "junk", 4);
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_msg(set != NULL, "%s", err);
	ck_assert_uint_eq(contract_count(set), 2);
	ck_assert_str_eq(contract_name(contract_at(set, 0)), "a1");
	ck_assert_str_eq(contract_name(contract_at(set, 1)), "b_2");
	ck_assert_ptr_eq(contract_find(set, "b_2"), contract_at(set, 1));
	ck_assert_ptr_null(contract_find(set, "b"));
	ck_assert_ptr_null(contract_find(set, NULL));
	ck_assert_ptr_null(contract_find(set, "b_2.json"));

	/* the hash is of the file's bytes, not of a re-serialisation */
	digest_sha256_hex(a, strlen(a), hash);
	snprintf(want, sizeof(want), "sha256:%s", hash);
	ck_assert_str_eq(contract_hash(contract_find(set, "a1")), want);
	contract_set_free(set);

	/* one bad file fails the whole directory */
	write_file(dir, "c.json", "{", 1);
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "/c.json: not valid JSON"));

	/* a short error buffer is cut, still NUL-terminated */
	set = contract_load_dir(dir, err, 8);
	ck_assert_ptr_null(set);
	ck_assert_uint_eq(strlen(err), 7);
	set = contract_load_dir(dir, NULL, 0);
	ck_assert_ptr_null(set);
	contract_set_free(NULL);
	ck_assert_uint_eq(contract_count(NULL), 0);
}
END_TEST

/* Where contracts meet the configuration, a notify entry's target must be
 * configured with a kind that fits it; the message names the contract,
 * the entry and the target. */
START_TEST(test_notify_targets_checked)
{
	static const char *const text =
		"{\"name\":\"t\"," SCHEMA_OK ",\"gate\":{\"approvers\":[\"group:служба поддержки\","
		"\"lead@example.com\"],\"notify\":{\"group:служба поддержки\":{\"target\":%s,"
		"\"to\":[\"podderzhka@support.example.test\",\"dezhurny@support.example.test\"]},"
		"\"lead@example.com\":{\"target\":%s}}}," EFFECTS "}";
	static const struct {
		const char *mail, *chat, *want;
	} cases[] = {
		{ "\"approvers_mail\"", "\"team_chat\"", NULL },
		{ "\"mail_missing\"", "\"team_chat\"",
		  "contract \"t\": gate.notify entry \"group:служба поддержки\": target "
		  "\"mail_missing\" is not configured" },
		{ "\"team_chat\"", "\"team_chat\"",
		  "contract \"t\": gate.notify entry \"group:служба поддержки\": target \"team_chat\" "
		  "is of kind http: mail addresses (\"to\") need an smtp target" },
		{ "\"approvers_mail\"", "\"approvers_mail\"",
		  "contract \"t\": gate.notify entry \"lead@example.com\": target \"approvers_mail\" "
		  "is of kind smtp: a chat webhook (an entry without \"to\") needs an http or slack "
		  "target" },
	};
	char mail[] = "approvers_mail", smtp[] = "smtp", chat[] = "team_chat", http[] = "http";
	struct config cfg;
	char doc[4096], err[1024];
	size_t i;

	memset(&cfg, 0, sizeof(cfg));
	cfg.targets[0].name = mail;
	cfg.targets[0].kind = smtp;
	cfg.targets[1].name = chat;
	cfg.targets[1].kind = http;
	cfg.ntargets = 2;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct contract *c;
		struct contract_set *set;
		int rc;

		snprintf(doc, sizeof(doc), text, cases[i].mail, cases[i].chat);
		set = load_text(doc, &c);
		err[0] = '\0';
		rc = contract_notify_check(set, &cfg, err, sizeof(err));
		if (cases[i].want == NULL)
			ck_assert_msg(rc == 0, "case %zu refused: %s", i, err);
		else
			ck_assert_msg(rc == -1 && strstr(err, cases[i].want) != NULL,
			              "case %zu: rc %d, message \"%s\", want \"%s\"", i, rc, err,
			              cases[i].want);
		contract_set_free(set);
	}
	/* contracts without notify need no target */
	{
		const struct contract *c;
		struct contract_set *set = load_schema("{}", &c);

		cfg.ntargets = 0;
		ck_assert_int_eq(contract_notify_check(set, &cfg, err, sizeof(err)), 0);
		contract_set_free(set);
	}
}
END_TEST

/* A control character in a member name must not reach the message raw. */
START_TEST(test_load_error_sanitised)
{
	char dir[256], err[1024];
	const char *text = C(SCHEMA_OK "," GATE_OK "," EFFECTS ",\"a\\u001b[31m\\n\":1");
	struct contract_set *set;
	size_t i;

	fresh_dir(dir, sizeof(dir));
	write_file(dir, "t.json", text, strlen(text));
	set = contract_load_dir(dir, err, sizeof(err));
	ck_assert_ptr_null(set);
	for (i = 0; err[i] != '\0'; i++)
		ck_assert_msg((unsigned char)err[i] >= 0x20, "control byte in \"%s\"", err);
	ck_assert_ptr_nonnull(strstr(err, "/a?[31m?: unknown member"));
}
END_TEST

/* ---- defaults and getters ------------------------------------------------------ */

START_TEST(test_defaults)
{
	const struct contract *c;
	struct contract_set *set = load_text(STD(GATE_OK), &c);
	json_t *d;

	ck_assert_int_eq(contract_gate(c)->mode, GATE_APPROVE_BEFORE_ACT);
	ck_assert_str_eq(contract_gate_mode_name(contract_gate(c)->mode), "approve_before_act");
	ck_assert_int_eq(contract_gate(c)->window_seconds, 0);
	ck_assert_int_eq(contract_gate(c)->expires_seconds, 86400);
	ck_assert_int_eq(contract_repair_attempts(c), 1);
	ck_assert(contract_gate(c)->separation_of_duties);
	ck_assert(contract_decision_allowed(c, "approve"));
	ck_assert(contract_decision_allowed(c, "reject"));
	ck_assert(!contract_decision_allowed(c, "Approve"));
	ck_assert(!contract_decision_allowed(c, ""));
	ck_assert(!contract_decision_allowed(c, NULL));
	/* off by default */
	ck_assert(!contract_decision_allowed(c, "changes_requested"));
	d = contract_allowed_decisions(c);
	ck_assert_uint_eq(json_array_size(d), 2);
	ck_assert_str_eq(json_string_value(json_array_get(d, 0)), "approve");
	json_decref(d);
	ck_assert_uint_eq(contract_loggable_count(c), 0);
	ck_assert_ptr_null(contract_loggable(c, 0));
	ck_assert_uint_eq(contract_gate(c)->napprovers, 1);
	ck_assert_str_eq(contract_gate(c)->approvers[0], "group:x");
	ck_assert(!contract_auto_eligible(c, NULL, NULL));
	ck_assert(!contract_sampled(c, 0.0));
	contract_set_free(set);
}
END_TEST

START_TEST(test_settings)
{
	const struct contract *c;
	struct contract_set *set;
	json_t *d;

	set = load_text(STD("\"gate\":{\"mode\":\"act_with_window\",\"window_seconds\":600,"
	                    "\"approvers\":[\"group:ops\",\"Lead@Example.com\"],"
	                    "\"expires_seconds\":3600,\"allowed_decisions\":[\"reject\"],"
	                    "\"separation_of_duties\":false}"), &c);
	ck_assert_int_eq(contract_gate(c)->mode, GATE_ACT_WITH_WINDOW);
	ck_assert_int_eq(contract_gate(c)->window_seconds, 600);
	ck_assert_int_eq(contract_gate(c)->expires_seconds, 3600);
	ck_assert(!contract_gate(c)->separation_of_duties);
	ck_assert(!contract_decision_allowed(c, "approve"));
	ck_assert(contract_decision_allowed(c, "reject"));
	d = contract_allowed_decisions(c);
	ck_assert_uint_eq(json_array_size(d), 1);
	ck_assert_str_eq(json_string_value(json_array_get(d, 0)), "reject");
	json_decref(d);
	ck_assert_uint_eq(contract_gate(c)->napprovers, 2);
	ck_assert_str_eq(contract_gate(c)->approvers[1], "Lead@Example.com");
	ck_assert_ptr_null(contract_notify(c)->entries);
	ck_assert_int_eq(contract_notify(c)->remind_after_seconds, 0);
	ck_assert_uint_eq(contract_notify(c)->nescalate, 0);
	contract_set_free(set);

	/* request changes, turned on */
	set = load_text(STD("\"gate\":{\"approvers\":[\"x\"],\"allowed_decisions\":"
	                    "[\"approve\",\"changes_requested\"]},\"repair_attempts\":2"), &c);
	ck_assert(contract_decision_allowed(c, "changes_requested"));
	ck_assert(!contract_decision_allowed(c, "reject"));
	d = contract_allowed_decisions(c);
	ck_assert_uint_eq(json_array_size(d), 2);
	ck_assert_str_eq(json_string_value(json_array_get(d, 1)), "changes_requested");
	json_decref(d);
	ck_assert_int_eq(contract_repair_attempts(c), 2);
	contract_set_free(set);

	set = load_text(STD("\"gate\":{\"approvers\":[\"group:служба поддержки\"],"
	                    "\"notify\":{\"group:служба поддержки\":{\"target\":\"demo_smtp\","
	                    "\"to\":[\"a@support.example\",\"b@support.example\"]},"
	                    "\"group:руководители\":{\"target\":\"team_chat\"}},"
	                    "\"remind_after_seconds\":3600,\"escalate_after_seconds\":7200,"
	                    "\"escalate_to\":[\"group:руководители\"]}"), &c);
	ck_assert_ptr_nonnull(contract_notify(c)->entries);
	ck_assert_uint_eq(json_array_size(json_object_get(
	                      contract_notify_entry(c, "group:служба поддержки"), "to")), 2);
	ck_assert_str_eq(json_string_value(json_object_get(
	                     contract_notify_entry(c, "group:руководители"), "target")), "team_chat");
	ck_assert_ptr_null(contract_notify_entry(c, "group:other"));
	ck_assert_int_eq(contract_notify(c)->remind_after_seconds, 3600);
	ck_assert_int_eq(contract_notify(c)->escalate_after_seconds, 7200);
	ck_assert_uint_eq(contract_notify(c)->nescalate, 1);
	ck_assert_str_eq(contract_notify(c)->escalate_to[0], "group:руководители");
	contract_set_free(set);

	set = load_text(C(SCHEMA_OK "," GATE_OK "," EFFECTS ",\"repair_attempts\":0,"
	                  "\"loggable_fields\":[\"/a\"]"), &c);
	ck_assert_int_eq(contract_repair_attempts(c), 0);
	ck_assert_uint_eq(contract_loggable_count(c), 1);
	ck_assert_str_eq(contract_loggable(c, 0), "/a");
	contract_set_free(set);

	/* 1.0 is an integer everywhere, also in the contract's own settings */
	set = load_text(C(SCHEMA_OK "," GATE_OK "," EFFECTS ",\"repair_attempts\":2.0"), &c);
	ck_assert_int_eq(contract_repair_attempts(c), 2);
	contract_set_free(set);
	ck_assert_str_eq(contract_gate_mode_name((enum gate_mode)7), "unknown");
}
END_TEST

/* ---- gate rules ----------------------------------------------------------------- */

struct rcase {
	const char *op;
	const char *value;   /* NULL: no "value" member */
	const char *field;   /* the output's "x"; NULL: absent */
	bool want;
};

static const struct rcase rcases[] = {
	{ "eq", "\"a\"", "\"a\"", true },
	{ "eq", "\"a\"", "\"b\"", false },
	{ "eq", "\"a\"", "\"A\"", false },
	{ "eq", "1", "1.0", true },
	{ "eq", "1", "true", false },
	{ "eq", "null", "null", true },
	{ "eq", "{\"k\":[1,2]}", "{\"k\":[1,2.0]}", true },
	{ "eq", "\"a\"", NULL, false },
	{ "ne", "\"a\"", "\"b\"", true },
	{ "ne", "\"a\"", "\"a\"", false },
	{ "ne", "\"a\"", NULL, false },           /* fails closed */
	{ "in", "[\"lead\",\"customer\"]", "\"customer\"", true },
	{ "in", "[\"lead\",\"customer\"]", "\"spam\"", false },
	{ "in", "[1,2]", "2.0", true },
	{ "in", "[\"lead\"]", NULL, false },
	{ "not_in", "[\"spam\"]", "\"lead\"", true },
	{ "not_in", "[\"spam\"]", "\"spam\"", false },
	{ "not_in", "[\"spam\"]", NULL, false },  /* fails closed */
	{ "lt", "5", "4", true },
	{ "lt", "5", "5", false },
	{ "lt", "5", "\"4\"", false },
	{ "lt", "5", NULL, false },
	{ "le", "5", "5.0", true },
	{ "le", "5", "5.01", false },
	{ "gt", "0.5", "1", true },
	{ "gt", "0.5", "0.5", false },
	{ "gt", "0.5", "true", false },
	{ "ge", "0.9", "0.9", true },
	{ "ge", "0.9", "0.89999", false },
	{ "ge", "0.9", "null", false },
	{ "ge", "9007199254740992", "9007199254740993", true },
	{ "exists", NULL, "null", true },
	{ "exists", NULL, NULL, false },
	{ "exists", "true", "0", true },
	{ "exists", "false", NULL, true },
	{ "exists", "false", "\"x\"", false },
};

START_TEST(test_rule_ops)
{
	const struct rcase *rc = &rcases[_i];
	const struct contract *c;
	struct contract_set *set;
	char rules[512], out[256];
	json_t *output, *effect;

	if (rc->value != NULL)
		snprintf(rules, sizeof(rules), "[{\"path\":\"/output/x\",\"op\":\"%s\","
		         "\"value\":%s}]", rc->op, rc->value);
	else
		snprintf(rules, sizeof(rules), "[{\"path\":\"/output/x\",\"op\":\"%s\"}]",
		         rc->op);
	set = load_rules(rules, NULL, &c);
	if (rc->field != NULL)
		snprintf(out, sizeof(out), "{\"x\":%s,\"y\":1}", rc->field);
	else
		snprintf(out, sizeof(out), "{\"y\":1}");
	output = parse(out);
	effect = parse("{\"type\":\"t.do\",\"target\":\"demo_http\"}");
	ck_assert_msg(contract_auto_eligible(c, output, effect) == rc->want,
	              "%s %s on %s: want %d", rc->op, rc->value ? rc->value : "-",
	              rc->field ? rc->field : "(absent)", rc->want);
	json_decref(output);
	json_decref(effect);
	contract_set_free(set);
}
END_TEST

START_TEST(test_rule_paths)
{
	const struct contract *c;
	struct contract_set *set;
	json_t *o, *e;

	set = load_rules("[{\"path\":\"/output/list/1/a~1b\",\"op\":\"eq\",\"value\":3},"
	                 "{\"path\":\"/effect/target\",\"op\":\"in\",\"value\":[\"demo_http\"]},"
	                 "{\"path\":\"/effect/payload/n\",\"op\":\"lt\",\"value\":10}]",
	                 NULL, &c);
	o = parse("{\"list\":[{},{\"a/b\":3}]}");
	e = parse("{\"type\":\"t.do\",\"target\":\"demo_http\",\"payload\":{\"n\":9}}");
	ck_assert(contract_auto_eligible(c, o, e));
	ck_assert(!contract_auto_eligible(c, o, NULL));
	ck_assert(!contract_auto_eligible(c, NULL, e));
	json_decref(e);
	e = parse("{\"type\":\"t.do\",\"target\":\"demo_smtp\",\"payload\":{\"n\":9}}");
	ck_assert(!contract_auto_eligible(c, o, e));
	json_decref(e);
	json_decref(o);
	contract_set_free(set);
}
END_TEST

START_TEST(test_crm_tag_rules)
{
	struct contract_set *set = load_shipped();
	const struct contract *c = contract_find(set, "crm_tag");
	const struct contract *s = contract_find(set, "support_reply");
	json_t *other = parse("{\"type\":\"crm.untag\",\"target\":\"demo_http\","
	                      "\"payload\":{\"tag\":\"lead\"}}");
	/* The rules judge the payload that goes out (the tag in it comes from
	 * the output); the model's confidence plays no part. */
	struct { const char *out; const char *tag; bool want; } rows[] = {
		{ "{\"tag\":\"lead\",\"confidence\":0.95}", "lead", true },
		{ "{\"tag\":\"customer\",\"confidence\":0.9}", "customer", true },
		{ "{\"tag\":\"lead\",\"confidence\":0.05}", "lead", true },
		{ "{\"tag\":\"lead\"}", "lead", true },
		{ "{\"tag\":\"churn_risk\",\"confidence\":0.99}", "churn_risk", false },
		{ "{\"tag\":\"spam\",\"confidence\":1}", "spam", false },
		/* what is sent decides, not what the output says */
		{ "{\"tag\":\"lead\",\"confidence\":1}", "spam", false },
		{ "{\"tag\":\"lead\",\"confidence\":1}", NULL, false },
		/* the model's own fields never grant autonomy */
		{ "{\"tag\":\"spam\",\"confidence\":1,\"auto_reply\":true}", "spam", false },
	};
	size_t i;

	ck_assert_ptr_nonnull(c);
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		json_t *o = parse(rows[i].out);
		json_t *eff = json_pack("{s:s, s:s, s:{s:s}}", "type", "crm.tag", "target",
		                        "demo_http", "payload", "contact_id", "c-1");

		if (rows[i].tag != NULL)
			json_object_set_new(json_object_get(eff, "payload"), "tag",
			                    json_string(rows[i].tag));
		ck_assert_msg(contract_auto_eligible(c, o, eff) == rows[i].want, "%s, tag %s",
		              rows[i].out, rows[i].tag ? rows[i].tag : "(none)");
		ck_assert(!contract_auto_eligible(c, o, other));
		ck_assert(!contract_auto_eligible(s, o, eff)); /* not its mode */
		json_decref(o);
		json_decref(eff);
	}
	json_decref(other);
	contract_set_free(set);
}
END_TEST

/* The share of n fresh CSPRNG draws the contract samples. */
static double
sampled_share(const struct contract *c, size_t n)
{
	size_t i, hits = 0;
	double d;

	for (i = 0; i < n; i++) {
		ck_assert_int_eq(contract_sample_draw(&d), 0);
		ck_assert_msg(d >= 0 && d < 1, "draw %f outside [0,1)", d);
		hits += contract_sampled(c, d);
	}
	return (double)hits / (double)n;
}

START_TEST(test_sampling)
{
	const char *rule = "[{\"path\":\"/output/x\",\"op\":\"exists\"}]";
	const struct contract *c;
	struct contract_set *set;
	double share;

	set = load_rules(rule, NULL, &c); /* default 0 */
	ck_assert(sampled_share(c, 10000) == 0.0);
	contract_set_free(set);

	set = load_rules(rule, ",\"sample_rate\":0", &c);
	ck_assert(sampled_share(c, 10000) == 0.0);
	contract_set_free(set);

	set = load_rules(rule, ",\"sample_rate\":1", &c);
	ck_assert(sampled_share(c, 10000) == 1.0);
	ck_assert(contract_sampled(c, 0.9999999999));
	contract_set_free(set);

	set = load_rules(rule, ",\"sample_rate\":0.5", &c);
	share = sampled_share(c, 10000);
	ck_assert_msg(share >= 0.47 && share <= 0.53, "share %f", share);
	/* the verdict is the draw against the rate, and nothing else */
	ck_assert(contract_sampled(c, 0.4999));
	ck_assert(!contract_sampled(c, 0.5));
	/* no valid draw: a person decides */
	ck_assert(contract_sampled(c, -1));
	ck_assert(contract_sampled(c, 1.0));
	ck_assert(contract_sampled(c, NAN));
	contract_set_free(set);

	set = load_rules(rule, ",\"sample_rate\":0.1", &c);
	share = sampled_share(c, 10000);
	ck_assert_msg(share >= 0.08 && share <= 0.12, "share %f", share);
	contract_set_free(set);
}
END_TEST

/* ---- approvers and effects ---------------------------------------------------------- */

struct acase {
	const char *approver, *subject, *groups;
	bool want;
};

static const struct acase acases[] = {
	{ "alice@example.com", "alice@example.com", NULL, true },
	{ "alice@example.com", "Alice@Example.COM", NULL, true },
	{ "Alice@Example.com", "alice@example.com", "", true },
	{ "alice@example.com", "bob@example.com", NULL, false },
	{ "alice@example.com", "alice@example.co", NULL, false },
	{ "alice@example.com", "alice@example.com ", NULL, false },
	{ "alice", "alice", NULL, true },
	{ "alice", "Alice", NULL, false },     /* not e-mail-like: exact */
	{ "alice@example.com", "", NULL, false },
	{ "alice@example.com", NULL, NULL, false },
	{ "group:support", "bob", "support", true },
	{ "group:support", "bob", "sales,support", true },
	{ "group:support", "bob", "sales, support", true },
	{ "group:support", "bob", "sales support", false },  /* one group, "sales support" */
	{ "group:support", "bob", " support ,", true },
	{ "group:support", "bob", "sales,,\tsupport", true },
	{ "group:support", "bob", "supporters", false },
	{ "group:support", "bob", "sales,xsupport", false },
	{ "group:support", "bob", "Support", false },
	{ "group:support", "bob", "sales,ops", false },
	{ "group:support", "bob", "", false },
	{ "group:support", "bob", NULL, false },
	{ "group:support", "", "support", false },   /* no subject, no decision */
	{ "group:support", NULL, "support", false },
	/* "group:" only ever matches groups, and only it does */
	{ "group:support", "group:support", NULL, false },
	{ "group:support", "support", NULL, false },
	{ "support", "bob", "support", false },
	{ "alice@example.com", "bob", "alice@example.com", false },
	{ "group:", "bob", "", false },
	{ "group:", "bob", ",", false },
	{ NULL, "bob", "support", false },
};

START_TEST(test_approver_matches)
{
	const struct acase *ac = &acases[_i];

	ck_assert_msg(contract_approver_matches(ac->approver, ac->subject, ac->groups, ',') ==
	              ac->want, "%s / %s / %s: want %d", ac->approver ? ac->approver : "NULL",
	              ac->subject ? ac->subject : "NULL", ac->groups ? ac->groups : "NULL",
	              ac->want);
}
END_TEST

START_TEST(test_effects)
{
	struct contract_set *set = load_shipped();
	const struct contract *s = contract_find(set, "support_reply");
	const struct contract *c = contract_find(set, "crm_tag");

	ck_assert(contract_effect_allowed(s, "email.send", "demo_smtp"));
	ck_assert(!contract_effect_allowed(s, "email.send", "demo_http"));
	ck_assert(!contract_effect_allowed(s, "crm.tag", "demo_smtp"));
	ck_assert(!contract_effect_allowed(s, "Email.send", "demo_smtp"));
	ck_assert(!contract_effect_allowed(s, "email.send", "demo_smtp "));
	ck_assert(!contract_effect_allowed(s, "email", "demo_smtp"));
	ck_assert(!contract_effect_allowed(s, NULL, "demo_smtp"));
	ck_assert(!contract_effect_allowed(s, "email.send", NULL));
	ck_assert(contract_effect_allowed(c, "crm.tag", "demo_http"));
	ck_assert(!contract_effect_allowed(c, "crm.tag", "demo_smtp"));
	contract_set_free(set);
}
END_TEST

/* ---- the shipped contracts ---------------------------------------------------------- */

START_TEST(test_shipped)
{
	struct contract_set *set = load_shipped();
	const struct contract *s = contract_find(set, "support_reply");
	const struct contract *c = contract_find(set, "crm_tag");
	json_t *o, *errors;
	char body[5002];

	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(contract_gate(s)->mode, GATE_APPROVE_BEFORE_ACT);
	ck_assert_str_eq(contract_gate(s)->approvers[0], "group:support");
	ck_assert_uint_eq(contract_gate(s)->napprovers, 1);
	ck_assert_int_eq(contract_repair_attempts(s), 1);
	ck_assert_uint_eq(contract_loggable_count(s), 2);
	ck_assert_str_eq(contract_loggable(s, 0), "/tone");
	ck_assert_str_eq(contract_loggable(s, 1), "/confidence");
	ck_assert_uint_eq(strlen(contract_hash(s)), 7 + 64);
	ck_assert(strncmp(contract_hash(s), "sha256:", 7) == 0);

	ck_assert_int_eq(contract_gate(c)->mode, GATE_APPROVE_BY_EXCEPTION);
	ck_assert_str_eq(contract_gate(c)->approvers[0], "group:sales");
	ck_assert_uint_eq(contract_loggable_count(c), 2);
	ck_assert_str_eq(contract_loggable(c, 0), "/tag");

	o = parse("{\"subject\":\"Re: your order\",\"body\":\"Hello\",\"tone\":\"friendly\","
	          "\"confidence\":0.7}");
	errors = contract_validate(s, o);
	ck_assert_uint_eq(json_array_size(errors), 0);
	json_decref(errors);
	json_decref(o);

	memset(body, 'b', 5001);
	body[5001] = '\0';
	o = json_pack("{s:s,s:s,s:s,s:f,s:b}", "subject", "", "body", body, "tone", "rude",
	              "confidence", 1.5, "auto_reply", 1);
	errors = contract_validate(s, o);
	ck_assert_uint_eq(json_array_size(errors), 5);
	ck_assert_str_eq(err_str(errors, 0, "path"), "/subject");
	ck_assert_str_eq(err_str(errors, 0, "rule"), "minLength");
	ck_assert_str_eq(err_str(errors, 1, "path"), "/body");
	ck_assert_str_eq(err_str(errors, 1, "rule"), "maxLength");
	ck_assert_str_eq(err_str(errors, 2, "path"), "/tone");
	ck_assert_str_eq(err_str(errors, 2, "rule"), "enum");
	ck_assert_str_eq(err_str(errors, 3, "path"), "/confidence");
	ck_assert_str_eq(err_str(errors, 3, "rule"), "maximum");
	ck_assert_str_eq(err_str(errors, 4, "path"), "/auto_reply");
	ck_assert_str_eq(err_str(errors, 4, "rule"), "additionalProperties");
	json_decref(errors);
	json_decref(o);

	o = parse("{\"tag\":\"lead\"}");
	errors = contract_validate(c, o);
	ck_assert_uint_eq(json_array_size(errors), 1);
	ck_assert_str_eq(err_str(errors, 0, "path"), "/confidence");
	ck_assert_str_eq(err_str(errors, 0, "rule"), "required");
	json_decref(errors);
	json_decref(o);
	contract_set_free(set);
}
END_TEST

/* Workers share one loaded set: everything after load is read-only. */
struct worker {
	const struct contract *s, *c;
	const json_t *good, *bad, *tag, *eff;
	size_t failures;
};

static void *
worker_run(void *arg)
{
	struct worker *w = arg;
	json_t *e;
	int i;

	for (i = 0; i < 2000; i++) {
		e = contract_validate(w->s, w->good);
		w->failures += e == NULL || json_array_size(e) != 0;
		json_decref(e);
		e = contract_validate(w->s, w->bad);
		w->failures += e == NULL || json_array_size(e) != 2;
		json_decref(e);
		w->failures += !contract_auto_eligible(w->c, w->tag, w->eff);
		(void)contract_sampled(w->c, (double)i / 1e6);
	}
	return NULL;
}

START_TEST(test_threads)
{
	struct contract_set *set = load_shipped();
	json_t *good = parse("{\"subject\":\"s\",\"body\":\"b\",\"confidence\":0.5}");
	json_t *bad = parse("{\"subject\":\"s\",\"body\":\"\",\"confidence\":2}");
	json_t *tag = parse("{\"tag\":\"lead\",\"confidence\":0.95}");
	json_t *eff = parse("{\"type\":\"crm.tag\",\"target\":\"demo_http\","
	                    "\"payload\":{\"contact_id\":\"c-1\",\"tag\":\"lead\"}}");
	struct worker w[8];
	pthread_t t[8];
	size_t i;

	for (i = 0; i < 8; i++) {
		w[i] = (struct worker){ contract_find(set, "support_reply"),
		                        contract_find(set, "crm_tag"), good, bad, tag, eff, 0 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
	}
	for (i = 0; i < 8; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_uint_eq(w[i].failures, 0);
	}
	json_decref(good);
	json_decref(bad);
	json_decref(tag);
	json_decref(eff);
	contract_set_free(set);
}
END_TEST

/* ---- JSON Pointers ---------------------------------------------------------------- */

START_TEST(test_pointer_get)
{
	json_t *doc = parse("{\"a\":{\"b/c\":[10,{\"~x\":true}]},\"\":5,\"n\":null}");

	ck_assert_ptr_eq(contract_pointer_get(doc, ""), doc);
	ck_assert_int_eq(json_integer_value(contract_pointer_get(doc, "/")), 5);
	ck_assert_int_eq(json_integer_value(contract_pointer_get(doc, "/a/b~1c/0")), 10);
	ck_assert(json_is_true(contract_pointer_get(doc, "/a/b~1c/1/~0x")));
	ck_assert(json_is_null(contract_pointer_get(doc, "/n")));
	ck_assert_ptr_null(contract_pointer_get(doc, "/a/b~1c/01"));
	ck_assert_ptr_null(contract_pointer_get(doc, "/a/b~1c/-"));
	ck_assert_ptr_null(contract_pointer_get(doc, "/a/b~1c/2"));
	ck_assert_ptr_null(contract_pointer_get(doc, "/a/b~1c/99999999999999999999999"));
	ck_assert_ptr_null(contract_pointer_get(doc, "/a/b/c"));
	ck_assert_ptr_null(contract_pointer_get(doc, "/a~2"));
	ck_assert_ptr_null(contract_pointer_get(doc, "/a~"));
	ck_assert_ptr_null(contract_pointer_get(doc, "a"));
	ck_assert_ptr_null(contract_pointer_get(doc, "/n/x"));
	ck_assert_ptr_null(contract_pointer_get(doc, NULL));
	ck_assert_ptr_null(contract_pointer_get(NULL, ""));
	json_decref(doc);
}
END_TEST

/* ---- hostile files --------------------------------------------------------------- */

static unsigned long
rnd(unsigned long *s)
{
	*s = *s * 6364136223846793005UL + 1442695040888963407UL;
	return *s >> 33;
}

/* Byte flips, insertions of JSON punctuation and truncations of a real
 * contract: every load must end in a set or an error message, and when it
 * loads the result must still validate without trouble. */
START_TEST(test_mutations)
{
	static const char punct[] = "{}[]\":,~/\\0-1e.tfn \x01\xff";
	char dir[256], err[1024], path[512];
	unsigned long seed = 42;
	struct contract_set *set;
	size_t len, i, k, n;
	char *orig, *buf;
	FILE *f;
	json_t *o = parse("{\"tag\":\"lead\",\"confidence\":0.95,\"subject\":\"s\","
	                  "\"body\":\"b\"}");
	json_t *e = parse("{\"type\":\"crm.tag\",\"target\":\"demo_http\"}");

	snprintf(path, sizeof(path), "%s/crm_tag.json", shipped_dir());
	f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	orig = malloc(65536);
	buf = malloc(65536 + 64);
	ck_assert_ptr_nonnull(orig);
	ck_assert_ptr_nonnull(buf);
	len = fread(orig, 1, 65536, f);
	fclose(f);

	fresh_dir(dir, sizeof(dir));
	for (i = 0; i < 3000; i++) {
		memcpy(buf, orig, len);
		n = len;
		for (k = 0; k < 1 + rnd(&seed) % 4; k++) {
			size_t at = rnd(&seed) % n;

			switch (rnd(&seed) % 3) {
			case 0:
				buf[at] = punct[rnd(&seed) % (sizeof(punct) - 1)];
				break;
			case 1:
				memmove(buf + at + 1, buf + at, n - at);
				buf[at] = punct[rnd(&seed) % (sizeof(punct) - 1)];
				n++;
				break;
			default:
				if (rnd(&seed) % 8 == 0)
					n = at + 1;
				break;
			}
		}
		write_file(dir, "crm_tag.json", buf, n);
		err[0] = '\0';
		set = contract_load_dir(dir, err, sizeof(err));
		if (set == NULL) {
			ck_assert_msg(err[0] != '\0', "no message for a refused file");
			continue;
		}
		if (contract_count(set) == 1) {
			const struct contract *c = contract_at(set, 0);
			json_t *errors = contract_validate(c, o);

			ck_assert_ptr_nonnull(errors);
			json_decref(errors);
			(void)contract_auto_eligible(c, o, e);
			(void)contract_sampled(c, 0.5);
		}
		contract_set_free(set);
	}
	free(orig);
	free(buf);
	json_decref(o);
	json_decref(e);
}
END_TEST

/* ---- the suite ----------------------------------------------------------------------- */

TL_SUITE(contract_suite, "contract",
         {"validate", 0,
          .loops = TL_LOOPS({test_validate_table, sizeof(vcases) / sizeof(vcases[0])}),
          .tests = TL_LIST(test_validate_messages, test_validate_cap, test_validate_long_key,
                           test_validate_deep_instance)},
         {"load", 120,
          .loops = TL_LOOPS({test_load_errors, sizeof(lcases) / sizeof(lcases[0])}),
          .tests = TL_LIST(test_load_oversized, test_load_too_deep, test_load_not_regular,
                           test_load_dir, test_notify_targets_checked, test_load_error_sanitised,
                           test_defaults, test_settings, test_mutations)},
         /* test_sampling makes 50,000 CSPRNG draws: 0.7-2.7 s under ASan,
          * more on a loaded machine than Check's default 4 s allow */
         {"gate", 60,
          .loops = TL_LOOPS({test_rule_ops, sizeof(rcases) / sizeof(rcases[0])},
                            {test_approver_matches, sizeof(acases) / sizeof(acases[0])}),
          .tests = TL_LIST(test_rule_paths, test_crm_tag_rules, test_sampling, test_effects,
                           test_editable_allow, test_pointer_get)},
         {"shipped", 60, .tests = TL_LIST(test_shipped, test_threads)})

int
main(void)
{
	return tl_suite_run_in(contract_suite(), scratch) != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
