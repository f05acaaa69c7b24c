/*
 * edit.c — an approver's correction of a draft; see edit.h.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "edit.h"
#include "effect.h"

size_t
edit_text_lf(char *s, size_t n)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		if (s[i] == '\r') {
			s[o++] = '\n';
			if (i + 1 < n && s[i + 1] == '\n')
				i++;
			continue;
		}
		s[o++] = s[i];
	}
	if (o < n)
		s[o] = '\0';
	return o;
}

/* Are a and b the same text once both have LF line ends? */
static bool
same_text(const char *a, size_t an, const char *b, size_t bn)
{
	size_t i = 0, j = 0;

	for (;;) {
		int ca, cb;

		if (i < an && a[i] == '\r') {
			ca = '\n';
			i += i + 1 < an && a[i + 1] == '\n' ? 2 : 1;
		} else {
			ca = i < an ? (unsigned char)a[i++] : -1;
		}
		if (j < bn && b[j] == '\r') {
			cb = '\n';
			j += j + 1 < bn && b[j + 1] == '\n' ? 2 : 1;
		} else {
			cb = j < bn ? (unsigned char)b[j++] : -1;
		}
		if (ca != cb)
			return false;
		if (ca == -1)
			return true;
	}
}

json_t *
edit_apply(const struct contract *c, const json_t *draft, const json_t *values,
           json_t **changed, json_t *errors)
{
	const char *name;
	json_t *out, *v;
	size_t i, bad = 0;

	*changed = NULL;
	json_object_foreach((json_t *)(uintptr_t)values, name, v) {
		if (!contract_is_editable(c, name) || !json_is_string(v)) {
			char path[OG_CONTRACT_NAME_MAX + 2] = "/";

			strncat(path, name, sizeof(path) - 2);
			(void)json_array_append_new(
				errors, json_pack("{s:s, s:s, s:s}", "path", path, "rule", "editable",
			                          "message", "may not be edited on this request"));
			bad++;
		}
	}
	if (bad > 0 || !json_is_object(draft))
		return NULL;
	out = json_deep_copy(draft);
	*changed = json_array();
	if (out == NULL || *changed == NULL)
		goto nomem;
	/* in the contract's order, so the names read the same every time */
	for (i = 0; i < contract_gate(c)->neditable; i++) {
		const char *n = contract_gate(c)->editable[i];
		const json_t *now = json_object_get(draft, n);
		char *text;
		size_t len;

		v = json_object_get(values, n);
		if (v == NULL)
			continue;
		if (json_is_string(now) && same_text(json_string_value(now), json_string_length(now),
		                                     json_string_value(v), json_string_length(v)))
			continue;
		len = json_string_length(v);
		if ((text = malloc(len + 1)) == NULL)
			goto nomem;
		memcpy(text, json_string_value(v), len + 1);
		len = edit_text_lf(text, len);
		if (json_object_set_new(out, n, json_stringn(text, len)) != 0 ||
		    json_array_append_new(*changed, json_string(n)) != 0) {
			free(text);
			goto nomem;
		}
		free(text);
	}
	return out;
nomem:
	json_decref(out);
	json_decref(*changed);
	*changed = NULL;
	return NULL;
}

json_t *
edit_check(const struct contract *c, const char *type, bool mail, const json_t *proposed,
           const json_t *output, json_t *errors)
{
	const char *names[OG_CONTRACT_FROM_OUTPUT_MAX];
	json_t *more, *payload, *sent;
	size_t i, n, before = json_array_size(errors);

	more = contract_validate(c, output);
	if (more == NULL || json_array_extend(errors, more) != 0) {
		json_decref(more);
		return NULL;
	}
	json_decref(more);
	if (json_array_size(errors) > before)
		return NULL;
	/* the payload as the workflow handed it in: without the members the
	 * contract takes from the output, which come from the corrected one */
	if ((payload = json_deep_copy(proposed)) == NULL)
		return NULL;
	n = effect_from_output(c, type, names, OG_CONTRACT_FROM_OUTPUT_MAX);
	/* where the effect goes is corrected only within the contract's
	 * allow-list */
	for (i = 0; i < n; i++) {
		const json_t *now = json_object_get(output, names[i]);
		const char *why;
		char path[OG_CONTRACT_NAME_MAX + 2] = "/";

		if (now == NULL || json_equal(now, json_object_get(proposed, names[i])) ||
		    (why = contract_edit_refusal(c, names[i], now)) == NULL)
			continue;
		strncat(path, names[i], sizeof(path) - 2);
		(void)json_array_append_new(errors, json_pack("{s:s, s:s, s:s}", "path", path, "rule",
		                                              "editable_allow", "message", why));
	}
	if (json_array_size(errors) > before) {
		json_decref(payload);
		return NULL;
	}
	for (i = 0; i < n && json_is_object(payload); i++)
		(void)json_object_del(payload, names[i]);
	sent = effect_build(c, type, mail, payload, output, EFFECT_AT_OUTPUT, errors);
	json_decref(payload);
	return sent;
}
