/*
 * api_output.c — POST /v1/runs/{key}/output: a model's output is checked
 * against its contract and the effect it proposes is built; an invalid
 * output spends a repair, a valid one goes to the gate, whose choice (a
 * person, or the rules) decide_output carries out in one transaction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "canon.h"
#include "contract.h"
#include "decide.h"
#include "effect.h"
#include "ledger.h"
#include "caps.h"
#include "log.h"

static bool
http_url(const char *s)
{
	return s != NULL && (strncmp(s, "https://", 8) == 0 || strncmp(s, "http://", 7) == 0) &&
	       strlen(s) <= 2048 && api_printable(s);
}

/* A 422 that names the problem with the output submission. */
static void
call_unprocessable(struct api_call *c, const char *code, const char *message, const char *field)
{
	api_reject(c, code, message, field);
}

/* The output fields contract k marks loggable, as one compact JSON object
 * keyed by JSON Pointer (malloc'd), or NULL when it marks none that the
 * output has. Nothing else of an output is ever logged. */
char *
api_output_loggable(const struct contract *k, const json_t *output)
{
	size_t i, n = k != NULL && output != NULL ? contract_loggable_count(k) : 0;
	json_t *o;
	char *text = NULL;

	if (n == 0 || (o = json_object()) == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		const char *ptr = contract_loggable(k, i);
		json_t *v = ptr != NULL ? contract_pointer_get(output, ptr) : NULL;

		if (v != NULL)
			json_object_set(o, ptr, v);
	}
	if (json_object_size(o) > 0)
		text = canon_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return text;
}

void
api_output_submit(struct api_call *c)
{
	static const char *const fields[] = { "lease_owner", "version", "contract", "output",
		                              "model", "effect", "source_url", "requested_by",
		                              "callback_url", NULL };
	const struct config *cfg = c->ctx->cfg;
	const struct contract *contract;
	struct ledger_output lo = { 0 };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	char out_hash[CANON_HASH_LEN], why[1280];
	char *out_text = NULL, *eff_text = NULL, *model_text = NULL, *errors_text = NULL;
	char *logged = NULL;
	const char *name, *etype, *etarget;
	json_t *output, *effect, *model, *errors = NULL, *answer = NULL;
	json_t *effect_doc = NULL, *sent = NULL;
	const struct config_target *target;
	char sample_detail[128] = "", person[OG_MAIL_ADDRESS_MAX + 1];
	struct decide_output d = { 0 };
	bool human;
	enum og_rc lrc;
	long long version;
	size_t out_len;

	if (!api_only_fields(c, fields) || !api_req_owner(c, &lo.owner) ||
	    !api_req_int(c, "version", 1, (long long)1 << 53, &version))
		goto out;
	name = json_string_value(json_object_get(c->body, "contract"));
	contract = name != NULL && c->ctx->contracts != NULL
	               ? contract_find(c->ctx->contracts, name)
	               : NULL;
	if (contract == NULL) {
		call_unprocessable(c, "unknown_contract", "contract must name a loaded contract",
		                   "contract");
		goto out;
	}
	f.contract = contract_name(contract);
	output = json_object_get(c->body, "output");
	if (output == NULL) {
		api_reject(c, "invalid_field", "output is required", "output");
		goto out;
	}
	model = json_object_get(c->body, "model");
	if (model != NULL && !json_is_object(model)) {
		api_reject(c, "invalid_field", "model must be an object", "model");
		goto out;
	}
	effect = json_object_get(c->body, "effect");
	etype = json_string_value(json_object_get(effect, "type"));
	etarget = json_string_value(json_object_get(effect, "target"));
	if (!json_is_object(effect) || etype == NULL || etarget == NULL ||
	    json_object_get(effect, "payload") == NULL || json_object_size(effect) != 3) {
		api_reject(c, "invalid_field",
		           "effect must be {\"type\", \"target\", \"payload\"}", "effect");
		goto out;
	}
	if (!contract_effect_allowed(contract, etype, etarget)) {
		call_unprocessable(c, "effect_not_allowed",
		                   "the contract does not allow this effect type and target",
		                   "effect");
		goto out;
	}
	target = config_target(cfg, etarget);
	if (target == NULL) {
		call_unprocessable(c, "unknown_target", "effect.target names no configured target",
		                   "effect");
		goto out;
	}
	if (!api_opt_string(c, "source_url", 2048, &lo.source_url) ||
	    !api_opt_string(c, "requested_by", OG_FIELD_MAX, &lo.requested_by) ||
	    !api_opt_string(c, "callback_url", 2048, &lo.callback_url))
		goto out;
	/* Separation of duties compares the approver with the requester: with
	 * no requester named, the requester could approve unseen. */
	if (contract_requester_must_be_person(contract) &&
	    (lo.requested_by == NULL || lo.requested_by[strspn(lo.requested_by, " \t")] == '\0')) {
		call_unprocessable(c, "requested_by_required",
		                   contract_separation_of_duties(contract)
		                       ? "the contract requires separation of duties: requested_by "
		                         "must name who asked for this action, so that they cannot "
		                         "approve it"
		                       : "the contract requires requested_by: the mail address of "
		                         "who asked for this action",
		                   "requested_by");
		goto out;
	}
	/* A requester compared with approvers must be a person: "bob" or
	 * "n8n:inbox" is nobody the approver could be told apart from. */
	if (contract_requester_must_be_person(contract) &&
	    !contract_person(lo.requested_by, person)) {
		call_unprocessable(c, "requested_by_not_a_person",
		                   "requested_by must name a person by mail address "
		                   "(\"bob@example.com\" or \"Bob Smith <bob@example.com>\"): the "
		                   "contract compares the approver with the requester",
		                   "requested_by");
		goto out;
	}
	if (lo.source_url != NULL && !http_url(lo.source_url)) {
		api_reject(c, "invalid_field", "source_url must be an http(s) URL",
		           "source_url");
		goto out;
	}
	if (lo.callback_url != NULL &&
	    config_callback_refusal(cfg, lo.callback_url, why, sizeof(why))) {
		call_unprocessable(c, "callback_not_allowed", why, "callback_url");
		goto out;
	}

	lo.client_id = c->client.id;
	lo.key = c->key;
	lo.version = version;
	lo.contract = contract_name(contract);
	lo.contract_hash = contract_hash(contract);
	if (canon_member(CANON_AS_WRITTEN, c->req->body, c->req->body_len, "output", &out_text, &out_len) !=
	    CANON_OK) {
		api_reject(c, "invalid_json", "output is not canonical JSON", "output");
		goto out;
	}
	canon_hash(out_text, out_len, out_hash);
	lo.output = out_text;
	lo.output_hash = out_hash;

	errors = contract_validate(contract, output);
	if (errors == NULL) {
		api_internal(c, "validator failed");
		goto out;
	}
	/* The payload as it will be sent: the caller's, with the members the
	 * contract takes from the output; checked like the output, so nobody
	 * approves (and no rule judges) anything but what goes out. */
	if (json_array_size(errors) == 0) {
		sent = effect_build(contract, etype, strcmp(target->kind, "smtp") == 0,
		                    json_object_get(effect, "payload"), output, EFFECT_AT_OUTPUT,
		                    errors);
		if (sent == NULL && json_array_size(errors) == 0) {
			api_internal(c, "effect could not be built");
			goto out;
		}
	}
	if (json_array_size(errors) > 0) {
		int budget = contract_repair_attempts(contract), left;

		errors_text = canon_dumps(errors, JSON_COMPACT);
		lo.validation = errors_text;
		lrc = ledger_output_invalid(c->ctx->db, &lo, budget, &run);
		if (lrc != OG_OK) {
			if (lrc == OG_LEASE_LOST)
				api_lease_lost(c, &f);
			else
				api_fail(c, lrc);
			goto out;
		}
		left = budget - run.attempt;
		answer = json_pack("{s:s, s:O, s:i, s:s, s:I}", "outcome",
		                   run.state == RUN_FAILED_TERMINAL ? ledger_state_name(run.state) : "invalid",
		                   "errors", errors, "repairs_left", left < 0 ? 0 : left, "state",
		                   ledger_state_name(run.state), "version", (json_int_t)run.version);
		http_json(c->resp, 422, answer);
		answer = NULL;
		f.state_from = ledger_state_name(RUN_PROCESSING);
		f.state_to = ledger_state_name(run.state);
		f.version = run.version;
		f.validation = "invalid";
		f.error_class = run.state == RUN_FAILED_TERMINAL ? "validation" : NULL;
		f.reason = run.state == RUN_FAILED_TERMINAL ? "repair budget spent" : NULL;
		api_log(c, LOG_LEVEL_NOTICE, "output.invalid", &f);
		goto out;
	}

	effect_doc = json_pack("{s:s, s:s, s:O}", "type", etype, "target", etarget, "payload",
	                       sent);
	/* Valid. The gate decides by the contract's rules alone: fields of the
	 * model's own output never grant autonomy unless a rule names them; a
	 * rule over /effect sees the payload that will be sent. */
	switch (contract_gate_mode(contract)) {
	case GATE_ACT_WITH_WINDOW:
		human = false;
		break;
	case GATE_APPROVE_BY_EXCEPTION: {
		/* The sample is drawn from the CSPRNG once per run and kept on
		 * it, never derived from the key: a caller cannot choose runs
		 * that dodge it, nor roll again by resubmitting. */
		double fresh, draw = -1;

		if (contract_sample_draw(&fresh) != 0) {
			api_internal(c, "the CSPRNG failed");
			goto out;
		}
		lrc = ledger_sample_draw(c->ctx->db, c->client.id, c->key, fresh,
		                         contract_sample_rate(contract), &draw);
		if (lrc == OG_UNAVAILABLE) {
			api_fail(c, OG_UNAVAILABLE);
			goto out;
		}
		/* not processing: the accept below says why; -1 is "sampled" */
		human = effect_doc == NULL ||
		        !contract_auto_eligible(contract, output, effect_doc) ||
		        contract_sampled(contract, draw);
		if (lrc == OG_OK)
			snprintf(sample_detail, sizeof(sample_detail),
			         "sample draw %.6f %s rate %g: %s", draw,
			         draw < contract_sample_rate(contract) ? "<" : ">=",
			         contract_sample_rate(contract),
			         contract_sampled(contract, draw) ? "sampled, a person decides"
			                                          : "not sampled");
		break;
	}
	default:
		human = true;
		break;
	}
	model_text = model != NULL ? canon_dumps(model, JSON_COMPACT) : NULL;
	eff_text = effect_doc != NULL ? canon_dumps(effect_doc, JSON_COMPACT) : NULL;
	if (eff_text == NULL) {
		api_internal(c, "effect could not be serialised");
		goto out;
	}
	lo.model = model_text;
	lo.effect = eff_text;
	d.output = &lo;
	d.contract = contract;
	d.human = human;
	d.effect_type = etype;
	d.effect_target = etarget;
	d.payload = sent;
	d.public_url = cfg->public_url;
	switch (decide_output(c->ctx->db, &d, &run)) {
	case OG_OK:
		break;
	case OG_LEASE_LOST:
		api_lease_lost(c, &f);
		goto out;
	case OG_NOT_FOUND:
		api_fail(c, OG_NOT_FOUND);
		goto out;
	case OG_UNAVAILABLE:
		api_fail(c, OG_UNAVAILABLE);
		goto out;
	default:
		if (d.detail != NULL)
			api_internal(c, d.detail);
		else
			api_fail(c, OG_ERROR);
		goto out;
	}
	if (human) {
		answer = json_pack("{s:s, s:O, s:I}", "outcome", ledger_state_name(RUN_AWAITING_HUMAN), "approvals",
		                   d.approvals, "version", (json_int_t)run.version);
	} else {
		answer = json_pack("{s:s, s:s, s:I}", "outcome", "approved", "effect_id",
		                   d.effect_id, "version", (json_int_t)run.version);
		if (d.delay_seconds > 0)
			json_object_set_new(answer, "not_before", json_string(d.not_before));
	}
	f.state_from = ledger_state_name(RUN_PROCESSING);
	f.state_to = ledger_state_name(run.state);
	f.version = run.version;
	f.validation = "valid";
	f.target = etarget;
	f.effect_id = json_string_value(json_object_get(answer, "effect_id"));
	f.decision = human ? NULL : "auto";
	f.actor = human ? NULL : "gate:auto";
	f.model = json_string_value(json_object_get(model, "name"));
	f.detail = sample_detail[0] != '\0' ? sample_detail : NULL;
	f.model_provider = json_string_value(json_object_get(model, "provider"));
	f.model_revision = json_string_value(json_object_get(model, "revision"));
	f.output_fields = logged = api_output_loggable(contract, output);
	http_json(c->resp, 202, json_incref(answer));
	/* three decisions, three lines: the output passed its contract, the
	 * gate chose a person or the rules, and (rules) the effect is queued */
	{
		struct log_fields v = { .contract = f.contract, .model = f.model,
			                .model_provider = f.model_provider,
			                .model_revision = f.model_revision,
			                .output_fields = f.output_fields,
			                .validation = "valid", .payload_hash = out_hash };

		api_log(c, LOG_LEVEL_INFO, "output.valid", &v);
	}
	api_log(c, LOG_LEVEL_INFO, human ? "gate.awaiting_human" : "gate.auto_approved", &f);
	if (!human) {
		struct log_fields e = { .effect_id = f.effect_id, .target = etarget,
			                .decision = "auto", .actor = "gate:auto" };

		api_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
out:
	json_decref(answer);
	decide_output_clear(&d);
	json_decref(errors);
	json_decref(effect_doc);
	json_decref(sent);
	free(out_text);
	free(eff_text);
	free(model_text);
	free(errors_text);
	free(logged);
	ledger_run_clear(&run);
}
