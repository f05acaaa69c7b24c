/*
 * api_int.h — what the request pipeline (api.c) and the handler files
 * share: the route row, the state of one request, the answers every
 * handler gives the same way, and the handlers themselves.
 *
 *   api.c          route table, route matching, the pipeline (authentication,
 *                  body kind and size, dispatch), the shared answers
 *   api_runs.c     the workflow's own calls: claim, status, lease,
 *                  transition, cancel
 *   api_output.c   a model's output: contract, repairs, the gate's choice
 *   api_mcp.c      /v1/mcp: the same use cases for an AI agent, as MCP
 *                  tools (JSON-RPC 2.0 over Streamable HTTP)
 *   api_approve.c  the approval pages of the people who decide (the
 *                  handlers; what the pages show is in api_card.c)
 *
 * The two transactions behind an output and a decision are use cases of
 * the library (decide.c): the handlers read the request, call them, and
 * turn their result into the answer and the log lines.
 *   api_ops.c      what operators and monitors read: healthz, readyz, metrics
 *
 * Private to those files; programs and suites use api.h.
 */
#ifndef OG_API_INT_H
#define OG_API_INT_H

#include <stdbool.h>

#include <jansson.h>

#include "api.h"
#include "caps.h"
#include "clients.h"
#include "ledger.h"
#include "log.h"
#include "rc.h"

struct contract;
struct api_call;

enum route_auth {
	AUTH_NONE,
	AUTH_BEARER,   /* an API client's key */
	AUTH_SSO,      /* a person signed in through nginx (REMOTE_USER) */
};

/* What a route accepts as its body. A route that takes one takes at most
 * max_body_bytes of it; a route that takes none ignores any. */
enum route_body {
	BODY_NONE,
	BODY_JSON,     /* a JSON object */
	BODY_FORM,     /* an HTML form post */
};

/* What a route answers with, which sets the headers every answer of it
 * carries (refusals of the pipeline included). */
enum route_answer {
	ANSWER_JSON,   /* application/json, not cached */
	ANSWER_PAGE,   /* an HTML page holding a capability in its URL */
	ANSWER_TEXT,   /* the handler sets its own headers */
};

/* What a route's path looks like. */
enum route_shape {
	SHAPE_EXACT,      /* the path is exactly prefix */
	SHAPE_KEY,        /* prefix + {key} + suffix ("" for none) */
};

struct route {
	const char *method;
	enum route_shape shape;
	const char *prefix;
	const char *suffix;
	const char *pattern;  /* for logs and errors; never the raw path */
	enum route_auth auth;
	enum route_body body;
	enum route_answer answer;
	bool token;           /* the path segment is an approval token, not a key */
	bool claim_auth;      /* authenticated by the claim's own statement */
	void (*handler)(struct api_call *c);
};

/* The state of one request while it is handled. */
struct api_call {
	struct api_ctx *ctx;
	const struct http_request *req;
	struct http_response *resp;
	const struct route *route;
	const char *pattern;
	struct client client;
	bool authed;
	/* A claim: its bearer key, hashed, waits for the claim's statement to
	 * authenticate it (or for an earlier answer, which authenticates
	 * first). */
	bool auth_deferred;
	char auth_hash[DIGEST_HEX_LEN];
	char key[OG_KEY_MAX_CHARS * 4 + 1];
	json_t *body;          /* BODY_JSON: the parsed object */
	bool body_refused;     /* BODY_FORM: not a form, or over the size cap */
	char token[OG_KEY_MAX_CHARS * 4 + 1]; /* approval routes: the raw token */
	/* The claim: the key of its Idempotency-Key header (idem_len >= 0),
	 * or why the header is refused (idem_problem). */
	char idem[OG_KEY_MAX_CHARS * 4 + 1];
	long idem_len;
	const char *idem_problem;
};

/* ---- answers (api.c) ---- */

/* The claim's statement authenticated its key (denied: it refused it, and
 * the request is answered 401). */
void api_claim_authenticated(struct api_call *c, bool denied);

/* The run's URL path, /v1/runs/ + the key percent-encoded as one segment:
 * Location of a claim, instance of a problem about a run. */
#define API_RUN_PATH_MAX (sizeof("/v1/runs/") + (OG_KEY_MAX_CHARS * 4) * 3)
void api_run_path(const struct api_call *c, char out[API_RUN_PATH_MAX]);

void api_json_headers(struct api_call *c);
/* One log line with the request's context (client, key, route, status). */
void api_log(struct api_call *c, enum log_level level, const char *event, struct log_fields *f);
/* Every error is an RFC 9457 problem document (application/problem+json)
 * whose status follows from its stable code (api.c: problem_types). */
/* A 4xx for bad input: the problem document, with "field" when one field
 * is to blame, and one request.invalid line (auth.failed for 401). */
void api_reject(struct api_call *c, const char *code, const char *message, const char *field);
/* A refusal about the run itself (OG_MISMATCH payload_mismatch 422,
 * OG_CAP_REACHED lease_cap_reached 409, OG_WINDOW_CLOSED window_closed 409,
 * …: api.c's problem_types is the one mapping of a result to its code and
 * status): the problem document with the members of ext (reference taken);
 * the caller writes the log line. */
void api_refuse(struct api_call *c, enum og_rc rc, const char *message, json_t *ext);
/* The problem document of a stable code with the members of ext
 * (reference taken); the caller writes the log line. */
void api_answer_problem(struct api_call *c, const char *code, const char *message, json_t *ext);
/* A failed data or use-case call (its og_rc), with its log line:
 * OG_UNAVAILABLE 503 database_unavailable with Retry-After, OG_NOT_FOUND
 * 404 run_not_found, anything else 500 internal_error. */
void api_fail(struct api_call *c, enum og_rc rc);
/* 500 with detail in the log: a fault that is not the caller's. */
void api_internal(struct api_call *c, const char *detail);
/* 409 lease_lost: the caller no longer owns the run and must stop. One
 * lease.lost line with whatever f already says about the run. */
void api_lease_lost(struct api_call *c, struct log_fields *f);

/* ---- field readers (api.c): each rejects with a clear message ---- */

bool api_printable(const char *s);
/* Optional string field of at most max bytes. */
bool api_opt_string(struct api_call *c, const char *name, size_t max, const char **out);
bool api_opt_int(struct api_call *c, const char *name, long long lo, long long hi,
                 long long def, long long *out);
bool api_req_int(struct api_call *c, const char *name, long long lo, long long hi,
                 long long *out);
bool api_req_owner(struct api_call *c, const char **owner);
/* Refuses members the route does not know: a typo must not pass silently. */
bool api_only_fields(struct api_call *c, const char *const *allowed);

/* ---- handlers: one a route, named in the route table ---- */

void api_runs_claim(struct api_call *c);       /* POST /v1/runs */
void api_runs_status(struct api_call *c);      /* GET /v1/runs/{key} */
void api_runs_lease(struct api_call *c);       /* POST /v1/runs/{key}/lease */
void api_runs_transition(struct api_call *c);  /* POST /v1/runs/{key}/transition */
void api_runs_cancel(struct api_call *c);      /* POST /v1/runs/{key}/cancel */
void api_output_submit(struct api_call *c);    /* POST /v1/runs/{key}/output */
void api_approve_handle(struct api_call *c);   /* GET and POST /approve/{token} */
void api_approve_card(struct api_call *c);     /* GET and POST /approve/card/{id} */
void api_approve_inbox(struct api_call *c);    /* GET /approve/ */
void api_approvals_decide(struct api_call *c); /* POST /v1/approvals/{id}/decisions */
void api_runs_list(struct api_call *c);        /* GET /v1/runs */
void api_approvals_list(struct api_call *c);   /* GET /v1/approvals */
void api_contracts_list(struct api_call *c);   /* GET /v1/contracts */
void api_chat_slack_interactions(struct api_call *c); /* POST /v1/chat/slack/interactions */
void api_ops_healthz(struct api_call *c);      /* GET /healthz */
void api_ops_readyz(struct api_call *c);       /* GET /readyz */
void api_ops_metrics(struct api_call *c);      /* GET /metrics */
void api_ops_openapi(struct api_call *c);      /* GET /v1/openapi.json */
void api_mcp_handle(struct api_call *c);       /* POST /v1/mcp (api_mcp.c) */

/* The OpenAPI document of the API, compiled in from src/lib/openapi.json
 * (openapi_doc.c is generated by the build). */
extern const unsigned char api_openapi_json[];
extern const size_t api_openapi_json_len;

/* ---- a model's output, whichever door it came through (api_output.c) ---- */

/* One output handed in by the lease owner of run c->key (c->client's):
 * the REST body's members, or an MCP tool call's arguments. */
struct api_output_in {
	const struct contract *contract;
	const json_t *output;
	const char *output_text;     /* the output's canonical JSON text */
	size_t output_len;
	const json_t *model;         /* an object, or NULL */
	const json_t *effect;        /* {"type", "target", "payload"} as given */
	const char *source_url, *requested_by, *callback_url;   /* NULL when absent */
	const json_t *context;       /* for the approver, as given; NULL when absent */
	const char *owner;           /* the claim's lease owner */
	long long version;
};

/* What in asks for, checked against the contract and the configuration,
 * and the payload that would be sent, built: nothing is read or written.
 * False after answering a refusal (4xx) or a fault into c->resp. True
 * with *errors (new array, empty when the output is valid) and *sent (the
 * payload, new reference, NULL when invalid). */
bool api_output_check(struct api_call *c, const struct api_output_in *in, json_t **sent,
                      json_t **errors) __attribute__((warn_unused_result));
/* The use case: checks in, records an invalid output (422, a repair
 * spent) or hands a valid one to the gate, whose choice decide_output
 * carries out in one transaction (202 awaiting_human with the approvals,
 * or approved with the queued effect). Answers into c->resp as POST
 * /v1/runs/{key}/output does and writes its log lines. */
void api_output_decide(struct api_call *c, const struct api_output_in *in);

/* ---- shared by the output and the approval decision (api_output.c) ---- */

/* The output fields contract k marks loggable, as one compact JSON object
 * keyed by JSON Pointer (malloc'd), or NULL when it marks none that the
 * output has. Nothing else of an output is ever logged. */
char *api_output_loggable(const struct contract *k, const json_t *output);

/* ---- the approval pages' part of the pipeline (api_approve.c) ---- */

/* What every answer under /approve/ carries, pages and the JSON
 * refusals of the pipeline alike: the URL holds a capability. */
void api_approve_security_headers(struct api_call *c);
/* The headers of an approval page. */
void api_approve_headers(struct api_call *c);
/* Whether a person is signed in; when not (or when this server has no
 * pages to show them), answers with a page saying so. */
bool api_approve_signed_in(struct api_call *c);

#endif
