/*
 * fuzz_contract_validate.c — the validator and gate rules of the shipped
 * contracts (crm_tag and support_reply in contracts/) against arbitrary
 * JSON: contract_validate, contract_auto_eligible, contract_sampled and
 * contract_pointer_get.
 *
 * The input is read as a request body would be (jansson, duplicates
 * refused). Its "output" member is the model output and "effect" the
 * proposed effect when present; the whole document is also validated as an
 * output. "draw" (or one from the input's size) is the run's sample draw,
 * "pointer" a JSON Pointer to resolve.
 *
 * Properties: errors are well-formed and capped, validation and sampling
 * are deterministic, and only approve_by_exception ever auto-approves.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "contract.h"
#include "fuzzlib.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct contract_set *set;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char dir[4096], err[1024];

	snprintf(dir, sizeof(dir), "%s/contracts", fuzzlib_srcdir());
	set = contract_load_dir(dir, err, sizeof(err));
	if (set == NULL || contract_count(set) == 0) {
		fprintf(stderr, "fuzz: cannot load %s: %s\n", dir, set == NULL ? err : "empty");
		abort();
	}
	return 0;
}

static void
check_contract(const struct contract *c, const json_t *output, const json_t *effect,
               double draw)
{
	json_t *e1 = contract_validate(c, output), *e2 = contract_validate(c, output);
	bool auto1 = contract_auto_eligible(c, output, effect);

	fuzzlib_check_errors(e1);
	FUZZ_ASSERT(json_equal(e1, e2));
	FUZZ_ASSERT(contract_auto_eligible(c, output, effect) == auto1);
	if (contract_gate(c)->mode != GATE_APPROVE_BY_EXCEPTION)
		FUZZ_ASSERT(!auto1);
	/* the sample is a draw kept on the run: the same draw, the same verdict */
	FUZZ_ASSERT(contract_sampled(c, draw) == contract_sampled(c, draw));
	json_decref(e1);
	json_decref(e2);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *doc = json_loadb((const char *)data, size,
	                         JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	const json_t *output, *effect;
	json_t *none;
	const char *pointer;
	char *raw;
	double draw;
	size_t i;

	if (doc == NULL)
		return 0;
	none = json_object();
	output = json_object_get(doc, "output");
	/* the API always has an effect object by then */
	effect = json_object_get(doc, "effect");
	if (!json_is_object(effect))
		effect = none;
	/* a sample draw: the document's "draw" when it has one (NaN, out of
	 * range and all), else one from the input's size */
	draw = json_is_number(json_object_get(doc, "draw"))
	               ? json_number_value(json_object_get(doc, "draw"))
	               : (double)(size % 1024) / 1024.0;
	pointer = json_string_value(json_object_get(doc, "pointer"));
	raw = strndup((const char *)data, size);
	if (raw == NULL)
		abort();
	for (i = 0; i < contract_count(set); i++) {
		const struct contract *c = contract_at(set, i);

		check_contract(c, output != NULL ? output : doc, effect, draw);
		check_contract(c, doc, json_is_object(doc) ? doc : none, 1.0 - draw);
	}
	if (pointer != NULL)
		(void)contract_pointer_get(doc, pointer);
	(void)contract_pointer_get(doc, raw);
	free(raw);
	json_decref(none);
	json_decref(doc);
	return 0;
}
