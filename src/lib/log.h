/*
 * log.h — the decision log: one JSON object per line, written whole
 * by a single write(2) on an O_APPEND descriptor, reopened on SIGHUP.
 *
 * The API has a named field for everything a decision may carry and nothing
 * else: there is no field for a payload, a model output, a token or a key,
 * so they cannot be logged by accident. Free text (`detail`, `hint`,
 * `reason`) is passed through log_redact() before it is written.
 */
#ifndef OG_LOG_H
#define OG_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level {
	LOG_LEVEL_DEBUG = 0,
	LOG_LEVEL_INFO,
	LOG_LEVEL_NOTICE,
	LOG_LEVEL_WARNING,
	LOG_LEVEL_ERROR,
	LOG_LEVEL_ALERT,
};

/* Every member is optional: NULL strings and zero numbers are left out. */
struct log_fields {
	const char *client;
	const char *key;
	const char *correlation_id;
	const char *workflow_version;
	const char *contract;
	const char *trigger;
	const char *payload_hash;
	const char *state_from;
	const char *state_to;
	const char *actor;
	const char *decision;
	const char *approval_id;
	const char *previous_owner; /* a reclaim: the lease owner whose lease ran out */
	const char *effect_id;
	const char *target;
	const char *provider_id;
	const char *error_class;
	const char *model;          /* the model's name; with the two below, logged as
	                               "model":{"provider","name","revision"} */
	const char *model_provider;
	const char *model_revision;
	const char *validation;
	/* The output fields the contract marks loggable, as one compact JSON
	 * object text keyed by JSON Pointer ({"/label":"refund"}), written as
	 * "output"; never the rest of an output. Left out whole, never cut, when
	 * it does not fit or is not an object. */
	const char *output_fields;
	/* The output members an approver corrected before approving, as one
	 * compact JSON array text of their names (["body"]), written as
	 * "edited": the contract's names, never what was written in them. */
	const char *edited_fields;
	const char *reason;
	const char *detail;     /* a short fact for the reader */
	const char *hint;       /* what to do about it */
	const char *request_id; /* nginx $request_id, to join with the access log */
	const char *method;
	const char *path;       /* route pattern, never a raw path (it may hold a token) */
	long long version;      /* run version; 0 = absent (versions start at 1) */
	int attempt;            /* 0 = absent */
	long long duration_ms;  /* 0 = absent; rounded up, so a measured one is >= 1 */
	long long count;        /* how many (e.g. effects held back); 0 = absent */
	int status;             /* HTTP status answered; 0 = absent */
};

/* Opens (creating, mode 0640) the log at path, or stderr when path is NULL,
 * empty or "-". program names the writer in every line. */
int log_open(const char *path, enum log_level min_level, const char *program)
	__attribute__((warn_unused_result));
/* Reopens the same path (after logrotate moved it). Safe while other
 * threads write: the descriptor number is swapped atomically with dup3
 * (keeping close-on-exec). log_open and log_close are not thread-safe. */
int log_reopen(void) __attribute__((warn_unused_result));
void log_close(void);
void log_set_level(enum log_level min_level);
bool log_enabled(enum log_level level);
/* "debug" … "alert" → level; -1 if unknown. */
int log_level_parse(const char *name);
const char *log_level_name(enum log_level level);

/* Writes one decision line. f may be NULL. Never fails the caller: a write
 * error is reported once on stderr until writes succeed again. */
void log_event(enum log_level level, const char *event, const struct log_fields *f);

/* Masks secrets in free text, in place: the credential after "Bearer "
 * (any case), and any run of 32 or more [A-Za-z0-9_-] characters (API keys,
 * tokens, hashes, UUIDs) become "[redacted]", the rest of the text shifting
 * left; a credential shorter than that marker is overwritten with '*'.
 * Returns the number of runs masked. */
size_t log_redact(char *text);
/* log_redact() for text a provider or a library wrote about a provider
 * (an error string): also masks mail addresses as "[address]", URLs, host
 * names and IPv4 addresses (an internal host) as "[host]", the value after key=, token:, secret=,
 * password= and the like, and any run of 16 or more [A-Za-z0-9_-] with
 * both letters and digits (a short key). Never longer than the input.
 * Returns the number of things masked. */
size_t log_redact_provider(char *text);
/* Exact names the redactor leaves alone (a rule name is not a secret);
 * the array must outlive the log. Call before any thread logs. */
void log_keep_names(const char *const *names, size_t n);

#endif
