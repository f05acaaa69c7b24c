/*
 * page_json.c — JSON as an approval page shows it: objects with their
 * members sorted, indented two spaces a level, numbers as people write them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "buf.h"
#include "canon.h"
#include "page.h"

static int
pj_compact(struct buf *b, const json_t *v)
{
	/* shortest round-trip numbers: 0.8 shows as 0.8, not 0.80000000000000004,
	 * and 0.30000000000000004 stays what it is */
	char *t = canon_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	int rc = t != NULL ? buf_puts(b, t) : -1;

	free(t);
	return rc;
}

static int
pj_indent(struct buf *b, int depth)
{
	static const char spaces[] = "        "; /* 2 * PAGE_JSON_INDENT_DEPTH */
	size_t n = (size_t)depth * 2;

	return buf_append(b, spaces, n < sizeof(spaces) - 1 ? n : sizeof(spaces) - 1);
}

static int
pj_strcmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Indented for the first PAGE_JSON_INDENT_DEPTH levels, compact below:
 * the text grows at most a few bytes per value, never with the depth. */
static int
pj_value(struct buf *b, const json_t *v, int depth)
{
	const char **keys = NULL, *k;
	size_t i, n;
	json_t *m;
	int rc = -1;

	n = json_is_object(v) ? json_object_size(v) : json_is_array(v) ? json_array_size(v) : 0;
	if (n == 0 || depth >= PAGE_JSON_INDENT_DEPTH)
		return pj_compact(b, v);
	if (buf_puts(b, json_is_object(v) ? "{\n" : "[\n") != 0)
		return -1;
	if (json_is_object(v)) {
		if ((keys = malloc(n * sizeof(*keys))) == NULL)
			return -1;
		i = 0;
		json_object_foreach((json_t *)(uintptr_t)v, k, m)
			keys[i++] = k;
		qsort(keys, n, sizeof(*keys), pj_strcmp);
	}
	for (i = 0; i < n; i++) {
		if (pj_indent(b, depth + 1) != 0)
			goto out;
		if (keys != NULL) {
			json_t *name = json_string(keys[i]);

			rc = name != NULL ? pj_compact(b, name) : -1;
			json_decref(name);
			if (rc != 0 || buf_puts(b, ": ") != 0)
				goto out;
			rc = -1;
			m = json_object_get(v, keys[i]);
		} else {
			m = json_array_get(v, i);
		}
		if (pj_value(b, m, depth + 1) != 0 || buf_puts(b, i + 1 < n ? ",\n" : "\n") != 0)
			goto out;
	}
	if (pj_indent(b, depth) == 0 && buf_puts(b, json_is_object(v) ? "}" : "]") == 0)
		rc = 0;
out:
	free(keys);
	return rc;
}

char *
page_json_text(const json_t *v)
{
	struct buf b;

	if (v == NULL)
		return strdup("");
	buf_init(&b, SIZE_MAX / 2);
	if (pj_value(&b, v, 0) != 0 || buf_puts(&b, "") != 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

