/*
 * api_lists.c — the lists of the API: GET /v1/runs and GET /v1/approvals.
 *
 * A client sees its own rows, oldest first, a page at a time. The query
 * string filters (state, since, contract) and pages: limit (1-1000,
 * default 100) and cursor, the next_cursor of the page before. The cursor
 * is the last row's place — its created_at to the microsecond and its key
 * (or challenge id) — so paging is by key set: rows created while a client
 * pages come after the ones it has not reached yet or not at all, never
 * twice and never in place of another. A cursor is opaque to the caller:
 * "MICROSECONDS.HEX" of the key's bytes.
 *
 * And GET /v1/contracts: the contracts this responder loaded, each with
 * the effect types and targets it allows — what a workflow tool offers as
 * choices (the n8n node's Contract, Effect Type and Effect Target).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "contract.h"
#include "digest.h"
#include "gate.h"
#include "ledger.h"
#include "listq.h"
#include "schema_format.h"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX     1000
/* A cursor: the microseconds, '.', two hex digits a byte of the key. */
#define LIST_CURSOR_MAX    (24 + 2 * (OG_KEY_MAX_CHARS * 4) + 1)

struct list_params {
	struct og_list_query q;
	char state[32], since[64], contract[OG_CONTRACT_NAME_MAX + 1];
	char cursor[LIST_CURSOR_MAX + 1];
	char after[OG_KEY_MAX_CHARS * 4 + 1];
};

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The cursor's two halves into p->q; false when it is not one of ours. */
static bool
cursor_read(struct list_params *p)
{
	const char *s = p->cursor, *dot = strchr(s, '.');
	char *end;
	size_t i, n;

	if (dot == NULL || dot == s || (size_t)(dot - s) > 19)
		return false;
	p->q.after_us = strtoll(s, &end, 10);
	if (end != dot || p->q.after_us < 0)
		return false;
	n = strlen(dot + 1);
	if (n == 0 || n % 2 != 0 || n / 2 >= sizeof(p->after))
		return false;
	for (i = 0; i < n / 2; i++) {
		int hi = hexval(dot[1 + 2 * i]), lo = hexval(dot[2 + 2 * i]);

		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
			return false;
		p->after[i] = (char)(hi << 4 | lo);
	}
	p->after[n / 2] = '\0';
	p->q.after_key = p->after;
	return true;
}

/* One query parameter into out (outlen bytes): 1 present, 0 absent, -1
 * refused (the answer given). */
static int
param(struct api_call *c, const char *query, const char *name, char *out, size_t outlen)
{
	long n = query != NULL ? http_form_get(query, strlen(query), name, out, outlen) : -1;
	char msg[160];

	if (n == -1)
		return 0;
	if (n > 0 && (size_t)n == strlen(out) && api_printable(out))
		return 1;
	snprintf(msg, sizeof(msg), "the query parameter %s is empty, too long or not printable text",
	         name);
	api_reject(c, "invalid_field", msg, name);
	return -1;
}

/* Is every parameter of query one of the list's (state, since, contract,
 * limit, cursor)? A name the list does not know is refused, not ignored:
 * a misspelt filter ("stat=pending") would otherwise list everything. */
static bool
params_known(struct api_call *c, const char *query)
{
	static const char *const known[] = { "state", "since", "contract", "limit", "cursor",
		                             NULL };
	const char *part = query;

	while (part != NULL && *part != '\0') {
		size_t n = strcspn(part, "=&"), i;

		for (i = 0; known[i] != NULL; i++)
			if (strlen(known[i]) == n && strncmp(known[i], part, n) == 0)
				break;
		if (known[i] == NULL && n > 0) {
			api_reject(c, "invalid_field", "a query parameter this list does not take: it "
			           "takes state, since, contract, limit and cursor", NULL);
			return false;
		}
		part = strchr(part, '&');
		part = part != NULL ? part + 1 : NULL;
	}
	return true;
}

/* The query string read and checked into p; false when it is refused. */
static bool
params_read(struct api_call *c, bool (*is_state)(const char *name), struct list_params *p)
{
	const char *query = strchr(c->req->uri, '?');
	char limit[16];
	int r;

	memset(p, 0, sizeof(*p));
	p->q.client_id = c->client.id;
	p->q.limit = LIST_LIMIT_DEFAULT;
	query = query != NULL ? query + 1 : NULL;
	if (!params_known(c, query))
		return false;
	if ((r = param(c, query, "state", p->state, sizeof(p->state))) < 0)
		return false;
	if (r > 0) {
		if (!is_state(p->state)) {
			api_reject(c, "invalid_field", "state is not one of this list's states", "state");
			return false;
		}
		p->q.state = p->state;
	}
	if ((r = param(c, query, "since", p->since, sizeof(p->since))) < 0)
		return false;
	if (r > 0) {
		if (!schema_format_check(SCHEMA_FORMAT_DATE_TIME, p->since, strlen(p->since))) {
			api_reject(c, "invalid_field", "since must be an RFC 3339 date-time "
			           "(2026-12-01T08:00:00Z)", "since");
			return false;
		}
		p->q.since = p->since;
	}
	if ((r = param(c, query, "contract", p->contract, sizeof(p->contract))) < 0)
		return false;
	if (r > 0) {
		/* a contract's name is [a-z0-9_]{1,64} (contract.h): anything else
		 * names none, and is refused rather than listed as nothing */
		if (strspn(p->contract, "abcdefghijklmnopqrstuvwxyz0123456789_") !=
		    strlen(p->contract)) {
			api_reject(c, "invalid_field", "contract must be a contract's name "
			           "(a-z, 0-9 and _)", "contract");
			return false;
		}
		p->q.contract = p->contract;
	}
	if ((r = param(c, query, "limit", limit, sizeof(limit))) < 0)
		return false;
	if (r > 0) {
		char *end;
		long v = strtol(limit, &end, 10);

		if (*end != '\0' || v < 1 || v > LIST_LIMIT_MAX) {
			api_reject(c, "invalid_field", "limit must be a whole number from 1 to 1000",
			           "limit");
			return false;
		}
		p->q.limit = (int)v;
	}
	if ((r = param(c, query, "cursor", p->cursor, sizeof(p->cursor))) < 0)
		return false;
	if (r > 0 && !cursor_read(p)) {
		api_reject(c, "invalid_field", "cursor is not a next_cursor this API gave", "cursor");
		return false;
	}
	return true;
}

/* {member: rows, next_cursor}: the cursor from the last row when the page
 * is full (a shorter page is the last); at_us taken out of every row. */
static void
answer(struct api_call *c, const char *member, json_t *rows, const char *id_member, int limit)
{
	json_t *row, *doc;
	size_t i;
	char *cursor = NULL;

	if (json_array_size(rows) == (size_t)limit) {
		const json_t *last = json_array_get(rows, json_array_size(rows) - 1);
		const char *id = json_string_value(json_object_get(last, id_member));
		size_t n = strlen(id);

		cursor = malloc(24 + 2 * n + 1);
		if (cursor == NULL) {
			json_decref(rows);
			api_internal(c, "out of memory");
			return;
		}
		snprintf(cursor, 24, "%lld.",
		         (long long)json_integer_value(json_object_get(last, "at_us")));
		digest_hex((const unsigned char *)id, n, cursor + strlen(cursor));
	}
	json_array_foreach(rows, i, row)
		json_object_del(row, "at_us");
	doc = json_pack("{s:o, s:o}", member, rows, "next_cursor",
	                cursor != NULL ? json_string(cursor) : json_null());
	free(cursor);
	if (doc == NULL) {
		api_internal(c, "out of memory");
		return;
	}
	http_json(c->resp, 200, doc);
}

/* A list of the API: which states its filter takes (the owner's names),
 * the owner's page read, and how its answer names the rows. */
struct list_kind {
	bool (*is_state)(const char *name);
	enum og_rc (*read)(struct db *db, const struct og_list_query *q, json_t **out);
	const char *member, *id_member;
};

static bool
run_state_is(const char *name)
{
	return ledger_state_parse(name) >= 0;
}

static bool
approval_state_is(const char *name)
{
	int s;

	for (s = APPROVAL_PENDING; s <= APPROVAL_EXPIRED; s++)
		if (strcmp(gate_state_name((enum approval_state)s), name) == 0)
			return true;
	return false;
}

static void
list_page(struct api_call *c, const struct list_kind *k)
{
	struct list_params p;
	json_t *rows = NULL;
	enum og_rc rc;

	if (!params_read(c, k->is_state, &p))
		return;
	if ((rc = k->read(c->ctx->db, &p.q, &rows)) != OG_OK) {
		api_fail(c, rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR);
		return;
	}
	answer(c, k->member, rows, k->id_member, p.q.limit);
}

void
api_runs_list(struct api_call *c)
{
	static const struct list_kind runs = { run_state_is, ledger_list, "runs", "key" };

	list_page(c, &runs);
}

void
api_approvals_list(struct api_call *c)
{
	static const struct list_kind approvals = { approval_state_is, gate_list_page,
		                                    "approvals", "approval_id" };

	list_page(c, &approvals);
}

/* One contract as the list shows it: {name, description?, gate_mode,
 * effect_types, effect_targets, allowed_decisions, editable}. */
static json_t *
contract_entry(const struct contract *k)
{
	const json_t *doc = contract_doc(k), *effects = json_object_get(doc, "effects");
	const char *description = json_string_value(json_object_get(doc, "description"));
	json_t *editable = json_array(), *e;
	size_t i;

	for (i = 0; editable != NULL && i < contract_gate(k)->neditable; i++)
		json_array_append_new(editable, json_string(contract_gate(k)->editable[i]));
	e = json_pack("{s:s, s:s, s:O, s:O, s:o, s:o}", "name", contract_name(k), "gate_mode",
	              contract_gate_mode_name(contract_gate(k)->mode), "effect_types",
	              json_object_get(effects, "allowed_types"), "effect_targets",
	              json_object_get(effects, "allowed_targets"), "allowed_decisions",
	              contract_allowed_decisions(k), "editable", editable);
	if (e != NULL && description != NULL)
		json_object_set_new(e, "description", json_string(description));
	return e;
}

void
api_contracts_list(struct api_call *c)
{
	const struct contract_set *set = c->ctx->contracts;
	json_t *list = json_array(), *doc;
	size_t i;

	for (i = 0; list != NULL && set != NULL && i < contract_count(set); i++) {
		json_t *e = contract_entry(contract_at(set, i));

		if (e == NULL || json_array_append_new(list, e) != 0) {
			json_decref(list);
			list = NULL;
		}
	}
	doc = list != NULL ? json_pack("{s:o}", "contracts", list) : NULL;
	if (doc == NULL) {
		api_internal(c, "out of memory");
		return;
	}
	http_json(c->resp, 200, doc);
}
