/*
 * listen.c — the dispatcher's LISTEN connection; see listen.h.
 */
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>

#include "listen.h"

/* NULL while the database is away. */
static PGconn *
listen_connect(const char *conninfo)
{
	PGconn *c = PQconnectdb(conninfo);
	PGresult *r;

	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return NULL;
	}
	r = PQexec(c, dispatch_listen_sql());
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		PQclear(r);
		PQfinish(c);
		return NULL;
	}
	PQclear(r);
	return c;
}

void
listen_wait(struct listen *l, struct dispatch_shared *s, const char *conninfo, int poll_ms,
            long long now_ms)
{
	struct pollfd pfd = { -1, POLLIN, 0 };

	if (l->conn == NULL && now_ms - l->last_try_ms >= 1000) {
		l->last_try_ms = now_ms;
		l->conn = listen_connect(conninfo);
		if (l->conn != NULL)
			dispatch_wake(s); /* what was enqueued while away */
	}
	if (l->conn != NULL)
		pfd.fd = PQsocket(l->conn);
	if (poll(&pfd, pfd.fd >= 0 ? 1 : 0, poll_ms) > 0 && l->conn != NULL) {
		PGnotify *n;
		bool woke = false;

		if (!PQconsumeInput(l->conn)) {
			PQfinish(l->conn);
			l->conn = NULL;
		} else {
			while ((n = PQnotifies(l->conn)) != NULL) {
				PQfreemem(n);
				woke = true;
			}
			if (woke)
				dispatch_wake(s);
		}
	}
	if (l->conn != NULL && PQstatus(l->conn) != CONNECTION_OK)
		listen_close(l);
}

void
listen_close(struct listen *l)
{
	if (l->conn != NULL)
		PQfinish(l->conn);
	l->conn = NULL;
}
