/*
 * dispatchlib.h — shared by the suites that run oncegate-dispatch
 * (check_dispatch, check_ops, check_realdata, check_inbox, ...): child
 * processes, the loopback providers, the HTTP provider's record and the
 * SMTP sink's mails, runs handed in and approval pages requested. Each suite sets g_suite, g_tmp and g_procs before
 * it starts anything, and g_http_port once its HTTP provider is up.
 */
#ifndef OG_DISPATCHLIB_H
#define OG_DISPATCHLIB_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#define START_WAIT_S 15 /* a process must be up within this */

extern const char *g_suite;      /* the suite's name, for messages */
extern char g_tmp[256];          /* the suite's temporary directory */
extern char g_procs[PATH_MAX];   /* registry of per-test processes */
extern int g_http_port;          /* the HTTP provider's port */
extern int g_smtp_port;          /* the SMTP sink's port, when the suite has one */
extern char g_smtp_record[PATH_MAX]; /* what the SMTP sink received, one JSON line a mail */

bool streq(const char *a, const char *b); /* both non-NULL and equal */
/* Writes text to path; fails the test when it cannot. */
void write_file(const char *path, const char *text);


/* The fixture of a suite whose tests run dispatchers: before each test
 * nothing of an earlier test still runs, and nothing an earlier test (or
 * suite) left waiting can be claimed; after it, nothing it started runs. */
void dl_fixture_setup(void);
void dl_fixture_teardown(void);
/* A test case of suite s with that fixture and a timeout of timeout_s. */
TCase *dl_tcase(Suite *s, const char *name, double timeout_s);

/* Writes the dispatcher setting that names the test stack's contracts
 * directory (each payload is checked against its contract again before it
 * is sent). */
void dl_conf_contracts(FILE *f);

/* The kill switch's environment half for a spawned dispatcher. */
enum env_switch { ENV_TRUE, ENV_UNSET, ENV_FALSE };

/* Is pid running (not a zombie)? Reaps it when it is our child. */
bool proc_running(pid_t pid);
/* Does pid's command line mention g_tmp? (A recycled PID is never ours.) */
bool proc_ours(pid_t pid);
/* Notes pid in g_procs, for proc_sweep. */
void proc_register(pid_t pid);
/* Kills every registered process still running, then forgets them. */
void proc_sweep(void);
/* fork + exec with stdout and stderr appended to files and the kill
 * switch's environment half set as asked. */
pid_t spawn(char *const argv[], const char *out, const char *err, enum env_switch env);
/* Waits up to secs for our child pid to exit; true with its status. */
bool wait_exit(pid_t pid, double secs, int *status);

/* Starts tests/providers/SCRIPT (extra: more arguments, NULL-terminated) and
 * reads "ready <port>" from its stdout; -1 when it did not come up. No Check
 * assertions: used outside any test. */
int provider_start(const char *script, const char *name, char *const extra[], pid_t *pid_out);
void provider_stop(pid_t pid, const char *name);

/* The HTTP provider's answer to METHOD path (its /_requests, /_committed,
 * /_reset), parsed; fails the test when it does not answer. */
json_t *prov_call(const char *method, const char *path);
/* Recorded requests whose Idempotency-Key (or lookup key) starts with
 * prefix, of kind (effect, lookup, other; NULL: any). */
json_t *prov_requests(const char *prefix, const char *kind);
size_t prov_count(const char *prefix, const char *kind);
/* Committed effects whose key starts with prefix. */
json_t *prov_committed(const char *prefix);
/* Polls until the provider has at least want matching requests. */
size_t wait_prov(const char *prefix, const char *kind, size_t want, double secs);

/* The id of the API client named name into out, through plain libpq (PG*
 * environment); false, said on stderr, when there is none. No Check
 * assertions: used outside any test. */
bool dl_client_id(const char *name, char *out, size_t outlen);

/* The effect_outbox row of effect id as JSON (the test fails when there is
 * none); its attempts (a JSON array); its state (malloc'd); its dead letter
 * (NULL: none). */
json_t *dl_effect_row(PGconn *c, const char *id);
json_t *dl_attempts_of(PGconn *c, const char *id);
char *dl_effect_state(PGconn *c, const char *id);
json_t *dl_dead_letter_of(PGconn *c, const char *id);
/* Polls the effect's state until it is `want` (or secs are up); returns the
 * last state seen (malloc'd). */
char *dl_wait_effect(PGconn *c, const char *id, const char *want, double secs);
/* Fails the test unless effect id reaches state want within secs, showing
 * its row and attempts. */
#define DL_EXPECT_EFFECT(c, id, want, secs)                                            \
	do {                                                                           \
		char *st_ = dl_wait_effect((c), (id), (want), (secs));                 \
		if (!streq(st_, (want))) {                                             \
			json_t *row_ = dl_effect_row((c), (id));                       \
			json_t *att_ = dl_attempts_of((c), (id));                      \
			char *r_ = tl_json_text(row_), *a_ = tl_json_text(att_);       \
			ck_abort_msg("effect %s: state %s after %.0f s, expected %s\n"  \
			             "  row: %s\n  attempts: %s", (id), st_ ? st_ : "?", \
			             (double)(secs), (want), r_, a_);                   \
		}                                                                      \
		free(st_);                                                             \
	} while (0)
/* The state of the run of API client id client with this key (malloc'd). */
char *dl_run_state(PGconn *c, const char *client, const char *key);
/* The Message-ID the SMTP provider gives the mail of provider_key when its
 * domain is domain. */
void dl_message_id(const char *provider_key, const char *domain, char out[128]);

/* A run of API client id client with this key as the responder leaves it
 * once its effects may go out: approved, by the suite (g_suite: its
 * payload and trigger), workflow version version, correlation id
 * "corr-KEY", output (JSON text) and contract (with a made-up hash) when
 * not NULL. */
void dl_make_run(PGconn *c, const char *client, const char *key, const char *version,
                 const char *contract, const char *output);
/* One pending effect of that run, due delay_s from now (not_before and
 * next_attempt_at, as enqueue sets them); its id in id[40]. */
void dl_add_effect(PGconn *c, const char *client, const char *key, const char *type,
                   const char *target, const char *payload, double delay_s, char id[40]);

/* Allows sends (on) or stops them with `oncegatectl sends resume|stop`
 * (the kill switch's database half), the suite named in the reason; fails
 * the test when that fails. */
void dl_sends(bool on);

/* Cancels every effect still pending, unknown or sending (a test's
 * fixture: no dispatcher of the next test sees foreign work). */
void dl_cancel_waiting(void);

/* A suite that runs dispatchers, for dl_suite_main. */
struct dl_suite {
	const char *name;           /* "check_dispatch": messages, g_tmp's name */
	const char *prefix;         /* of the run's name (tl_run) */
	const char *needed;         /* variables besides ONCEGATE_URL, ONCEGATE_DISPATCH,
	                             * ONCEGATE_CONF, ONCEGATE_CTL, ONCEGATE_PROVIDERS and
	                             * ONCEGATE_PYTHON, separated by spaces (NULL: none) */
	Suite *(*suite)(void);
	/* Before the providers start, once the run is named and g_tmp made
	 * (NULL: nothing); false stops the suite as failed. */
	bool (*prepare)(void);
	/* After the tests (NULL: nothing). */
	void (*finish)(void);
	/* The HTTP provider's --stall-seconds (0: its default). */
	int http_stall_s;
	/* Also the SMTP sink, recording into g_smtp_record. */
	bool smtp;
};
/* The whole main of such a suite: 77 (skip) without the stack, 99 when one
 * of the needed variables is missing; else the run named (tl_run), g_suite,
 * g_tmp and g_procs set, prepare, the providers started (g_http_port,
 * g_smtp_port), the tests, finish, the providers stopped; then everything
 * the tests left running killed, the kill switch turned off and g_tmp
 * removed unless something failed (then kept, and said so). Returns the
 * exit status. */
int dl_suite_main(const struct dl_suite *s);

/* A suite's whole main: DL_SUITE_MAIN(.name = ..., .suite = ..., ...), the
 * fields of its struct dl_suite. */
#define DL_SUITE_MAIN(...) TL_MAIN_OF(struct dl_suite, dl_suite_main, __VA_ARGS__)

/* A dispatcher of a test: its config, decision log and stderr in g_tmp. */
struct dl_disp {
	pid_t pid;
	char conf[PATH_MAX];
	char log[PATH_MAX];
	char err[PATH_MAX];
};
/* Names the files (dPID-N.conf, .log, .err in g_tmp) and returns the log's
 * path, for the config text the caller writes next. */
const char *dl_disp_files(struct dl_disp *d);
/* Writes conf_text as d->conf, checks it with -n, starts the dispatcher
 * with the kill switch's environment half as asked and waits for its
 * dispatch.started line; fails the test otherwise. */
void dl_disp_start(struct dl_disp *d, const char *conf_text, enum env_switch env);
/* SIGTERM, the exit within wait_s (status 0), no sanitizer finding;
 * returns the seconds from SIGTERM to the exit. */
double dl_disp_stop(struct dl_disp *d, int wait_s);
/* Fails the test when the dispatcher's stderr holds an AddressSanitizer,
 * UBSan or LeakSanitizer report. */
void dl_disp_check_sanitizers(const struct dl_disp *d);

/* The config text of a dispatcher being written. */
struct dl_conf {
	FILE *f;
	char *text;
	size_t len;
};
/* Opens the config of dispatcher d (its files named as dl_disp_files does)
 * with the settings the suites share: its own decision log, 2 workers,
 * batches of 4, 30 s leases, 200 ms polls, a 5 s shutdown, a reconcile each
 * second and the stack's contracts (each payload is checked again before it
 * goes). The caller adds settings and targets to c->f. */
void dl_conf_open(struct dl_conf *c, struct dl_disp *d);
/* Closes the config and starts d with it (dl_disp_start). */
void dl_conf_start(struct dl_conf *c, struct dl_disp *d, enum env_switch env);

/* ---- runs, approval pages and mails (check_inbox, check_realdata) ------- */

struct tl_resp;

#define DL_RATE_RETRIES 8 /* nginx limits approval POSTs: a 429 is waited out */

/* Two API clients (tenants) sharing business keys: the stack's "dev"
 * (ONCEGATE_API_KEY) and RUN-b, which dl_tenants_prepare (a struct dl_suite
 * prepare) adds with `oncegatectl client add` (dl_key_b NULL when that
 * failed: the tests that need it say so) and dl_tenants_finish forgets. */
extern const char *dl_key_dev;
extern char dl_client_b[96];
extern char *dl_key_b;
bool dl_tenants_prepare(void);
void dl_tenants_finish(void);
/* The whole main of a suite of those two tenants (needing
 * ONCEGATE_API_KEY): DL_TENANTS_MAIN("check_x", "x", .suite = ..., ...),
 * the other fields of its struct dl_suite after the name and prefix. */
#define DL_TENANTS_MAIN(name_, prefix_, ...)                                          \
	DL_SUITE_MAIN(.name = (name_), .prefix = (prefix_), .needed = "ONCEGATE_API_KEY", \
	              .prepare = dl_tenants_prepare, .finish = dl_tenants_finish, __VA_ARGS__)

/* Claims key as bearer (the payload names the run and contract) and hands
 * in output for contract with effect (both stolen), requested by
 * requested_by; the /output answer in *r. */
void dl_claim_and_output(const char *bearer, const char *key, const char *contract,
                         json_t *output, json_t *effect, const char *requested_by,
                         struct tl_resp *r);
/* Claims key as bearer and hands in the mail (subject, body) to `to` (a
 * JSON array of addresses, stolen) for contract, requested by
 * requested_by; the /output answer in *r. */
void dl_mail_output(const char *bearer, const char *key, const char *contract, const char *subject,
                    const char *body, json_t *to, const char *requested_by, struct tl_resp *r);
/* The same with the subject and body of the corpus mail mail_id; the
 * answer must be 202, awaiting a person. */
void dl_corpus_mail_output(const char *bearer, const char *key, const char *contract,
                           const char *mail_id, json_t *to, const char *requested_by,
                           struct tl_resp *r);
/* Claims key as the stack's client "dev" and hands in a support_reply
 * (subject, text) to customer@example.com whose result n8n awaits at
 * callback_url, requested by requested_by: the /output answer in *r,
 * which must be 202, awaiting a person. */
void dl_reply_run(const char *key, const char *subject, const char *text, const char *callback_url,
                  const char *requested_by, struct tl_resp *r);
/* A mail run's approval links, in its contract's approver order. */
#define DL_LINKS 3
struct dl_links {
	char path[DL_LINKS][128];   /* /approve/TOKEN */
	char id[DL_LINKS][64];      /* the approval's id */
};
/* Claims key as bearer and hands in the mail (subject, body) to `to` for
 * contract (one with DL_LINKS approver entries), requested by
 * requested_by: the answer must be 202 with DL_LINKS approvals, whose
 * links land in *l. */
void dl_mail_run(const char *bearer, const char *key, const char *contract, const char *subject,
                 const char *body, const char *to, const char *requested_by,
                 struct dl_links *l);
/* Approval i of an /output answer, which must be a 202 with that approval's
 * link: its raw token (malloc'd); its approval id in id (idsz bytes) when
 * id is not NULL. */
char *dl_token_of(const struct tl_resp *r, size_t i, char *id, size_t idsz);
/* The identity headers the SSO proxy sends for user in groups (NULL: that
 * header not sent): their lines in sso, pointed to from h[0] on; returns
 * how many. */
struct dl_sso {
	char user[256];
	char groups[1024];
};
int dl_sso_headers(struct dl_sso *sso, const char *user, const char *groups, const char **h);
/* GET (form NULL) or POST of form to path as user in groups (as the SSO
 * proxy's headers; NULL: that header not sent). A POST comes from origin,
 * or (NULL) from our own origin with Sec-Fetch-Site: same-origin. The
 * answer's headers in *hdrs when hdrs is not NULL. A 429 of nginx's POST
 * limit is waited out (DL_RATE_RETRIES times, a second each). */
void dl_page_request(const char *path, const char *user, const char *groups, const char *form,
                     const char *origin, struct tl_resp *r, char **hdrs);
/* The same with the request's headers as given (h, NULL-terminated): what
 * a browser behind the SSO proxy sends, or does not. */
void dl_page_send(const char *path, const char *const *h, const char *form, struct tl_resp *r,
                  char **hdrs);

/* Starts dispatcher d with dl_conf_open's settings, approval links in
 * notices made from the stack's address (ONCEGATE_URL) and the targets
 * the printf format targets writes; the kill switch's environment half on
 * (dl_conf_start). */
void dl_disp_start_linked(struct dl_disp *d, const char *targets, ...)
	__attribute__((format(printf, 2, 3)));
/* Starts dispatcher d with dl_conf_open's settings and the targets
 * demo_http and demo_smtp (the names the shipped and test contracts use)
 * pointed at the suite's HTTP provider (g_http_port) and SMTP sink
 * (g_smtp_port), mails from mail_from, approval links in notices made
 * from the stack's address (ONCEGATE_URL); the kill switch's environment
 * half on (dl_conf_start). */
void dl_disp_start_demo(struct dl_disp *d, const char *mail_from);
/* What the SMTP sink received (g_smtp_record), MIME-decoded by Python's
 * email package: one object per mail {rcpt (RCPT TO), queue_id, message_id,
 * from and to (the addresses of those headers), subject, body (line ends
 * as the text's own)}. */
json_t *dl_mails_received(void);

#endif
