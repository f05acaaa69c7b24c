/*
 * testlib.h — helpers for the integration suites: they drive the product
 * from outside (HTTP through nginx, rows through libpq, the decision log
 * file, oncegatectl), never through libog's internals.
 *
 * Every helper that can fail in a way a test cannot recover from fails the
 * current Check test itself, with a message that names what it was doing.
 */
#ifndef OG_TESTLIB_H
#define OG_TESTLIB_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include "suitelib.h"

/* Caps and timeouts of the test client. */
#define TL_RESPONSE_MAX      (8 * 1024 * 1024)
#define TL_HTTP_TIMEOUT_S    30
#define TL_CONNECT_TIMEOUT_S 5
#define TL_HEADER_MAX        1024
#define TL_LOG_WAIT_MS       3000  /* how long a log line may lag its answer */
#define TL_LOG_SETTLE_MS     150   /* then how long to wait for extra lines */

/* ---- environment ------------------------------------------------------- */

/* The value of an environment variable the stack exports, or NULL. */
const char *tl_env(const char *name);

/* ---- a suite's run --------------------------------------------------------- */

/* The run's name, PREFIX<epoch>-<pid> (set by tl_suite_begin): the keys,
 * clients and markers a suite makes start with it, so that two runs never
 * meet in the stack's tables. */
extern char tl_run[64];

/* The start of an integration suite's main: 77 (skip) when ONCEGATE_URL is
 * not set (no stack), 99 when it is but one of the variables named in needed
 * (separated by spaces; NULL: none) is not, or libcurl cannot start; else 0,
 * with tl_run named. */
int tl_suite_begin(const char *suite, const char *prefix, const char *needed);
/* (tl_suite_run, in suitelib.h, runs the Check suite.) */
/* The end: libcurl cleaned up; the exit status for `failed` failed tests. */
int tl_suite_end(int failed);

/* A suite against the stack that runs no dispatcher, for tl_stack_main. */
struct tl_stack_suite {
	const char *name;     /* "check_gate", for tl_suite_begin */
	const char *prefix;   /* of the run's name */
	const char *needed;   /* as tl_suite_begin takes them */
	Suite *(*suite)(void);
	/* Once the run is named, before the tests (NULL: nothing); false
	 * fails the suite. */
	bool (*prepare)(void);
	/* After the tests (NULL: nothing). */
	void (*finish)(void);
	bool nofork;          /* as tl_suite_run takes it */
};
/* The whole main of such a suite: tl_suite_begin, prepare, the tests,
 * finish, tl_suite_end; returns the exit status. */
int tl_stack_main(const struct tl_stack_suite *s);
/* A suite's main: TL_STACK_MAIN(.name = ..., .suite = ..., ...), the fields
 * of its struct tl_stack_suite. */
#define TL_STACK_MAIN(...) TL_MAIN_OF(struct tl_stack_suite, tl_stack_main, __VA_ARGS__)

/* A key of this run: "<tl_run>-<what>". */
void tl_mkkey(char *buf, size_t n, const char *what);

/* What a claim hands the caller: the lease's owner and the run's version
 * (for the output and transitions that follow). */
struct tl_claimed {
	char owner[64];
	long long version;
};
/* POSTs the claim body (borrowed) to /v1/runs as bearer; fails the test
 * unless it answered 201 with a lease owner and a version. */
void tl_claim_body(const char *bearer, const json_t *body, struct tl_claimed *c);
/* A new run of this key as client "dev" ($ONCEGATE_API_KEY), with a small
 * payload naming the run, leased for 60 s. */
void tl_claim_run(const char *key, struct tl_claimed *c);
/* A new run of this key as bearer with payload (stolen), leased for 60 s. */
void tl_claim_payload(const char *bearer, const char *key, json_t *payload, struct tl_claimed *c);

/* ---- HTTP -------------------------------------------------------------- */

struct tl_resp {
	long status;                 /* 0 when no answer came */
	char *body;                  /* NUL-terminated, never NULL after a call */
	size_t body_len;
	json_t *json;                /* the body parsed as JSON, or NULL */
	char retry_after[TL_HEADER_MAX];
	char allow[TL_HEADER_MAX];
	char content_type[TL_HEADER_MAX];
	char location[TL_HEADER_MAX];
	char www_authenticate[TL_HEADER_MAX];
	char what[512];              /* "METHOD /path", for messages */
	char error[CURL_ERROR_SIZE + 128]; /* libcurl's error text, if any */
};

/* One request to $ONCEGATE_URL + path (path already percent-encoded).
 * bearer: the API key for "Authorization: Bearer", or NULL for none.
 * ctype: Content-Type, or NULL for none. body may be NULL.
 * Returns 0 when an HTTP answer came, -1 otherwise (r->error says why). */
int tl_http(const char *method, const char *path, const char *bearer,
            const char *ctype, const char *body, size_t body_len,
            struct tl_resp *r);
/* The same to an absolute URL (another server: a loopback provider), from
 * the local address iface (NULL: any). */
int tl_http_url(const char *method, const char *url, const char *iface, const char *bearer,
                const char *ctype, const char *body, size_t body_len, struct tl_resp *r);
/* POST of a JSON value (compact), Content-Type application/json. */
int tl_post_json(const char *path, const char *bearer, const json_t *body,
                 struct tl_resp *r);
/* POST /v1/approvals/ID/decisions of the decision body (stolen: freed)
 * as bearer, the answer in r; returns its HTTP status. */
long tl_decide_api(const char *bearer, const char *id, json_t *body, struct tl_resp *r);
/* The same decision, which must be refused with that status and problem
 * code (tl_expect_problem). */
void tl_decide_refused(const char *bearer, const char *id, json_t *body, long status,
                       const char *code);
/* POST of JSON text as written, Content-Type application/json. */
int tl_post_text(const char *path, const char *bearer, const char *text,
                 struct tl_resp *r);
int tl_get(const char *path, const char *bearer, struct tl_resp *r);
void tl_resp_free(struct tl_resp *r);
/* Fails the test unless r is HTTP status with a problem whose type ends in
 * code. */
void tl_expect_problem(const struct tl_resp *r, long status, const char *code);
/* Fails unless the headers hdrs of an answer (HTTP status, what names it)
 * carry what every answer under /approve/ must, whoever wrote it (the
 * responder's pages, its JSON refusals, nginx's own errors): no-store, no
 * referrer, nosniff, no framing, and a strict Content-Security-Policy
 * (default-src 'none', no inline code, no eval, no wildcard). */
void tl_expect_approval_headers(const char *hdrs, long status, const char *what);

/* String member of r->json, or NULL. */
const char *tl_jstr(const json_t *obj, const char *name);
/* Integer member of obj; false when absent or not an integer. */
bool tl_jint(const json_t *obj, const char *name, long long *out);

/* Percent-encodes everything but RFC 3986 unreserved characters. */
char *tl_urlencode(const char *s);

/* "sha256:" + lowercase hex SHA-256 of text (a canonical JSON text the
 * test wrote by hand). out holds at least 72 bytes. */
void tl_payload_hash(const char *text, char out[72]);
/* The payload_hash an effect with this JSON payload is enqueued with
 * (outbox_payload_hash), whatever its spacing or member order: what the
 * dispatcher checks the stored payload against before each send. */
void tl_effect_hash(const char *payload, char out[72]);

/* Strict "YYYY-MM-DDTHH:MM:SS.mmmZ" → seconds since the epoch. */
bool tl_ts_parse(const char *s, double *epoch);

/* ---- PostgreSQL -------------------------------------------------------- */

/* PQconnectdb("") (PG* environment); fails the test when it cannot. */
PGconn *tl_pg_connect(void);
/* First column of the first row as a new string; NULL for no row or SQL
 * NULL. Parameters are text. Fails the test on an SQL error. */
char *tl_pg_value(PGconn *c, const char *sql, int nparams,
                  const char *const *params);
/* The same, as a number; -1 for no row. */
long long tl_pg_count(PGconn *c, const char *sql, int nparams,
                      const char *const *params);
/* Same as tl_pg_value, parsed as a double; NAN for no row / NULL. */
double tl_pg_double(PGconn *c, const char *sql, int nparams,
                    const char *const *params);
/* Queries with text parameters given as a NULL-terminated list (at most
 * QMAX): the first column of the first row (malloc'd) or NULL; it as a
 * count; the rows an INSERT/UPDATE/DELETE touched; it parsed as JSON. */
#define QMAX 8
char *qstr(PGconn *c, const char *sql, ...) __attribute__((sentinel));
long long qnum(PGconn *c, const char *sql, ...) __attribute__((sentinel));
long long qexec(PGconn *c, const char *sql, ...) __attribute__((sentinel));
json_t *qjson(PGconn *c, const char *sql, ...) __attribute__((sentinel));
/* How many runs (of any client) have this key. */
long long tl_runs_of_key(PGconn *c, const char *key);
/* The whole workflow_runs row of (client name, key) as JSON text, or NULL. */
char *tl_run_row(PGconn *c, const char *client, const char *key);

/* The gate's sample is a CSPRNG draw kept on the run (sql/010): a test that
 * needs a known outcome keeps a draw (e.g. "0.99": outside any sample below
 * 1) on the claimed, still processing run before its output — the way a
 * resubmitted output meets the draw of its first try. Fails the test
 * unless exactly one run with that key took it. */
void tl_keep_sample_draw(const char *key, const char *draw);

/* ---- the decision log -------------------------------------------------- */

/* Current size of $ONCEGATE_LOG: where "lines written from now on" start. */
long tl_log_offset(void);
/* The whole file, NUL-terminated, or NULL when it cannot be read. */
char *tl_log_slurp(size_t *len);

typedef bool (*tl_log_pred)(const json_t *line, const void *arg);
/* The complete lines (ending in '\n') of text that pred keeps (NULL: all),
 * each a JSON object, or a string when it is not one; blank lines passed
 * over. Never NULL (text NULL: none). */
json_t *tl_json_lines(const char *text, size_t len, tl_log_pred pred, const void *arg);
/* Lines written after offset that satisfy pred (all lines when pred is
 * NULL), as a JSON array of objects; a line that is not a JSON object shows
 * up as a JSON string holding the raw text. Waits until at least `want`
 * match (or TL_LOG_WAIT_MS passes), then TL_LOG_SETTLE_MS more so that a
 * surplus line is caught too. */
json_t *tl_log_collect(long offset, tl_log_pred pred, const void *arg,
                       size_t want);
/* Predicates. */
bool tl_log_is_key(const json_t *line, const void *key);
/* A line about one HTTP request (it has method, path, status or
 * request_id), or one of the request events. */
bool tl_log_is_request(const json_t *line, const void *unused);
/* How many entries of a collected array have event == name. */
size_t tl_log_count_event(const json_t *lines, const char *event);
/* The first entry with event == name, or NULL. */
json_t *tl_log_find_event(const json_t *lines, const char *event);

/* ---- oncegatectl ------------------------------------------------------- */

/* Runs "$ONCEGATE_CTL -c $ONCEGATE_CONF <args...>" (each argument passed
 * as one word, NULL-terminated list), captures stdout into *out (may be
 * NULL). Returns the exit status, or -1 when it could not run. */
int tl_ctl(char **out, ...) __attribute__((sentinel));
/* How tl_vctl runs it. */
struct tl_ctl_how {
	const char *sudo_user;  /* SUDO_USER (a login name, which oncegatectl
	                         * must not record); NULL: left as is */
	bool json;              /* --json before the arguments */
	bool merge_stderr;      /* stderr into *out too */
	const char *errpath;    /* stderr into this file (NULL: left alone) */
};
/* tl_ctl with the arguments as a va_list, run as how says. */
int tl_vctl(const struct tl_ctl_how *how, char **out, va_list ap);
/* The same with stderr too: both captured into *out (may be NULL) and *err
 * (malloc'd, never NULL). */
int tl_ctl_err(char **out, char **err, ...) __attribute__((sentinel));
/* The PostgreSQL role tl_ctl's oncegatectl connects as (the stack's
 * operator login role, else PGUSER), which operator_actions name. */
const char *tl_ctl_role(void);
/* `client add NAME --reason ...`: the new API key, or NULL. */
char *tl_client_add(const char *name);
int tl_client_revoke(const char *name);

/* ---- processes --------------------------------------------------------- */

/* stdout of a shell command line, or NULL. */
char *tl_shell_output(const char *cmdline);
/* Does process pid's command line (its arguments joined by spaces) hold
 * needle? False when it cannot be read (the process is gone). */
bool tl_cmdline_has(pid_t pid, const char *needle);
/* Runs a shell command line; its exit status or -1. */
int tl_shell(const char *cmdline);

void tl_sleep_ms(long ms);
/* Calls fn on each of the n elements of args (size bytes apart), each in a
 * thread of its own, all released at once (a barrier); returns when every
 * one has returned. For races: n requests as nearly at once as can be. */
void tl_race(void (*fn)(void *arg), void *args, size_t size, int n);
double tl_now(void);

/* ---- approval pages (check_gate) ---------------------------------------- */

/* As tl_http, plus extra request headers (a NULL-terminated list of
 * "Name: value" strings; NULL for none) and, when headers is not NULL, the
 * final answer's header block in *headers ("Name: value\r\n" lines,
 * malloc'd; after a 1xx only the final set). Redirects are never followed.
 * In r->what, whatever follows "/approve/" is shown as [token]: approval
 * tokens are secrets even in a test log. */
int tl_http_hdrs(const char *method, const char *path,
                 const char *const *req_headers, const char *ctype,
                 const char *body, size_t body_len, struct tl_resp *r,
                 char **headers);

/* The value of header `name` (case-insensitive, the last occurrence,
 * trimmed) in a block from tl_http_hdrs, malloc'd; NULL when absent. */
char *tl_header_get(const char *headers, const char *name);

/* application/x-www-form-urlencoded text of name, value pairs ending with
 * a NULL name: tl_form("decision", "approve", "csrf", v, (char *)NULL). */
char *tl_form(const char *name, ...) __attribute__((sentinel));

/* Lowercase hex SHA-256 of a NUL-terminated string. */
void tl_sha256_hex(const char *s, char out[65]);

/* The provider idempotency key the outbox stores for a new effect of
 * (API client id, run key, effect type, target, slot), computed here from
 * the documented format (malloc'd): og1/c<client>/<key>/<type>/<slot>/<hex>. */
char *tl_provider_key(const char *client_id, const char *key, const char *type,
                      const char *target, int slot);
/* Printable ASCII without spaces, non-empty: safe as an HTTP header value
 * and inside a Message-ID. */
bool tl_header_safe(const char *s);

/* 32 random bytes as unpadded base64url: the shape of an approval token
 * that no approval has. */
void tl_random_token(char out[44]);

/* The stack's nginx access log: nginx/access.log in the directory that
 * holds $ONCEGATE_CONF (malloc'd), or NULL. */
char *tl_access_log_path(void);
/* The same for nginx/error.log. */
char *tl_error_log_path(void);

/* A whole file, NUL-terminated (malloc'd); NULL when it cannot be read. */
char *tl_file_slurp(const char *path, size_t *len);
/* tests/data/<name> (through $srcdir under make check, else relative to
 * where the suite runs) read whole, as tl_file_slurp; fails the test when
 * it is not there. */
char *tl_data_slurp(const char *name, size_t *len);

/* How many rows of all tables of the public schema hold needle anywhere
 * in their text form (what a dump would hold), searched by the server. */
long long tl_pg_rows_holding(PGconn *c, const char *needle);

/* Executes a statement that returns no rows; fails the test on error.
 * Returns the number of rows it affected. */
long long tl_pg_exec(PGconn *c, const char *sql, int nparams,
                     const char *const *params);

/* Polls GET /healthz until it answers 200, at most `seconds`. */
bool tl_wait_healthy(int seconds);
/* A Check fixture: the stack answers /healthz within 30 s (another suite
 * may have stopped the cluster a moment ago). */
void tl_setup_healthy(void);

/* Compact JSON text of v, for messages (malloc'd; "(null)" for NULL). */
char *tl_json_text(const json_t *v);
/* The model block of an output: the one the workflows of the tests use. */
json_t *tl_model_json(void);
/* A crm.tag effect to demo_http (contact c-42). */
json_t *tl_tag_effect_json(void);

/* ---- raw HTTP (check_security) ------------------------------------------ */

/* A new TCP connection to the host and port of $ONCEGATE_URL (http only),
 * or -1. */
int tl_raw_connect(void);

/* Sends len bytes of req, exactly as given, on a new connection, then reads
 * until the server closes it or timeout_ms passes. Returns the status code
 * of the first status line (0 when none came), or -1 when no connection
 * could be made; the whole answer (NUL-terminated, malloc'd) in *out when
 * out is not NULL. A send that the server cuts short (it answered early)
 * is not an error. */
long tl_raw_request(const char *req, size_t len, int timeout_ms, char **out);

/* The directory that holds $ONCEGATE_CONF (the stack's state directory,
 * malloc'd), or NULL. */
char *tl_state_dir(void);

/* ---- the corpus (tests/data/corpus) ------------------------------------ */

/* Realistic test data: support mails in several scripts at the contracts'
 * maxima, recipient lists, identity-provider group headers, business keys
 * two tenants share, outputs and claim payloads (README.md there says what
 * each file holds). Found through $srcdir under make check, else relative
 * to the current directory. */

/* One corpus file ("mails.json"), parsed; a new reference. Fails the
 * current test when it cannot be read or parsed. */
json_t *tl_corpus_load(const char *file);
/* The mail with this id in mails.json ("ru_max", "mixed_max", ...):
 * {"id", "subject", "body", ...}, borrowed from a copy loaded once per
 * process. Fails the test when there is none. */
const json_t *tl_corpus_mail(const char *id);
/* A string member of a mail, e.g. tl_corpus_mail_str("zh_max", "body"). */
const char *tl_corpus_mail_str(const char *id, const char *member);
/* The ids of mails.json, in file order, as a NULL-terminated static list. */
const char *const *tl_corpus_mail_ids(void);
/* Code points of UTF-8 text (what the contracts' lengths count). */
size_t tl_utf8_chars(const char *s);
/* prefix + key, cut so that the whole is at most max_chars code points
 * (malloc'd): a test's run prefix in front of a corpus key keeps the key
 * at the length limit. */
char *tl_corpus_key(const char *prefix, const char *key, size_t max_chars);

/* Fails the test unless the answer r has HTTP status code. */
#define ASSERT_STATUS(r, code)                                                 \
	ck_assert_msg((r)->status == (code),                                   \
	              "%s: HTTP %ld, expected %d%s%s; body: %.2000s",          \
	              (r)->what, (r)->status, (int)(code),                     \
	              (r)->error[0] ? "; curl: " : "", (r)->error, (r)->body)

/* "/v1/runs/" + the key percent-encoded + suffix (may be NULL); malloc'd. */
char *tl_run_path(const char *key, const char *suffix);
/* Does hay contain needle, ignoring ASCII case? (false for NULLs) */
bool tl_contains_ci(const char *hay, const char *needle);

/* Everything stored about one run (its row, approvals, effects, attempts,
 * timeline events, dead letters), as text: equal snapshots, nothing
 * changed, byte for byte. */
char *tl_run_snapshot(PGconn *c, const char *key);
/* Fails the test, naming what, when the run's snapshot differs from before. */
void tl_expect_run_unchanged(PGconn *c, const char *key, const char *before, const char *what);

/* The CSRF value the responder would put in the approval form for this
 * approval and subject, made with the csrf_secret of $ONCEGATE_CONF: what a
 * person who once had the form holds, for tests of refusals to people who
 * are now shown none (malloc'd). */
char *tl_csrf_for(const char *approval_id, const char *subject);

#endif
