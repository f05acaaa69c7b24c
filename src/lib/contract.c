/*
 * contract.c — output contracts: the loader and the gate rules.
 *
 * A contract file is parsed by jansson and then checked member by member
 * against what this file knows; its schemas are compiled by schema.c, its
 * gate by contract_gate.c, and every problem is reported at its JSON Pointer (jload.h). Strings and
 * values of a loaded contract are borrowed from the parsed document, which
 * the contract keeps until it is freed.
 *
 * The loader refuses documents nested deeper than OG_JSON_DEPTH_MAX before
 * anything recurses over them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strnlen, openat, O_CLOEXEC */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "canon.h"
#include "contract_int.h"
#include "jptr.h"

/* A file name in a load error: all of it (NAME_MAX on Linux). */
#define FILE_SHOW_MAX  255

struct contract_set {
	struct contract **items;      /* sorted by name */
	size_t count;
};

/* ---- JSON Pointers -------------------------------------------------------- */

json_t *
contract_pointer_get(const json_t *doc, const char *pointer)
{
	return jptr_get(doc, pointer, OG_CONTRACT_POINTER_MAX);
}

/* [a-z0-9_.]{1,64} for effect types and targets; [a-z0-9_]{1,64} for
 * contract names (dots == false). */
bool
contract_name_ok(const char *s, size_t n, bool dots)
{
	size_t i;

	if (n == 0 || n > OG_CONTRACT_NAME_MAX)
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_' || (dots && s[i] == '.')))
			return false;
	return true;
}


/* An entry of allowed_types or allowed_targets. */
static bool
names_check(struct jload *ld, const json_t *v, const void *arg)
{
	(void)arg;
	if (!json_is_string(v) || !contract_name_ok(json_string_value(v), json_string_length(v), true))
		return jload_fail(ld, "must be a name of 1..%d characters [a-z0-9_.]",
		                  OG_CONTRACT_NAME_MAX);
	return true;
}

/* An entry of allowed_types: a name, and none of oncegate's own types
 * (approval.* notices, decision.* callbacks), which only oncegate queues:
 * allowed to a workflow, they would mail any approval's link or post to a
 * URL of its choosing. */
static bool
types_check(struct jload *ld, const json_t *v, const void *arg)
{
	const char *s;

	if (!names_check(ld, v, arg))
		return false;
	s = json_string_value(v);
	if (strncmp(s, "approval.", 9) == 0 || strncmp(s, "decision.", 9) == 0)
		return jload_fail(ld, "\"%s\" is one of oncegate's own effect types (approval.*, "
		                  "decision.*): no contract can allow it", s);
	return true;
}

static const struct jload_list types_list = {
	"allowed_types", 1, OG_CONTRACT_ALLOWED_MAX, "names", types_check, NULL, NULL,
};

static const struct jload_list targets_list = {
	"allowed_targets", 1, OG_CONTRACT_ALLOWED_MAX, "names", names_check, NULL, NULL,
};

/* ---- one contract ------------------------------------------------------------ */

static const char *const top_members[] = {
	"name", "description", "schema", "gate", "effects", "repair_attempts",
	"loggable_fields", NULL,
};

static const char *const effects_members[] = {
	"allowed_types", "allowed_targets", "types", NULL,
};

static const char *const decl_members[] = { "schema", "from_output", NULL };

static void
contract_free(struct contract *c)
{
	size_t i;

	if (c == NULL)
		return;
	for (i = 0; i < c->ndecls; i++)
		schema_free(c->decls[i].schema);
	schema_free(c->schema);
	json_decref(c->doc);
	free(c);
}

/* Deeper than this and the document is refused before anything recurses
 * over it (jansson itself stops at JSON_PARSER_MAX_DEPTH). */
static bool
depth_ok(const json_t *v, unsigned depth)
{
	const char *key;
	size_t i;
	json_t *e;

	if (!json_is_object(v) && !json_is_array(v))
		return true;
	if (depth >= OG_JSON_DEPTH_MAX)
		return false;
	if (json_is_array(v)) {
		json_array_foreach(v, i, e)
			if (!depth_ok(e, depth + 1))
				return false;
	} else {
		json_object_foreach((json_t *)(uintptr_t)v, key, e)
			if (!depth_ok(e, depth + 1))
				return false;
	}
	return true;
}

/* An entry of loggable_fields: a pointer into the output (arg, its schema). */
static bool
loggable_check(struct jload *ld, const json_t *v, const void *arg)
{
	if (!json_is_string(v) || !jptr_valid(json_string_value(v), OG_CONTRACT_POINTER_MAX) ||
	    json_string_value(v)[0] == '\0')
		return jload_fail(ld, "must be a JSON Pointer to a field of the output "
		                  "(\"/label\"), not the whole output");
	if (!schema_allows(arg, json_string_value(v)))
		return jload_fail(ld, "names a field the schema does not allow");
	return true;
}

/* effects.types.<type>.from_output: top-level members of the output that
 * the payload takes from it; the output's schema and the type's schema must
 * both allow each, so a typo cannot name a field that never exists. */
/* effects.types.<type>.from_output: top-level members of the output that
 * the payload takes from it; the output's schema and the type's schema must
 * both allow each, so a typo cannot name a field that never exists. */
struct from_output_arg {
	const struct schema *output, *payload;
};

bool
contract_member_check(struct jload *ld, const json_t *v, const struct schema *output,
                      char ptr[OG_CONTRACT_NAME_MAX + 2])
{
	const char *name = json_string_value(v);

	if (name == NULL || !contract_name_ok(name, json_string_length(v), false))
		return jload_fail(ld, "must be the name of a top-level member of the output, "
		                  "1..%d characters [a-z0-9_]", OG_CONTRACT_NAME_MAX);
	snprintf(ptr, OG_CONTRACT_NAME_MAX + 2, "/%s", name);
	if (!schema_allows(output, ptr))
		return jload_fail(ld, "names a member the output's schema does not allow");
	return true;
}

static bool
from_output_check(struct jload *ld, const json_t *v, const void *arg)
{
	const struct from_output_arg *a = arg;
	char ptr[OG_CONTRACT_NAME_MAX + 2];

	if (!contract_member_check(ld, v, a->output, ptr))
		return false;
	if (!schema_allows(a->payload, ptr))
		return jload_fail(ld, "names a member this type's schema does not allow");
	return true;
}

/* effects.types: {"<type>": {"schema": {…}, "from_output": [NAME, …]}}, each
 * type one of allowed_types. */
static bool
compile_effect_types(struct jload *ld, struct contract *c, const json_t *types)
{
	struct from_output_arg fo;
	const struct jload_list from_list = {
		"from_output", 0, OG_CONTRACT_FROM_OUTPUT_MAX, "member names",
		from_output_check, NULL, &fo,
	};
	const char *key;
	size_t key_len, i;
	struct jptr_mark m;
	json_t *v;

	if (types == NULL)
		return true;
	if (!json_is_object(types))
		return jload_fail_at(ld, "types", "must be an object of effect types");
	m = jptr_push_str(&ld->at, "types");
	json_object_keylen_foreach((json_t *)(uintptr_t)types, key, key_len, v) {
		struct jptr_mark mt = jptr_push(&ld->at, key, key_len);
		struct effect_decl *d = &c->decls[c->ndecls];
		struct jptr_mark ms;

		for (i = 0; i < c->ntypes; i++)
			if (strlen(c->types[i]) == key_len && memcmp(c->types[i], key, key_len) == 0)
				break;
		if (i == c->ntypes)
			return jload_fail(ld, "is not one of allowed_types");
		if (!json_is_object(v))
			return jload_fail(ld, "must be an object {\"schema\", \"from_output\"}");
		if (!jload_members(ld, v, decl_members, "unknown member"))
			return false;
		if (json_object_get(v, "schema") == NULL)
			return jload_fail_at(ld, "schema", "missing (required)");
		d->type = c->types[i];
		ms = jptr_push_str(&ld->at, "schema");
		d->schema = schema_compile(ld, json_object_get(v, "schema"));
		jptr_pop(&ld->at, ms);
		if (d->schema == NULL)
			return false;
		c->ndecls++;
		fo.output = c->schema;
		fo.payload = d->schema;
		if (!jload_strings(ld, v, &from_list, d->from_output, &d->nfrom))
			return false;
		jptr_pop(&ld->at, mt);
	}
	jptr_pop(&ld->at, m);
	return true;
}

/* Builds a contract from the bytes of file `stem`.json. */
static struct contract *
contract_parse(struct jload *ld, const char *stem, const char *data, size_t len)
{
	struct contract *c = NULL;
	struct jload_list loggable_list = {
		"loggable_fields", 0, OG_CONTRACT_LOGGABLE_MAX, "JSON Pointers",
		loggable_check, NULL, NULL,
	};
	json_error_t jerr;
	char shown[sizeof(jerr.text) + 8];
	json_t *v, *eff;
	struct jptr_mark m;
	bool ok = false;

	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		jload_nomem(ld);
		return NULL;
	}
	memcpy(c->hash, "sha256:", 7);
	digest_sha256_hex(data, len, c->hash + 7);

	c->doc = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (c->doc == NULL) {
		/* jansson quotes the offending input: keep it printable ASCII. */
		jload_show(jerr.text, strlen(jerr.text), shown, sizeof(shown), sizeof(jerr.text));
		jload_fail(ld, "not valid JSON at line %d, column %d: %s", jerr.line,
		      jerr.column, canon_jansson_problem(jerr.text) ?: shown);
		goto out;
	}
	if (!json_is_object(c->doc)) {
		jload_fail(ld, "must be a JSON object");
		goto out;
	}
	if (!depth_ok(c->doc, 0)) {
		jload_fail(ld, "nested deeper than %d levels", OG_JSON_DEPTH_MAX);
		goto out;
	}
	if (!jload_members(ld, c->doc, top_members, "unknown member"))
		goto out;

	v = json_object_get(c->doc, "name");
	if (v == NULL || !json_is_string(v)) {
		jload_fail_at(ld, "name", "must be a string (required)");
		goto out;
	}
	if (strcmp(json_string_value(v), stem) != 0 ||
	    json_string_length(v) != strlen(stem)) {
		jload_fail_at(ld, "name", "must equal the file name without .json (\"%s\")", stem);
		goto out;
	}
	snprintf(c->name, sizeof(c->name), "%s", stem);

	v = json_object_get(c->doc, "description");
	if (v != NULL && !json_is_string(v)) {
		jload_fail_at(ld, "description", "must be a string");
		goto out;
	}

	v = json_object_get(c->doc, "schema");
	if (v == NULL) {
		jload_fail_at(ld, "schema", "missing (required)");
		goto out;
	}
	m = jptr_push_str(&ld->at, "schema");
	c->schema = schema_compile(ld, v);
	jptr_pop(&ld->at, m);
	if (c->schema == NULL)
		goto out;
	loggable_list.arg = c->schema;

	v = json_object_get(c->doc, "gate");
	if (v == NULL) {
		jload_fail_at(ld, "gate", "missing (required)");
		goto out;
	}
	m = jptr_push_str(&ld->at, "gate");
	ok = contract_gate_load(ld, c, v);
	jptr_pop(&ld->at, m);
	if (!ok)
		goto out;
	ok = false;

	eff = json_object_get(c->doc, "effects");
	if (eff == NULL) {
		jload_fail_at(ld, "effects", "missing (required)");
		goto out;
	}
	m = jptr_push_str(&ld->at, "effects");
	ok = json_is_object(eff) ? true : jload_fail(ld, "must be an object");
	ok = ok && jload_members(ld, eff, effects_members, "unknown member") &&
	     jload_strings(ld, eff, &types_list, c->types, &c->ntypes) &&
	     jload_strings(ld, eff, &targets_list, c->targets, &c->ntargets) &&
	     compile_effect_types(ld, c, json_object_get(eff, "types"));
	jptr_pop(&ld->at, m);
	if (!ok)
		goto out;
	ok = false;
	m = jptr_push_str(&ld->at, "gate");
	ok = contract_gate_check_editable(ld, c);
	jptr_pop(&ld->at, m);
	if (!ok)
		goto out;
	ok = false;

	if (!jload_int(ld, c->doc, "repair_attempts", 0, OG_CONTRACT_REPAIR_MAX,
	             OG_CONTRACT_REPAIR_DEFAULT, &c->repair_attempts) ||
	    !jload_strings(ld, c->doc, &loggable_list, c->loggable, &c->nloggable))
		goto out;
	ok = true;
out:
	if (!ok) {
		contract_free(c);
		c = NULL;
	}
	return c;
}

/* ---- the directory ------------------------------------------------------------ */

/* Reads a regular file of at most OG_CONTRACT_FILE_MAX bytes. One byte more
 * than the cap is read so a file growing under us is caught too. */
static bool
read_file(struct jload *ld, int dfd, const char *name, char **out, size_t *len)
{
	struct stat st;
	char *data = NULL;
	size_t got = 0;
	ssize_t n;
	int fd;
	bool ok = false;

	*out = NULL;
	/* O_NONBLOCK: a FIFO dropped into the directory must not hang start-up. */
	fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return jload_fail(ld, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) != 0) {
		jload_fail(ld, "cannot stat: %s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		jload_fail(ld, "not a regular file");
		goto out;
	}
	if (st.st_size > OG_CONTRACT_FILE_MAX) {
		jload_fail(ld, "%lld bytes, over the %d byte cap", (long long)st.st_size,
		      OG_CONTRACT_FILE_MAX);
		goto out;
	}
	data = malloc(OG_CONTRACT_FILE_MAX + 1);
	if (data == NULL) {
		jload_nomem(ld);
		goto out;
	}
	while (got < OG_CONTRACT_FILE_MAX + 1) {
		n = read(fd, data + got, OG_CONTRACT_FILE_MAX + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			jload_fail(ld, "cannot read: %s", strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got > OG_CONTRACT_FILE_MAX) {
		jload_fail(ld, "over the %d byte cap", OG_CONTRACT_FILE_MAX);
		goto out;
	}
	*out = data;
	*len = got;
	data = NULL;
	ok = true;
out:
	free(data);
	close(fd);
	return ok;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
contract_cmp(const void *key, const void *elem)
{
	return strcmp(key, (*(struct contract *const *)elem)->name);
}

struct contract_set *
contract_load_dir(const char *dir, char *err, size_t errlen)
{
	struct contract_set *set = NULL;
	struct jload ld;
	struct dirent *de;
	char **names = NULL, file[4096], *data = NULL;
	const char *where = dir != NULL ? dir : "(null)";  /* the file in messages */
	size_t nnames = 0, i, len, dlen;
	DIR *d = NULL;
	bool ok = false;

	memset(&ld, 0, sizeof(ld));
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (dir == NULL || (d = opendir(dir)) == NULL) {
		jload_fail(&ld, "cannot open contracts directory: %s",
		      dir == NULL ? "no directory" : strerror(errno));
		goto out;
	}
	names = calloc(OG_CONTRACTS_MAX, sizeof(*names));
	set = calloc(1, sizeof(*set));
	if (names == NULL || set == NULL) {
		jload_nomem(&ld);
		goto out;
	}
	for (;;) {
		/* readdir reports errors only through errno; anything called in
		 * the loop body may have left a stale value there. */
		errno = 0;
		de = readdir(d);
		if (de == NULL)
			break;
		len = strlen(de->d_name);
		/* Dot files are editor and tool debris, not contracts. */
		if (de->d_name[0] == '.' || len < 5 ||
		    strcmp(de->d_name + len - 5, ".json") != 0)
			continue;
		if (nnames == OG_CONTRACTS_MAX) {
			jload_fail(&ld, "more than %d contract files", OG_CONTRACTS_MAX);
			goto out;
		}
		names[nnames] = strdup(de->d_name);
		if (names[nnames] == NULL) {
			jload_nomem(&ld);
			goto out;
		}
		nnames++;
	}
	if (errno != 0) {
		jload_fail(&ld, "cannot read contracts directory: %s", strerror(errno));
		goto out;
	}
	/* Name order: loads and their first error are the same on every host. */
	qsort(names, nnames, sizeof(*names), name_cmp);

	set->items = calloc(nnames > 0 ? nnames : 1, sizeof(*set->items));
	if (set->items == NULL) {
		jload_nomem(&ld);
		goto out;
	}
	dlen = strlen(dir);
	for (i = 0; i < nnames; i++) {
		struct contract *c;
		char shown[FILE_SHOW_MAX + 8], stem[OG_CONTRACT_NAME_MAX + 1];

		jload_show(names[i], strlen(names[i]), shown, sizeof(shown), FILE_SHOW_MAX);
		snprintf(file, sizeof(file), "%s%s%s", dir,
		         dlen > 0 && dir[dlen - 1] == '/' ? "" : "/", shown);
		where = file;
		len = strlen(names[i]) - 5;
		if (!contract_name_ok(names[i], len, false)) {
			jload_fail(&ld, "file name must be [a-z0-9_]{1,%d}.json",
			      OG_CONTRACT_NAME_MAX);
			goto out;
		}
		memcpy(stem, names[i], len);
		stem[len] = '\0';
		if (!read_file(&ld, dirfd(d), names[i], &data, &len))
			goto out;
		c = contract_parse(&ld, stem, data, len);
		free(data);
		data = NULL;
		if (c == NULL)
			goto out;
		set->items[set->count++] = c;
	}
	ok = true;
out:
	if (names != NULL)
		for (i = 0; i < nnames; i++)
			free(names[i]);
	free(names);
	free(data);
	if (d != NULL)
		closedir(d);
	if (!ok) {
		jload_format(&ld, where, err, errlen);
		contract_set_free(set);
		set = NULL;
	}
	return set;
}

void
contract_set_free(struct contract_set *set)
{
	size_t i;

	if (set == NULL)
		return;
	for (i = 0; i < set->count; i++)
		contract_free(set->items[i]);
	free(set->items);
	free(set);
}

size_t
contract_count(const struct contract_set *set)
{
	return set != NULL ? set->count : 0;
}

const struct contract *
contract_at(const struct contract_set *set, size_t i)
{
	return set != NULL && i < set->count ? set->items[i] : NULL;
}

const struct contract *
contract_find(const struct contract_set *set, const char *name)
{
	struct contract **found;

	if (set == NULL || name == NULL || set->count == 0)
		return NULL;
	found = bsearch(name, set->items, set->count, sizeof(*set->items), contract_cmp);
	return found != NULL ? *found : NULL;
}

const char *
contract_name(const struct contract *c)
{
	return c->name;
}

const char *
contract_hash(const struct contract *c)
{
	return c->hash;
}

const json_t *
contract_doc(const struct contract *c)
{
	return c->doc;
}

/* ---- validation ----------------------------------------------------------------- */

json_t *
contract_validate(const struct contract *c, const json_t *output)
{
	return schema_validate(c->schema, output, "", "output");
}

static const struct effect_decl *
decl_of(const struct contract *c, const char *type)
{
	size_t i;

	for (i = 0; c != NULL && type != NULL && i < c->ndecls; i++)
		if (strcmp(c->decls[i].type, type) == 0)
			return &c->decls[i];
	return NULL;
}

json_t *
contract_validate_effect(const struct contract *c, const char *type, const json_t *payload)
{
	const struct effect_decl *d = decl_of(c, type);

	if (d == NULL)
		return json_array();
	return schema_validate(d->schema, payload, "/effect/payload", "payload");
}

bool
contract_effect_declared(const struct contract *c, const char *type)
{
	return decl_of(c, type) != NULL;
}

size_t
contract_from_output_count(const struct contract *c, const char *type)
{
	const struct effect_decl *d = decl_of(c, type);

	return d != NULL ? d->nfrom : 0;
}

const char *
contract_from_output(const struct contract *c, const char *type, size_t i)
{
	const struct effect_decl *d = decl_of(c, type);

	return d != NULL && i < d->nfrom ? d->from_output[i] : NULL;
}

/* ---- effects ---------------------------------------------------------------------- */


bool
contract_effect_allowed(const struct contract *c, const char *type, const char *target)
{
	size_t i;
	bool type_ok = false, target_ok = false;

	if (type == NULL || target == NULL)
		return false;
	for (i = 0; i < c->ntypes; i++)
		type_ok = type_ok || strcmp(c->types[i], type) == 0;
	for (i = 0; i < c->ntargets; i++)
		target_ok = target_ok || strcmp(c->targets[i], target) == 0;
	return type_ok && target_ok;
}

size_t
contract_loggable_count(const struct contract *c)
{
	return c->nloggable;
}

const char *
contract_loggable(const struct contract *c, size_t i)
{
	return i < c->nloggable ? c->loggable[i] : NULL;
}

