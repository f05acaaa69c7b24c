/*
 * config.c — the configuration as one declarative table.
 *
 * Each row names a setting, its type, default, bounds and whether it is a
 * secret; the loader, the validator and the dumper all walk the same table.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/stat.h>

#include <libpq-fe.h>

#include "config.h"
#include "caps.h"
#include "classify.h"
#include "digest.h"
#include "log.h"
#include "provider.h"
#include "service.h"

enum config_type { CT_STRING, CT_INT, CT_OCTAL };

struct config_row {
	const char *name;
	enum config_type type;
	size_t offset;
	const char *sdef;  /* default of a string */
	long idef;         /* default of a number */
	long min, max;     /* numbers only */
	bool secret;       /* never printed */
};

#define ROW_S(n, d, s) { #n, CT_STRING, offsetof(struct config, n), d, 0, 0, 0, s }
#define ROW_I(n, d, lo, hi) { #n, CT_INT, offsetof(struct config, n), NULL, d, lo, hi, false }
#define ROW_O(n, d) { #n, CT_OCTAL, offsetof(struct config, n), NULL, d, 0, 07777, false }

static const struct config_row rows[] = {
	ROW_S(listen, "/run/oncegate/fcgi.sock", false),
	ROW_O(listen_mode, 0660),
	ROW_S(listen_owner, "", false),
	ROW_S(listen_group, "", false),
	ROW_S(user, "", false),
	ROW_I(listen_backlog, OG_LISTEN_BACKLOG, 1, 65535),
	ROW_S(listen_allow, "", false),
	ROW_I(threads, OG_THREADS_DEFAULT, 1, OG_THREADS_MAX),
	ROW_I(max_body_bytes, OG_BODY_MAX_DEFAULT, 1024, OG_BODY_MAX_LIMIT),
	ROW_I(retry_after_seconds, OG_RETRY_AFTER_DEFAULT, 1, 3600),
	ROW_I(shutdown_grace_seconds, OG_SHUTDOWN_GRACE_S, 1, 3600),
	/* a conninfo may carry a password */
	ROW_S(database, "", true),
	ROW_S(pooled_database, "", true),
	ROW_I(statement_timeout_ms, OG_DB_STATEMENT_TIMEOUT_MS, 0, 3600000),
	ROW_I(lease_default_seconds, OG_LEASE_DEFAULT, 1, 7 * 86400),
	ROW_I(lease_max_seconds, OG_LEASE_MAX, 1, 7 * 86400),
	ROW_I(lease_cap_seconds, OG_LEASE_CAP, 1, 30 * 86400),
	ROW_I(duplicate_window_days, 0, 0, OG_DUPLICATE_WINDOW_MAX_DAYS),
	ROW_S(log_file, "-", false),
	ROW_S(dispatch_log_file, "", false),
	ROW_S(log_level, "info", false),
	ROW_S(sql_dir, OG_PKGDATADIR "/sql", false),
	ROW_S(contracts_dir, OG_SYSCONFDIR "/oncegate/contracts", false),
	ROW_S(templates_dir, OG_PKGDATADIR "/templates", false),
	ROW_S(public_url, "", false),
	ROW_S(csrf_secret, "", true),
	ROW_S(csrf_secret_file, "", false),
	ROW_S(proxy_secret_file, "", false),
	ROW_S(auth_groups_separator, ",", false),
	ROW_S(callback_origins, "", false),
	ROW_I(dispatch_workers, 4, 1, 256),
	ROW_I(dispatch_batch, 8, 1, 1000),
	ROW_I(dispatch_lease_seconds, 60, 5, 86400),
	ROW_I(dispatch_poll_ms, 1000, 10, 600000),
	ROW_I(dispatch_shutdown_seconds, 20, 1, 3600),
	ROW_I(reconcile_interval_seconds, 30, 1, 86400),
	ROW_I(retention_days, 30, 1, 3650),
};

/* The settings of a `[target NAME]` section. */
#define TROW_S(n, d) { #n, CT_STRING, offsetof(struct config_target, n), d, 0, 0, 0, false }
#define TROW_I(n, d, lo, hi) { #n, CT_INT, offsetof(struct config_target, n), NULL, d, lo, hi, false }

static const struct config_row target_rows[] = {
	TROW_S(kind, "http"),
	TROW_S(url, ""),
	TROW_S(lookup_url, ""),
	TROW_S(credentials_env, ""),
	TROW_I(idempotency_key, 0, 0, 1),
	TROW_I(connect_timeout_ms, 3000, 1, 600000),
	TROW_I(timeout_ms, 10000, 1, 600000),
	TROW_I(response_cap_bytes, 65536, 256, 16 * 1024 * 1024),
	TROW_I(rate_per_second, 0, 0, 100000),
	TROW_I(max_attempts, 5, 1, 100),
	TROW_I(base_ms, 500, 1, 3600000),
	TROW_I(cap_ms, 60000, 1, 86400000),
	TROW_I(max_elapsed_s, 3600, 1, 7 * 86400),
	TROW_I(jitter_percent, 20, 0, 100),
	TROW_S(provider_id_header, ""),
	TROW_S(provider_id_pointer, "/id"),
	TROW_S(rejection_pointer, ""),
	TROW_S(mail_from, "oncegate@localhost"),
};

static void
errf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static char **
str_slot(void *base, const struct config_row *r)
{
	return (char **)(void *)((char *)base + r->offset);
}

static int *
int_slot(void *base, const struct config_row *r)
{
	return (int *)(void *)((char *)base + r->offset);
}

#define NROWS(t) (sizeof(t) / sizeof((t)[0]))

/* Sets one setting from text; -1 with a message when the value is bad. */
static int
config_set(void *c, const struct config_row *r, const char *value,
           char *err, size_t errlen)
{
	char *end, *copy;
	long v;

	switch (r->type) {
	case CT_STRING:
		copy = strdup(value);
		if (copy == NULL) {
			errf(err, errlen, "out of memory");
			return -1;
		}
		free(*str_slot(c, r));
		*str_slot(c, r) = copy;
		return 0;
	case CT_INT:
	case CT_OCTAL:
		errno = 0;
		v = strtol(value, &end, r->type == CT_OCTAL ? 8 : 10);
		if (errno != 0 || end == value || *end != '\0') {
			errf(err, errlen, "%s: \"%s\" is not %s", r->name, value,
			     r->type == CT_OCTAL ? "an octal mode" : "an integer");
			return -1;
		}
		if (v < r->min || v > r->max) {
			errf(err, errlen, "%s: %ld is out of range %ld..%ld", r->name, v,
			     r->min, r->max);
			return -1;
		}
		*int_slot(c, r) = (int)v;
		return 0;
	}
	return -1;
}

static const struct config_row *
config_find(const struct config_row *table, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(table[i].name, name) == 0)
			return &table[i];
	return NULL;
}

static void
rows_defaults(void *base, const struct config_row *table, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (table[i].type != CT_STRING)
			*int_slot(base, &table[i]) = (int)table[i].idef;
		else if (config_set(base, &table[i], table[i].sdef, NULL, 0) != 0)
			abort(); /* out of memory at start-up */
	}
}

static void
rows_free(void *base, const struct config_row *table, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (table[i].type == CT_STRING) {
			free(*str_slot(base, &table[i]));
			*str_slot(base, &table[i]) = NULL;
		}
}

void
config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	rows_defaults(c, rows, NROWS(rows));
}

void
config_free(struct config *c)
{
	int i;

	if (c == NULL)
		return;
	rows_free(c, rows, NROWS(rows));
	if (c->proxy_secret != NULL)
		digest_wipe(c->proxy_secret, strlen(c->proxy_secret));
	free(c->proxy_secret);
	c->proxy_secret = NULL;
	for (i = 0; i < c->ntargets; i++) {
		rows_free(&c->targets[i], target_rows, NROWS(target_rows));
		free(c->targets[i].name);
		c->targets[i].name = NULL;
	}
	c->ntargets = 0;
}

static char *
trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* `[target NAME]`: NAME is [a-z0-9_]{1,64}, unique. */
static int
config_section(struct config *c, char *line, char *err, size_t errlen)
{
	char *end = strchr(line, ']'), *name;
	struct config_target *t;
	size_t i, n;

	if (end == NULL || *trim(end + 1) != '\0') {
		errf(err, errlen, "expected `[target NAME]`");
		return -1;
	}
	*end = '\0';
	name = trim(line + 1);
	if (strncmp(name, "target", 6) != 0 || (name[6] != ' ' && name[6] != '\t')) {
		errf(err, errlen, "unknown section \"[%.64s]\" (only [target NAME])", name);
		return -1;
	}
	name = trim(name + 6);
	n = strlen(name);
	if (n == 0 || n > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != n) {
		errf(err, errlen, "target name \"%.64s\" must be 1-64 of a-z 0-9 _", name);
		return -1;
	}
	for (i = 0; i < (size_t)c->ntargets; i++)
		if (strcmp(c->targets[i].name, name) == 0) {
			errf(err, errlen, "target \"%s\" defined twice", name);
			return -1;
		}
	if (c->ntargets == CONFIG_TARGETS_MAX) {
		errf(err, errlen, "more than %d targets", CONFIG_TARGETS_MAX);
		return -1;
	}
	t = &c->targets[c->ntargets];
	memset(t, 0, sizeof(*t));
	rows_defaults(t, target_rows, NROWS(target_rows));
	if ((t->name = strdup(name)) == NULL) {
		rows_free(t, target_rows, NROWS(target_rows));
		errf(err, errlen, "out of memory");
		return -1;
	}
	c->ntargets++;
	return 0;
}

const struct config_target *
config_target(const struct config *c, const char *name)
{
	int i;

	for (i = 0; name != NULL && i < c->ntargets; i++)
		if (strcmp(c->targets[i].name, name) == 0)
			return &c->targets[i];
	return NULL;
}

/* The decision callback's target, when the file names none: made from
 * callback_origins (kind http, each origin a base the resume URL must be
 * under), so that one setting admits an n8n both when its workflow hands
 * in a callback_url and when the dispatcher calls it back. */
static int
callback_target_implied(struct config *c, char *err, size_t errlen)
{
	char header[] = "[target callback]";
	struct config_target *t;
	char *bases, *p;
	int rc;

	if (c->callback_origins[0] == '\0' || config_target(c, "callback") != NULL)
		return 0;
	if (config_section(c, header, err, errlen) != 0)
		return -1;
	t = &c->targets[c->ntargets - 1];
	if ((bases = strdup(c->callback_origins)) == NULL) {
		errf(err, errlen, "out of memory");
		return -1;
	}
	for (p = bases; *p != '\0'; p++)
		if (*p == ',' || *p == '\t')
			*p = ' ';
	rc = config_set(t, config_find(target_rows, NROWS(target_rows), "kind"), "http", err,
	                errlen);
	if (rc == 0)
		rc = config_set(t, config_find(target_rows, NROWS(target_rows), "url"), bases, err,
		                errlen);
	free(bases);
	return rc;
}


/* The origin of an http(s) URL: scheme://authority, lowercased scheme
 * and host; 0 when url is not an absolute http(s) URL. */
static size_t
url_origin(const char *url, char *out, size_t outlen)
{
	const char *p;
	size_t n, i;

	if (strncasecmp(url, "https://", 8) == 0)
		p = url + 8;
	else if (strncasecmp(url, "http://", 7) == 0)
		p = url + 7;
	else
		return 0;
	n = (size_t)(p - url) + strcspn(p, "/?#");
	if (n == (size_t)(p - url) || n >= outlen || memchr(url, '@', n) != NULL)
		return 0;
	for (i = 0; i < n; i++)
		out[i] = (char)tolower((unsigned char)url[i]);
	out[n] = '\0';
	return n;
}

bool
config_callback_allowed(const struct config *c, const char *url)
{
	char origin[512], allowed[512];
	const char *p = c->callback_origins;

	if (url == NULL || url_origin(url, origin, sizeof(origin)) == 0)
		return false;
	while (*p != '\0') {
		size_t n;

		p += strspn(p, " \t,");
		n = strcspn(p, " \t,");
		if (n > 0 && n < sizeof(allowed)) {
			size_t m = n;

			memcpy(allowed, p, m);
			allowed[m] = '\0';
			while (m > 0 && allowed[m - 1] == '/')
				allowed[--m] = '\0';
			if (url_origin(allowed, allowed, sizeof(allowed)) > 0 &&
			    strcmp(allowed, origin) == 0)
				return true;
		}
		p += n;
	}
	return false;
}


bool
config_callback_refusal(const struct config *c, const char *url, char *msg, size_t len)
{
	char origin[512];

	if (config_callback_allowed(c, url))
		return false;
	if (url == NULL || url_origin(url, origin, sizeof(origin)) == 0)
		snprintf(msg, len, "callback_url must be an http(s) URL with a host");
	else if (c->callback_origins[0] == '\0')
		snprintf(msg, len, "callback_url's origin %s is refused: oncegate has no "
		         "callback_origins; add %s to callback_origins in oncegate.conf and "
		         "reload", origin, origin);
	else
		snprintf(msg, len, "callback_url's origin %s is not one of oncegate's "
		         "callback_origins; add %s to callback_origins in oncegate.conf and "
		         "reload, or set n8n's WEBHOOK_URL to an origin listed there", origin,
		         origin);
	return true;
}

/* Parses `name = value`, with an optional double-quoted value in which \"
 * and \\ are escapes. Returns -1 with a message on a syntax error. */
static int
config_parse_line(char *line, char **name, char **value, char *err, size_t errlen)
{
	char *eq, *v, *o;

	eq = strchr(line, '=');
	if (eq == NULL) {
		errf(err, errlen, "expected `name = value`");
		return -1;
	}
	*eq = '\0';
	*name = trim(line);
	v = trim(eq + 1);
	if (**name == '\0') {
		errf(err, errlen, "missing setting name before '='");
		return -1;
	}
	if (*v == '"') {
		o = ++v;
		*value = v;
		for (; *v != '"'; v++) {
			if (*v == '\0') {
				errf(err, errlen, "unterminated quoted value");
				return -1;
			}
			if (*v == '\\' && (v[1] == '"' || v[1] == '\\'))
				v++;
			*o++ = *v;
		}
		*o = '\0';
		if (*trim(v + 1) != '\0') {
			errf(err, errlen, "text after the closing quote");
			return -1;
		}
		return 0;
	}
	/* unquoted: a '#' starts a comment */
	o = strchr(v, '#');
	if (o != NULL)
		*o = '\0';
	*value = trim(v);
	return 0;
}

/* Where a validation error is: the setting (and its target) it names. */
struct where {
	const char *target;
	const char *name;
};

static int validate_at(const struct config *c, struct where *w, char *err, size_t errlen);
static void errf_at(char *err, size_t errlen, const char *path, int line, const char *msg);

int
config_load(const char *path, struct config *c, char *err, size_t errlen)
{
	char line[OG_CONFIG_LINE_MAX + 2];
	char msg[512];
	FILE *f;
	int lineno = 0, rc = -1;

	f = fopen(path, "r");
	if (f == NULL) {
		errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	while (!feof(f)) {
		const struct config_row *r;
		struct config_target *target;
		char *name, *value, *s;
		size_t n = 0;
		int ch = 0;

		/* Byte by byte, so a NUL cannot silently cut a line short (fgets
		 * would hand us the text before it and drop the rest). */
		while (n < sizeof(line) - 1 && (ch = getc(f)) != EOF) {
			line[n++] = (char)ch;
			if (ch == '\n')
				break;
		}
		if (n == 0)
			break;
		line[n] = '\0';
		lineno++;
		if (n > OG_CONFIG_LINE_MAX || (n == sizeof(line) - 1 && line[n - 1] != '\n')) {
			errf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
			     OG_CONFIG_LINE_MAX);
			goto out;
		}
		if (memchr(line, '\0', n) != NULL) {
			errf(err, errlen, "%s:%d: NUL byte in line", path, lineno);
			goto out;
		}
		s = trim(line);
		if (*s == '\0' || *s == '#')
			continue;
		if (*s == '[') {
			if (config_section(c, s, msg, sizeof(msg)) != 0) {
				errf(err, errlen, "%s:%d: %s", path, lineno, msg);
				goto out;
			}
			continue;
		}
		if (config_parse_line(s, &name, &value, msg, sizeof(msg)) != 0) {
			errf(err, errlen, "%s:%d: %s", path, lineno, msg);
			goto out;
		}
		if (strlen(value) > OG_CONFIG_VALUE_MAX) {
			errf(err, errlen, "%s:%d: %s: value longer than %d bytes", path,
			     lineno, name, OG_CONFIG_VALUE_MAX);
			goto out;
		}
		if (c->ntargets > 0) {
			/* inside a [target] section: its settings only */
			target = &c->targets[c->ntargets - 1];
			r = config_find(target_rows, NROWS(target_rows), name);
		} else {
			target = NULL;
			r = config_find(rows, NROWS(rows), name);
		}
		if (r == NULL) {
			errf(err, errlen, "%s:%d: unknown setting \"%.64s\"%s", path, lineno, name,
			     target != NULL ? " in a [target] section" : "");
			goto out;
		}
		if (config_set(target != NULL ? (void *)target : (void *)c, r, value, msg,
		               sizeof(msg)) != 0) {
			errf(err, errlen, "%s:%d: %s", path, lineno, msg);
			goto out;
		}
	}
	if (ferror(f)) {
		errf(err, errlen, "%s: read error", path);
		goto out;
	}
	if (callback_target_implied(c, msg, sizeof(msg)) != 0) {
		errf(err, errlen, "%s: %s", path, msg);
		goto out;
	}
	{
		struct where w;

		if (validate_at(c, &w, msg, sizeof(msg)) != 0) {
			errf_at(err, errlen, path, config_line(path, w.target, w.name), msg);
			goto out;
		}
	}
	rc = 0;
out:
	fclose(f);
	return rc;
}

bool
config_listen_is_tcp(const char *listen)
{
	return listen[0] != '\0' && listen[0] != '/';
}

/* A canonical dotted-quad IPv4 address of len bytes (libfcgi compares the
 * peer's inet_ntoa() text with listen_allow's items as strings). */
static bool
ipv4_canonical(const char *s, size_t len)
{
	char in[INET_ADDRSTRLEN], out[INET_ADDRSTRLEN];
	struct in_addr a;

	if (len == 0 || len >= sizeof(in))
		return false;
	memcpy(in, s, len);
	in[len] = '\0';
	return inet_pton(AF_INET, in, &a) == 1 &&
	       inet_ntop(AF_INET, &a, out, sizeof(out)) != NULL && strcmp(in, out) == 0;
}

/* listen = IPV4:PORT. FastCGI has no authentication and the responder
 * trusts the identity nginx passes, so a TCP socket needs listen_allow:
 * the addresses of the web servers allowed to connect. */
static int
check_listen_tcp(const struct config *c, char *err, size_t errlen)
{
	const char *colon = strrchr(c->listen, ':'), *p, *item;
	char *end;
	long port;

	if (colon == NULL || !ipv4_canonical(c->listen, (size_t)(colon - c->listen))) {
		errf(err, errlen, "listen: \"%s\" is neither an absolute socket path nor "
		     "IPV4:PORT", c->listen);
		return -1;
	}
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (!isdigit((unsigned char)colon[1]) || *end != '\0' || errno != 0 || port < 1 ||
	    port > 65535) {
		errf(err, errlen, "listen: \"%s\": the port must be 1-65535", c->listen);
		return -1;
	}
	if (c->listen_allow[0] == '\0') {
		errf(err, errlen, "listen on TCP needs listen_allow, the IPv4 addresses of "
		     "the web servers that may connect (FastCGI has no authentication)");
		return -1;
	}
	for (item = c->listen_allow; ; item = p + 1) {
		p = strchr(item, ',');
		if (!ipv4_canonical(item, p != NULL ? (size_t)(p - item) : strlen(item))) {
			errf(err, errlen, "listen_allow: \"%s\" is not a comma-separated list "
			     "of IPv4 addresses", c->listen_allow);
			return -1;
		}
		if (p == NULL)
			break;
	}
	return 0;
}

#define AT(t, n) (w->target = (t), w->name = (n))

/* Does url start with scheme (its first four letters, as before: "http"
 * takes https too)? */
static bool
scheme_is(const char *url, const char *scheme)
{
	return strncmp(url, scheme, strlen(scheme)) == 0;
}

/* "http(s):// for kind http, smtp(s):// for kind smtp" */
static void
schemes(char *out, size_t outlen)
{
	const struct provider *pv;
	size_t i, len = 0;

	out[0] = '\0';
	for (i = 0; (pv = provider_at(i)) != NULL && len < outlen; i++)
		len += (size_t)snprintf(out + len, outlen - len, "%s%s(s):// for kind %s",
		                        i > 0 ? ", " : "", pv->scheme, pv->kind);
}

static int
validate_at(const struct config *c, struct where *w, char *err, size_t errlen)
{
	AT(NULL, NULL);
	if (c->lease_default_seconds > c->lease_max_seconds) {
		AT(NULL, "lease_default_seconds");
		errf(err, errlen, "lease_default_seconds (%d) is above lease_max_seconds (%d)",
		     c->lease_default_seconds, c->lease_max_seconds);
		return -1;
	}
	if (log_level_parse(c->log_level) < 0) {
		AT(NULL, "log_level");
		errf(err, errlen, "log_level: \"%s\" is not one of debug, info, notice, "
		     "warning, error, alert", c->log_level);
		return -1;
	}
	for (int i = 0; i < c->ntargets; i++) {
		const struct config_target *t = &c->targets[i];

		const struct provider *pv = provider_of(t);
		char kinds[256];

		if (pv == NULL) {
			provider_kinds(-1, kinds, sizeof(kinds));
			AT(t->name, "kind");
			errf(err, errlen, "target %s: kind \"%s\" is not %s", t->name, t->kind, kinds);
			return -1;
		}
		if (t->url[0] == '\0') {
			AT(t->name, "url");
			errf(err, errlen, "target %s: url is required", t->name);
			return -1;
		}
		if (t->base_ms > t->cap_ms) {
			AT(t->name, "base_ms");
			errf(err, errlen, "target %s: base_ms is above cap_ms", t->name);
			return -1;
		}
		/* A URL scheme the kind cannot speak would fail every send. */
		if (!scheme_is(t->url, pv->scheme) ||
		    (t->lookup_url[0] != '\0' && !scheme_is(t->lookup_url, "http"))) {
			schemes(kinds, sizeof(kinds));
			AT(t->name, "url");
			errf(err, errlen, "target %s: url must be %s; lookup_url http(s)://", t->name,
			     kinds);
			return -1;
		}
		if ((t->rejection_pointer[0] != '\0' &&
		     !classify_pointer_valid(t->rejection_pointer)) ||
		    (t->provider_id_pointer[0] != '\0' && t->provider_id_pointer[0] != '/')) {
			AT(t->name, t->rejection_pointer[0] != '\0' &&
			   !classify_pointer_valid(t->rejection_pointer) ? "rejection_pointer"
			                                                 : "provider_id_pointer");
			errf(err, errlen, "target %s: rejection_pointer and provider_id_pointer must "
			     "be JSON Pointers (\"/field\")", t->name);
			return -1;
		}
		if (t->credentials_env[0] != '\0' && strspn(t->credentials_env,
		    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
		    strlen(t->credentials_env)) {
			AT(t->name, "credentials_env");
			errf(err, errlen, "target %s: credentials_env must name an environment "
			     "variable", t->name);
			return -1;
		}
	}
	if (c->csrf_secret[0] != '\0' && c->csrf_secret_file[0] != '\0') {
		AT(NULL, "csrf_secret");
		errf(err, errlen, "csrf_secret and csrf_secret_file are both set: keep one "
		     "(the file, so that the dispatcher reads no responder secret)");
		return -1;
	}
	if (c->csrf_secret[0] != '\0' && strlen(c->csrf_secret) < 32) {
		AT(NULL, "csrf_secret");
		errf(err, errlen, "csrf_secret must be at least 32 characters");
		return -1;
	}
	/* One character that no group name is made of: a letter, digit or
	 * control character would cut names apart. */
	if (strlen(c->auth_groups_separator) != 1 ||
	    (!ispunct((unsigned char)c->auth_groups_separator[0]) &&
	     c->auth_groups_separator[0] != ' ')) {
		AT(NULL, "auth_groups_separator");
		errf(err, errlen, "auth_groups_separator must be one punctuation character or a "
		     "space (default \",\", as oauth2-proxy joins groups)");
		return -1;
	}
	if (c->public_url[0] != '\0' && strncmp(c->public_url, "https://", 8) != 0 &&
	    strncmp(c->public_url, "http://", 7) != 0) {
		AT(NULL, "public_url");
		errf(err, errlen, "public_url must start with https:// (or http:// for a local stack)");
		return -1;
	}
	AT(NULL, "listen");
	if (c->listen[0] != '\0' && c->listen[0] != '/' && check_listen_tcp(c, err, errlen) != 0)
		return -1;
	if (c->listen_allow[0] != '\0' && !config_listen_is_tcp(c->listen)) {
		AT(NULL, "listen_allow");
		errf(err, errlen, "listen_allow applies to a TCP listen (HOST:PORT) only");
		return -1;
	}
	return 0;
}

int
config_validate(const struct config *c, char *err, size_t errlen)
{
	struct where w;

	return validate_at(c, &w, err, errlen);
}

/* Does line (trimmed) set name: `name` then blanks then '='? */
static bool
line_sets(const char *line, const char *name)
{
	size_t n = strlen(name);

	if (strncmp(line, name, n) != 0)
		return false;
	line += n;
	while (*line == ' ' || *line == '\t')
		line++;
	return *line == '=';
}

int
config_line(const char *path, const char *target, const char *name)
{
	char line[OG_CONFIG_LINE_MAX + 2], header[96];
	/* 0: before any section, 1: in target's section, 2: in another */
	int lineno = 0, found = 0, header_line = 0, where = 0;
	FILE *f;

	header[0] = '\0';
	if (target != NULL)
		snprintf(header, sizeof(header), "[target %s]", target);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *s = trim(line);

		lineno++;
		if (*s == '[') {
			where = target != NULL && strcmp(s, header) == 0 ? 1 : 2;
			if (where == 1)
				header_line = lineno;
			continue;
		}
		if (name != NULL && where == (target != NULL ? 1 : 0) && line_sets(s, name))
			found = lineno;
	}
	fclose(f);
	return found > 0 ? found : header_line;
}

/* "path:LINE: " when line is known, else "path: ". */
static void
errf_at(char *err, size_t errlen, const char *path, int line, const char *msg)
{
	if (line > 0)
		errf(err, errlen, "%s:%d: %s", path, line, msg);
	else
		errf(err, errlen, "%s: %s", path, msg);
}

/* Reads the one-line secret of path into out (at least
 * OG_SECRET_FILE_MAX + 1 bytes); -1 with a message naming the file. */
static int
secret_file_read(const char *name, const char *path, char *out, char *err, size_t errlen)
{
	static const char allowed[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                              "0123456789+/=_.-";
	struct stat st;
	size_t n = 0;
	FILE *f;
	int rc = -1;

	out[0] = '\0';
	f = fopen(path, "re");
	if (f == NULL) {
		errf(err, errlen, "%s: %s: %s", name, path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		errf(err, errlen, "%s: %s is not a regular file", name, path);
		goto out;
	}
	/* The group may read (0640: the daemon's group), nobody else. */
	if ((st.st_mode & 0037) != 0) {
		errf(err, errlen, "%s: %s is mode %04o: the group may not write it and "
		     "others may not read it (0600 or 0640)", name, path,
		     (unsigned)(st.st_mode & 07777));
		goto out;
	}
	n = fread(out, 1, OG_SECRET_FILE_MAX + 1, f);
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
		n--;
	out[n > OG_SECRET_FILE_MAX ? OG_SECRET_FILE_MAX : n] = '\0';
	if (n < 32 || n > OG_SECRET_FILE_MAX || strspn(out, allowed) != n) {
		errf(err, errlen, "%s: %s must hold one line of 32-%d characters of "
		     "A-Z a-z 0-9 + / = _ . - (openssl rand -hex 32)", name, path,
		     OG_SECRET_FILE_MAX);
		goto out;
	}
	rc = 0;
out:
	if (rc != 0)
		digest_wipe(out, OG_SECRET_FILE_MAX + 1);
	fclose(f);
	return rc;
}

/* The secret of the file path (when set) into *slot. */
static int
secret_load(const char *name, const char *path, char **slot, char *err, size_t errlen)
{
	char buf[OG_SECRET_FILE_MAX + 1];
	char *copy;

	if (path[0] == '\0')
		return 0;
	if (secret_file_read(name, path, buf, err, errlen) != 0)
		return -1;
	copy = strdup(buf);
	digest_wipe(buf, sizeof(buf));
	if (copy == NULL) {
		errf(err, errlen, "out of memory");
		return -1;
	}
	if (*slot != NULL)
		digest_wipe(*slot, strlen(*slot));
	free(*slot);
	*slot = copy;
	return 0;
}

int
config_read_secrets(struct config *c, char *err, size_t errlen)
{
	if (secret_load("csrf_secret_file", c->csrf_secret_file, &c->csrf_secret, err, errlen) != 0)
		return -1;
	return secret_load("proxy_secret_file", c->proxy_secret_file, &c->proxy_secret, err, errlen);
}

/* A directory this process can list and read. */
static bool
dir_readable(const char *dir)
{
	return dir[0] != '\0' && access(dir, R_OK | X_OK) == 0;
}

/* The checks of config_check_ready that ask the system and libpq: the
 * setting to blame (its target in *target), or NULL. */
static const char *
check_names(const struct config *c, char *msg, size_t len, const char **target)
{
	static const char *const conninfos[] = { "database", "pooled_database" };
	static const char *const users[] = { "user", "listen_owner" };
	size_t i;
	int k;

	*target = NULL;
	for (i = 0; i < 2; i++) {
		const char *v = i == 0 ? c->database : c->pooled_database;
		char *perr = NULL;
		PQconninfoOption *o;

		if (v[0] == '\0')
			continue;
		/* libpq's message may quote the string, password and all: not shown */
		o = PQconninfoParse(v, &perr);
		PQfreemem(perr);
		if (o == NULL) {
			snprintf(msg, len, "%s is not a libpq connection string (key=value pairs "
			         "such as \"host=/var/run/postgresql dbname=oncegate\", or a "
			         "postgresql:// URI)", conninfos[i]);
			return conninfos[i];
		}
		PQconninfoFree(o);
	}
	for (i = 0; i < 2; i++) {
		const char *v = i == 0 ? c->user : c->listen_owner;

		if (v[0] != '\0' && getpwnam(v) == NULL) {
			snprintf(msg, len, "%s: no user \"%.64s\" on this host", users[i], v);
			return users[i];
		}
	}
	if (c->listen_group[0] != '\0' && getgrnam(c->listen_group) == NULL) {
		snprintf(msg, len, "listen_group: no group \"%.64s\" on this host (the web "
		         "server's group, e.g. www-data)", c->listen_group);
		return "listen_group";
	}
	for (k = 0; k < c->ntargets; k++) {
		const struct config_target *t = &c->targets[k];

		const struct provider *pv = provider_of(t);
		const char *at;

		if (pv != NULL && pv->check_target != NULL &&
		    (at = pv->check_target(t, msg, len)) != NULL) {
			*target = t->name;
			return at;
		}
	}
	return NULL;
}

int
config_check_ready(const struct config *c, const char *path, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		size_t offset;
		const char *why;
	} dirs[] = {
		{ "contracts_dir", offsetof(struct config, contracts_dir),
		  "the responder and the dispatcher load every contract from it" },
		{ "templates_dir", offsetof(struct config, templates_dir),
		  "the approval pages are made from it" },
		{ "sql_dir", offsetof(struct config, sql_dir), "oncegatectl migrate reads it" },
	};
	char msg[768];
	const char *name = NULL, *target = NULL;
	size_t i;

	if (c->public_url[0] == '\0') {
		name = "public_url";
		snprintf(msg, sizeof(msg), "public_url is not set: approval links would be "
		         "relative and unusable in mail; set the https:// address people open");
	} else if (c->csrf_secret[0] == '\0' && c->csrf_secret_file[0] == '\0') {
		name = "csrf_secret_file";
		snprintf(msg, sizeof(msg), "csrf_secret_file (or csrf_secret) is not set: approval "
		         "forms could not be submitted; name a 0400 file holding at least 32 "
		         "random characters (openssl rand -hex 32)");
	} else if (c->proxy_secret_file[0] == '\0') {
		name = "proxy_secret_file";
		snprintf(msg, sizeof(msg), "proxy_secret_file is not set: any process that can "
		         "connect to the responder's socket could act as nginx and name any "
		         "approver; name a 0400 file holding the secret nginx sends as "
		         "OG_PROXY_SECRET");
	}
	for (i = 0; name == NULL && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		const char *dir = *(char *const *)(const void *)((const char *)c + dirs[i].offset);

		if (!dir_readable(dir)) {
			name = dirs[i].name;
			snprintf(msg, sizeof(msg), "%s: \"%.256s\" is not a readable directory "
			         "(%s): %s", name, dir, dirs[i].why,
			         dir[0] == '\0' ? "empty" : strerror(errno));
		}
	}
	if (name == NULL && strcmp(c->log_file, "-") != 0 && c->log_file[0] != '\0') {
		char *slash = strrchr(c->log_file, '/'), dir[512];

		if (c->log_file[0] != '/' || slash == NULL) {
			name = "log_file";
			snprintf(msg, sizeof(msg), "log_file must be an absolute path or \"-\"");
		} else {
			snprintf(dir, sizeof(dir), "%.*s", (int)(slash - c->log_file + 1), c->log_file);
			if (access(dir, F_OK) != 0) {
				name = "log_file";
				snprintf(msg, sizeof(msg), "log_file: directory %.256s does not exist",
				         dir);
			}
		}
	}
	if (name == NULL) {
		/* Readable and well formed now, as the responder will need them. */
		char buf[OG_SECRET_FILE_MAX + 1];

		if (c->csrf_secret_file[0] != '\0' &&
		    secret_file_read("csrf_secret_file", c->csrf_secret_file, buf, msg,
		                     sizeof(msg)) != 0)
			name = "csrf_secret_file";
		else if (secret_file_read("proxy_secret_file", c->proxy_secret_file, buf, msg,
		                          sizeof(msg)) != 0)
			name = "proxy_secret_file";
		digest_wipe(buf, sizeof(buf));
	}
	if (name == NULL)
		name = check_names(c, msg, sizeof(msg), &target);
	if (name == NULL)
		return 0;
	errf_at(err, errlen, path, config_line(path, target, name), msg);
	return -1;
}

int
config_check_warnings(const struct config *c, const char *path, FILE *out)
{
	int n = 0;

	if (strncasecmp(c->public_url, "http://", 7) == 0) {
		int line = config_line(path, NULL, "public_url");

		fprintf(out, "%s:%d: warning: public_url is plain http://: approval links, the "
		        "SSO session and the approval forms travel unencrypted; use https:// "
		        "everywhere but a stack on loopback\n", path, line);
		n++;
	}
	return n;
}

int
config_drop_privileges(const struct config *c, char *err, size_t errlen)
{
	struct passwd *pw;

	if (geteuid() != 0 || c->user[0] == '\0')
		return 0;
	pw = getpwnam(c->user);
	if (pw == NULL) {
		errf(err, errlen, "user: no user \"%s\"", c->user);
		return -1;
	}
	if (pw->pw_uid == 0)
		return 0;
	if (initgroups(pw->pw_name, pw->pw_gid) != 0 || setgid(pw->pw_gid) != 0 ||
	    setuid(pw->pw_uid) != 0) {
		errf(err, errlen, "user: cannot become %s: %s", c->user, strerror(errno));
		return -1;
	}
	/* for good: root cannot be regained */
	if (setuid(0) == 0) {
		errf(err, errlen, "user: still able to become root after switching to %s", c->user);
		return -1;
	}
	return 0;
}

static void
rows_dump(void *base, const struct config_row *table, size_t n, FILE *out)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const struct config_row *r = &table[i];

		switch (r->type) {
		case CT_STRING:
			fprintf(out, "%s = %s\n", r->name,
			        r->secret && (*str_slot(base, r))[0] != '\0' ? "[secret]"
			                                                    : *str_slot(base, r));
			break;
		case CT_INT:
			fprintf(out, "%s = %d\n", r->name, *int_slot(base, r));
			break;
		case CT_OCTAL:
			fprintf(out, "%s = %04o\n", r->name, (unsigned)*int_slot(base, r));
			break;
		}
	}
}

void
config_dump(const struct config *c, FILE *out)
{
	int i;

	/* the table walkers take a mutable base; nothing is written */
	rows_dump((void *)(uintptr_t)c, rows, NROWS(rows), out);
	for (i = 0; i < c->ntargets; i++) {
		fprintf(out, "\n[target %s]\n", c->targets[i].name);
		rows_dump((void *)(uintptr_t)&c->targets[i], target_rows, NROWS(target_rows), out);
	}
}

int
config_options(int argc, char **argv, void (*usage)(FILE *out), const char **path,
               bool *check)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *explicit_path = NULL, *prog;
	int opt;

	*check = false;
	while ((opt = getopt_long(argc, argv, "c:nhV", opts, NULL)) != -1) {
		switch (opt) {
		case 'V':
			prog = argc > 0 && argv[0] != NULL ? strrchr(argv[0], '/') : NULL;
			service_version(prog != NULL ? prog + 1 : argc > 0 ? argv[0] : "oncegate");
			return 0;
		case 'c':
			explicit_path = optarg;
			break;
		case 'n':
			*check = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	*path = config_path(explicit_path);
	return -1;
}

const char *
config_path(const char *explicit_path)
{
	const char *env;

	if (explicit_path != NULL && explicit_path[0] != '\0')
		return explicit_path;
	env = getenv("ONCEGATE_CONF");
	if (env != NULL && env[0] != '\0')
		return env;
	return OG_SYSCONFDIR "/oncegate.conf";
}
