/*
 * log.c — the decision log.
 *
 * Each line is built in a stack buffer by a tiny JSON writer (no allocation
 * but the redacted copies of free text) and handed to ONE write(2) on an
 * O_APPEND descriptor: the kernel appends it whole, so threads need no lock
 * and lines never interleave. log_reopen() swaps the file under the same
 * descriptor number with dup2, so a writer racing with it writes either to
 * the old file or to the new one, never to a closed descriptor.
 *
 * Field order is fixed (ts, level, event, program, the decision fields, then
 * detail, hint, request_id, method, path, status) so lines are easy to read
 * with grep as well as with jq.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dup3 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "caps.h"
#include "log.h"
#include "unknown.h"
#include "utf8.h"

#define LOG_MODE 0640
#define LOG_FLAGS (O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY)
#define LOG_REDACTED "[redacted]"

/* request_id, method, path and status go last but must survive when
 * detail is cut, so they are rendered first into a buffer of this size:
 * three capped strings and a number, with their names. */
#define LOG_TAIL_MAX (3 * (OG_FIELD_MAX + 32) + 32)

/* Every line that lost a field or part of one says so. */
#define LOG_TRUNCATED ",\"truncated\":true"

/* -1 until log_open(): lines go to stderr. Atomic because writers read it
 * while the main thread may open or close the log. */
static atomic_int log_fd = -1;
static atomic_int log_min = LOG_LEVEL_INFO;
/* Set after a failed write so stderr hears about it once, not per line. */
static atomic_bool log_failing;
/* Owned file path; NULL when logging to stderr. Written only by
 * log_open/log_close, which are not called while other threads log. */
static char *log_path;
static char *log_program;

static const char *const log_names[] = {
	"debug", "info", "notice", "warning", "error", "alert",
};

#define LOG_NLEVELS ((int)(sizeof(log_names) / sizeof(log_names[0])))

struct line {
	char *buf;
	size_t len;
	size_t cap;
	bool cut; /* a field was dropped or shortened */
};

static bool
line_put(struct line *l, const char *s, size_t n)
{
	if (n > l->cap - l->len)
		return false;
	memcpy(l->buf + l->len, s, n);
	l->len += n;
	return true;
}

/* Appends ,"name":"value" escaped, ending at or before limit. Only whole
 * characters are written; invalid UTF-8 becomes U+FFFD so the line stays
 * valid JSON whatever a caller passes. At most max_in input bytes are used. */
static void
line_str(struct line *l, const char *name, const char *value, size_t limit,
         size_t max_in)
{
	const unsigned char *s = (const unsigned char *)value, *start = s, *end;
	size_t mark = l->len, saved_cap = l->cap, n, used;
	long cp;
	char esc[6];
	const char *piece;

	if (value == NULL)
		return;
	if (limit < l->cap)
		l->cap = limit;
	/* keep one byte for the closing quote */
	if (l->cap == 0 || l->cap - 1 < l->len)
		goto dropped;
	l->cap--;
	if (!line_put(l, ",\"", 2) || !line_put(l, name, strlen(name)) ||
	    !line_put(l, "\":\"", 3))
		goto dropped;

	end = s + strlen(value);
	while (s < end) {
		n = utf8_decode(s, (size_t)(end - s), &cp);
		piece = (const char *)s;
		if (cp < 0) {
			piece = "\\ufffd";
			n = 6;
		} else if (*s < 0x20 || *s == '"' || *s == '\\') {
			piece = esc;
			n = utf8_json_escape(*s, esc);
		}
		/* input consumed: an invalid byte or an escaped one is one byte */
		used = piece == (const char *)s ? n : 1;

		if ((size_t)(s - start) + used > max_in || !line_put(l, piece, n)) {
			l->cut = true;
			break;
		}
		s += used;
	}
	l->cap++;
	l->buf[l->len++] = '"';
	l->cap = saved_cap;
	return;

dropped:
	l->len = mark;
	l->cap = saved_cap;
	l->cut = true;
}

static void
line_num(struct line *l, const char *name, long long v, size_t limit)
{
	char tmp[64];
	int n;

	if (v == 0)
		return;
	n = snprintf(tmp, sizeof(tmp), ",\"%s\":%lld", name, v);
	if (n < 0 || (size_t)n >= sizeof(tmp) || l->len + (size_t)n > limit ||
	    !line_put(l, tmp, (size_t)n))
		l->cut = true;
}

/* Appends ,"model":{"provider":…,"name":…,"revision":…} with the parts
 * given, whole or not at all. */
static void
line_model(struct line *l, const char *name, const char *provider, const char *revision,
           size_t limit)
{
	char tmp[3 * (OG_FIELD_MAX + 16) + 16];
	struct line m = { tmp, 0, sizeof(tmp), false };
	size_t mark = l->len;

	if (name == NULL && provider == NULL && revision == NULL)
		return;
	line_str(&m, "provider", provider, m.cap, OG_FIELD_MAX);
	line_str(&m, "name", name, m.cap, OG_FIELD_MAX);
	line_str(&m, "revision", revision, m.cap, OG_FIELD_MAX);
	l->cut |= m.cut;
	/* m holds ,"provider":"…",…: its first comma becomes the brace */
	if (m.len == 0 || l->len + m.len + sizeof(",\"model\":}") - 1 > limit ||
	    !line_put(l, ",\"model\":{", 10) || !line_put(l, tmp + 1, m.len - 1) ||
	    !line_put(l, "}", 1)) {
		l->len = mark;
		l->cut = true;
	}
}

/* Appends ,"name":<text> where text is a JSON object (or, with array, an
 * array) written by jansson, whole or not at all: a part of an object would
 * not be JSON. */
static void
line_object(struct line *l, const char *name, const char *text, size_t limit, bool array)
{
	size_t n, mark = l->len;
	const unsigned char *p;

	if (text == NULL)
		return;
	n = strlen(text);
	if (n < 2 || text[0] != (array ? '[' : '{') || text[n - 1] != (array ? ']' : '}')) {
		l->cut = true;
		return;
	}
	/* one line: jansson escapes control characters; refuse any that came */
	for (p = (const unsigned char *)text; *p != '\0'; p++)
		if (*p < 0x20) {
			l->cut = true;
			return;
		}
	if (l->len + n + strlen(name) + 4 > limit || !line_put(l, ",\"", 2) ||
	    !line_put(l, name, strlen(name)) || !line_put(l, "\":", 2) || !line_put(l, text, n)) {
		l->len = mark;
		l->cut = true;
	}
}

/* Masks in place. A run is replaced by LOG_REDACTED and the rest of the
 * text shifts left; a run shorter than that marker (only possible after
 * "Bearer ") is overwritten with '*' instead, because in-place text cannot
 * grow. With cut set the text is the head of something longer, so a token
 * run touching the end is masked whatever its length: it may be the first
 * half of a key. */
/* Names that free text may carry whole although they look like key
 * material: a rule's name such as "timeout_after_send_not_idempotent" must
 * stay readable for the operator. Set once at start-up (log_keep_names). */
static const char *const *kept_names;
static size_t nkept_names;

void
log_keep_names(const char *const *names, size_t n)
{
	kept_names = names;
	nkept_names = n;
}

static bool
kept_name(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < nkept_names; i++)
		if (strlen(kept_names[i]) == n && memcmp(kept_names[i], s, n) == 0)
			return true;
	return false;
}

static size_t
redact(char *text, bool cut)
{
	static const char marker[] = LOG_REDACTED;
	char *r = text, *w = text, *e;
	size_t runs = 0, n;

	if (text == NULL)
		return 0;
#define IS_TOKEN(c) (((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z') || \
                     ((c) >= '0' && (c) <= '9') || (c) == '_' || (c) == '-')
#define IS_SPACE(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r' || \
                     (c) == '\f' || (c) == '\v')
	while (*r != '\0') {
		if (!IS_TOKEN(*r)) {
			*w++ = *r++;
			continue;
		}
		if (strncasecmp(r, "bearer", 6) == 0 && (r[6] == ' ' || r[6] == '\t')) {
			/* keep the scheme and the blanks, mask the credential */
			e = r + 6;
			while (*e == ' ' || *e == '\t')
				e++;
			memmove(w, r, (size_t)(e - r));
			w += e - r;
			r = e;
			for (e = r; *e != '\0' && !IS_SPACE(*e); e++)
				;
		} else {
			for (e = r; IS_TOKEN(*e); e++)
				;
			if ((e - r < 32 || kept_name(r, (size_t)(e - r))) &&
			    !(cut && *e == '\0')) {
				memmove(w, r, (size_t)(e - r));
				w += e - r;
				r = e;
				continue;
			}
		}
		n = (size_t)(e - r);
		if (n == 0)
			continue;
		if (n >= sizeof(marker) - 1) {
			memcpy(w, marker, sizeof(marker) - 1);
			w += sizeof(marker) - 1;
		} else {
			memset(w, '*', n);
			w += n;
		}
		r = e;
		runs++;
	}
#undef IS_TOKEN
#undef IS_SPACE
	*w = '\0';
	return runs;
}

size_t
log_redact(char *text)
{
	return redact(text, false);
}

#define PV_ALNUM(c) (((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z') || \
                     ((c) >= '0' && (c) <= '9'))
#define PV_TOKEN(c) (PV_ALNUM(c) || (c) == '_' || (c) == '-')
#define PV_ALPHA(c) (((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z'))

/* The length of a host name or IPv4 address (with :port) at s, 0 when
 * there is none: labels joined by dots, the last one 2+ letters, or four
 * numbers (so "5.7.1" and "v1.2" stay). */
static size_t
host_at(const char *s)
{
	size_t n = 0, labels = 0, numeric = 0, last = 0, last_alpha = 0;

	for (;;) {
		size_t start = n, alpha = 0;

		while (PV_TOKEN(s[n]) && s[n] != '_') {
			alpha += PV_ALPHA(s[n]) ? 1 : 0;
			n++;
		}
		if (n == start)
			break;
		labels++;
		numeric += alpha == 0 ? 1 : 0;
		last = n - start;
		last_alpha = alpha;
		if (s[n] != '.' || !PV_ALNUM(s[n + 1]))
			break;
		n++;
	}
	if (labels < 2 || !((last_alpha == last && last >= 2) || (labels == 4 && numeric == 4)))
		return 0;
	if (s[n] == ':' && s[n + 1] >= '0' && s[n + 1] <= '9')
		for (n++; s[n] >= '0' && s[n] <= '9'; n++)
			;
	return n;
}

/* A mail address (local@host) at s: its length, else 0. A recipient's
 * address is personal data a provider's answer often echoes. */
static size_t
address_at(const char *s)
{
	size_t n = 0, h;

	/* the local part: ASCII word characters and any UTF-8 (SMTPUTF8) */
	while (PV_ALNUM(s[n]) || s[n] == '.' || s[n] == '_' || s[n] == '-' || s[n] == '+' ||
	       s[n] == '%' || (unsigned char)s[n] >= 0x80)
		n++;
	if (n == 0 || s[n] != '@' || (h = host_at(s + n + 1)) == 0)
		return 0;
	return n + 1 + h;
}

/* After a secret's name and "=" or ":" (blanks allowed): the value's
 * offset from s, 0 when s does not start with such a name. */
static size_t
secret_value_at(const char *s)
{
	static const char *const names[] = { "api_key", "apikey", "api-key", "access_token",
		                             "token", "secret", "password", "passwd", "pwd",
		                             "key", "auth", "sig", "signature" };
	size_t i, n;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		n = strlen(names[i]);
		if (strncasecmp(s, names[i], n) != 0)
			continue;
		while (s[n] == ' ' || s[n] == '"' || s[n] == '\'')
			n++;
		if (s[n] != '=' && s[n] != ':')
			continue;
		n++;
		while (s[n] == ' ' || s[n] == '"' || s[n] == '\'')
			n++;
		return n;
	}
	return 0;
}

/* Writes the marker for a span of n masked bytes (never more than n). */
static char *
mask_span(char *w, const char *marker, size_t n)
{
	size_t m = strlen(marker);

	if (n >= m) {
		memcpy(w, marker, m);
		return w + m;
	}
	memset(w, '*', n);
	return w + n;
}

size_t
log_redact_provider(char *text)
{
	char *r = text, *w = text;
	size_t masked = 0, n, v;

	if (text == NULL)
		return 0;
	while (*r != '\0') {
		bool word_start = r == text || !PV_TOKEN(r[-1]);

		if (word_start && PV_ALPHA(*r)) {
			/* scheme://… to the next blank: a URL names a host */
			for (n = 0; PV_ALNUM(r[n]) || r[n] == '+'; n++)
				;
			if (strncmp(r + n, "://", 3) == 0) {
				for (n += 3; r[n] != '\0' && r[n] != ' ' && r[n] != '\t' && r[n] != '"' &&
				             r[n] != '\'' && r[n] != '>' && r[n] != ')';
				     n++)
					;
				w = mask_span(w, "[host]", n);
				r += n;
				masked++;
				continue;
			}
			if ((v = secret_value_at(r)) > 0) {
				memmove(w, r, v);
				w += v;
				r += v;
				for (n = 0; r[n] != '\0' && r[n] != ' ' && r[n] != '\t' && r[n] != ',' &&
				            r[n] != ';' && r[n] != '&' && r[n] != '"' && r[n] != '\'';
				     n++)
					;
				if (n > 0) {
					w = mask_span(w, "[redacted]", n);
					r += n;
					masked++;
				}
				continue;
			}
		}
		if (word_start && (PV_ALNUM(*r) || (unsigned char)*r >= 0x80) &&
		    (n = address_at(r)) > 0) {
			w = mask_span(w, "[address]", n);
			r += n;
			masked++;
			continue;
		}
		if (word_start && PV_ALNUM(*r) && (n = host_at(r)) > 0) {
			w = mask_span(w, "[host]", n);
			r += n;
			masked++;
			continue;
		}
		if (word_start && PV_TOKEN(*r)) {
			size_t digits = 0, letters = 0;

			for (n = 0; PV_TOKEN(r[n]); n++) {
				digits += r[n] >= '0' && r[n] <= '9';
				letters += PV_ALPHA(r[n]) ? 1 : 0;
			}
			if (n >= 16 && n < 32 && digits > 0 && letters > 0 && !kept_name(r, n)) {
				w = mask_span(w, "[redacted]", n);
				r += n;
				masked++;
				continue;
			}
			memmove(w, r, n);
			w += n;
			r += n;
			continue;
		}
		*w++ = *r++;
	}
	*w = '\0';
	return masked + redact(text, false);
}
#undef PV_ALNUM
#undef PV_TOKEN
#undef PV_ALPHA

/* A redacted copy of free text, at most a line long (more could never be
 * written). NULL when s is NULL or memory is short: the field is then left
 * out rather than written unredacted. */
static char *
redacted_copy(const char *s, bool *cut)
{
	size_t n;
	char *c;

	if (s == NULL)
		return NULL;
	n = strnlen(s, OG_LOG_LINE_MAX + 1);
	if (n > OG_LOG_LINE_MAX)
		n = OG_LOG_LINE_MAX;
	c = malloc(n + 1);
	if (c == NULL) {
		*cut = true;
		return NULL;
	}
	memcpy(c, s, n);
	c[n] = '\0';
	redact(c, s[n] != '\0');
	return c;
}

static void
format_ts(char *out, size_t size)
{
	struct timespec ts;
	struct tm tm;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 ||
	    gmtime_r(&ts.tv_sec, &tm) == NULL) {
		snprintf(out, size, "1970-01-01T00:00:00.000Z");
		return;
	}
	snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
	         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	         tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));
}

static void
log_write(const char *buf, size_t len)
{
	int fd = atomic_load(&log_fd);
	ssize_t n;
	int err;

	if (fd < 0)
		fd = STDERR_FILENO;
	do
		n = write(fd, buf, len);
	while (n < 0 && errno == EINTR);

	if (n >= 0 && (size_t)n == len) {
		if (atomic_load(&log_failing) && atomic_exchange(&log_failing, false))
			fprintf(stderr, "oncegate: decision log writes succeed again\n");
		return;
	}
	/* A short write to a regular file means the disk is full; retrying the
	 * rest would split the line, so it counts as a failure. */
	err = n < 0 ? errno : ENOSPC;
	if (!atomic_exchange(&log_failing, true)) {
		errno = err;
		fprintf(stderr, "oncegate: decision log write failed: %m\n");
	}
}

/* The members of struct log_fields a line shows between its program and
 * its model, in that order: a string (max: its own limit), a long long or
 * an int. */
enum field_kind { FIELD_STR, FIELD_LL, FIELD_INT };
#define FS(f, max) { #f, offsetof(struct log_fields, f), FIELD_STR, max }
#define FN(f, kind) { #f, offsetof(struct log_fields, f), kind, 0 }
static const struct {
	const char *name;
	size_t off;
	enum field_kind kind;
	size_t max;
} head_fields[] = {
	FS(client, OG_LOG_FIELD_MAX), FS(key, OG_LOG_FIELD_MAX),
	FS(correlation_id, OG_LOG_FIELD_MAX), FS(workflow_version, OG_LOG_FIELD_MAX),
	FS(contract, OG_LOG_FIELD_MAX), FS(trigger, OG_LOG_FIELD_MAX),
	FS(payload_hash, OG_LOG_FIELD_MAX), FS(state_from, OG_LOG_FIELD_MAX),
	FS(state_to, OG_LOG_FIELD_MAX), FN(version, FIELD_LL), FS(actor, OG_LOG_FIELD_MAX),
	FS(decision, OG_LOG_FIELD_MAX), FS(approval_id, OG_LOG_FIELD_MAX),
	FS(previous_owner, OG_LOG_FIELD_MAX), FS(effect_id, OG_LOG_FIELD_MAX),
	FS(target, OG_LOG_FIELD_MAX), FS(provider_id, OG_LOG_FIELD_MAX),
	FS(error_class, OG_ERROR_CLASS_MAX), FN(attempt, FIELD_INT), FN(duration_ms, FIELD_LL),
	FN(count, FIELD_LL),
};
#undef FS
#undef FN

static void
line_fields(struct line *l, const struct log_fields *f, size_t limit)
{
	size_t i;

	for (i = 0; i < sizeof(head_fields) / sizeof(head_fields[0]); i++) {
		const void *at = (const char *)f + head_fields[i].off;

		if (head_fields[i].kind == FIELD_STR)
			line_str(l, head_fields[i].name, *(const char *const *)at, limit,
			         head_fields[i].max);
		else if (head_fields[i].kind == FIELD_LL)
			line_num(l, head_fields[i].name, *(const long long *)at, limit);
		else
			line_num(l, head_fields[i].name, *(const int *)at, limit);
	}
}

void
log_event(enum log_level level, const char *event, const struct log_fields *f)
{
	static const struct log_fields none;
	char buf[OG_LOG_LINE_MAX], tailbuf[LOG_TAIL_MAX], ts[64];
	struct line l = { buf, 0, sizeof(buf), false };
	struct line tail = { tailbuf, 0, sizeof(tailbuf), false };
	char *reason = NULL, *detail = NULL, *hint = NULL;
	size_t limit, hint_room;

	if (!log_enabled(level))
		return;
	if (f == NULL)
		f = &none;
	reason = redacted_copy(f->reason, &l.cut);
	detail = redacted_copy(f->detail, &l.cut);
	hint = redacted_copy(f->hint, &l.cut);

	line_str(&tail, "request_id", f->request_id, tail.cap, OG_FIELD_MAX);
	line_str(&tail, "method", f->method, tail.cap, OG_FIELD_MAX);
	line_str(&tail, "path", f->path, tail.cap, OG_FIELD_MAX);
	line_num(&tail, "status", f->status, tail.cap);
	l.cut |= tail.cut;
	/* what the head may fill: room is kept for the tail and the end */
	limit = l.cap - tail.len - (sizeof(LOG_TRUNCATED) - 1) - 2;

	format_ts(ts, sizeof(ts));
	(void)line_put(&l, "{\"ts\":\"", 7);
	(void)line_put(&l, ts, strlen(ts));
	(void)line_put(&l, "\",\"level\":\"", 11);
	(void)line_put(&l, log_names[level], strlen(log_names[level]));
	(void)line_put(&l, "\"", 1);
	line_str(&l, "event", event != NULL ? event : OG_UNKNOWN, limit, OG_LOG_FIELD_MAX);
	line_str(&l, "program", log_program != NULL ? log_program : "oncegate",
	         limit, OG_LOG_FIELD_MAX);

	line_fields(&l, f, limit);
	line_model(&l, f->model, f->model_provider, f->model_revision, limit);
	line_str(&l, "validation", f->validation, limit, OG_LOG_FIELD_MAX);
	line_object(&l, "output", f->output_fields, limit, false);
	line_object(&l, "edited", f->edited_fields, limit, true);
	line_str(&l, "reason", reason, limit, OG_LOG_FIELD_MAX);

	/* detail and hint take what is left, detail leaving hint a share */
	hint_room = 0;
	if (hint != NULL) {
		hint_room = strlen(hint) + sizeof(",\"hint\":\"\"");
		if (hint_room > OG_FIELD_MAX)
			hint_room = OG_FIELD_MAX;
	}
	line_str(&l, "detail", detail, l.len < limit && limit - l.len > hint_room ?
	         limit - hint_room : l.len, SIZE_MAX);
	line_str(&l, "hint", hint, limit, SIZE_MAX);

	(void)line_put(&l, tail.buf, tail.len);
	if (l.cut)
		(void)line_put(&l, LOG_TRUNCATED, sizeof(LOG_TRUNCATED) - 1);
	(void)line_put(&l, "}\n", 2);

	log_write(l.buf, l.len);
	free(reason);
	free(detail);
	free(hint);
}

int
log_open(const char *path, enum log_level min_level, const char *program)
{
	char *p = NULL, *prog = NULL;
	int fd = -1, rc = -1;

	prog = strdup(program != NULL && *program != '\0' ? program : "oncegate");
	if (prog == NULL)
		goto out;
	if (path != NULL && *path != '\0' && strcmp(path, "-") != 0) {
		p = strdup(path);
		if (p == NULL)
			goto out;
		fd = open(path, LOG_FLAGS, LOG_MODE);
		if (fd < 0)
			goto out;
	}
	log_close();
	log_path = p;
	log_program = prog;
	atomic_store(&log_fd, fd);
	log_set_level(min_level);
	p = prog = NULL;
	rc = 0;
out:
	free(p);
	free(prog);
	return rc;
}

/* Uses only async-signal-safe calls, so a SIGHUP handler may call it. */
int
log_reopen(void)
{
	int old = atomic_load(&log_fd), fd, rc;

	if (log_path == NULL || old < 0)
		return 0;
	fd = open(log_path, LOG_FLAGS, LOG_MODE);
	if (fd < 0)
		return -1;
	/* dup3 sets close-on-exec in the same step; dup2 would clear it */
	rc = dup3(fd, old, O_CLOEXEC);
	close(fd);
	return rc < 0 ? -1 : 0;
}

void
log_close(void)
{
	int fd = atomic_exchange(&log_fd, -1);

	if (fd >= 0)
		close(fd);
	free(log_path);
	free(log_program);
	log_path = NULL;
	log_program = NULL;
}

void
log_set_level(enum log_level min_level)
{
	int v = (int)min_level;

	if (v < 0)
		v = 0;
	if (v >= LOG_NLEVELS)
		v = LOG_NLEVELS - 1;
	atomic_store(&log_min, v);
}

bool
log_enabled(enum log_level level)
{
	int v = (int)level;

	return v >= 0 && v < LOG_NLEVELS && v >= atomic_load(&log_min);
}

int
log_level_parse(const char *name)
{
	int i;

	if (name == NULL)
		return -1;
	for (i = 0; i < LOG_NLEVELS; i++)
		if (strcasecmp(name, log_names[i]) == 0)
			return i;
	return -1;
}

const char *
log_level_name(enum log_level level)
{
	int v = (int)level;

	if (v < 0 || v >= LOG_NLEVELS)
		return OG_UNKNOWN;
	return log_names[v];
}
