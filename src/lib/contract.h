/*
 * contract.h — output contracts and gate policy.
 *
 * A contract is one JSON file `NAME.json` in the contracts directory, NAME
 * matching [a-z0-9_]{1,64} and equal to the file's "name":
 *
 *   {
 *     "name": "support_reply",
 *     "description": "…",                            optional string
 *     "schema": { … },                                required, see below
 *     "gate": {                                       required
 *       "mode": "approve_before_act" | "act_with_window" | "approve_by_exception",
 *                                                     default approve_before_act
 *       "window_seconds": N,        act_with_window only, required there, 1..604800
 *       "auto_when": [ RULE, … ],   approve_by_exception only, required there,
 *                                   1..32 rules, all must hold
 *       "sample_rate": R,           approve_by_exception only, 0..1, default 0
 *       "approvers": ["group:support", "lead@example.com"],   required, 1..20,
 *                                   distinct; no commas; spaces only inside
 *                                   a group name ("group:customer support")
 *       "expires_seconds": N,       60..2592000, default 86400
 *       "allowed_decisions": ["approve", "reject"],   non-empty subset of approve,
 *                                   reject and changes_requested, default the
 *                                   first two; changes_requested (send the
 *                                   draft back with feedback for a new one,
 *                                   counted against repair_attempts) needs
 *                                   approve
 *       "separation_of_duties": B   default true: requested_by must name a
 *                                   person (a mail address), who cannot approve
 *       "requested_by_mail": B      default false: requested_by must name a
 *                                   person even without separation of duties
 *       "min_approvals": N,         1..20, default 1: distinct people who must
 *                                   approve (any reject ends the run); at most
 *                                   the number of approvers when none is a group
 *       "editable": ["body"]        optional, ≤ 32 distinct names: top-level
 *                                   output members, allowed by the schema as
 *                                   strings, that an approver may correct
 *                                   before approving
 *       "editable_allow": {NAME: {"mail_domains": [D, …]} | {"url_prefixes": [U, …]}}
 *                                   optional, keys among editable: where a
 *                                   correction may point; required for an
 *                                   editable member an effect takes from the
 *                                   output as to, cc, bcc, reply_to or url
 *       "notify": {APPROVER: {"target": T, "to"?: [ADDRESS, …]}, …},
 *                                   optional: whom to tell (contract_notify.c)
 *       "remind_after_seconds": N,  optional, below expires_seconds, with notify
 *       "escalate_after_seconds": N, "escalate_to": [APPROVER, …]
 *                                   optional, together: entries added when
 *                                   nobody decided in time
 *     },
 *     "effects": {                                    required
 *       "allowed_types": ["email.send"],      non-empty, distinct, [a-z0-9_.]{1,64},
 *                                             never oncegate's own approval.* or
 *                                             decision.*
 *       "allowed_targets": ["demo_smtp"],     the same
 *       "types": {                            optional; keys among allowed_types
 *         "email.send": {
 *           "schema": { … },                  required: the schema (same subset
 *                                             as below) every payload of this
 *                                             type must meet, as it is sent
 *           "from_output": ["subject", "body"]  optional, ≤ 32 distinct names:
 *                                             top-level output members the
 *                                             payload takes from the output
 *         }
 *       }
 *     },
 *     "repair_attempts": N,                           0..10, default 1
 *     "loggable_fields": ["/label"]                   optional, ≤ 32 JSON Pointers
 *   }                                                 into the output (not "")
 *
 * One source per field: a member named in from_output comes from the
 * output and the caller's payload must not carry it; every other member
 * comes from the payload. Both the output's schema and the type's schema
 * must allow each from_output name. The payload that goes out (and that
 * auto_when rules over /effect/payload see) is the caller's payload with
 * those members of the output added; it is what the type's schema checks
 * (effect.h).
 *
 * RULE is {"path": P, "op": OP, "value": V}. P is a JSON Pointer into the
 * document {"output": <model output>, "effect": <proposed effect>}; it must
 * start with /output or /effect/type, /effect/target, /effect/payload.
 *   eq, ne            V any JSON value; equality as JSON Schema's (1 == 1.0)
 *   in, not_in        V a non-empty array; membership by the same equality
 *   lt, le, gt, ge    V a number; the field must be a number
 *   exists            V optional boolean (default true): field present / absent
 * Every op but exists fails when P names nothing: auto-approval fails closed.
 *
 * "schema" is the JSON Schema subset of schema.h: type, properties,
 * required, additionalProperties (boolean), enum, const, minLength,
 * maxLength, minimum, maximum, items (one schema), minItems, maxItems,
 * format (email, uri, date-time), and the annotations $schema, $id,
 * $comment, title, description, examples, default.
 *
 * Anything else — unknown members anywhere, another keyword, a bad value, a
 * minimum above its maximum — makes the whole directory fail to load, with
 * a message naming the file and the JSON Pointer of the problem, so that a
 * typo can never silently loosen a gate.
 *
 * Loaded contracts are immutable: every function below may be called from
 * any number of threads at once.
 */
#ifndef OG_CONTRACT_H
#define OG_CONTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "caps.h"

enum gate_mode {
	GATE_APPROVE_BEFORE_ACT = 0,
	GATE_ACT_WITH_WINDOW,
	GATE_APPROVE_BY_EXCEPTION,
};

struct contract;       /* one loaded contract, immutable after load */
struct contract_set;   /* all contracts of a directory */

/* Loads every NAME.json of dir (not recursive; names starting with '.' and
 * names not ending in ".json" are skipped, any other name must be
 * [a-z0-9_]{1,64}.json). Files must be regular files of at most
 * OG_CONTRACT_FILE_MAX bytes. On any error: NULL and a message naming the
 * file and, where one applies, the JSON Pointer of the problem in err. An
 * empty directory is an empty set, not an error. */
struct contract_set *contract_load_dir(const char *dir, char *err, size_t errlen)
	__attribute__((warn_unused_result));
void contract_set_free(struct contract_set *set);
size_t contract_count(const struct contract_set *set);
/* i-th contract in name order, i < contract_count(set); NULL otherwise. */
const struct contract *contract_at(const struct contract_set *set, size_t i);
const struct contract *contract_find(const struct contract_set *set, const char *name); /* NULL if none */
const char *contract_name(const struct contract *c);
const char *contract_hash(const struct contract *c);   /* "sha256:" + hex of the file's bytes */
/* The contract's document as loaded (borrowed, read-only): what describes
 * it to others, such as its MCP tools' descriptions and input schemas. */
const json_t *contract_doc(const struct contract *c);

/* Validates output against the schema. Returns a new JSON array of errors,
 * each {"path": JSON Pointer into the output (RFC 6901, "" for the root),
 * "rule": the keyword that failed, "message": short English}; empty when
 * valid; NULL only when out of memory. At most OG_CONTRACT_ERRORS_MAX
 * errors are reported. Within one value "type" is checked first and, when
 * it fails, nothing else about that value is. */
json_t *contract_validate(const struct contract *c, const json_t *output)
	__attribute__((warn_unused_result));

/* Validates an effect payload (as it will be sent) against the schema of
 * effects.types.<type>. Errors as contract_validate's, with paths that
 * start "/effect/payload" (pointers into the /output request body); an
 * empty array when the type has no entry. NULL only when out of memory. */
json_t *contract_validate_effect(const struct contract *c, const char *type,
                                 const json_t *payload) __attribute__((warn_unused_result));
/* Has the contract an effects.types entry for type? */
bool contract_effect_declared(const struct contract *c, const char *type);
/* The type's from_output names; 0 / NULL when it has none or no entry. */
size_t contract_from_output_count(const struct contract *c, const char *type);
const char *contract_from_output(const struct contract *c, const char *type, size_t i);

/* The gate's settings and lists as loaded ("gate"), read-only and valid
 * as long as the contract set is. */
struct contract_gate {
	enum gate_mode mode;
	int window_seconds;           /* act_with_window; 0 otherwise */
	int expires_seconds;          /* approval expiry */
	double sample_rate;           /* approve_by_exception; 0 otherwise */
	bool separation_of_duties;
	bool requested_by_mail;       /* requested_by must name a person by mail address */
	int min_approvals;            /* distinct people who must approve, 1 by default */
	/* "alice@example.com" or "group:support" */
	const char *approvers[OG_CONTRACT_APPROVERS_MAX];
	size_t napprovers;
	/* gate.editable: the top-level output members (string-valued) an
	 * approver may correct before approving */
	const char *editable[OG_CONTRACT_EDITABLE_MAX];
	size_t neditable;
};

/* Whom the gate tells and when (contract_notify.c), read-only as above. */
struct contract_notify {
	const json_t *entries;        /* gate.notify {APPROVER: {"target", "to"?}}, NULL: none */
	int remind_after_seconds;     /* 0: no reminder */
	int escalate_after_seconds;   /* 0: no escalation */
	const char *escalate_to[OG_CONTRACT_APPROVERS_MAX];  /* entries an escalation adds */
	size_t nescalate;
};

const struct contract_gate *contract_gate(const struct contract *c);
const struct contract_notify *contract_notify(const struct contract *c);

const char *contract_gate_mode_name(enum gate_mode mode);
/* Invalid outputs tolerated before failed_terminal (0 = the first invalid
 * output is terminal). */
int contract_repair_attempts(const struct contract *c);
/* Must an output's requested_by name a person (contract_person)? Under
 * separation of duties, and when gate.requested_by_mail says so. */
bool contract_requester_must_be_person(const struct contract *c);
/* "approve", "reject", "changes_requested" */
bool contract_decision_allowed(const struct contract *c, const char *decision);
json_t *contract_allowed_decisions(const struct contract *c); /* new JSON array of strings */
/* Is name among gate.editable? */
bool contract_is_editable(const struct contract *c, const char *name);

/* The notify entry {"target", "to"?} of an approver entry (NULL: none). */
const json_t *contract_notify_entry(const struct contract *c, const char *approver);
/* 0 when every notify entry of every contract in set names a target cfg
 * configures with a kind that fits it (mail addresses: smtp; a chat
 * webhook: http); else -1 with a message naming the contract, the entry
 * and the target. Run where contracts meet the configuration. */
struct config;
int contract_notify_check(const struct contract_set *set, const struct config *cfg, char *err,
                          size_t errlen) __attribute__((warn_unused_result));
/* 0 when every target in every contract's effects.allowed_targets is a
 * [target] section of cfg; else -1 with a message naming the contract's
 * file and the target (`oncegatectl config check`). */
int contract_targets_check(const struct contract_set *set, const struct config *cfg,
                           char *err, size_t errlen) __attribute__((warn_unused_result));

/* May this SSO subject with these groups decide for the approver entry
 * `approver`? groups is AUTH_GROUPS: a list separated by sep (config
 * auth_groups_separator, "," as oauth2-proxy joins them); each item is
 * trimmed of spaces and tabs, empty items are ignored, and a "group:NAME"
 * entry matches when NAME equals an item whole and exactly (bytes, case
 * included: "customer support" is neither "support" nor "Customer
 * support"). Any other entry matches only the subject: ignoring ASCII case
 * when both contain '@' (e-mail addresses), exactly otherwise. NULL or
 * empty subject never matches. */
bool contract_approver_matches(const char *approver, const char *subject, const char *groups,
                               char sep);

/* The person text s names, as separation of duties compares people: the
 * addr-spec of a mail address ("bob@example.com", "Bob Smith
 * <bob@example.com>", either trimmed of spaces and tabs), in ASCII lower
 * case, into out (OG_MAIL_ADDRESS_MAX + 1 bytes). False, and out empty,
 * when s names no person ("bob", "n8n:inbox", NULL). */
bool contract_person(const char *s, char *out);

/* Is the signed-in subject the run's requester? Two people (mail
 * addresses) are the same when their addr-specs are; when either side
 * names no person (a replay's operator role, a sign-in without a mail
 * address) the trimmed, case-folded texts are compared, and also each
 * with the other's mailbox (the local part), so "Bob" is bob@example.com. */
bool contract_is_requester(const char *requested_by, const char *subject);

/* May editable member name be corrected to value? Members with no
 * gate.editable_allow entry may (the schema and the effect still judge
 * them); one with an entry must be a mail address at one of its
 * mail_domains (ASCII case ignored) or a URL starting with one of its
 * url_prefixes. NULL when it may, else why not. */
const char *contract_edit_refusal(const struct contract *c, const char *name,
                                  const json_t *value);

bool contract_effect_allowed(const struct contract *c, const char *type, const char *target);

/* approve_by_exception: all auto_when rules hold over the document
 * {"output": output, "effect": effect}. Always false for the other modes. */
bool contract_auto_eligible(const struct contract *c, const json_t *output, const json_t *effect);

/* Sampling (approve_by_exception): a share sample_rate of the eligible runs
 * still goes to a person. Which ones is decided by a draw from the CSPRNG,
 * made once per run and kept on it (ledger_sample_draw), never by anything
 * the caller chooses such as the key: nobody can pick runs that dodge the
 * sample, and a resubmitted output meets the same draw.
 * contract_sample_draw: a uniform draw in [0,1) from RAND_bytes (53 bits);
 * -1 when the CSPRNG fails. contract_sampled: draw < sample_rate; rate 0 →
 * never, rate 1 → always; a draw outside [0,1) → true (a person decides). */
int contract_sample_draw(double *draw) __attribute__((warn_unused_result));
bool contract_sampled(const struct contract *c, double draw);

/* Output fields the contract marks loggable (JSON Pointers), for the
 * decision log. */
size_t contract_loggable_count(const struct contract *c);
const char *contract_loggable(const struct contract *c, size_t i); /* NULL when out of range */

/* The value at JSON Pointer `pointer` (RFC 6901) in doc, borrowed; NULL if
 * the pointer is malformed or names nothing. For reading loggable fields. */
json_t *contract_pointer_get(const json_t *doc, const char *pointer);

#endif
