/*
 * ceiling.h — the loop the two ceiling responders share (ceiling_claim.c,
 * ceiling_select.c): what nginx → libfcgi → libpq → PostgreSQL cost with
 * nothing of oncegate in between. THREADS threads, each with its own libpq
 * connection (PG* environment), accept on the FastCGI socket given on the
 * command line, pull "key" out of the JSON body and run one prepared
 * statement with it; the including file defines SQL (one parameter, the
 * key) and answer(), which writes the HTTP answer from the result.
 *
 *   gcc -O2 -pthread $(pkg-config --cflags libpq) ceiling_claim.c -lfcgi -lpq -o ceiling_claim
 *   ceiling_claim /path/to/socket
 *
 * A measuring instrument for tests/bench/run.sh, not part of the product.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <fcgiapp.h>
#include <libpq-fe.h>

#define THREADS 8    /* the stack's oncegate-fcgi: threads = 8 */
#define BACKLOG 1024 /* its listen_backlog default */

static void answer(FCGX_Request *rq, PGresult *res);
static int sock;

static void *
serve(void *arg)
{
	PGconn *pg = PQconnectdb("");
	PGresult *prep = PQstatus(pg) == CONNECTION_OK ? PQprepare(pg, "s", SQL, 1, NULL) : NULL;
	FCGX_Request rq;
	char body[4096], key[512];

	(void)arg;
	if (PQresultStatus(prep) != PGRES_COMMAND_OK) {
		fprintf(stderr, "ceiling: %s", PQerrorMessage(pg));
		exit(1);
	}
	PQclear(prep);
	FCGX_InitRequest(&rq, sock, 0);
	while (FCGX_Accept_r(&rq) >= 0) {
		int n = FCGX_GetStr(body, sizeof(body) - 1, rq.in);
		const char *k, *e, *params[1] = { key };
		PGresult *res;

		body[n > 0 ? n : 0] = '\0';
		k = strstr(body, "\"key\":\"");
		e = k != NULL ? strchr(k + 7, '"') : NULL;
		if (e == NULL || e - (k + 7) >= (long)sizeof(key)) {
			FCGX_FPrintF(rq.out, "Status: 400\r\nContent-Type: application/json\r\n\r\n{}");
			FCGX_Finish_r(&rq);
			continue;
		}
		memcpy(key, k + 7, (size_t)(e - (k + 7)));
		key[e - (k + 7)] = '\0';
		res = PQexecPrepared(pg, "s", 1, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			FCGX_FPrintF(rq.out, "Status: 500\r\nContent-Type: text/plain\r\n\r\n%s",
			             PQerrorMessage(pg));
		else
			answer(&rq, res);
		PQclear(res);
		FCGX_Finish_r(&rq);
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	pthread_t t[THREADS];
	int i;

	if (argc != 2 || FCGX_Init() != 0 || (sock = FCGX_OpenSocket(argv[1], BACKLOG)) < 0) {
		fprintf(stderr, "usage: %s SOCKET (PG* in the environment)\n", argv[0]);
		return 2;
	}
	chmod(argv[1], 0666);
	for (i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, serve, NULL);
	for (i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	return 0;
}
