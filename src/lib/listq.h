/*
 * listq.h — one page of a list the API answers (GET /v1/runs, GET
 * /v1/approvals): a client's rows, filtered, oldest first, after a keyset
 * cursor. The owners (ledger.c, gate.c) read it; api_lists.c fills it from
 * the query string and makes the next cursor from the last row.
 */
#ifndef OG_LISTQ_H
#define OG_LISTQ_H

struct og_list_query {
	long long client_id;   /* a client sees its own rows only */
	const char *state;     /* NULL: any */
	const char *since;     /* RFC 3339, created at or after; NULL: any */
	const char *contract;  /* NULL: any */
	long long after_us;    /* the cursor: after (created_at in µs, */
	const char *after_key; /*  this key or id); after_key NULL: from the start */
	int limit;             /* rows in the page */
};

#endif
