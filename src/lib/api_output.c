/*
 * api_output.c — a model's output, whichever door it came through (POST
 * /v1/runs/{key}/output, or an MCP tool call in api_mcp.c): it is checked
 * against its contract and the effect it proposes is built
 * (api_output_check); an invalid output spends a repair, a valid one goes
 * to the gate, whose choice (a person, or the rules) decide_output carries
 * out in one transaction (api_output_decide).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "canon.h"
#include "contract.h"
#include "decide.h"
#include "effect.h"
#include "ledger.h"
#include "metrics.h"
#include "caps.h"
#include "log.h"
#include "provider.h"

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

/* The effect in->effect names, checked for shape and against the
 * contract and the configuration; false after answering. */
static bool
output_effect(struct api_call *c, const struct api_output_in *in, const char **etype,
              const char **etarget, const struct config_target **target)
{
	const json_t *effect = in->effect;

	*etype = json_string_value(json_object_get(effect, "type"));
	*etarget = json_string_value(json_object_get(effect, "target"));
	if (!json_is_object(effect) || *etype == NULL || *etarget == NULL ||
	    json_object_get(effect, "payload") == NULL || json_object_size(effect) != 3) {
		api_reject(c, "invalid_field",
		           "effect must be {\"type\", \"target\", \"payload\"}", "effect");
		return false;
	}
	if (!contract_effect_allowed(in->contract, *etype, *etarget)) {
		call_unprocessable(c, "effect_not_allowed",
		                   "the contract does not allow this effect type and target",
		                   "effect");
		return false;
	}
	*target = config_target(c->ctx->cfg, *etarget);
	if (*target == NULL) {
		call_unprocessable(c, "unknown_target", "effect.target names no configured target",
		                   "effect");
		return false;
	}
	return true;
}

/* Who asked and where answers go, as the contract and the configuration
 * allow them; false after answering. */
static bool
output_people(struct api_call *c, const struct api_output_in *in)
{
	const struct contract *contract = in->contract;
	char person[OG_MAIL_ADDRESS_MAX + 1], why[1280];

	/* Separation of duties compares the approver with the requester: with
	 * no requester named, the requester could approve unseen. */
	if (contract_requester_must_be_person(contract) &&
	    (in->requested_by == NULL || in->requested_by[strspn(in->requested_by, " \t")] == '\0')) {
		call_unprocessable(c, "requested_by_required",
		                   contract_gate(contract)->separation_of_duties
		                       ? "the contract requires separation of duties: requested_by "
		                         "must name who asked for this action, so that they cannot "
		                         "approve it"
		                       : "the contract requires requested_by: the mail address of "
		                         "who asked for this action",
		                   "requested_by");
		return false;
	}
	/* A requester compared with approvers must be a person: "bob" or
	 * "n8n:inbox" is nobody the approver could be told apart from. */
	if (contract_requester_must_be_person(contract) &&
	    !contract_person(in->requested_by, person)) {
		call_unprocessable(c, "requested_by_not_a_person",
		                   "requested_by must name a person by mail address "
		                   "(\"bob@example.com\" or \"Bob Smith <bob@example.com>\"): the "
		                   "contract compares the approver with the requester",
		                   "requested_by");
		return false;
	}
	if (in->source_url != NULL && !http_url(in->source_url)) {
		api_reject(c, "invalid_field", "source_url must be an http(s) URL",
		           "source_url");
		return false;
	}
	if (in->callback_url != NULL &&
	    config_callback_refusal(c->ctx->cfg, in->callback_url, why, sizeof(why))) {
		call_unprocessable(c, "callback_not_allowed", why, "callback_url");
		return false;
	}
	return true;
}

/* The members of an output's context, each one string of at most max
 * characters; multiline: line breaks and tabs allowed (the message). */
static const struct context_member {
	const char *name, *field;
	size_t max;
	bool multiline;
} context_members[] = {
	{ "subject", "context.subject", OG_CONTEXT_SUBJECT_MAX, false },
	{ "customer", "context.customer", OG_CONTEXT_CUSTOMER_MAX, false },
	{ "message", "context.message", OG_CONTEXT_MESSAGE_MAX, true },
};

/* Characters of s (well-formed UTF-8, as jansson keeps it), or (size_t)-1
 * when it holds a control character the member does not allow. */
static size_t
context_chars(const char *s, size_t len, bool multiline)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		unsigned char b = (unsigned char)s[i];

		if ((b < 0x20 && !(multiline && (b == '\n' || b == '\r' || b == '\t'))) ||
		    b == 0x7f)
			return (size_t)-1;
		if ((b & 0xc0) != 0x80)
			n++;
	}
	return n;
}

/* The context for the approver: an object of the members above, each
 * optional; any other member, type or size is refused, naming the field.
 * It is never part of the effect: false after answering. */
static bool
output_context(struct api_call *c, const json_t *ctx)
{
	const char *name;
	json_t *v;
	char msg[160];
	size_t i, n;

	if (!json_is_object(ctx)) {
		api_reject(c, "invalid_field",
		           "context must be an object of strings: subject, customer, message",
		           "context");
		return false;
	}
	json_object_foreach((json_t *)(uintptr_t)ctx, name, v) {
		const struct context_member *m = NULL;

		for (i = 0; i < sizeof(context_members) / sizeof(context_members[0]); i++)
			if (strcmp(name, context_members[i].name) == 0)
				m = &context_members[i];
		if (m == NULL) {
			api_reject(c, "invalid_field",
			           "context takes only the members subject, customer and message",
			           "context");
			return false;
		}
		if (!json_is_string(v)) {
			snprintf(msg, sizeof(msg), "%s must be a string", m->field);
			api_reject(c, "invalid_field", msg, m->field);
			return false;
		}
		n = context_chars(json_string_value(v), json_string_length(v), m->multiline);
		if (n == (size_t)-1) {
			snprintf(msg, sizeof(msg), "%s must be %s", m->field,
			         m->multiline ? "printable text (line breaks and tabs allowed)"
			                      : "one line of printable text");
			api_reject(c, "invalid_field", msg, m->field);
			return false;
		}
		if (n > m->max) {
			snprintf(msg, sizeof(msg), "%s must be at most %zu characters (it has %zu)",
			         m->field, m->max, n);
			api_reject(c, "invalid_field", msg, m->field);
			return false;
		}
	}
	return true;
}

bool
api_output_check(struct api_call *c, const struct api_output_in *in, json_t **sent,
                 json_t **errors)
{
	const struct config_target *target;
	const char *etype, *etarget;

	*sent = NULL;
	*errors = NULL;
	if (!output_effect(c, in, &etype, &etarget, &target) || !output_people(c, in) ||
	    (in->context != NULL && !output_context(c, in->context)))
		return false;
	*errors = contract_validate(in->contract, in->output);
	if (*errors == NULL) {
		api_internal(c, "validator failed");
		return false;
	}
	metrics_count(METRICS_OUTPUT_SUBMITTED);
	/* The payload as it will be sent: the caller's, with the members the
	 * contract takes from the output; checked like the output, so nobody
	 * approves (and no rule judges) anything but what goes out. */
	if (json_array_size(*errors) == 0) {
		*sent = effect_build(in->contract, etype, provider_takes_mail(target),
		                     json_object_get(in->effect, "payload"), in->output,
		                     EFFECT_AT_OUTPUT, *errors);
		if (*sent == NULL && json_array_size(*errors) == 0) {
			api_internal(c, "effect could not be built");
			json_decref(*errors);
			*errors = NULL;
			return false;
		}
	}
	return true;
}

/* An invalid output spends a repair: 422 with the errors. */
static void
output_invalid(struct api_call *c, const struct api_output_in *in, struct ledger_output *lo,
               json_t *errors)
{
	int budget = contract_repair_attempts(in->contract), left;
	struct ledger_run run = { 0 };
	struct log_fields f = { .contract = contract_name(in->contract) };
	char *errors_text = canon_dumps(errors, JSON_COMPACT);
	enum og_rc lrc;

	lo->validation = errors_text;
	lrc = ledger_output_invalid(c->ctx->db, lo, budget, &run);
	if (lrc != OG_OK) {
		if (lrc == OG_LEASE_LOST)
			api_lease_lost(c, &f);
		else
			api_fail(c, lrc);
		goto out;
	}
	left = budget - run.attempt;
	http_json(c->resp, 422,
	          json_pack("{s:s, s:O, s:i, s:s, s:I}", "outcome",
	                    run.state == RUN_FAILED_TERMINAL ? ledger_state_name(run.state)
	                                                     : "invalid",
	                    "errors", errors, "repairs_left", left < 0 ? 0 : left, "state",
	                    ledger_state_name(run.state), "version", (json_int_t)run.version));
	f.state_from = ledger_state_name(RUN_PROCESSING);
	f.state_to = ledger_state_name(run.state);
	f.version = run.version;
	f.validation = "invalid";
	f.error_class = run.state == RUN_FAILED_TERMINAL ? "validation" : NULL;
	f.reason = run.state == RUN_FAILED_TERMINAL ? "repair budget spent" : NULL;
	api_log(c, LOG_LEVEL_NOTICE, "output.invalid", &f);
out:
	free(errors_text);
	ledger_run_clear(&run);
}

/* The gate's choice by the contract's rules alone: fields of the model's
 * own output never grant autonomy unless a rule names them; a rule over
 * /effect sees the payload that will be sent. 1: a person decides, 0:
 * the rules; -1 after answering. */
static int
output_gate(struct api_call *c, const struct api_output_in *in, const json_t *effect_doc,
            char *detail, size_t detail_len)
{
	const struct contract *contract = in->contract;
	/* The sample is drawn from the CSPRNG once per run and kept on it,
	 * never derived from the key: a caller cannot choose runs that dodge
	 * it, nor roll again by resubmitting. */
	double fresh, draw = -1;
	enum og_rc lrc;

	switch (contract_gate(contract)->mode) {
	case GATE_ACT_WITH_WINDOW:
		return 0;
	case GATE_APPROVE_BY_EXCEPTION:
		break;
	default:
		return 1;
	}
	if (contract_sample_draw(&fresh) != 0) {
		api_internal(c, "the CSPRNG failed");
		return -1;
	}
	lrc = ledger_sample_draw(c->ctx->db, c->client.id, c->key, fresh,
	                         contract_gate(contract)->sample_rate, &draw);
	if (lrc == OG_UNAVAILABLE) {
		api_fail(c, OG_UNAVAILABLE);
		return -1;
	}
	if (lrc == OG_OK)
		snprintf(detail, detail_len, "sample draw %.6f %s rate %g: %s", draw,
		         draw < contract_gate(contract)->sample_rate ? "<" : ">=",
		         contract_gate(contract)->sample_rate,
		         contract_sampled(contract, draw) ? "sampled, a person decides"
		                                          : "not sampled");
	/* not processing: the accept below says why; -1 is "sampled" */
	return effect_doc == NULL || !contract_auto_eligible(contract, in->output, effect_doc) ||
	       contract_sampled(contract, draw);
}

/* decide_output's failure as the answer; true when it succeeded. */
static bool
output_decided(struct api_call *c, enum og_rc rc, const struct decide_output *d,
               struct log_fields *f)
{
	switch (rc) {
	case OG_OK:
		return true;
	case OG_LEASE_LOST:
		api_lease_lost(c, f);
		break;
	case OG_NOT_FOUND:
	case OG_UNAVAILABLE:
		api_fail(c, rc);
		break;
	default:
		if (d->detail != NULL)
			api_internal(c, d->detail);
		else
			api_fail(c, OG_ERROR);
		break;
	}
	return false;
}

/* The answer of a decided output and its three log lines: the output
 * passed its contract, the gate chose a person or the rules, and (rules)
 * the effect is queued. */
static void
output_answer(struct api_call *c, const struct api_output_in *in, const struct decide_output *d,
              const struct ledger_run *run, const char *out_hash, const char *detail)
{
	const json_t *model = in->model;
	struct log_fields f = { .contract = contract_name(in->contract) };
	json_t *answer;
	char *logged;

	if (d->human) {
		answer = json_pack("{s:s, s:O, s:I}", "outcome", ledger_state_name(RUN_AWAITING_HUMAN),
		                   "approvals", d->approvals, "version", (json_int_t)run->version);
	} else {
		answer = json_pack("{s:s, s:s, s:I}", "outcome", ledger_state_name(RUN_APPROVED),
		                   "effect_id", d->effect_id, "version", (json_int_t)run->version);
		if (d->delay_seconds > 0)
			json_object_set_new(answer, "not_before", json_string(d->not_before));
	}
	f.state_from = ledger_state_name(RUN_PROCESSING);
	f.state_to = ledger_state_name(run->state);
	f.version = run->version;
	f.validation = "valid";
	f.target = d->effect_target;
	f.effect_id = d->human ? NULL : d->effect_id;
	f.decision = d->human ? NULL : "auto";
	f.actor = d->human ? NULL : "gate:auto";
	f.model = json_string_value(json_object_get(model, "name"));
	f.detail = detail[0] != '\0' ? detail : NULL;
	f.model_provider = json_string_value(json_object_get(model, "provider"));
	f.model_revision = json_string_value(json_object_get(model, "revision"));
	f.output_fields = logged = api_output_loggable(in->contract, in->output);
	http_json(c->resp, 202, answer);
	{
		struct log_fields v = { .contract = f.contract, .model = f.model,
			                .model_provider = f.model_provider,
			                .model_revision = f.model_revision,
			                .output_fields = f.output_fields,
			                .validation = "valid", .payload_hash = out_hash };

		api_log(c, LOG_LEVEL_INFO, "output.valid", &v);
	}
	api_log(c, LOG_LEVEL_INFO, d->human ? "gate.awaiting_human" : "gate.auto_approved", &f);
	if (!d->human) {
		struct log_fields e = { .effect_id = f.effect_id, .target = d->effect_target,
			                .decision = "auto", .actor = "gate:auto" };

		api_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
	free(logged);
}

void
api_output_decide(struct api_call *c, const struct api_output_in *in)
{
	const struct config *cfg = c->ctx->cfg;
	struct ledger_output lo = { 0 };
	struct ledger_run run = { 0 };
	struct log_fields f = { .contract = contract_name(in->contract) };
	struct decide_output d = { 0 };
	char out_hash[CANON_HASH_LEN], sample_detail[128] = "";
	char *eff_text = NULL, *model_text = NULL, *context_text = NULL;
	json_t *errors = NULL, *sent = NULL, *effect_doc = NULL;
	const char *etype = json_string_value(json_object_get(in->effect, "type"));
	const char *etarget = json_string_value(json_object_get(in->effect, "target"));
	int human;

	if (!api_output_check(c, in, &sent, &errors))
		goto out;
	lo.client_id = c->client.id;
	lo.key = c->key;
	lo.owner = in->owner;
	lo.version = in->version;
	lo.contract = contract_name(in->contract);
	lo.contract_hash = contract_hash(in->contract);
	lo.source_url = in->source_url;
	lo.requested_by = in->requested_by;
	lo.callback_url = in->callback_url;
	canon_hash(in->output_text, in->output_len, out_hash);
	lo.output = in->output_text;
	lo.output_hash = out_hash;
	if (json_array_size(errors) > 0) {
		output_invalid(c, in, &lo, errors);
		goto out;
	}
	effect_doc = json_pack("{s:s, s:s, s:O}", "type", etype, "target", etarget, "payload",
	                       sent);
	human = output_gate(c, in, effect_doc, sample_detail, sizeof(sample_detail));
	if (human < 0)
		goto out;
	model_text = in->model != NULL ? canon_dumps(in->model, JSON_COMPACT) : NULL;
	eff_text = effect_doc != NULL ? canon_dumps(effect_doc, JSON_COMPACT) : NULL;
	if (eff_text == NULL) {
		api_internal(c, "effect could not be serialised");
		goto out;
	}
	/* stored beside the run, never in the effect: an empty one is none */
	if (json_object_size(in->context) > 0 &&
	    (lo.context = context_text = canon_dumps(in->context, JSON_COMPACT)) == NULL) {
		api_internal(c, "context could not be serialised");
		goto out;
	}
	lo.model = model_text;
	lo.effect = eff_text;
	d.output = &lo;
	d.contract = in->contract;
	d.human = human == 1;
	d.effect_type = etype;
	d.effect_target = etarget;
	d.payload = sent;
	d.public_url = cfg->public_url;
	if (output_decided(c, decide_output(c->ctx->db, &d, &run), &d, &f))
		output_answer(c, in, &d, &run, out_hash, sample_detail);
out:
	decide_output_clear(&d);
	json_decref(errors);
	json_decref(effect_doc);
	json_decref(sent);
	free(eff_text);
	free(model_text);
	free(context_text);
	ledger_run_clear(&run);
}

void
api_output_submit(struct api_call *c)
{
	static const char *const fields[] = { "lease_owner", "version", "contract", "output",
		                              "model", "effect", "source_url", "requested_by",
		                              "callback_url", "context", NULL };
	struct api_output_in in = { 0 };
	char *out_text = NULL;
	const char *name;

	if (!api_only_fields(c, fields) || !api_req_owner(c, &in.owner) ||
	    !api_req_int(c, "version", 1, (long long)1 << 53, &in.version))
		goto out;
	name = json_string_value(json_object_get(c->body, "contract"));
	in.contract = name != NULL && c->ctx->contracts != NULL
	                  ? contract_find(c->ctx->contracts, name)
	                  : NULL;
	if (in.contract == NULL) {
		call_unprocessable(c, "unknown_contract", "contract must name a loaded contract",
		                   "contract");
		goto out;
	}
	in.output = json_object_get(c->body, "output");
	if (in.output == NULL) {
		api_reject(c, "invalid_field", "output is required", "output");
		goto out;
	}
	in.model = json_object_get(c->body, "model");
	if (in.model != NULL && !json_is_object(in.model)) {
		api_reject(c, "invalid_field", "model must be an object", "model");
		goto out;
	}
	in.effect = json_object_get(c->body, "effect");
	in.context = json_object_get(c->body, "context");
	if (!api_opt_string(c, "source_url", OG_URL_MAX_CHARS, &in.source_url) ||
	    !api_opt_string(c, "requested_by", OG_TEXT_MAX_CHARS, &in.requested_by) ||
	    !api_opt_string(c, "callback_url", OG_URL_MAX_CHARS, &in.callback_url))
		goto out;
	if (canon_member(CANON_AS_WRITTEN, c->req->body, c->req->body_len, "output", &out_text,
	                 &in.output_len) != CANON_OK) {
		api_reject(c, "invalid_json", "output is not canonical JSON", "output");
		goto out;
	}
	in.output_text = out_text;
	api_output_decide(c, &in);
out:
	free(out_text);
}
