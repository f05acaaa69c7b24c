/*
 * fcgi.h — the FastCGI side of oncegate-fcgi: the listening socket and the
 * fixed pool of worker threads. fcgi.c is the only file that includes
 * fcgiapp.h; it turns each FCGX_Request into a struct http_request.
 */
#ifndef OG_FCGI_H
#define OG_FCGI_H

#include <pthread.h>
#include <stddef.h>

#include "config.h"

struct fcgi_pool;
struct contract_set;
struct page_set;

/* What every worker reads and SIGHUP replaces: a worker holds the read lock
 * for the length of one request, the reloader the write lock for a swap. */
struct fcgi_shared {
	pthread_rwlock_t lock;
	struct contract_set *contracts;
	struct page_set *pages;
};

/* Creates the unix socket named by cfg->listen (mode/owner/group applied),
 * or takes the inherited socket on fd 0 when cfg->listen is empty. */
int fcgi_open_socket(const struct config *cfg, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Starts cfg->threads workers accepting on fd. */
struct fcgi_pool *fcgi_pool_start(int fd, const struct config *cfg,
                                  struct fcgi_shared *shared, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Stops accepting, lets in-flight requests finish for up to grace seconds,
 * then joins the workers. Returns the number still busy at the deadline. */
int fcgi_pool_stop(struct fcgi_pool *pool, int grace_seconds);

#endif
