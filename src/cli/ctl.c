/*
 * ctl.c — the shared part of oncegatectl's commands; see ctl.h.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "canon.h"
#include "buf.h"

#include "ctl.h"

int
ctl_exit(enum og_rc rc)
{
	return rc == OG_OK ? EXIT_SUCCESS : rc == OG_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
}

int
ctl_db(struct ctl *ctl)
{
	if (ctl->db == NULL)
		ctl->db = ctl->cfg.pooled_database[0] != '\0'
		              ? db_new_pooled(ctl->cfg.pooled_database,
		                              ctl->cfg.statement_timeout_ms, true)
		              : db_new(ctl->cfg.database, ctl->cfg.statement_timeout_ms);
	if (ctl->db == NULL || db_ensure(ctl->db) != DB_OK) {
		fprintf(stderr, "oncegatectl: %s\n",
		        ctl->db != NULL ? db_error(ctl->db) : "out of memory");
		return -1;
	}
	return 0;
}

const char *
ctl_operator(const char *given)
{
	const char *u;

	if (given != NULL && *given != '\0')
		return given;
	u = getenv("SUDO_USER");
	if (u == NULL || *u == '\0')
		u = getenv("USER");
	if (u == NULL || *u == '\0')
		u = getlogin();
	return u != NULL && *u != '\0' ? u : "unknown";
}

void
ctl_log(struct ctl *ctl, enum log_level level, const char *event, const struct log_fields *f)
{
	if (!ctl->log_opened) {
		if (log_open(ctl->cfg.log_file, LOG_LEVEL_INFO, "oncegatectl") != 0) {
			fprintf(stderr, "oncegatectl: cannot open the decision log %s\n",
			        ctl->cfg.log_file);
			return;
		}
		ctl->log_opened = true;
	}
	log_event(level, event, f);
}

int
ctl_refuse(struct ctl *ctl, const char *what, int code, const char *op, const char *key,
           const char *reason, const char *fmt, ...)
{
	char msg[1024], event[64];
	struct log_fields f = { 0 };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "oncegatectl: %s refused: %s\n", what, msg);
	snprintf(event, sizeof(event), "%s.refused", what);
	f.actor = op;
	f.key = key;
	f.reason = reason;
	f.detail = msg;
	ctl_log(ctl, LOG_LEVEL_WARNING, event, &f);
	return code;
}

void
ctl_print_json(json_t *v)
{
	char *s = v != NULL ? canon_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	printf("%s\n", s != NULL ? s : "null");
	free(s);
}

const char *
ctl_jstr(const json_t *o, const char *name)
{
	const char *v = json_string_value(json_object_get(o, name));

	return v != NULL ? v : "-";
}

long long
ctl_duration(const char *s)
{
	char *end;
	long long v;

	if (!isdigit((unsigned char)s[0]))
		return -1;
	v = strtoll(s, &end, 10);
	if (v <= 0 || v > 100000000LL || end[0] == '\0' || end[1] != '\0')
		return -1;
	switch (end[0]) {
	case 's':
		return v;
	case 'm':
		return v * 60;
	case 'h':
		return v * 3600;
	case 'd':
		return v * 86400;
	case 'w':
		return v * 604800;
	default:
		return -1;
	}
}

void
ctl_age(long long s, char *buf, size_t n)
{
	if (s < 0)
		s = 0;
	if (s >= 86400)
		snprintf(buf, n, "%lldd%lldh", s / 86400, (s % 86400) / 3600);
	else if (s >= 3600)
		snprintf(buf, n, "%lldh%lldm", s / 3600, (s % 3600) / 60);
	else if (s >= 60)
		snprintf(buf, n, "%lldm", s / 60);
	else
		snprintf(buf, n, "%llds", s);
}

void
ctl_close(struct ctl *ctl)
{
	if (ctl->log_opened)
		log_close();
	ctl->log_opened = false;
	db_free(ctl->db);
	ctl->db = NULL;
	config_free(&ctl->cfg);
}

/* Length of the UTF-8 sequence at s (1-4) and its code point, or 0 when
 * the bytes are not one. */
static size_t
utf8_at(const unsigned char *s, long *cp)
{
	size_t n, i;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
	if (n == 0 || s[0] > 0xF4)
		return 0;
	*cp = s[0] & (0x7F >> n);
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		*cp = *cp << 6 | (s[i] & 0x3F);
	}
	return n;
}

char *
ctl_terminal_text(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	struct buf b;
	long cp;
	size_t n;
	int rc = 0;

	buf_init(&b, strlen(s) * 6 + 1);
	while (*p != '\0' && rc == 0) {
		n = utf8_at(p, &cp);
		if (n == 0)
			rc = buf_printf(&b, "\\x%02x", *p++);
		else if (cp < 0x20 || cp == 0x7F)
			rc = buf_printf(&b, "\\x%02lx", cp);
		/* C1 controls, and the bidirectional controls that reorder what
		 * follows them on the screen */
		else if ((cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
		         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F ||
		         cp == 0x061C)
			rc = buf_printf(&b, "\\u%04lx", cp);
		else
			rc = buf_append(&b, p, n);
		if (n > 0)
			p += n;
	}
	if (rc != 0 || buf_puts(&b, "") != 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* The terminal-safe copy of a string value (NULL: keep m, walked into). */
static json_t *
safe_value(json_t *m)
{
	char *t;
	json_t *s;

	if (!json_is_string(m) || (t = ctl_terminal_text(json_string_value(m))) == NULL) {
		ctl_terminal_safe(m);
		return NULL;
	}
	s = json_string_nocheck(t);
	free(t);
	return s;
}

void
ctl_terminal_safe(json_t *v)
{
	const char *k;
	json_t *m, *s;
	size_t i;

	if (json_is_object(v)) {
		json_object_foreach(v, k, m)
			if ((s = safe_value(m)) != NULL)
				json_object_set_new(v, k, s);
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, m)
			if ((s = safe_value(m)) != NULL)
				json_array_set_new(v, i, s);
	}
}
