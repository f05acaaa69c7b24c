/*
 * check_identity.c — who may decide (issue 12): group approvers against
 * AUTH_GROUPS as SSO proxies send them, group names in contracts, and
 * separation of duties needing a named requester. (The separator setting
 * itself: check_config.)
 *
 * The unit part (contract loader, matcher) runs anywhere; the
 * integration part drives the stack `./dev test` starts, through nginx
 * (whose local config maps X-Dev-User / X-Dev-Groups to REMOTE_USER /
 * AUTH_GROUPS verbatim), and is skipped without ONCEGATE_URL. Approval
 * tokens are secrets: messages never show one.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "caps.h"
#include "contract.h"
#include "testlib.h"

#define GROUPS_MAX   64
#define REQUESTER    "support-inbox@workflows.example"

static const char *g_key;
static const char *g_base;

/* ---- the corpus: tests/data/identity/groups.tsv ------------------------- */

struct groups_case {
	bool approve;
	char groups[512];
};

static struct groups_case g_cases[GROUPS_MAX];
static size_t g_ncases;

static FILE *
data_open(const char *rel)
{
	const char *srcdir = getenv("srcdir");
	const char *tries[] = { srcdir, "..", "." , "../.." };
	char path[4096];
	size_t i;
	FILE *f;

	for (i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		if (tries[i] == NULL || tries[i][0] == '\0')
			continue;
		snprintf(path, sizeof(path), "%s/%s", tries[i], rel);
		if ((f = fopen(path, "r")) != NULL)
			return f;
	}
	return NULL;
}

static void
load_groups(void)
{
	FILE *f = data_open("tests/data/identity/groups.tsv");
	char line[1024];

	ck_assert_msg(f != NULL, "cannot open tests/data/identity/groups.tsv");
	g_ncases = 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *tab = strchr(line, '\t'), *o, *i;
		struct groups_case *gc;

		if (line[0] == '#' || tab == NULL)
			continue;
		ck_assert_int_lt(g_ncases, GROUPS_MAX);
		gc = &g_cases[g_ncases++];
		*tab = '\0';
		ck_assert_msg(strcmp(line, "approve") == 0 || strcmp(line, "refuse") == 0,
		              "groups.tsv: %s", line);
		gc->approve = strcmp(line, "approve") == 0;
		line[strcspn(tab + 1, "\n") + (size_t)(tab + 1 - line)] = '\0';
		for (o = gc->groups, i = tab + 1; *i != '\0' && o < gc->groups + sizeof(gc->groups) - 1;) {
			if (i[0] == '\\' && i[1] == 't') {
				*o++ = '\t';
				i += 2;
			} else {
				*o++ = *i++;
			}
		}
		*o = '\0';
	}
	fclose(f);
	ck_assert_msg(g_ncases >= 20, "groups.tsv holds only %zu cases", g_ncases);
}

/* ---- unit: the matcher, the separator setting, group names in contracts -- */

START_TEST(test_matcher_corpus)
{
	size_t i;

	load_groups();
	for (i = 0; i < g_ncases; i++)
		ck_assert_msg(contract_approver_matches("group:support", "bob@example.com",
		                                        g_cases[i].groups, ',') == g_cases[i].approve,
		              "AUTH_GROUPS \"%s\": group:support %s", g_cases[i].groups,
		              g_cases[i].approve ? "must match" : "must not match");
	/* A group whose name has a space is matched whole, trimmed. */
	ck_assert(contract_approver_matches("group:customer support", "bob", "sales, customer support ", ','));
	ck_assert(!contract_approver_matches("group:customer support", "bob", "customer,support", ','));
	ck_assert(!contract_approver_matches("group:customer support", "bob", "customer  support", ','));
	/* Another separator: the items are what lies between it. */
	ck_assert(contract_approver_matches("group:support", "bob", "customer support; support", ';'));
	ck_assert(!contract_approver_matches("group:support", "bob", "customer support,support", ';'));
	ck_assert(contract_approver_matches("group:support", "bob", "sales support", ' '));
	ck_assert(!contract_approver_matches("group:support", "bob", "support", '\0'));
}
END_TEST

/* A contract "t" whose only approver is `approver`: loads or not. */
static bool
contract_with_approver(const char *approver, char *err, size_t errlen)
{
	char dir[] = "/tmp/check_identity.XXXXXX", path[4200];
	struct contract_set *set;
	json_t *doc;
	bool ok;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	doc = json_pack("{s:s, s:{}, s:{s:[s]}, s:{s:[s], s:[s]}}", "name", "t", "schema", "gate",
	                "approvers", approver, "effects", "allowed_types", "t.do",
	                "allowed_targets", "demo_http");
	snprintf(path, sizeof(path), "%s/t.json", dir);
	ck_assert_int_eq(json_dump_file(doc, path, 0), 0);
	json_decref(doc);
	set = contract_load_dir(dir, err, errlen);
	ok = set != NULL;
	contract_set_free(set);
	unlink(path);
	rmdir(dir);
	return ok;
}

START_TEST(test_group_names_in_contracts)
{
	/* an approver entry, whether a contract with it loads */
	static const struct tl_verdict cases[] = {
		{ "group:customer support", true },
		{ "group:Служба поддержки", true },
		{ "group:/support/tier-1", true },
		{ "group: support", false },
		{ "group:support ", false },
		{ "group:a,b", false },
		{ "customer support", false },   /* a subject never has a space */
		{ "group:support\tteam", false },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[512] = "";
		bool loads = contract_with_approver(cases[i].given, err, sizeof(err));

		ck_assert_msg(loads == cases[i].ok, "approver \"%s\": %s (%s)", cases[i].given,
		              loads ? "loaded" : "refused", err);
		if (!loads)
			ck_assert_msg(strstr(err, "/gate/approvers/0") != NULL,
			              "the error does not point at the entry: %s", err);
	}
}
END_TEST

/* Separation of duties compares people: the addr-spec of a mail address,
 * trimmed and case-folded; a name alone is nobody. */
START_TEST(test_person_identities)
{
	static const struct {
		const char *text, *person; /* person NULL: names nobody */
	} people[] = {
		{ "bob@example.com", "bob@example.com" },
		{ "Bob@Example.COM", "bob@example.com" },
		{ "bob@example.com ", "bob@example.com" },
		{ "\t bob@example.com", "bob@example.com" },
		{ "Bob Smith <bob@example.com>", "bob@example.com" },
		{ "\"Smith, Bob\" <Bob@Example.com> ", "bob@example.com" },
		{ "Мария Иванова <maria.ivanova@example.com>", "maria.ivanova@example.com" },
		{ "山田 太郎 < taro.yamada@example.jp >", "taro.yamada@example.jp" },
		{ "[Approve](https://evil.example) <bob@example.com>", "bob@example.com" },
		{ "bob", NULL },
		{ "Bob Smith", NULL },
		{ "n8n:support-inbox", NULL },
		{ "n8n:Поддержка / サポート", NULL },
		{ "bob@", NULL },
		{ "@example.com", NULL },
		{ "<bob@example.com", NULL },
		{ "Bob <bob@example.com> x", NULL },
		{ "bob@example.com, eve@example.com", NULL },
		{ "bob@exa mple.com", NULL },
		{ "мария@пример.рф", NULL },
		{ "", NULL },
		{ "   ", NULL },
		{ NULL, NULL },
	};
	static const struct {
		const char *requested_by, *subject;
		bool same;
	} pairs[] = {
		{ "bob@example.com", "bob@example.com", true },
		{ "Bob Smith <bob@example.com>", "bob@example.com", true },
		{ "bob@example.com ", "BOB@example.com", true },
		{ "bob", "bob@example.com", true },       /* a replay's operator role */
		{ "Bob", "bob@example.com", true },
		{ "og_operator", "olga.petrova@example.com", false },
		{ "bob@example.com", "bob", true },       /* a sign-in without an address */
		{ "bob@example.com", "bobby@example.com", false },
		{ "bob@example.com", "bob@example.org", false },
		{ "Мария Иванова <maria.ivanova@example.com>", "maria.ivanova@example.com", true },
		{ "Мария Иванова <maria.ivanova@example.com>", "Мария Иванова", false },
		{ NULL, "bob@example.com", false },
		{ "bob@example.com", NULL, false },
	};
	char out[OG_MAIL_ADDRESS_MAX + 1];
	size_t i;

	for (i = 0; i < sizeof(people) / sizeof(people[0]); i++) {
		bool is = contract_person(people[i].text, out);

		ck_assert_msg(is == (people[i].person != NULL) &&
		              strcmp(out, people[i].person ? people[i].person : "") == 0,
		              "\"%s\": %s \"%s\", want %s", people[i].text ? people[i].text : "(null)",
		              is ? "person" : "nobody", out,
		              people[i].person ? people[i].person : "nobody");
	}
	for (i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
		ck_assert_msg(contract_is_requester(pairs[i].requested_by, pairs[i].subject) ==
		                  pairs[i].same,
		              "requested_by \"%s\", subject \"%s\": want %s",
		              pairs[i].requested_by ? pairs[i].requested_by : "(null)",
		              pairs[i].subject ? pairs[i].subject : "(null)",
		              pairs[i].same ? "the requester" : "someone else");
}
END_TEST

/* ---- integration ------------------------------------------------------- */

static void
claim(const char *key, struct tl_claimed *c)
{
	json_t *b = json_pack("{s:s, s:{s:s}}", "key", key, "payload", "ticket", key);

	tl_claim_body(g_key, b, c);
	json_decref(b);
}

/* A support_reply (or crm_tag) output; requested_by NULL: not sent. */
static void
post_output(const char *key, const struct tl_claimed *c, bool crm, const char *requested_by,
            struct tl_resp *r)
{
	char *path = tl_run_path(key, "/output");
	json_t *b;

	if (crm)
		b = json_pack("{s:s, s:I, s:s, s:{s:s, s:f, s:s}, s:{s:s, s:s, s:{s:s}}}",
		              "lease_owner", c->owner, "version", (json_int_t)c->version, "contract",
		              "crm_tag", "output", "tag", "lead", "confidence", 0.97, "reason",
		              "Спросил цену дважды; 見積もりを二回依頼", "effect", "type", "crm.tag",
		              "target", "demo_http", "payload", "contact_id", key);
	else
		b = json_pack("{s:s, s:I, s:s, s:{s:s, s:s, s:s, s:f},"
		              " s:{s:s, s:s, s:{s:s, s:i}}, s:s}",
		              "lease_owner", c->owner, "version", (json_int_t)c->version, "contract",
		              "support_reply", "output", "subject", "Re: заказ 42 — 配送について",
		              "body", "Здравствуйте! Ваш заказ отправлен. ご注文は金曜日に届きます。"
		              " شكرا لصبركم. תודה על הסבלנות 🙏", "tone", "friendly", "confidence",
		              0.8, "effect", "type", "email.send", "target", "demo_smtp", "payload",
		              "to", "customer@example.com", "ticket", 42, "source_url",
		              "https://crm.example/ticket/42");
	ck_assert_ptr_nonnull(b);
	if (requested_by != NULL)
		json_object_set_new(b, "requested_by", json_string(requested_by));
	tl_post_json(path, g_key, b, r);
	json_decref(b);
	free(path);
}

struct gated {
	char key[160];
	char token[64];
	char approval_id[64];
};

/* A support_reply run awaiting group support, asked for by requester. */
static void
make_gated_by(const char *test, const char *requester, struct gated *g)
{
	struct tl_claimed c;
	struct tl_resp r;
	json_t *a;
	const char *url;

	memset(g, 0, sizeof(*g));
	snprintf(g->key, sizeof(g->key), "%s-%s", tl_run, test);
	claim(g->key, &c);
	post_output(g->key, &c, false, requester, &r);
	ck_assert_msg(r.status == 202, "%s: HTTP %ld: %.1000s", r.what, r.status, r.body);
	a = json_array_get(json_object_get(r.json, "approvals"), 0);
	url = tl_jstr(a, "url");
	ck_assert_msg(url != NULL && strstr(url, "/approve/") != NULL, "no approval url: %s", r.body);
	snprintf(g->token, sizeof(g->token), "%s", strstr(url, "/approve/") + 9);
	snprintf(g->approval_id, sizeof(g->approval_id), "%s", tl_jstr(a, "approval_id"));
	tl_resp_free(&r);
}

static void
make_gated(const char *test, struct gated *g)
{
	make_gated_by(test, REQUESTER, g);
}

/* GET or POST (form != NULL) /approve/TOKEN as user with AUTH_GROUPS groups. */
static void
page(const char *token, const char *user, const char *groups, const char *form,
     struct tl_resp *r, char **hdrs)
{
	char path[128], hu[256], hg[1024], ho[512];
	const char *h[6] = { hu, hg, NULL, NULL, NULL, NULL };

	snprintf(path, sizeof(path), "/approve/%s", token);
	snprintf(hu, sizeof(hu), "X-Dev-User: %s", user);
	snprintf(hg, sizeof(hg), "X-Dev-Groups: %s", groups);
	if (form != NULL) {
		snprintf(ho, sizeof(ho), "Origin: %s", g_base);
		h[2] = ho;
		h[3] = "Sec-Fetch-Site: same-origin";
	}
	tl_http_hdrs(form != NULL ? "POST" : "GET", path, h,
	             form != NULL ? "application/x-www-form-urlencoded" : NULL, form,
	             form != NULL ? strlen(form) : 0, r, hdrs);
}

static bool
has_form(const struct tl_resp *r)
{
	return strstr(r->body, "<form") != NULL || strstr(r->body, "name=\"csrf\"") != NULL ||
	       strstr(r->body, "name=\"decision\"") != NULL;
}

/* Every "refuse" value of the corpus: the card without a form, a POST with
 * a valid form token for that person refused 403, nothing changed. Every
 * "approve" value: the form, and the decision goes through. */
START_TEST(test_groups_on_the_page)
{
	PGconn *c = tl_pg_connect();
	struct gated g;
	size_t i;
	char *before;

	load_groups();
	make_gated("groups-refused", &g);
	before = tl_run_snapshot(c, g.key);
	for (i = 0; i < g_ncases; i++) {
		struct tl_resp r;
		char *csrf, *form;

		if (g_cases[i].approve)
			continue;
		page(g.token, "dana@example.com", g_cases[i].groups, NULL, &r, NULL);
		ck_assert_msg(r.status == 403 && !has_form(&r) &&
		              strstr(r.body, "You are not among the approvers") != NULL &&
		              strstr(r.body, "customer@example.com") == NULL &&
		              strstr(r.body, "Re: заказ 42") == NULL,
		              "AUTH_GROUPS \"%s\": HTTP %ld, the page must say the link is not "
		              "hers and show nothing of the request: %.3000s", g_cases[i].groups,
		              r.status, r.body);
		tl_resp_free(&r);
		csrf = tl_csrf_for(g.approval_id, "dana@example.com");
		form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
		page(g.token, "dana@example.com", g_cases[i].groups, form, &r, NULL);
		ck_assert_msg(r.status == 403 && !has_form(&r) &&
		              strstr(r.body, "not among the approvers") != NULL,
		              "AUTH_GROUPS \"%s\": a POST must be refused 403, got %ld: %.2000s",
		              g_cases[i].groups, r.status, r.body);
		tl_resp_free(&r);
		free(form);
		free(csrf);
	}
	tl_expect_run_unchanged(c, g.key, before, "people outside group support");
	free(before);

	for (i = 0; i < g_ncases; i++) {
		struct tl_resp r;
		char name[64], *csrf, *form, *hdrs = NULL;
		const char *p[1];

		if (!g_cases[i].approve)
			continue;
		snprintf(name, sizeof(name), "groups-ok-%zu", i);
		make_gated(name, &g);
		page(g.token, "sam@example.com", g_cases[i].groups, NULL, &r, NULL);
		ck_assert_msg(r.status == 200 && has_form(&r) &&
		              strstr(r.body, "value=\"approve\"") != NULL &&
		              strstr(r.body, "You cannot decide") == NULL,
		              "AUTH_GROUPS \"%s\": the page must offer the decision: %.3000s",
		              g_cases[i].groups, r.body);
		tl_resp_free(&r);
		csrf = tl_csrf_for(g.approval_id, "sam@example.com");
		form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
		page(g.token, "sam@example.com", g_cases[i].groups, form, &r, &hdrs);
		ck_assert_msg(r.status == 303, "AUTH_GROUPS \"%s\": approve: HTTP %ld: %.2000s",
		              g_cases[i].groups, r.status, r.body);
		p[0] = g.key;
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE "
		                                "idempotency_key = $1 AND state = 'approved' AND "
		                                "decided_by = 'sam@example.com'", 1, p), 1);
		tl_resp_free(&r);
		free(hdrs);
		free(form);
		free(csrf);
	}
	PQfinish(c);
}
END_TEST

/* An output with this requested_by is refused: 422 with code naming the
 * field and saying words, the run as before, one log line with the code
 * as its reason. */
static void
expect_requester_refused(PGconn *c, const char *key, const struct tl_claimed *cl, bool crm,
                         const char *requested_by, const char *before, const char *code,
                         const char *words)
{
	struct tl_resp r;
	long off = tl_log_offset();
	json_t *lines;

	post_output(key, cl, crm, requested_by, &r);
	ck_assert_msg(r.status == 422 && tl_jstr(r.json, "error") != NULL &&
	              strcmp(tl_jstr(r.json, "error"), code) == 0 &&
	              tl_jstr(r.json, "field") != NULL &&
	              strcmp(tl_jstr(r.json, "field"), "requested_by") == 0 &&
	              strstr(r.body, words) != NULL,
	              "%s requested_by \"%s\": want 422 %s naming the field, got %ld: %.1000s",
	              crm ? "crm_tag" : "support_reply", requested_by ? requested_by : "(absent)",
	              code, r.status, r.body);
	tl_resp_free(&r);
	tl_expect_run_unchanged(c, key, before, "an output the requester check refuses");
	lines = tl_log_collect(off, tl_log_is_key, key, 1);
	ck_assert_msg(json_array_size(lines) == 1 &&
	              tl_jstr(json_array_get(lines, 0), "reason") != NULL &&
	              strcmp(tl_jstr(json_array_get(lines, 0), "reason"), code) == 0,
	              "one log line with reason %s", code);
	json_decref(lines);
}

/* Separation of duties: an output without a requester is a 422 naming
 * requested_by, and nothing about the run changes — also for a contract
 * whose rules would have approved it without a person. */
START_TEST(test_sod_needs_requester)
{
	static const char *const missing[] = { NULL, "", "   " };
	PGconn *c = tl_pg_connect();
	size_t i;
	int crm;

	for (crm = 0; crm <= 1; crm++) {
		struct tl_claimed cl;
		struct tl_resp r;
		char key[160], *before;
		const char *p[1] = { key };

		snprintf(key, sizeof(key), "%s-sod-%s", tl_run, crm ? "crm" : "reply");
		claim(key, &cl);
		before = tl_run_snapshot(c, key);
		for (i = 0; i < sizeof(missing) / sizeof(missing[0]); i++)
			expect_requester_refused(c, key, &cl, crm, missing[i], before,
			                         "requested_by_required", "separation of duties");
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE "
		                                "idempotency_key = $1", 1, p), 0);
		/* Named, it goes through: to a person, or by the contract's rules. */
		post_output(key, &cl, crm, "Поддержка / サポート <support@workflows.example>", &r);
		ck_assert_msg(r.status == 202 || r.status == 200, "with requested_by: HTTP %ld: %.1000s",
		              r.status, r.body);
		tl_resp_free(&r);
		free(before);
	}
	PQfinish(c);
}
END_TEST

/* A challenge made before outputs had to name a requester (requested_by
 * NULL in its row) under separation of duties: nobody can show they did
 * not request it, so it can be rejected, never approved — on the page (no
 * Approve button) and in the POST. */
START_TEST(test_sod_unknown_requester)
{
	PGconn *c = tl_pg_connect();
	struct gated g;
	struct tl_resp r;
	char *csrf, *form, *before;
	const char *p[1];

	make_gated("sod-unknown", &g);
	p[0] = g.approval_id;
	ck_assert_int_eq(tl_pg_exec(c, "UPDATE approvals SET requested_by = NULL WHERE id = $1", 1,
	                            p), 1);
	page(g.token, "sam@example.com", "customer support,support", NULL, &r, NULL);
	ck_assert_msg(r.status == 200 && has_form(&r) && strstr(r.body, "value=\"reject\"") &&
	              !strstr(r.body, "value=\"approve\""),
	              "the page must offer Reject only: %.3000s", r.body);
	tl_resp_free(&r);
	before = tl_run_snapshot(c, g.key);
	csrf = tl_csrf_for(g.approval_id, "sam@example.com");
	form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
	page(g.token, "sam@example.com", "support", form, &r, NULL);
	ck_assert_msg(r.status == 403 && strstr(r.body, "can only be rejected") != NULL,
	              "approve without a known requester: HTTP %ld: %.2000s", r.status, r.body);
	tl_resp_free(&r);
	free(form);
	tl_expect_run_unchanged(c, g.key, before, "approving a challenge with no requester");
	form = tl_form("decision", "reject", "csrf", csrf, "reason", "Кто это запросил? 誰の依頼?",
	               (char *)NULL);
	page(g.token, "sam@example.com", "support", form, &r, NULL);
	ck_assert_msg(r.status == 303, "reject: HTTP %ld: %.2000s", r.status, r.body);
	tl_resp_free(&r);
	p[0] = g.key;
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE "
	                                "idempotency_key = $1 AND state = 'rejected'", 1, p), 1);
	free(form);
	free(csrf);
	free(before);
	PQfinish(c);
}
END_TEST

/* Under separation of duties a requester that names no person is refused
 * (422 requested_by_not_a_person, the run unchanged, one log line), for
 * both shipped contracts. */
START_TEST(test_sod_requester_not_a_person)
{
	static const char *const nobody[] = { "bob", "Bob Smith", "n8n:support-inbox",
		                              "n8n:Поддержка / サポート", "bob@",
		                              "<bob@example.com", "bob@example.com, eve@example.com" };
	PGconn *c = tl_pg_connect();
	size_t i;
	int crm;

	for (crm = 0; crm <= 1; crm++) {
		struct tl_claimed cl;
		char key[160], *before;

		snprintf(key, sizeof(key), "%s-nobody-%s", tl_run, crm ? "crm" : "reply");
		claim(key, &cl);
		before = tl_run_snapshot(c, key);
		for (i = 0; i < sizeof(nobody) / sizeof(nobody[0]); i++)
			expect_requester_refused(c, key, &cl, crm, nobody[i], before,
			                         "requested_by_not_a_person", "mail address");
		free(before);
	}
	PQfinish(c);
}
END_TEST

/* The requester as a workflow may spell them — with a name, in another
 * case, with a trailing space — cannot approve as the person signed in;
 * someone else of the group can. */
START_TEST(test_sod_requester_spellings)
{
	static const char *const spellings[] = { "Bob Smith <bob@example.com>", "bob@example.com ",
		                                 "BOB@Example.com",
		                                 "Боб Смит <Bob@EXAMPLE.com>" };
	PGconn *c = tl_pg_connect();
	size_t i;

	for (i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
		struct gated g;
		struct tl_resp r;
		char name[32], *csrf, *form, *before;
		const char *p[1];

		snprintf(name, sizeof(name), "spelling-%zu", i);
		make_gated_by(name, spellings[i], &g);
		page(g.token, "bob@example.com", "support", NULL, &r, NULL);
		ck_assert_msg(r.status == 403 && !has_form(&r) &&
		              strstr(r.body, "You requested this action") != NULL &&
		              strstr(r.body, "customer@example.com") == NULL,
		              "requested_by \"%s\": bob's page: HTTP %ld: %.2000s", spellings[i],
		              r.status, r.body);
		tl_resp_free(&r);
		before = tl_run_snapshot(c, g.key);
		csrf = tl_csrf_for(g.approval_id, "bob@example.com");
		form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
		page(g.token, "bob@example.com", "support", form, &r, NULL);
		ck_assert_msg(r.status == 403 && strstr(r.body, "You requested this action") != NULL,
		              "requested_by \"%s\": bob approving: HTTP %ld: %.2000s", spellings[i],
		              r.status, r.body);
		tl_resp_free(&r);
		tl_expect_run_unchanged(c, g.key, before, "the requester approving their request");
		free(form);
		free(csrf);
		csrf = tl_csrf_for(g.approval_id, "sam@example.com");
		form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
		page(g.token, "sam@example.com", "support", form, &r, NULL);
		ck_assert_msg(r.status == 303, "sam approving: HTTP %ld: %.2000s", r.status, r.body);
		tl_resp_free(&r);
		p[0] = g.key;
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE "
		                                "idempotency_key = $1 AND state = 'approved' AND "
		                                "decided_by = 'sam@example.com'", 1, p), 1);
		free(form);
		free(csrf);
		free(before);
	}
	PQfinish(c);
}
END_TEST

static Suite *
identity_suite(bool stack)
{
	Suite *s = suite_create("identity");
	TCase *tc = tl_tcase(s, "unit", 0);

	TL_TESTS(tc, test_matcher_corpus, test_group_names_in_contracts, test_person_identities);
	if (stack) {
		tc = tl_tcase(s, "stack", 120);
		TL_TESTS(tc, test_groups_on_the_page, test_sod_needs_requester,
		         test_sod_unknown_requester, test_sod_requester_not_a_person,
		         test_sod_requester_spellings);
	}
	return s;
}

int
main(void)
{
	bool stack = tl_env("ONCEGATE_URL") != NULL;
	int rc;

	/* the corpus tests run without the stack too */
	if (!stack)
		printf("check_identity: ONCEGATE_URL is not set: the stack tests are skipped.\n");
	else if ((rc = tl_suite_begin("check_identity", "id", "ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_LOG")) != 0)
		return rc;
	g_base = tl_env("ONCEGATE_URL");
	g_key = tl_env("ONCEGATE_API_KEY");
	return tl_suite_end(tl_suite_run(identity_suite(stack), false));
}
