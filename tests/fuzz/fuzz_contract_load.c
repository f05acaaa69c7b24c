/*
 * fuzz_contract_load.c — the contract loader (src/lib/contract.c): the
 * input is written as one contract file into a scratch directory and the
 * directory is loaded with contract_load_dir.
 *
 * The file is named after the input's "name" member when that is a valid
 * contract name, so that mutations of the shipped contracts get past the
 * "file name equals name" check and reach the schema and gate parsers.
 *
 * A contract that loads is then used the way the API uses one: accessors,
 * validation of a few outputs (itself included), auto_when rules, sampling,
 * approver matching and loggable fields.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "contract.h"
#include "fuzzlib.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *dir;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	dir = fuzzlib_tempdir("contract");
	return 0;
}

/* The input's "name" if it may name a file, else "fuzz". */
static void
file_stem(const uint8_t *data, size_t size, char *out, size_t outlen)
{
	json_t *doc = json_loadb((const char *)data, size, 0, NULL);
	const char *name = json_string_value(json_object_get(doc, "name"));
	size_t n = name != NULL ? strlen(name) : 0;

	if (n >= 1 && n <= 64 && n < outlen &&
	    strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == n)
		memcpy(out, name, n + 1);
	else
		snprintf(out, outlen, "fuzz");
	json_decref(doc);
}

static void
use_contract(const struct contract *c, const uint8_t *data, size_t size)
{
	json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	json_t *outputs[4], *effect, *errors, *dec;
	size_t i, n;

	FUZZ_ASSERT(contract_name(c) != NULL && contract_hash(c) != NULL);
	FUZZ_ASSERT(strncmp(contract_hash(c), "sha256:", 7) == 0);
	outputs[0] = json_null();
	outputs[1] = json_object();
	outputs[2] = json_pack("{s:s, s:s, s:f, s:s, s:s}", "subject", "Re: your order",
	                       "body", "Thanks!", "confidence", 0.95, "tag", "lead",
	                       "tone", "friendly");
	outputs[3] = doc != NULL ? json_incref(doc) : json_array();
	effect = json_pack("{s:s, s:s, s:{s:i}}", "type", "crm.tag", "target", "demo_http",
	                   "payload", "n", 1);
	for (i = 0; i < 4; i++) {
		errors = contract_validate(c, outputs[i]);
		fuzzlib_check_errors(errors);
		json_decref(errors);
		if (contract_gate(c)->mode != GATE_APPROVE_BY_EXCEPTION)
			FUZZ_ASSERT(!contract_auto_eligible(c, outputs[i], effect));
		else
			(void)contract_auto_eligible(c, outputs[i], effect);
	}
	(void)contract_sampled(c, 0.5);
	(void)contract_sampled(c, -1.0); /* not a draw: a person decides */
	FUZZ_ASSERT(contract_gate_mode_name(contract_gate(c)->mode) != NULL);
	FUZZ_ASSERT((contract_gate(c)->window_seconds > 0) ==
	            (contract_gate(c)->mode == GATE_ACT_WITH_WINDOW));
	FUZZ_ASSERT(contract_gate(c)->expires_seconds >= OG_CONTRACT_EXPIRES_MIN &&
	            contract_gate(c)->expires_seconds <= OG_CONTRACT_EXPIRES_MAX);
	(void)contract_repair_attempts(c);
	(void)contract_decision_allowed(c, "approve");
	(void)contract_decision_allowed(c, "reject");
	dec = contract_allowed_decisions(c);
	FUZZ_ASSERT(json_is_array(dec) && json_array_size(dec) > 0);
	json_decref(dec);
	n = contract_gate(c)->napprovers;
	FUZZ_ASSERT(n >= 1 && n <= OG_CONTRACT_APPROVERS_MAX);
	for (i = 0; i < n; i++)
		(void)contract_approver_matches(contract_gate(c)->approvers[i], "lead@example.com",
		                                "customer support, sales", ',');
	(void)contract_effect_allowed(c, "crm.tag", "demo_http");
	n = contract_loggable_count(c);
	for (i = 0; i < n; i++)
		(void)contract_pointer_get(outputs[3], contract_loggable(c, i));
	FUZZ_ASSERT(contract_loggable(c, n) == NULL);

	for (i = 0; i < 4; i++)
		json_decref(outputs[i]);
	json_decref(effect);
	json_decref(doc);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char stem[80], file[4096], err[1024];
	struct contract_set *set;
	size_t i;

	file_stem(data, size, stem, sizeof(stem));
	snprintf(file, sizeof(file), "%s/%s.json", dir, stem);
	fuzzlib_write(file, data, size);
	err[0] = '\0';
	set = contract_load_dir(dir, err, sizeof(err));
	if (set != NULL) {
		FUZZ_ASSERT(contract_count(set) == 1);
		for (i = 0; i < contract_count(set); i++) {
			const struct contract *c = contract_at(set, i);

			FUZZ_ASSERT(c != NULL && strcmp(contract_name(c), stem) == 0);
			FUZZ_ASSERT(contract_find(set, stem) == c);
			use_contract(c, data, size);
		}
		FUZZ_ASSERT(contract_at(set, contract_count(set)) == NULL);
	} else {
		/* every failure says where */
		FUZZ_ASSERT(err[0] != '\0');
	}
	contract_set_free(set);
	unlink(file);
	return 0;
}
