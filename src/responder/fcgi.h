/*
 * fcgi.h — the FastCGI side of oncegate-fcgi: the listening socket and the
 * fixed pool of worker threads. fcgi.c is the only file that includes
 * fcgiapp.h; it turns each FCGX_Request into a struct http_request.
 */
#ifndef OG_FCGI_H
#define OG_FCGI_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"

struct fcgi_pool;
struct contract_set;
struct page_set;

/* What every worker reads and SIGHUP replaces: a worker holds the read lock
 * for the length of one request, the reloader the write lock for a swap. */
struct fcgi_shared {
	pthread_rwlock_t lock;
	/* the settings a request reads (public_url, csrf_secret, targets,
	 * leases, …); the socket, threads, body cap and database come from
	 * the configuration at start */
	const struct config *cfg;
	struct contract_set *contracts;
	struct page_set *pages;
};

/* Takes the socket systemd passed (sd_listen_fds: fd 3), else creates the
 * unix socket or TCP socket cfg->listen names (mode/owner/group applied),
 * else, when cfg->listen is empty, takes the socket a spawner left on fd 0.
 * *inherited: the socket is not ours to remove at exit. */
int fcgi_open_socket(const struct config *cfg, bool *inherited, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Starts cfg->threads workers accepting on fd. */
struct fcgi_pool *fcgi_pool_start(int fd, const struct config *cfg,
                                  struct fcgi_shared *shared, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Stops accepting, lets in-flight requests finish for up to grace seconds,
 * then joins the workers. Returns the number still busy at the deadline. */
int fcgi_pool_stop(struct fcgi_pool *pool, int grace_seconds);

#endif
