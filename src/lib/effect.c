/*
 * effect.c — the payload that goes out, built and checked; see effect.h.
 */
#include <stdio.h>
#include <string.h>

#include "caps.h"
#include "effect.h"
#include "payload.h"

/* The from_output members of type: the contract's, or, for email.send that
 * it does not describe, the drafted subject and body. */
size_t
effect_from_output(const struct contract *c, const char *type, const char **names, size_t max)
{
	size_t n = 0, i;

	if (c != NULL && contract_effect_declared(c, type)) {
		for (i = 0; i < contract_from_output_count(c, type) && n < max; i++)
			names[n++] = contract_from_output(c, type, i);
		return n;
	}
	if (strcmp(type, "email.send") == 0 && max >= 2) {
		names[n++] = "subject";
		names[n++] = "body";
	}
	return n;
}

json_t *
effect_build(const struct contract *c, const char *type, bool mail, const json_t *payload,
             const json_t *output, enum effect_when when, json_t *errors)
{
	const char *names[OG_CONTRACT_FROM_OUTPUT_MAX];
	size_t n, i, before = json_array_size(errors);
	json_t *out = NULL, *more = NULL;

	n = type != NULL ? effect_from_output(c, type, names, OG_CONTRACT_FROM_OUTPUT_MAX) : 0;
	if (payload == NULL) {
		(void)payload_error(errors, NULL, "required", "is required but missing");
		return NULL;
	}
	if (n > 0 && !json_is_object(payload)) {
		(void)payload_error(errors, NULL, "type", "must be an object: the contract adds "
		                "members of the output to it");
		return NULL;
	}
	out = json_deep_copy(payload);
	if (out == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		json_t *mine = json_object_get(payload, names[i]);
		json_t *theirs = json_is_object(output) ? json_object_get(output, names[i]) : NULL;

		if (mine != NULL && when == EFFECT_AT_OUTPUT) {
			(void)payload_error(errors, names[i], "from_output",
			                       "comes from the output (the contract says so); the "
			                       "payload must not carry it");
			continue;
		}
		if (mine != NULL) {
			if (theirs != NULL && !json_equal(mine, theirs))
				(void)payload_error(errors, names[i], "from_output",
				                       "differs from the approved output");
			continue;
		}
		if (theirs != NULL && json_object_set(out, names[i], theirs) != 0)
			goto nomem;
	}
	/* the schema too, so that one answer names every problem */
	if (c != NULL) {
		more = contract_validate_effect(c, type, out);
		if (more == NULL || json_array_extend(errors, more) != 0)
			goto nomem;
		json_decref(more);
		more = NULL;
	}
	if (mail && json_array_size(errors) == before)
		(void)payload_mail_check(out, errors);
	if (json_array_size(errors) > before)
		goto fail;
	return out;
nomem:
	json_array_clear(errors);
fail:
	json_decref(more);
	json_decref(out);
	return NULL;
}
