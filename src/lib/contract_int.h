/*
 * contract_int.h — what the contract loader (contract.c) and the gate
 * (contract_gate.c) share: a loaded contract's fields. Only those two files
 * include it.
 */
#ifndef OG_CONTRACT_INT_H
#define OG_CONTRACT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "caps.h"
#include "contract.h"
#include "digest.h"
#include "jload.h"
#include "schema.h"

#define CONTRACT_HASH_LEN (sizeof("sha256:") - 1 + DIGEST_HEX_LEN)

enum rule_op { OP_EQ, OP_NE, OP_IN, OP_NOT_IN, OP_LT, OP_LE, OP_GT, OP_GE, OP_EXISTS };

struct rule {
	bool on_output;               /* else on the effect */
	const char *rest;             /* pointer below /output or /effect */
	enum rule_op op;
	const json_t *value;
	bool want;                    /* exists: present (true) or absent */
};

/* effects.types.<type>: what a payload of that type must meet, and which of
 * its members come from the output instead of the payload. */
struct effect_decl {
	const char *type;
	struct schema *schema;
	const char *from_output[OG_CONTRACT_FROM_OUTPUT_MAX];
	size_t nfrom;
};

struct contract {
	char name[OG_CONTRACT_NAME_MAX + 1];
	char hash[CONTRACT_HASH_LEN];
	json_t *doc;                  /* owns every borrowed pointer below */
	struct schema *schema;
	struct contract_gate gate;    /* what contract_gate() hands out */
	struct contract_notify notify; /* what contract_notify() hands out */
	int repair_attempts;
	bool allow_approve, allow_reject;
	bool allow_changes;           /* gate.allowed_decisions has changes_requested */
	const json_t *editable_allow; /* gate.editable_allow, NULL when absent */
	struct rule rules[OG_CONTRACT_RULES_MAX];
	size_t nrules;
	const char *types[OG_CONTRACT_ALLOWED_MAX];
	size_t ntypes;
	const char *targets[OG_CONTRACT_ALLOWED_MAX];
	size_t ntargets;
	const char *loggable[OG_CONTRACT_LOGGABLE_MAX];
	size_t nloggable;
	struct effect_decl decls[OG_CONTRACT_ALLOWED_MAX];
	size_t ndecls;
};


/* [a-z0-9_.]{1,64} (dots) or [a-z0-9_]{1,64}: effect types and targets,
 * contract names and top-level output members. */
bool contract_name_ok(const char *s, size_t n, bool dots);
/* v names a top-level member of the output ([a-z0-9_]{1,64}) that the
 * output's schema allows; its pointer "/NAME" in ptr. False with the
 * failure in ld. */
bool contract_member_check(struct jload *ld, const json_t *v, const struct schema *output,
                           char ptr[OG_CONTRACT_NAME_MAX + 2]);

/* Loads the "gate" object (ld->at is its pointer) into c, whose schema is
 * already compiled (auto_when paths into the output are checked against
 * it). False with the failure in ld. */
bool contract_gate_load(struct jload *ld, struct contract *c, const json_t *gate);
/* With effects loaded: an editable member that an effect takes from the
 * output as its recipients or URL needs its gate.editable_allow entry. */
bool contract_gate_check_editable(struct jload *ld, const struct contract *c);
/* Loads notify, remind_after_seconds and escalate_after_seconds of "gate"
 * (approvers, escalate_to and expires_seconds already loaded). */
bool contract_notify_load(struct jload *ld, struct contract *c, const json_t *gate);

#endif
