/*
 * fcgi.c — the FastCGI adapter and the worker pool of oncegate-fcgi.
 *
 * The only file that includes fcgiapp.h. Each worker thread owns one
 * FCGX_Request and one database connection for its whole life (fcgi2
 * examples/threaded.c), so a request never waits for a connection and a
 * connection is never shared between threads.
 */
#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fcgiapp.h>
#include <systemd/sd-daemon.h>

#include "api.h"
#include "db.h"
#include "fcgi.h"
#include "caps.h"
#include "digest.h"
#include "log.h"

enum worker_state { WORKER_WAITING, WORKER_BUSY, WORKER_DONE };

struct worker {
	pthread_t thread;
	struct fcgi_pool *pool;
	atomic_int state;
	bool started;
};

struct fcgi_pool {
	int fd;
	const struct config *cfg;
	struct fcgi_shared *shared;
	atomic_bool stopping;
	int nworkers;
	struct worker *workers;
	/* large request bodies being handled (OG_LARGE_CONCURRENT at most) */
	pthread_mutex_t large_lock;
	pthread_cond_t large_free;
	int large;
};

/* Waits for a place among the large requests. */
static void
large_enter(struct fcgi_pool *pool)
{
	pthread_mutex_lock(&pool->large_lock);
	while (pool->large >= OG_LARGE_CONCURRENT)
		pthread_cond_wait(&pool->large_free, &pool->large_lock);
	pool->large++;
	pthread_mutex_unlock(&pool->large_lock);
}

static void
large_leave(struct fcgi_pool *pool)
{
	pthread_mutex_lock(&pool->large_lock);
	pool->large--;
	pthread_cond_signal(&pool->large_free);
	pthread_mutex_unlock(&pool->large_lock);
}

/* Interrupts a worker blocked on an idle kept-alive connection during
 * shutdown; it has nothing to do but make the read return EINTR. */
static void
wake_handler(int sig)
{
	(void)sig;
}

/* The directories of the socket path, made (0755) where they are missing:
 * /run is empty after a boot, and without systemd nobody else makes them. */
static int
make_parent(const char *path, char *err, size_t errlen)
{
	char dir[512];
	const char *slash = strrchr(path, '/');
	char *p;

	if (slash == NULL || slash == path || (size_t)(slash - path) >= sizeof(dir))
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	for (p = dir + 1;; p++) {
		bool last = *p == '\0';

		if (*p != '/' && !last)
			continue;
		*p = '\0';
		if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
			snprintf(err, errlen, "%s: cannot make the socket's directory: %s", dir,
			         strerror(errno));
			return -1;
		}
		if (last)
			return 0;
		*p = '/';
	}
}

int
fcgi_open_socket(const struct config *cfg, bool *inherited, char *err, size_t errlen)
{
	struct stat st;
	uid_t uid = (uid_t)-1;
	gid_t gid = (gid_t)-1;
	mode_t old;
	int fd, n;

	/* libfcgi reads the allowed peers once, in FCGX_Init, and closes
	 * connections from any other address as it accepts them. */
	if (cfg->listen_allow[0] != '\0' && setenv("FCGI_WEB_SERVER_ADDRS", cfg->listen_allow, 1) != 0) {
		snprintf(err, errlen, "setenv: %s", strerror(errno));
		return -1;
	}
	if (FCGX_Init() != 0) {
		snprintf(err, errlen, "FCGX_Init failed");
		return -1;
	}
	/* systemd socket activation (and systemd-socket-activate): the socket
	 * is fd 3, announced by $LISTEN_FDS and $LISTEN_PID; `listen` is then
	 * not used. */
	*inherited = true;
	n = sd_listen_fds(1);
	if (n < 0) {
		snprintf(err, errlen, "sd_listen_fds: %s", strerror(-n));
		return -1;
	}
	if (n > 1) {
		snprintf(err, errlen, "the service manager passed %d sockets; oncegate-fcgi "
		         "takes exactly one (one ListenStream= in the .socket unit)", n);
		return -1;
	}
	if (n == 1) {
		if (sd_is_socket(SD_LISTEN_FDS_START, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
			snprintf(err, errlen, "the socket the service manager passed is not a "
			         "listening stream socket");
			return -1;
		}
		return SD_LISTEN_FDS_START;
	}
	if (cfg->listen[0] == '\0') {
		/* spawn-fcgi hands us the socket on fd 0 */
		if (fstat(0, &st) != 0 || !S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "listen is empty but fd 0 is not a socket; set "
			         "listen to a socket path or start under a FastCGI spawner");
			return -1;
		}
		return 0;
	}
	*inherited = false;
	if (config_listen_is_tcp(cfg->listen)) {
		fd = FCGX_OpenSocket(cfg->listen, cfg->listen_backlog);
		if (fd < 0)
			snprintf(err, errlen, "%s: cannot listen: %s", cfg->listen, strerror(errno));
		return fd;
	}
	/* Started as root to become `user`: the socket is that user's unless
	 * listen_owner names another, as systemd's SocketUser= makes it. */
	if (cfg->listen_owner[0] != '\0' || (geteuid() == 0 && cfg->user[0] != '\0')) {
		const char *owner = cfg->listen_owner[0] != '\0' ? cfg->listen_owner : cfg->user;
		struct passwd *pw = getpwnam(owner);

		if (pw == NULL) {
			snprintf(err, errlen, "%s: no user \"%s\"",
			         cfg->listen_owner[0] != '\0' ? "listen_owner" : "user", owner);
			return -1;
		}
		uid = pw->pw_uid;
	}
	if (cfg->listen_group[0] != '\0') {
		struct group *gr = getgrnam(cfg->listen_group);

		if (gr == NULL) {
			snprintf(err, errlen, "listen_group: no group \"%s\"", cfg->listen_group);
			return -1;
		}
		gid = gr->gr_gid;
	}
	if (make_parent(cfg->listen, err, errlen) != 0)
		return -1;
	/* Nobody may connect before the mode and owner are right. */
	(void)unlink(cfg->listen);
	old = umask(0177);
	fd = FCGX_OpenSocket(cfg->listen, cfg->listen_backlog);
	umask(old);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot listen: %s", cfg->listen, strerror(errno));
		return -1;
	}
	if ((uid != (uid_t)-1 || gid != (gid_t)-1) && chown(cfg->listen, uid, gid) != 0) {
		if (errno == EPERM)
			snprintf(err, errlen, "%s: cannot give the socket to %s%s%s%s%s: only root "
			         "may (start oncegate-fcgi as root with `user` set: it binds the "
			         "socket, then runs as that user), or empty listen_owner and "
			         "listen_group", cfg->listen,
			         uid != (uid_t)-1 ? "user " : "",
			         uid != (uid_t)-1 ? (cfg->listen_owner[0] != '\0' ? cfg->listen_owner
			                                                          : cfg->user) : "",
			         uid != (uid_t)-1 && gid != (gid_t)-1 ? ", " : "",
			         gid != (gid_t)-1 ? "group " : "", gid != (gid_t)-1 ? cfg->listen_group : "");
		else
			snprintf(err, errlen, "%s: chown: %s", cfg->listen, strerror(errno));
		close(fd);
		return -1;
	}
	if (chmod(cfg->listen, (mode_t)cfg->listen_mode) != 0) {
		snprintf(err, errlen, "%s: chmod: %s", cfg->listen, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Reads the body: keeps up to the cap, drains and discards the rest (up to
 * OG_BODY_DRAIN_MAX) so the connection stays usable, and says it was too
 * large. */
static void
read_body(FCGX_Request *fr, char *body, size_t cap, struct http_request *req)
{
	char sink[4096];
	size_t kept = 0, seen = 0;
	int n;

	while (kept < cap && (n = FCGX_GetStr(body + kept, (int)(cap - kept), fr->in)) > 0)
		kept += (size_t)n;
	seen = kept;
	while (seen < OG_BODY_DRAIN_MAX && (n = FCGX_GetStr(sink, sizeof(sink), fr->in)) > 0) {
		seen += (size_t)n;
		req->body_too_large = true;
	}
	body[kept] = '\0';
	req->body = body;
	req->body_len = kept;
}

static const char *
param(FCGX_Request *fr, const char *name)
{
	return FCGX_GetParam(name, fr->envp);
}

static void
fill_request(FCGX_Request *fr, struct http_request *req)
{
	const char *cl;

	memset(req, 0, sizeof(*req));
	req->method = param(fr, "REQUEST_METHOD");
	req->uri = param(fr, "REQUEST_URI");
	req->content_type = param(fr, "CONTENT_TYPE");
	req->authorization = param(fr, "HTTP_AUTHORIZATION");
	req->remote_user = param(fr, "REMOTE_USER");
	req->auth_groups = param(fr, "AUTH_GROUPS");
	req->origin = param(fr, "HTTP_ORIGIN");
	req->sec_fetch_site = param(fr, "HTTP_SEC_FETCH_SITE");
	req->remote_addr = param(fr, "REMOTE_ADDR");
	req->request_id = param(fr, "REQUEST_ID");
	req->idempotency_key = param(fr, "HTTP_IDEMPOTENCY_KEY");
	req->mcp_protocol_version = param(fr, "HTTP_MCP_PROTOCOL_VERSION");
	req->slack_timestamp = param(fr, "HTTP_X_SLACK_REQUEST_TIMESTAMP");
	req->slack_signature = param(fr, "HTTP_X_SLACK_SIGNATURE");
	/* nginx passes a repeated field as repeated parameters, and
	 * FCGX_GetParam sees the first one only. */
	for (char **e = fr->envp; e != NULL && *e != NULL; e++)
		if (strncmp(*e, "HTTP_IDEMPOTENCY_KEY=", 21) == 0)
			req->idempotency_key_fields++;
	if (req->method == NULL)
		req->method = "";
	if (req->uri == NULL || strlen(req->uri) > OG_URI_MAX)
		req->uri = "";
	cl = param(fr, "CONTENT_LENGTH");
	req->content_length = cl != NULL && cl[0] != '\0' ? strtoll(cl, NULL, 10) : -1;
}

/* Is this request nginx's? Being able to connect to the socket is not
 * proof enough (on Debian its group, www-data, also runs PHP-FPM and
 * other sites): nginx sends proxy_secret as the parameter
 * OG_PROXY_SECRET, from a root-only include it read at start. Without
 * it, or with another value, the request is answered 403 before it
 * reaches any handler, so it changes nothing. Compared as SHA-256
 * digests, in constant time. No proxy_secret_file: every request passes
 * (a warning at start says so). */
static bool
from_proxy(FCGX_Request *fr, const struct config *cfg, struct http_response *resp)
{
	unsigned char want[DIGEST_SHA256_LEN], got[DIGEST_SHA256_LEN];
	const char *sent;
	bool ok;

	if (cfg->proxy_secret_file[0] == '\0')
		return true;
	sent = param(fr, "OG_PROXY_SECRET");
	if (sent == NULL)
		sent = "";
	digest_sha256(cfg->proxy_secret != NULL ? cfg->proxy_secret : "",
	              cfg->proxy_secret != NULL ? strlen(cfg->proxy_secret) : 0, want);
	digest_sha256(sent, strlen(sent), got);
	ok = cfg->proxy_secret != NULL && cfg->proxy_secret[0] != '\0' &&
	     digest_equal(want, got, sizeof(want));
	digest_wipe(want, sizeof(want));
	if (ok)
		return true;
	log_event(LOG_LEVEL_WARNING, "responder.not_from_proxy",
	          &(struct log_fields){
	              .detail = sent[0] == '\0' ? "a request without OG_PROXY_SECRET"
	                                        : "a request with a wrong OG_PROXY_SECRET",
	              .hint = "only nginx may reach the responder: it sends the secret of "
	                      "proxy_secret_file; something else connected to the socket" });
	http_problem(resp, 403, "not_from_proxy", "Forbidden",
	             "this socket serves the web server only", NULL);
	return false;
}

static void
send_response(FCGX_Request *fr, const struct http_response *resp)
{
	char line[128];
	int n;

	/* libfcgi's own printf knows no %zu: format here, write raw. */
	n = snprintf(line, sizeof(line), "Status: %d %s\r\n", resp->status,
	             http_reason(resp->status));
	FCGX_PutStr(line, n, fr->out);
	if (resp->content_type != NULL) {
		FCGX_PutS("Content-Type: ", fr->out);
		FCGX_PutS(resp->content_type, fr->out);
		FCGX_PutS("\r\n", fr->out);
	}
	if (resp->headers.len > 0)
		FCGX_PutStr(resp->headers.data, (int)resp->headers.len, fr->out);
	n = snprintf(line, sizeof(line), "Content-Length: %zu\r\n\r\n", resp->body.len);
	FCGX_PutStr(line, n, fr->out);
	if (resp->body.len > 0)
		FCGX_PutStr(resp->body.data, (int)resp->body.len, fr->out);
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct fcgi_pool *pool = w->pool;
	const struct config *cfg = pool->cfg;
	size_t cap = (size_t)cfg->max_body_bytes;
	struct api_ctx ctx = { 0 };
	struct http_request req;
	struct http_response resp;
	FCGX_Request fr;
	char *body;
	bool large;

	body = malloc(cap + 1);
	ctx.db = cfg->pooled_database[0] != '\0'
	             ? db_new_pooled(cfg->pooled_database, cfg->statement_timeout_ms, true)
	             : db_new(cfg->database, cfg->statement_timeout_ms);
	ctx.cfg = cfg;
	http_response_init(&resp);
	if (body == NULL || ctx.db == NULL || FCGX_InitRequest(&fr, pool->fd, FCGI_FAIL_ACCEPT_ON_INTR) != 0) {
		log_event(LOG_LEVEL_ERROR, "responder.worker_failed",
		          &(struct log_fields){ .detail = "out of memory at start" });
		goto out;
	}
	/* Connect now so the first request does not pay for it; a failure
	 * here is not fatal, the connection is retried on demand. */
	if (db_ensure(ctx.db) != DB_OK)
		log_event(LOG_LEVEL_WARNING, "db.unavailable",
		          &(struct log_fields){ .detail = db_error(ctx.db),
		                                .hint = "will reconnect on the next request" });

	while (!atomic_load(&pool->stopping)) {
		atomic_store(&w->state, WORKER_WAITING);
		if (FCGX_Accept_r(&fr) < 0) {
			struct timespec pause = { 0, 10 * 1000 * 1000 };

			if (atomic_load(&pool->stopping))
				break;
			/* EINTR, or a transient accept failure (EMFILE): do not spin */
			nanosleep(&pause, NULL);
			continue;
		}
		atomic_store(&w->state, WORKER_BUSY);
		fill_request(&fr, &req);
		read_body(&fr, body, cap, &req);
		large = req.body_len > OG_LARGE_BYTES;
		if (large)
			large_enter(pool);
		http_response_reset(&resp);
		pthread_rwlock_rdlock(&pool->shared->lock);
		ctx.cfg = pool->shared->cfg;
		ctx.contracts = pool->shared->contracts;
		ctx.pages = pool->shared->pages;
		if (from_proxy(&fr, ctx.cfg, &resp))
			api_handle(&ctx, &req, &resp);
		ctx.cfg = cfg;
		ctx.contracts = NULL;
		ctx.pages = NULL;
		pthread_rwlock_unlock(&pool->shared->lock);
		send_response(&fr, &resp);
		FCGX_Finish_r(&fr);
		if (large)
			large_leave(pool);
		/* What a large request freed stays in this thread's malloc arena
		 * (glibc does not give it back by itself): give it back now. */
		if (large || resp.body.len > OG_LARGE_BYTES) {
			http_response_free(&resp);
			http_response_init(&resp);
			malloc_trim(0);
		}
	}
	FCGX_Free(&fr, 1);
out:
	atomic_store(&w->state, WORKER_DONE);
	http_response_free(&resp);
	db_free(ctx.db);
	free(body);
	return NULL;
}

struct fcgi_pool *
fcgi_pool_start(int fd, const struct config *cfg, struct fcgi_shared *shared, char *err,
                size_t errlen)
{
	struct fcgi_pool *pool;
	struct sigaction sa;
	int i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = wake_handler; /* no SA_RESTART: blocked reads must return */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);

	pool = calloc(1, sizeof(*pool));
	if (pool == NULL || (pool->workers = calloc((size_t)cfg->threads,
	                                           sizeof(*pool->workers))) == NULL) {
		snprintf(err, errlen, "out of memory");
		free(pool);
		return NULL;
	}
	if (shared->cfg->proxy_secret_file[0] == '\0')
		log_event(LOG_LEVEL_WARNING, "responder.no_proxy_secret",
		          &(struct log_fields){
		              .detail = "proxy_secret_file is not set: any process that can "
		                        "connect to the socket can act as nginx",
		              .hint = "set proxy_secret_file and send its secret from nginx as "
		                      "fastcgi_param OG_PROXY_SECRET" });
	pool->fd = fd;
	pthread_mutex_init(&pool->large_lock, NULL);
	pthread_cond_init(&pool->large_free, NULL);
	pool->cfg = cfg;
	pool->shared = shared;
	pool->nworkers = cfg->threads;
	for (i = 0; i < cfg->threads; i++) {
		struct worker *w = &pool->workers[i];
		int rc;

		w->pool = pool;
		atomic_init(&w->state, WORKER_WAITING);
		rc = pthread_create(&w->thread, NULL, worker_main, w);
		if (rc != 0) {
			snprintf(err, errlen, "cannot start worker %d: %s", i, strerror(rc));
			fcgi_pool_stop(pool, 1);
			return NULL;
		}
		w->started = true;
	}
	return pool;
}

int
fcgi_pool_stop(struct fcgi_pool *pool, int grace_seconds)
{
	struct timespec tick = { 0, 50 * 1000 * 1000 };
	time_t deadline = time(NULL) + grace_seconds;
	int i, busy;

	if (pool == NULL)
		return 0;
	atomic_store(&pool->stopping, true);
	FCGX_ShutdownPending();
	/* Threads blocked in accept() are woken by SIGUSR1 below, never by
	 * shutdown(): the listening socket may be shared (systemd's socket
	 * unit keeps it for the next start), and a shut-down listening socket
	 * refuses connections for every process that holds it. */
	for (;;) {
		busy = 0;
		for (i = 0; i < pool->nworkers; i++) {
			struct worker *w = &pool->workers[i];
			int st = atomic_load(&w->state);

			if (!w->started || st == WORKER_DONE)
				continue;
			busy++;
			/* Only idle threads are interrupted; a busy one finishes its
			 * request and sees `stopping` on its own. */
			if (st == WORKER_WAITING)
				pthread_kill(w->thread, SIGUSR1);
		}
		if (busy == 0 || time(NULL) >= deadline)
			break;
		nanosleep(&tick, NULL);
	}
	if (busy == 0) {
		for (i = 0; i < pool->nworkers; i++)
			if (pool->workers[i].started)
				pthread_join(pool->workers[i].thread, NULL);
		pthread_cond_destroy(&pool->large_free);
		pthread_mutex_destroy(&pool->large_lock);
		free(pool->workers);
		free(pool);
	}
	/* Past the deadline the process exits with the stragglers running;
	 * their transactions roll back when their connections close. */
	return busy;
}
