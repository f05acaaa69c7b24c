/*
 * api.h — the HTTP surface of oncegate-fcgi: one static route table that
 * declares each route's method, path, authentication and body rules, and
 * the handlers behind it. Anything the table does not declare never reaches
 * a handler.
 */
#ifndef OG_API_H
#define OG_API_H

#include "config.h"
#include "db.h"
#include "http.h"


/* One per worker thread. */
struct contract_set;
struct page_set;

struct api_ctx {
	struct db *db;               /* this thread's connection */
	const struct config *cfg;
	const struct contract_set *contracts;  /* shared, read-only */
	const struct page_set *pages;          /* shared, read-only */
	/* Whether this thread's last claim was of a new key: the guess for
	 * the next one (ledger_claim's expect_new). */
	bool claim_was_new;
};

/* Answers one request into resp; never fails the process. */
void api_handle(struct api_ctx *ctx, const struct http_request *req,
                struct http_response *resp);

/* Route matching, exposed for the unit suites. Returns the route's pattern
 * (e.g. "/v1/runs/{key}/lease") and the percent-decoded key in key (size
 * keylen), or NULL with *status 404/405/400 and *allow set for 405. */
const char *api_route(const char *method, const char *uri, char *key, size_t keylen,
                      int *status, const char **allow);
/* 1–200 printable characters (valid UTF-8, no control
 * characters). */
int api_key_valid(const char *key, size_t len);
/* The rule a key must meet to be claimed: api_key_valid, and carried by
 * the URL path unchanged (no "." or ".." between slashes). NULL when the
 * key may be claimed, else what is wrong, in words for the caller. */
const char *api_key_claim_problem(const char *key, size_t len);

#endif
