/*
 * config.c — the configuration as one declarative table.
 *
 * Each row names a setting, its type, default, bounds and whether it is a
 * secret; the loader, the validator and the dumper all walk the same table.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "limits.h"
#include "log.h"

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
	ROW_I(listen_backlog, OG_LISTEN_BACKLOG, 1, 65535),
	ROW_I(threads, OG_THREADS_DEFAULT, 1, OG_THREADS_MAX),
	ROW_I(max_body_bytes, OG_BODY_MAX_DEFAULT, 1024, OG_BODY_MAX_LIMIT),
	ROW_I(retry_after_seconds, OG_RETRY_AFTER_DEFAULT, 1, 3600),
	ROW_I(shutdown_grace_seconds, OG_SHUTDOWN_GRACE_S, 1, 3600),
	/* a conninfo may carry a password */
	ROW_S(database, "", true),
	ROW_I(statement_timeout_ms, OG_DB_STATEMENT_TIMEOUT_MS, 0, 3600000),
	ROW_I(lease_default_seconds, OG_LEASE_DEFAULT, 1, 7 * 86400),
	ROW_I(lease_max_seconds, OG_LEASE_MAX, 1, 7 * 86400),
	ROW_I(lease_cap_seconds, OG_LEASE_CAP, 1, 30 * 86400),
	ROW_S(log_file, "-", false),
	ROW_S(log_level, "info", false),
	ROW_S(sql_dir, OG_PKGDATADIR "/sql", false),
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
str_slot(struct config *c, const struct config_row *r)
{
	return (char **)(void *)((char *)c + r->offset);
}

static int *
int_slot(struct config *c, const struct config_row *r)
{
	return (int *)(void *)((char *)c + r->offset);
}

/* Sets one setting from text; -1 with a message when the value is bad. */
static int
config_set(struct config *c, const struct config_row *r, const char *value,
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
config_find(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (strcmp(rows[i].name, name) == 0)
			return &rows[i];
	return NULL;
}

void
config_defaults(struct config *c)
{
	size_t i;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		if (rows[i].type != CT_STRING)
			*int_slot(c, &rows[i]) = (int)rows[i].idef;
		else if (config_set(c, &rows[i], rows[i].sdef, NULL, 0) != 0)
			abort(); /* out of memory at start-up */
	}
}

void
config_free(struct config *c)
{
	size_t i;

	if (c == NULL)
		return;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].type == CT_STRING) {
			free(*str_slot(c, &rows[i]));
			*str_slot(c, &rows[i]) = NULL;
		}
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
	while (fgets(line, sizeof(line), f) != NULL) {
		const struct config_row *r;
		char *name, *value, *s;
		size_t n = strlen(line);

		lineno++;
		if (n > OG_CONFIG_LINE_MAX || (n == sizeof(line) - 1 && line[n - 1] != '\n')) {
			errf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
			     OG_CONFIG_LINE_MAX);
			goto out;
		}
		if (memchr(line, '\0', n) != NULL || strlen(line) != n) {
			errf(err, errlen, "%s:%d: NUL byte in line", path, lineno);
			goto out;
		}
		s = trim(line);
		if (*s == '\0' || *s == '#')
			continue;
		if (config_parse_line(s, &name, &value, msg, sizeof(msg)) != 0) {
			errf(err, errlen, "%s:%d: %s", path, lineno, msg);
			goto out;
		}
		if (strlen(value) > OG_CONFIG_VALUE_MAX) {
			errf(err, errlen, "%s:%d: %s: value longer than %d bytes", path,
			     lineno, name, OG_CONFIG_VALUE_MAX);
			goto out;
		}
		r = config_find(name);
		if (r == NULL) {
			errf(err, errlen, "%s:%d: unknown setting \"%.64s\"", path, lineno, name);
			goto out;
		}
		if (config_set(c, r, value, msg, sizeof(msg)) != 0) {
			errf(err, errlen, "%s:%d: %s", path, lineno, msg);
			goto out;
		}
	}
	if (ferror(f)) {
		errf(err, errlen, "%s: read error", path);
		goto out;
	}
	if (config_validate(c, msg, sizeof(msg)) != 0) {
		errf(err, errlen, "%s: %s", path, msg);
		goto out;
	}
	rc = 0;
out:
	fclose(f);
	return rc;
}

int
config_validate(const struct config *c, char *err, size_t errlen)
{
	if (c->lease_default_seconds > c->lease_max_seconds) {
		errf(err, errlen, "lease_default_seconds (%d) is above lease_max_seconds (%d)",
		     c->lease_default_seconds, c->lease_max_seconds);
		return -1;
	}
	if (log_level_parse(c->log_level) < 0) {
		errf(err, errlen, "log_level: \"%s\" is not one of debug, info, notice, "
		     "warning, error, alert", c->log_level);
		return -1;
	}
	if (c->listen[0] != '\0' && c->listen[0] != '/') {
		errf(err, errlen, "listen: \"%s\" is not an absolute socket path", c->listen);
		return -1;
	}
	return 0;
}

void
config_dump(const struct config *c, FILE *out)
{
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct config_row *r = &rows[i];
		struct config *cc = (struct config *)(uintptr_t)c;

		switch (r->type) {
		case CT_STRING:
			fprintf(out, "%s = %s\n", r->name,
			        r->secret && (*str_slot(cc, r))[0] != '\0' ? "[secret]"
			                                                  : *str_slot(cc, r));
			break;
		case CT_INT:
			fprintf(out, "%s = %d\n", r->name, *int_slot(cc, r));
			break;
		case CT_OCTAL:
			fprintf(out, "%s = %04o\n", r->name, (unsigned)*int_slot(cc, r));
			break;
		}
	}
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
