/*
 * contract_gate.c — a contract's gate: loading "gate" (mode, window,
 * auto_when rules, sampling, approvers, expiry, decisions, separation of
 * duties) and answering what the gate asks of a run (who may decide, is an
 * output auto-eligible, is it sampled for a person).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "caps.h"
#include "contract_int.h"
#include "gate.h"
#include "payload.h"
#include "jptr.h"
#include "unknown.h"

static const char *const op_names[] = {
	"eq", "ne", "in", "not_in", "lt", "le", "gt", "ge", "exists",
};


static const char *const gate_members[] = {
	"mode", "window_seconds", "auto_when", "sample_rate", "approvers",
	"expires_seconds", "allowed_decisions", "separation_of_duties", "requested_by_mail",
	"min_approvals", "editable", "editable_allow", "notify", "remind_after_seconds", "escalate_after_seconds", "escalate_to",
	NULL,
};

static const char *const rule_members[] = { "path", "op", "value", NULL };

static const char *const mode_names[] = {
	[GATE_APPROVE_BEFORE_ACT] = "approve_before_act",
	[GATE_ACT_WITH_WINDOW] = "act_with_window",
	[GATE_APPROVE_BY_EXCEPTION] = "approve_by_exception",
};

static OG_PARSE_FN(op_parse, int, op_names, -1);
static OG_PARSE_FN(mode_parse, int, mode_names, -1);

static bool
compile_rule(struct jload *ld, struct contract *c, const json_t *j, struct rule *r)
{
	json_t *path = json_object_get(j, "path"), *op = json_object_get(j, "op");
	char seg[OG_CONTRACT_POINTER_MAX + 1] = "";
	const char *p, *full;
	size_t n;
	int i;

	if (!json_is_object(j))
		return jload_fail(ld, "a rule must be an object {\"path\", \"op\", \"value\"}");
	if (!jload_members(ld, j, rule_members, "unknown rule member"))
		return false;
	if (path == NULL || !json_is_string(path))
		return jload_fail_at(ld, "path", "must be a JSON Pointer string (required)");
	p = json_string_value(path);
	if (!jptr_valid(p, OG_CONTRACT_POINTER_MAX))
		return jload_fail_at(ld, "path", "is not a valid JSON Pointer");
	/* "output" and "effect" contain neither '~' nor '/', so their escaped
	 * form is the plain one and the rest of the pointer starts 7 bytes in. */
	full = p;
	if (p[0] != '\0' && jptr_next(&p, seg, sizeof(seg), &n) &&
	    strcmp(seg, "output") == 0) {
		r->on_output = true;
		r->rest = full + 7;
		if (!schema_allows(c->schema, r->rest))
			return jload_fail_at(ld, "path", "names a field the schema does not allow");
	} else if (strcmp(seg, "effect") == 0 && *p != '\0' &&
	           jptr_next(&p, seg, sizeof(seg), &n) &&
	           (strcmp(seg, "type") == 0 || strcmp(seg, "target") == 0 ||
	            strcmp(seg, "payload") == 0)) {
		r->on_output = false;
		r->rest = full + 7;
	} else {
		return jload_fail_at(ld, "path", "must start with /output or /effect/type, "
		                "/effect/target, /effect/payload");
	}

	if (op == NULL || !json_is_string(op))
		return jload_fail_at(ld, "op", "must be a string (required)");
	if ((i = op_parse(json_string_value(op))) < 0)
		return jload_fail_at(ld, "op", "unknown op (expected eq, ne, in, not_in, lt, "
		                "le, gt, ge or exists)");
	r->op = (enum rule_op)i;
	r->value = json_object_get(j, "value");

	switch (r->op) {
	case OP_EQ:
	case OP_NE:
		if (r->value == NULL)
			return jload_fail_at(ld, "value", "missing (required for %s)", op_names[r->op]);
		break;
	case OP_IN:
	case OP_NOT_IN:
		if (!json_is_array(r->value) || json_array_size(r->value) == 0)
			return jload_fail_at(ld, "value", "must be a non-empty array for %s",
			                op_names[r->op]);
		break;
	case OP_LT:
	case OP_LE:
	case OP_GT:
	case OP_GE:
		if (!json_is_number(r->value))
			return jload_fail_at(ld, "value", "must be a number for %s", op_names[r->op]);
		break;
	case OP_EXISTS:
		if (r->value != NULL && !json_is_boolean(r->value))
			return jload_fail_at(ld, "value", "must be true or false for exists");
		r->want = r->value == NULL || json_is_true(r->value);
		break;
	}
	return true;
}

static bool
approver_ok(const char *s, size_t n)
{
	bool group = n > 6 && strncmp(s, "group:", 6) == 0;
	size_t i;

	if (n == 0 || n > OG_CONTRACT_APPROVER_MAX || strlen(s) != n)
		return false;
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		/* Group names as identity providers emit them may hold inner
		 * spaces ("group:customer support"); subjects never do. */
		if (ch == ' ' && group && i > 6 && i < n - 1)
			continue;
		if (ch <= 0x20 || ch == 0x7f || ch == ',')
			return false;
	}
	return !(n == 6 && strncmp(s, "group:", 6) == 0);
}

static bool
approver_same(const char *a, const char *b)
{
	if (strchr(a, '@') != NULL && strchr(b, '@') != NULL &&
	    strncmp(a, "group:", 6) != 0 && strncmp(b, "group:", 6) != 0)
		return strcasecmp(a, b) == 0;
	return strcmp(a, b) == 0;
}

/* An entry of gate.approvers. */
static bool
approver_check(struct jload *ld, const json_t *v, const void *arg)
{
	(void)arg;
	if (!json_is_string(v) || !approver_ok(json_string_value(v), json_string_length(v)))
		return jload_fail(ld, "must be a subject or \"group:NAME\" of 1..%d "
		                  "bytes without commas, and without spaces except inside "
		                  "a group name", OG_CONTRACT_APPROVER_MAX);
	return true;
}

static const struct jload_list approvers_list = {
	"approvers", 1, OG_CONTRACT_APPROVERS_MAX, "approvers", approver_check,
	approver_same, NULL,
};

/* gate.escalate_to: approver entries added when nobody decided in time. */
static const struct jload_list escalate_list = {
	"escalate_to", 0, OG_CONTRACT_APPROVERS_MAX, "approvers", approver_check,
	approver_same, NULL,
};

static bool
compile_decisions(struct jload *ld, struct contract *c, const json_t *gate)
{
	json_t *arr = json_object_get(gate, "allowed_decisions"), *v;
	struct jptr_mark m;
	size_t i;

	if (arr == NULL) {
		c->allow_approve = c->allow_reject = true;
		return true;
	}
	if (!json_is_array(arr) || json_array_size(arr) == 0)
		return jload_fail_at(ld, "allowed_decisions", "must be a non-empty array of "
		                "\"approve\", \"reject\" and \"changes_requested\"");
	m = jptr_push_str(&ld->at, "allowed_decisions");
	json_array_foreach(arr, i, v) {
		struct jptr_mark mi = jptr_push_index(&ld->at, i);
		bool *slot;

		switch (gate_decision_parse(json_string_value(v))) {
		case GATE_APPROVE:
			slot = &c->allow_approve;
			break;
		case GATE_REJECT:
			slot = &c->allow_reject;
			break;
		case GATE_CHANGES_REQUESTED:
			slot = &c->allow_changes;
			break;
		default:
			return jload_fail(ld, "must be \"approve\", \"reject\" or "
			                  "\"changes_requested\"");
		}
		if (*slot)
			return jload_fail(ld, "listed twice");
		*slot = true;
		jptr_pop(&ld->at, mi);
	}
	jptr_pop(&ld->at, m);
	/* a new draft is only worth making if someone may approve it */
	if (c->allow_changes && !c->allow_approve)
		return jload_fail_at(ld, "allowed_decisions", "\"changes_requested\" needs "
		                     "\"approve\" among allowed_decisions");
	return true;
}

/* An entry of gate.editable: a top-level member of the output that the
 * output's schema allows as a string (the approver edits it as text). */
static bool
editable_check(struct jload *ld, const json_t *v, const void *arg)
{
	const struct schema *output = arg;
	char ptr[OG_CONTRACT_NAME_MAX + 2];

	if (!contract_member_check(ld, v, output, ptr))
		return false;
	if (!schema_allows_string(output, ptr))
		return jload_fail(ld, "names a member the output's schema does not allow as a "
		                  "string: only text can be edited");
	return true;
}

/* Payload members that say where an effect goes: a mail's recipients and a
 * request's URL. Editable only with an allow-list. */
static const char *const recipient_members[] = { "to", "cc", "bcc", "reply_to", NULL };

static bool
is_recipient(const char *name)
{
	size_t i;

	for (i = 0; recipient_members[i] != NULL; i++)
		if (strcmp(recipient_members[i], name) == 0)
			return true;
	return false;
}

/* A domain of mail_domains: lower-case labels of [a-z0-9-] joined by dots. */
static bool
mail_domain_ok(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > 253 || s[0] == '.' || s[n - 1] == '.' || s[0] == '-')
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      (s[i] == '.' && s[i + 1] != '.')))
			return false;
	return strchr(s, '.') != NULL;
}

/* A prefix of url_prefixes: http(s)://host/…, ending in "/", so that
 * "https://crm.example/" never admits "https://crm.example.evil/". */
static bool
url_prefix_ok(const char *s)
{
	size_t n = strlen(s);
	const char *host = strncmp(s, "https://", 8) == 0  ? s + 8
	                   : strncmp(s, "http://", 7) == 0 ? s + 7
	                                                   : NULL;

	return host != NULL && n < 2048 && host[0] != '/' && strchr(host, '/') != NULL &&
	       s[n - 1] == '/' && strpbrk(s, " \t\r\n@\\") == NULL;
}

/* gate.editable_allow: {"<editable member>": {"mail_domains": [...]} or
 * {"url_prefixes": [...]}}. */
static bool
compile_editable_allow(struct jload *ld, struct contract *c, const json_t *gate)
{
	const json_t *allow = json_object_get(gate, "editable_allow"), *e, *list, *v;
	const char *name;
	struct jptr_mark m, me, ml;
	size_t i, k;
	bool mail;

	if (allow == NULL)
		return true;
	if (!json_is_object(allow) || json_object_size(allow) == 0)
		return jload_fail_at(ld, "editable_allow", "must be an object of editable members");
	m = jptr_push_str(&ld->at, "editable_allow");
	json_object_foreach((json_t *)(uintptr_t)allow, name, e) {
		me = jptr_push_str(&ld->at, name);
		if (!contract_is_editable(c, name))
			return jload_fail(ld, "\"%s\" is not a member of gate.editable", name);
		mail = json_object_get(e, "mail_domains") != NULL;
		if (!json_is_object(e) || json_object_size(e) != 1 ||
		    (!mail && json_object_get(e, "url_prefixes") == NULL))
			return jload_fail(ld, "must be {\"mail_domains\": [...]} or "
			                  "{\"url_prefixes\": [...]}");
		list = json_object_get(e, mail ? "mail_domains" : "url_prefixes");
		if (!json_is_array(list) || json_array_size(list) == 0 ||
		    json_array_size(list) > OG_CONTRACT_ALLOWED_MAX)
			return jload_fail_at(ld, mail ? "mail_domains" : "url_prefixes",
			                     "must be an array of 1..%d entries",
			                     OG_CONTRACT_ALLOWED_MAX);
		ml = jptr_push_str(&ld->at, mail ? "mail_domains" : "url_prefixes");
		json_array_foreach(list, i, v) {
			struct jptr_mark mi = jptr_push_index(&ld->at, i);
			const char *t = json_string_value(v);

			if (t == NULL || (mail ? !mail_domain_ok(t) : !url_prefix_ok(t)))
				return jload_fail(ld, mail ? "must be a mail domain in lower case "
				                             "(\"support.example.com\")"
				                           : "must be an http(s) URL prefix ending in "
				                             "\"/\" (\"https://crm.example/contacts/\")");
			for (k = 0; k < i; k++)
				if (strcmp(json_string_value(json_array_get(list, k)), t) == 0)
					return jload_fail(ld, "duplicate of entry %zu", k);
			jptr_pop(&ld->at, mi);
		}
		jptr_pop(&ld->at, ml);
		jptr_pop(&ld->at, me);
	}
	jptr_pop(&ld->at, m);
	c->editable_allow = allow;
	return true;
}

bool
contract_gate_check_editable(struct jload *ld, const struct contract *c)
{
	const json_t *e;
	size_t i, d, k;

	for (i = 0; i < c->gate.neditable; i++) {
		const char *name = c->gate.editable[i];
		bool url = strcmp(name, "url") == 0;

		if (!url && !is_recipient(name))
			continue;
		e = c->editable_allow != NULL ? json_object_get(c->editable_allow, name) : NULL;
		for (d = 0; d < c->ndecls; d++)
			for (k = 0; k < c->decls[d].nfrom; k++) {
				if (strcmp(c->decls[d].from_output[k], name) != 0)
					continue;
				if (json_object_get(e, url ? "url_prefixes" : "mail_domains") != NULL)
					continue;
				return jload_fail_at(ld, "editable", "\"%s\" says where a %s effect goes "
				                     "(effects.types.%s.from_output): it is editable only "
				                     "with gate.editable_allow.%s listing the %s it may "
				                     "go to", name, c->decls[d].type, c->decls[d].type,
				                     name, url ? "url_prefixes" : "mail_domains");
			}
	}
	return true;
}

const char *
contract_edit_refusal(const struct contract *c, const char *name, const json_t *value)
{
	const json_t *e = c->editable_allow != NULL ? json_object_get(c->editable_allow, name)
	                                            : NULL;
	const json_t *domains = json_object_get(e, "mail_domains");
	const json_t *prefixes = json_object_get(e, "url_prefixes"), *v;
	const char *s = json_string_value(value), *at;
	size_t i;

	if (e == NULL)
		return NULL;
	if (s == NULL)
		return "must be text";
	if (domains != NULL) {
		at = strrchr(s, '@');
		if (!payload_mail_address_ok(s) || at == NULL)
			return "must be one mail address";
		json_array_foreach(domains, i, v)
			if (strcasecmp(at + 1, json_string_value(v)) == 0)
				return NULL;
		return "may only be corrected to an address at one of the domains the contract "
		       "allows (gate.editable_allow)";
	}
	json_array_foreach(prefixes, i, v)
		if (strncmp(s, json_string_value(v), json_string_length(v)) == 0 &&
		    strpbrk(s, " \t\r\n") == NULL)
			return NULL;
	return "may only be corrected to a URL under one the contract allows "
	       "(gate.editable_allow)";
}

/* gate.min_approvals: within 1..OG_CONTRACT_QUORUM_MAX and, when every
 * approver entry names one person (no group, whose members are not known
 * here), at most the number of those people. */
static bool
compile_quorum(struct jload *ld, struct contract *c, const json_t *gate)
{
	size_t i, groups = 0;

	if (!jload_int(ld, gate, "min_approvals", 1, OG_CONTRACT_QUORUM_MAX, 1,
	               &c->gate.min_approvals))
		return false;
	if (c->gate.min_approvals == 1)
		return true;
	if (!c->allow_approve)
		return jload_fail_at(ld, "min_approvals", "needs \"approve\" among "
		                     "allowed_decisions");
	for (i = 0; i < c->gate.napprovers; i++)
		if (strncmp(c->gate.approvers[i], "group:", 6) == 0)
			groups++;
	if (groups == 0 && (size_t)c->gate.min_approvals > c->gate.napprovers)
		return jload_fail_at(ld, "min_approvals", "is %d, but approvers names only %zu "
		                     "people (and no group): the run could never be approved",
		                     c->gate.min_approvals, c->gate.napprovers);
	return true;
}

bool
contract_gate_load(struct jload *ld, struct contract *c, const json_t *gate)
{
	const struct jload_list editable_list = {
		"editable", 0, OG_CONTRACT_EDITABLE_MAX, "member names", editable_check, NULL,
		c->schema,
	};
	json_t *v;
	struct jptr_mark m;
	size_t i;

	if (!json_is_object(gate))
		return jload_fail(ld, "must be an object");
	if (!jload_members(ld, gate, gate_members, "unknown gate member"))
		return false;

	c->gate.mode = GATE_APPROVE_BEFORE_ACT;
	if ((v = json_object_get(gate, "mode")) != NULL) {
		int mode = mode_parse(json_string_value(v));

		if (mode < 0)
			return jload_fail_at(ld, "mode", "must be \"approve_before_act\", "
			                "\"act_with_window\" or \"approve_by_exception\"");
		c->gate.mode = (enum gate_mode)mode;
	}

	/* Settings of another mode are refused rather than ignored: someone who
	 * writes window_seconds believes there is a window. */
	if (c->gate.mode == GATE_ACT_WITH_WINDOW) {
		if (json_object_get(gate, "window_seconds") == NULL)
			return jload_fail_at(ld, "window_seconds", "missing (required for "
			                "act_with_window)");
		if (!jload_int(ld, gate, "window_seconds", 1, OG_CONTRACT_WINDOW_MAX, 0,
		             &c->gate.window_seconds))
			return false;
	} else if (json_object_get(gate, "window_seconds") != NULL) {
		return jload_fail_at(ld, "window_seconds", "only applies to act_with_window");
	}

	if (c->gate.mode == GATE_APPROVE_BY_EXCEPTION) {
		v = json_object_get(gate, "auto_when");
		if (v == NULL)
			return jload_fail_at(ld, "auto_when", "missing (required for "
			                "approve_by_exception)");
		if (!json_is_array(v) || json_array_size(v) == 0 ||
		    json_array_size(v) > OG_CONTRACT_RULES_MAX)
			return jload_fail_at(ld, "auto_when", "must be an array of 1..%d rules",
			                OG_CONTRACT_RULES_MAX);
		m = jptr_push_str(&ld->at, "auto_when");
		for (i = 0; i < json_array_size(v); i++) {
			struct jptr_mark mi = jptr_push_index(&ld->at, i);

			if (!compile_rule(ld, c, json_array_get(v, i), &c->rules[i]))
				return false;
			jptr_pop(&ld->at, mi);
		}
		jptr_pop(&ld->at, m);
		c->nrules = json_array_size(v);

		c->gate.sample_rate = 0;
		if ((v = json_object_get(gate, "sample_rate")) != NULL) {
			if (!json_is_number(v) || json_number_value(v) < 0 ||
			    json_number_value(v) > 1)
				return jload_fail_at(ld, "sample_rate", "must be a number from 0 to 1");
			c->gate.sample_rate = json_number_value(v);
		}
	} else {
		if (json_object_get(gate, "auto_when") != NULL)
			return jload_fail_at(ld, "auto_when", "only applies to approve_by_exception");
		if (json_object_get(gate, "sample_rate") != NULL)
			return jload_fail_at(ld, "sample_rate", "only applies to approve_by_exception");
	}

	return jload_strings(ld, gate, &approvers_list, c->gate.approvers, &c->gate.napprovers) &&
	       jload_int(ld, gate, "expires_seconds", OG_CONTRACT_EXPIRES_MIN,
	               OG_CONTRACT_EXPIRES_MAX, OG_CONTRACT_EXPIRES_DEFAULT,
	               &c->gate.expires_seconds) &&
	       compile_decisions(ld, c, gate) &&
	       jload_bool(ld, gate, "separation_of_duties", true, &c->gate.separation_of_duties) &&
	       jload_bool(ld, gate, "requested_by_mail", false, &c->gate.requested_by_mail) &&
	       compile_quorum(ld, c, gate) &&
	       jload_strings(ld, gate, &editable_list, c->gate.editable, &c->gate.neditable) &&
	       compile_editable_allow(ld, c, gate) &&
	       jload_strings(ld, gate, &escalate_list, c->notify.escalate_to,
	                     &c->notify.nescalate) &&
	       contract_notify_load(ld, c, gate);
}


const struct contract_gate *
contract_gate(const struct contract *c)
{
	return &c->gate;
}

OG_NAME_FN(contract_gate_mode_name, enum gate_mode, mode_names, OG_UNKNOWN);

int
contract_repair_attempts(const struct contract *c)
{
	return c->repair_attempts;
}

bool
contract_requester_must_be_person(const struct contract *c)
{
	return c->gate.separation_of_duties || c->gate.requested_by_mail;
}

/* s[0..n) without ASCII spaces and tabs around it. */
static const char *
trim(const char *s, size_t *n)
{
	while (*n > 0 && (*s == ' ' || *s == '\t')) {
		s++;
		(*n)--;
	}
	while (*n > 0 && (s[*n - 1] == ' ' || s[*n - 1] == '\t'))
		(*n)--;
	return s;
}

bool
contract_person(const char *s, char *out)
{
	size_t n = s != NULL ? strlen(s) : 0, i;
	const char *lt;

	out[0] = '\0';
	s = trim(s != NULL ? s : "", &n);
	/* "Display Name <addr>": the address in the last angle brackets */
	if (n > 0 && s[n - 1] == '>') {
		for (lt = s + n - 1; lt > s && *lt != '<'; lt--)
			;
		if (*lt != '<')
			return false;
		n = (size_t)(s + n - 1 - (lt + 1));
		s = trim(lt + 1, &n);
	}
	if (n == 0 || n > OG_MAIL_ADDRESS_MAX)
		return false;
	for (i = 0; i < n; i++)
		out[i] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] - 'A' + 'a' : s[i]);
	out[n] = '\0';
	if (!payload_mail_address_ok(out)) {
		out[0] = '\0';
		return false;
	}
	return true;
}

/* The name a text gives when it names no person: trimmed, ASCII case
 * folded, into out (cut at its size). */
static void
loose_name(const char *s, char *out, size_t len)
{
	size_t n = strlen(s), i;

	s = trim(s, &n);
	for (i = 0; i < n && i + 1 < len; i++)
		out[i] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] - 'A' + 'a' : s[i]);
	out[i] = '\0';
}

bool
contract_is_requester(const char *requested_by, const char *subject)
{
	char r[OG_MAIL_ADDRESS_MAX + 1], p[OG_MAIL_ADDRESS_MAX + 1];
	char rl[OG_FIELD_MAX + 1], pl[OG_FIELD_MAX + 1];
	bool rp, pp;
	char *at;

	if (requested_by == NULL || subject == NULL)
		return false;
	rp = contract_person(requested_by, r);
	pp = contract_person(subject, p);
	if (rp && pp)
		return strcmp(r, p) == 0;
	/* One side names no person (a replay's operator, a sign-in without a
	 * mail address): the same text, or one's name equal to the other's
	 * mailbox, counts as the same person, on the safe side. */
	loose_name(requested_by, rl, sizeof(rl));
	loose_name(subject, pl, sizeof(pl));
	if (rl[0] == '\0' || pl[0] == '\0')
		return false;
	if (strcmp(rl, pl) == 0)
		return true;
	if (rp && (at = strchr(r, '@')) != NULL) {
		*at = '\0';
		return strcmp(r, pl) == 0;
	}
	if (pp && (at = strchr(p, '@')) != NULL) {
		*at = '\0';
		return strcmp(p, rl) == 0;
	}
	return false;
}

bool
contract_decision_allowed(const struct contract *c, const char *decision)
{
	switch (gate_decision_parse(decision)) {
	case GATE_APPROVE:
		return c->allow_approve;
	case GATE_REJECT:
		return c->allow_reject;
	case GATE_CHANGES_REQUESTED:
		return c->allow_changes;
	default:
		return false;
	}
}

json_t *
contract_allowed_decisions(const struct contract *c)
{
	json_t *a = json_array();

	if (a == NULL)
		return NULL;
	if ((c->allow_approve &&
	     json_array_append_new(a, json_string(gate_decision_name(GATE_APPROVE))) != 0) ||
	    (c->allow_reject &&
	     json_array_append_new(a, json_string(gate_decision_name(GATE_REJECT))) != 0) ||
	    (c->allow_changes &&
	     json_array_append_new(a, json_string(gate_decision_name(GATE_CHANGES_REQUESTED))) !=
	         0)) {
		json_decref(a);
		return NULL;
	}
	return a;
}

bool
contract_is_editable(const struct contract *c, const char *name)
{
	size_t i;

	for (i = 0; name != NULL && i < c->gate.neditable; i++)
		if (strcmp(c->gate.editable[i], name) == 0)
			return true;
	return false;
}

bool
contract_approver_matches(const char *approver, const char *subject, const char *groups,
                          char sep)
{
	const char *g, *p, *tok, *end, *next;
	size_t glen;

	if (approver == NULL || subject == NULL || subject[0] == '\0')
		return false;
	if (strncmp(approver, "group:", 6) != 0)
		return approver_same(approver, subject) && strncmp(subject, "group:", 6) != 0;
	g = approver + 6;
	glen = strlen(g);
	if (glen == 0 || groups == NULL || sep == '\0')
		return false;
	/* Items split at sep, each trimmed of spaces and tabs and compared
	 * whole and exactly: "customer support" is not "support", nor is
	 * "Support". */
	for (p = groups;; p = next + 1) {
		next = strchr(p, sep);
		end = next != NULL ? next : p + strlen(p);
		tok = p;
		while (tok < end && (*tok == ' ' || *tok == '\t'))
			tok++;
		while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if ((size_t)(end - tok) == glen && memcmp(tok, g, glen) == 0)
			return true;
		if (next == NULL)
			return false;
	}
}

static bool
rule_holds(const struct rule *r, const json_t *output, const json_t *effect)
{
	const json_t *v = contract_pointer_get(r->on_output ? output : effect, r->rest);
	size_t i;

	if (r->op == OP_EXISTS)
		return (v != NULL) == r->want;
	if (v == NULL)
		return false;
	switch (r->op) {
	case OP_EQ:
		return schema_equal(v, r->value);
	case OP_NE:
		return !schema_equal(v, r->value);
	case OP_IN:
	case OP_NOT_IN:
		for (i = 0; i < json_array_size(r->value); i++)
			if (schema_equal(v, json_array_get(r->value, i)))
				return r->op == OP_IN;
		return r->op == OP_NOT_IN;
	case OP_LT:
		return json_is_number(v) && schema_num_cmp(v, r->value) < 0;
	case OP_LE:
		return json_is_number(v) && schema_num_cmp(v, r->value) <= 0;
	case OP_GT:
		return json_is_number(v) && schema_num_cmp(v, r->value) > 0;
	case OP_GE:
		return json_is_number(v) && schema_num_cmp(v, r->value) >= 0;
	case OP_EXISTS:
		break;
	}
	return false;
}

bool
contract_auto_eligible(const struct contract *c, const json_t *output, const json_t *effect)
{
	size_t i;

	if (c->gate.mode != GATE_APPROVE_BY_EXCEPTION || c->nrules == 0)
		return false;
	for (i = 0; i < c->nrules; i++)
		if (!rule_holds(&c->rules[i], output, effect))
			return false;
	return true;
}

int
contract_sample_draw(double *draw)
{
	unsigned char b[8];
	uint64_t x = 0;
	size_t i;

	if (digest_random(b, sizeof(b)) != 0)
		return -1;
	for (i = 0; i < sizeof(b); i++)
		x = x << 8 | b[i];
	/* 53 bits: exactly representable, so the fraction is < 1. */
	*draw = (double)(x >> 11) / 9007199254740992.0;
	return 0;
}

bool
contract_sampled(const struct contract *c, double draw)
{
	if (c->gate.sample_rate <= 0)
		return false;
	/* a draw that is not one (NaN, out of range) sends the run to a person */
	if (c->gate.sample_rate >= 1 || !(draw >= 0 && draw < 1))
		return true;
	return draw < c->gate.sample_rate;
}

