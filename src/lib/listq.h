/*
 * listq.h — one page of a list the API answers (GET /v1/runs, GET
 * /v1/approvals): a client's rows, filtered, oldest first, after a keyset
 * cursor. The owners (ledger.c, gate.c) read it; api_lists.c fills it from
 * the query string and makes the next cursor from the last row.
 */
#ifndef OG_LISTQ_H
#define OG_LISTQ_H

#include <stdio.h>

struct og_list_query {
	long long client_id;   /* a client sees its own rows only */
	const char *state;     /* NULL: any */
	const char *since;     /* RFC 3339, created at or after; NULL: any */
	const char *contract;  /* NULL: any */
	long long after_us;    /* the cursor: after (created_at in µs, */
	const char *after_key; /*  this key or id); after_key NULL: from the start */
	int limit;             /* rows in the page */
};

/* The seven parameters both owners' page statements take, in this order:
 * client, state, since, contract, cursor time (µs), cursor key, limit. */
struct og_list_params {
	char client[24], after[24], limit[16];
	const char *p[7];
};

static inline void
og_list_params(const struct og_list_query *q, struct og_list_params *lp)
{
	snprintf(lp->client, sizeof(lp->client), "%lld", q->client_id);
	snprintf(lp->after, sizeof(lp->after), "%lld", q->after_us);
	snprintf(lp->limit, sizeof(lp->limit), "%d", q->limit);
	lp->p[0] = lp->client;
	lp->p[1] = q->state;
	lp->p[2] = q->since;
	lp->p[3] = q->contract;
	lp->p[4] = q->after_key != NULL ? lp->after : NULL;
	lp->p[5] = q->after_key;
	lp->p[6] = lp->limit;
}

#endif
