/*
 * ctl.c — the shared part of oncegatectl's commands; see ctl.h.
 */
#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
ctl_operator(const struct ctl *ctl)
{
	return db_role(ctl->db);
}

const char ctl_exit_text[] =
	"exit status: 0 done; 1 refused or failed (the message says why, nothing changed);\n"
	"  2 usage error; 3 database unavailable; 4 a bulk job stopped before its end\n";

const char ctl_json_text[] =
	"  --json (anywhere on the line): one JSON document on stdout, an array for a list.\n";

int
ctl_usage(const struct ctl *ctl)
{
	fprintf(stderr, "%s%s%s", ctl->usage != NULL ? ctl->usage : "", ctl_json_text,
	        ctl_exit_text);
	return EXIT_USAGE;
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

static bool g_printed;

void
ctl_print_json(json_t *v)
{
	char *s = v != NULL ? canon_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	printf("%s\n", s != NULL ? s : "null");
	free(s);
	g_printed = true;
}

int
ctl_print_new(json_t *v)
{
	ctl_print_json(v);
	json_decref(v);
	return EXIT_SUCCESS;
}

bool
ctl_printed(void)
{
	return g_printed;
}

const char *
ctl_jstr(const json_t *o, const char *name)
{
	const char *v = json_string_value(json_object_get(o, name));

	return v != NULL ? v : "-";
}

/* N followed by s, m, h, d or w, in seconds; -1 when not one. */
static long long
duration(const char *s)
{
	static const struct {
		char unit;
		long long secs;
	} units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 }, { 'w', 604800 } };
	long long v = 0;
	size_t i;

	if (!isdigit((unsigned char)*s))
		return -1;
	for (; isdigit((unsigned char)*s); s++)
		if ((v = v * 10 + (*s - '0')) > 100000000LL)
			return -1;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (s[0] == units[i].unit && s[1] == '\0' && v > 0)
			return v * units[i].secs;
	return -1;
}

/* n digits at *p as a number (p advanced); -1 when they are not digits. */
static int
digits(const char **p, int n)
{
	int v = 0;

	for (; n > 0; n--, (*p)++) {
		if (!isdigit((unsigned char)**p))
			return -1;
		v = v * 10 + (**p - '0');
	}
	return v;
}

/* An RFC 3339 date-time (or a date alone, its midnight UTC) as seconds
 * since the epoch; -1 when it is not one. */
static int
timestamp(const char *s, time_t *t)
{
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	const char *p = s;
	struct tm tm = { 0 };
	int y, mo, d, h = 0, mi = 0, sec = 0, off = 0, oh, om;

	if ((y = digits(&p, 4)) < 1970 || *p++ != '-' || (mo = digits(&p, 2)) < 1 || mo > 12 ||
	    *p++ != '-' || (d = digits(&p, 2)) < 1 || d > mdays[mo - 1])
		return -1;
	if (*p != '\0') {
		if ((*p != 'T' && *p != 't' && *p != ' ') || (p++, (h = digits(&p, 2)) < 0) ||
		    h > 23 || *p++ != ':' || (mi = digits(&p, 2)) < 0 || mi > 59 || *p++ != ':' ||
		    (sec = digits(&p, 2)) < 0 || sec > 60)
			return -1;
		if (*p == '.') {
			if (!isdigit((unsigned char)*++p))
				return -1;
			while (isdigit((unsigned char)*p))
				p++;
		}
		if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
			off = 0;
		} else if (*p == '+' || *p == '-') {
			int sign = *p++ == '-' ? -1 : 1;

			if ((oh = digits(&p, 2)) < 0 || oh > 23 || *p++ != ':' ||
			    (om = digits(&p, 2)) < 0 || om > 59 || *p != '\0')
				return -1;
			off = sign * (oh * 3600 + om * 60);
		} else {
			return -1;
		}
	}
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	*t = timegm(&tm) - off;
	/* 31 February and the like come back as another day */
	return tm.tm_mday == d ? 0 : -1;
}

int
ctl_time(const struct ctl *ctl, const char *opt, const char *s, long long *ago)
{
	long long v = duration(s);
	time_t t;

	if (v > 0) {
		*ago = v;
		return 0;
	}
	if (timestamp(s, &t) != 0) {
		fprintf(stderr, "oncegatectl: %s: %s \"%s\" is not a time: give a duration back from "
		        "now (90s, 15m, 2h, 7d, 2w) or an RFC 3339 timestamp "
		        "(2026-05-01T08:00:00Z)\n", ctl->command, opt, s);
		return -1;
	}
	if ((long long)t >= (long long)time(NULL)) {
		fprintf(stderr, "oncegatectl: %s: %s %s is not in the past\n", ctl->command, opt, s);
		return -1;
	}
	*ago = (long long)time(NULL) - (long long)t;
	return 0;
}

int
ctl_count(const char *s, int max)
{
	long v = 0;

	if (!isdigit((unsigned char)*s))
		return -1;
	for (; isdigit((unsigned char)*s); s++)
		if ((v = v * 10 + (*s - '0')) > max)
			return -1;
	return *s == '\0' && v > 0 ? (int)v : -1;
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

bool
ctl_one_of(const char *words, const char *w)
{
	size_t n = strlen(w);
	const char *p;

	if (n == 0 || strchr(w, ' ') != NULL)
		return false;
	for (p = words; (p = strstr(p, w)) != NULL; p += n)
		if ((p == words || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return true;
	return false;
}

/* The value of option o taken into its place: 0, or the exit code of the
 * fault (its message printed unless quiet). */
static int
take_option(struct ctl *ctl, const struct ctl_opt *o, const char *arg, bool quiet)
{
	char *end;

	switch (o->kind) {
	case CTL_OPT_FLAG:
		*(bool *)o->to = true;
		return 0;
	case CTL_OPT_TEXT:
		if (o->words != NULL && !ctl_one_of(o->words, arg))
			return quiet ? EXIT_USAGE : ctl_usage(ctl);
		*(const char **)o->to = arg;
		return 0;
	case CTL_OPT_COUNT:
		*(int *)o->to = ctl_count(arg, (int)o->max);
		if (*(int *)o->to <= 0)
			return quiet ? EXIT_USAGE : ctl_usage(ctl);
		return 0;
	case CTL_OPT_JOB:
		*(long long *)o->to = strtoll(arg, &end, 10);
		if (*end == '\0' && *(long long *)o->to > 0)
			return 0;
		if (!quiet)
			fprintf(stderr, "oncegatectl: %s: --%s takes a job number\n", ctl->command,
			        o->name);
		return EXIT_USAGE;
	case CTL_OPT_TIME: {
		char opt[64];

		snprintf(opt, sizeof(opt), "--%s", o->name);
		if (ctl_time(ctl, opt, arg, (long long *)o->to) != 0)
			return EXIT_USAGE;
		if (o->max > 0 && *(long long *)o->to / 86400 > o->max) {
			fprintf(stderr, "oncegatectl: %s: %s is at most %lld days\n", ctl->command,
			        opt, o->max);
			return EXIT_USAGE;
		}
		return 0;
	}
	}
	return EXIT_USAGE;
}

int
ctl_options(struct ctl *ctl, int argc, char **argv, const struct ctl_opt *opts, bool quiet)
{
	struct option lo[17];
	int n, opt, ex, bad = 0;

	for (n = 0; opts[n].name != NULL && n < 16; n++)
		lo[n] = (struct option){ opts[n].name,
			                 opts[n].kind == CTL_OPT_FLAG ? no_argument : required_argument,
			                 NULL, 256 + n };
	lo[n] = (struct option){ NULL, 0, NULL, 0 };
	optind = 0; /* glibc: 0 re-initialises getopt for the command's own arguments */
	opterr = !quiet;
	while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		ex = opt >= 256 && opt < 256 + n ? take_option(ctl, &opts[opt - 256], optarg, quiet)
		     : quiet                      ? EXIT_USAGE
		                                  : ctl_usage(ctl);
		if (ex != 0 && !quiet) {
			opterr = 1;
			return ex;
		}
		bad |= ex != 0;
	}
	opterr = 1;
	return bad ? EXIT_USAGE : 0;
}

int
ctl_begin(struct ctl *ctl, int argc, char **argv, const struct ctl_opt *opts, int words)
{
	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind != argc - words)
		return ctl_usage(ctl);
	return ctl_db(ctl) != 0 ? EXIT_UNAVAILABLE : 0;
}

int
ctl_failed(const struct ctl *ctl, const char *what, enum og_rc rc)
{
	fprintf(stderr, "oncegatectl: %s: %s\n", what, db_error(ctl->db));
	return ctl_exit(rc);
}

/* One cell of a plain-text list: padded, or the last of its row. */
static void
cell(const struct ctl_col *c, const char *text)
{
	if (c->width > 0)
		printf("%-*s ", c->width, text);
	else
		printf("%s\n", text);
}

void
ctl_print_list(const struct ctl *ctl, json_t *list, const struct ctl_col *cols)
{
	const struct ctl_col *c;
	json_t *o;
	size_t i;

	if (ctl->json) {
		ctl_print_new(list);
		return;
	}
	for (c = cols; c->title != NULL; c++)
		cell(c, c->title);
	json_array_foreach(list, i, o)
		for (c = cols; c->title != NULL; c++)
			cell(c, ctl_jstr(o, c->member));
	json_decref(list);
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
