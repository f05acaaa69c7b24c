/*
 * pagelib.c — shared by the suites that read approval pages as a browser
 * does and follow an effect to the loopback SMTP sink (check_inbox,
 * check_notify): requests with the identity headers an SSO proxy sends,
 * pages parsed by libxml2's HTML parser and queried by XPath, a decision
 * posted with the card's CSRF value, a dispatcher of the suite's own
 * pointed at the loopback providers, the sink's record MIME-decoded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <check.h>
#include <jansson.h>
#include <libxml/HTMLparser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>

#include "dispatchlib.h"
#include "pagelib.h"
#include "testlib.h"

/* nginx's POST limit answers 429: waited out this many times */
#define RATE_RETRIES 8

/* ---- the API ------------------------------------------------------------------ */

void
pl_claim_and_output(const char *run, const char *bearer, const char *key, const char *contract,
                    json_t *output, json_t *effect, const char *requested_by, struct tl_resp *r)
{
	json_t *body = json_pack("{s:s, s:{s:s}, s:i}", "key", key, "payload", "run", run,
	                         "lease_seconds", 60);
	char owner[64], *path;
	long long version = 0;
	struct tl_resp c;

	tl_post_json("/v1/runs", bearer, body, &c);
	json_decref(body);
	ASSERT_STATUS(&c, 201);
	ck_assert_msg(tl_jstr(c.json, "lease_owner") && tl_jint(c.json, "version", &version),
	              "claim answer: %s", c.body);
	snprintf(owner, sizeof(owner), "%s", tl_jstr(c.json, "lease_owner"));
	tl_resp_free(&c);
	body = json_pack("{s:s, s:I, s:s, s:o, s:o, s:{s:s, s:s, s:s}, s:s, s:s}", "lease_owner",
	                 owner, "version", (json_int_t)version, "contract", contract, "output", output,
	                 "effect", effect, "model", "provider", "openai-compatible", "name",
	                 "qwen2.5-7b-instruct", "revision", "2024-09-19", "source_url",
	                 "https://crm.example/ticket/48213", "requested_by", requested_by);
	path = tl_run_path(key, "/output");
	tl_post_json(path, bearer, body, r);
	json_decref(body);
	free(path);
}

/* ---- the pages --------------------------------------------------------------- */

/* GET (form NULL) or POST of path as user in groups (NULL: header not
 * sent), from our own origin; the answer's headers in *hdrs when not NULL.
 * A 429 of nginx's POST limit is waited out. */
void
pl_page_request(const char *path, const char *user, const char *groups, const char *form,
             const char *origin, struct tl_resp *r, char **hdrs)
{
	char hu[256], hg[1024], ho[256];
	const char *h[6];
	int n = 0, attempt;

	if (user != NULL) {
		snprintf(hu, sizeof(hu), "X-Dev-User: %s", user);
		h[n++] = hu;
	}
	if (groups != NULL) {
		snprintf(hg, sizeof(hg), "X-Dev-Groups: %s", groups);
		h[n++] = hg;
	}
	if (form != NULL) {
		snprintf(ho, sizeof(ho), "Origin: %s", origin ? origin : tl_env("ONCEGATE_URL"));
		h[n++] = ho;
		if (origin == NULL)
			h[n++] = "Sec-Fetch-Site: same-origin";
	}
	h[n] = NULL;
	for (attempt = 0;; attempt++) {
		if (hdrs != NULL)
			*hdrs = NULL;
		if (form != NULL)
			tl_http_hdrs("POST", path, h, "application/x-www-form-urlencoded", form,
			             strlen(form), r, hdrs);
		else
			tl_http_hdrs("GET", path, h, NULL, NULL, 0, r, hdrs);
		if (r->status != 429 || attempt >= RATE_RETRIES)
			return;
		tl_resp_free(r);
		if (hdrs != NULL)
			free(*hdrs);
		tl_sleep_ms(1000);
	}
}


void
pl_doc_get(const char *path, const char *user, const char *groups, struct pl_doc *d)
{
	memset(d, 0, sizeof(*d));
	pl_page_request(path, user, groups, NULL, NULL, &d->r, NULL);
	ck_assert_msg(strncasecmp(d->r.content_type, "text/html", 9) == 0,
	              "%s: not a page (%s, HTTP %ld): %.500s", d->r.what, d->r.content_type,
	              d->r.status, d->r.body);
	d->html = htmlReadMemory(d->r.body, (int)d->r.body_len, NULL, "UTF-8",
	                         HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET);
	ck_assert_ptr_nonnull(d->html);
	d->xp = xmlXPathNewContext(d->html);
	ck_assert_ptr_nonnull(d->xp);
}

void
pl_doc_free(struct pl_doc *d)
{
	if (d->xp != NULL)
		xmlXPathFreeContext(d->xp);
	if (d->html != NULL)
		xmlFreeDoc(d->html);
	tl_resp_free(&d->r);
	memset(d, 0, sizeof(*d));
}

/* The text of every node the XPath expression selects, as a JSON array. */
json_t *
pl_doc_texts(const struct pl_doc *d, const char *expr)
{
	xmlXPathObjectPtr o = xmlXPathEvalExpression((const xmlChar *)expr, d->xp);
	json_t *out = json_array();
	int i;

	ck_assert_msg(o != NULL, "XPath %s", expr);
	for (i = 0; o->nodesetval != NULL && i < o->nodesetval->nodeNr; i++) {
		xmlChar *t = xmlNodeGetContent(o->nodesetval->nodeTab[i]);

		json_array_append_new(out, json_string(t != NULL ? (const char *)t : ""));
		xmlFree(t);
	}
	xmlXPathFreeObject(o);
	return out;
}

/* The one text the expression selects (malloc'd); fails unless exactly one. */
char *
pl_doc_text1(const struct pl_doc *d, const char *expr)
{
	json_t *all = pl_doc_texts(d, expr);
	char *s;

	ck_assert_msg(json_array_size(all) == 1, "%s: %zu nodes match %s (want 1)", d->r.what,
	              json_array_size(all), expr);
	s = strdup(json_string_value(json_array_get(all, 0)));
	json_decref(all);
	return s;
}

size_t
pl_doc_count(const struct pl_doc *d, const char *expr)
{
	json_t *all = pl_doc_texts(d, expr);
	size_t n = json_array_size(all);

	json_decref(all);
	return n;
}

char *
pl_doc_all_text(const struct pl_doc *d)
{
	return pl_doc_text1(d, "/html/body");
}

/* The value of the page's hidden csrf input (malloc'd), or NULL. */
char *
pl_doc_csrf(const struct pl_doc *d)
{
	json_t *v = pl_doc_texts(d, "//input[@name='csrf']/@value");
	char *s = json_array_size(v) == 1 ? strdup(json_string_value(json_array_get(v, 0))) : NULL;

	json_decref(v);
	return s;
}

/* POSTs decision with the CSRF value of the card at path (GET first) as
 * user in groups; the POST's status and, in location, its Location. */
long
pl_decide_at(const char *path, const char *user, const char *groups, const char *decision,
          char *location, size_t loclen)
{
	struct pl_doc d;
	struct tl_resp r;
	char *csrf, *form, *hdrs = NULL, *loc;
	long st;

	pl_doc_get(path, user, groups, &d);
	ASSERT_STATUS(&d.r, 200);
	csrf = pl_doc_csrf(&d);
	ck_assert_msg(csrf != NULL, "%s: the card has no form for %s in \"%s\"", d.r.what, user,
	              groups);
	pl_doc_free(&d);
	form = tl_form("decision", decision, "csrf", csrf, "reason",
	               "Проверено: отправляем 👍", (char *)NULL);
	pl_page_request(path, user, groups, form, NULL, &r, &hdrs);
	st = r.status;
	loc = hdrs != NULL ? tl_header_get(hdrs, "Location") : NULL;
	if (location != NULL)
		snprintf(location, loclen, "%s", loc ? loc : "");
	free(loc);
	free(hdrs);
	tl_resp_free(&r);
	free(form);
	free(csrf);
	return st;
}

/* ---- the dispatcher and the SMTP sink --------------------------------------- */

/* The stack's From address of demo_smtp (what the card shows). */
char *
pl_stack_mail_from(void)
{
	char *conf = tl_file_slurp(tl_env("ONCEGATE_CONF"), NULL), *p, *e, *v = NULL;

	ck_assert_msg(conf != NULL, "cannot read %s", tl_env("ONCEGATE_CONF"));
	p = strstr(conf, "[target demo_smtp]");
	p = p != NULL ? strstr(p, "mail_from = ") : NULL;
	if (p != NULL) {
		p += strlen("mail_from = ");
		e = p + strcspn(p, "\r\n");
		v = strndup(p, (size_t)(e - p));
	}
	free(conf);
	ck_assert_msg(v != NULL, "no mail_from of demo_smtp in the stack's config");
	return v;
}

pid_t
pl_dispatcher_start(const char *mail_from, int smtp_port)
{
	char conf[PATH_MAX], log[PATH_MAX], err[PATH_MAX], text[PATH_MAX + 2048], *argv[4], *lines;
	double deadline;
	pid_t pid;
	FILE *f;

	snprintf(conf, sizeof(conf), "%s/dispatch.conf", g_tmp);
	snprintf(log, sizeof(log), "%s/dispatch.log", g_tmp);
	snprintf(err, sizeof(err), "%s/dispatch.err", g_tmp);
	snprintf(text, sizeof(text),
	         "# %s\nlog_file = %s\nlog_level = info\ndispatch_workers = 2\n"
	         "dispatch_poll_ms = 200\ndispatch_shutdown_seconds = 5\npublic_url = %s\n",
	         g_suite, log, tl_env("ONCEGATE_URL"));
	write_file(conf, text);
	f = fopen(conf, "a");
	ck_assert_msg(f != NULL, "%s: %s", conf, strerror(errno));
	dl_conf_contracts(f);
	fprintf(f,
	        "\n[target demo_http]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "lookup_url = http://127.0.0.1:%d/idem/effects/lookup\nidempotency_key = 1\n"
	        "provider_id_header = X-Provider-Id\ntimeout_ms = 5000\nmax_attempts = 3\n"
	        "base_ms = 200\ncap_ms = 1000\n\n"
	        "[target demo_smtp]\nkind = smtp\nurl = smtp://127.0.0.1:%d\nmail_from = %s\n"
	        "timeout_ms = 5000\nmax_attempts = 2\nbase_ms = 200\ncap_ms = 1000\n",
	        g_http_port, g_http_port, smtp_port, mail_from);
	ck_assert_int_eq(fclose(f), 0);
	argv[0] = (char *)(uintptr_t)tl_env("ONCEGATE_DISPATCH");
	argv[1] = (char *)(uintptr_t)"-c";
	argv[2] = conf;
	argv[3] = NULL;
	pid = spawn(argv, "/dev/null", err, ENV_TRUE);
	proc_register(pid);
	deadline = tl_now() + START_WAIT_S;
	for (;;) {
		lines = tl_file_slurp(log, NULL);
		if (lines != NULL && strstr(lines, "\"dispatch.started\"") != NULL)
			break;
		free(lines);
		ck_assert_msg(proc_running(pid) && tl_now() < deadline,
		              "oncegate-dispatch did not start (config %s, stderr %s)", conf, err);
		tl_sleep_ms(50);
	}
	free(lines);
	return pid;
}

/* What the SMTP sink received, MIME-decoded by Python's email package: one
 * object per mail {rcpt (RCPT TO), from, to (the To: addresses), subject,
 * body (line ends as the text's own)}. */
json_t *
pl_mails_received(const char *record)
{
	const char script[] =
	    "import json, sys, email, email.policy, email.utils\n"
	    "for line in open(sys.argv[1], encoding='utf-8'):\n"
	    "    r = json.loads(line)\n"
	    "    m = email.message_from_string(r['data'], policy=email.policy.default)\n"
	    "    print(json.dumps({'rcpt': r['rcpt_tos'],\n"
	    "        'from': [a for _, a in email.utils.getaddresses([str(m['From'])])],\n"
	    "        'to': [a for _, a in email.utils.getaddresses([str(m['To'])])],\n"
	    "        'subject': str(m.get('Subject', '')),\n"
	    "        'body': m.get_content().replace('\\r\\n', '\\n')}))\n";
	char path[PATH_MAX], cmd[PATH_MAX * 2 + 256], *out, *line, *save = NULL;
	json_t *list = json_array();

	snprintf(path, sizeof(path), "%s/decode.py", g_tmp);
	write_file(path, script);
	snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s'", tl_env("ONCEGATE_PYTHON"), path, record);
	out = tl_shell_output(cmd);
	ck_assert_msg(out != NULL, "decoding the SMTP sink's record failed");
	for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		json_t *m = json_loads(line, 0, NULL);

		ck_assert_msg(m != NULL, "decoder output: %.300s", line);
		json_array_append_new(list, m);
	}
	free(out);
	return list;
}

