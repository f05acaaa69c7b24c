/*
 * api_card.h — the approval pages' rendering (api_card.c), shared with the
 * handlers that answer /approve/ (api_approve.c): the draft a person
 * decides on, the card, the decided page and the notice page.
 */
#ifndef OG_API_CARD_H
#define OG_API_CARD_H

#include <stdbool.h>

#include <jansson.h>

#include "api_int.h"
#include "contract.h"
#include "gate.h"
#include "page.h"
#include "rc.h"

/* What a person decides on: the draft (an approver's correction of the
 * output when one was made, else the output), the effect approving
 * queues, built from it, and the votes so far. */
struct api_card_draft {
	const struct contract *k;    /* the run's contract as loaded now; NULL when not */
	const json_t *output;        /* the draft (borrowed from the run) */
	const char *hash;            /* its hash */
	const char *edited_by;       /* who corrected it, or NULL */
	json_t *effect;              /* {type, target, payload} approving queues; owned */
	json_t *votes;               /* the run's votes, oldest first; owned */
	int needed, approvals;
	const json_t *mine;          /* the signed-in person's vote, or NULL */
};

/* Reads the run of challenge a (as the status API shows it, without the
 * timeline: a new reference in *run) and its votes, in one round trip, and
 * loads its draft: the contract, the draft (the correction when one was
 * made, else the output), the effect approving queues and the votes so
 * far, with the quorum. Whether the run still awaits a decision is the
 * caller's to check. Release *run and clear dr with api_card_draft_clear
 * whatever this returns. */
enum og_rc api_card_load(struct api_call *c, const struct gate_approval *a, json_t **run,
                         struct api_card_draft *dr);
void api_card_draft_clear(struct api_card_draft *dr);
/* The effect approving queues when output is the draft: the proposed
 * effect's payload with the members the contract takes from the output
 * taken from this one, checked as at /output; NULL with errors appended
 * when it does not pass. */
json_t *api_card_draft_effect(struct api_call *c, const struct contract *k,
                              const json_t *proposed, const json_t *output, json_t *errors);
/* May the signed-in person take this decision on this challenge? NULL when
 * yes, else why not, in words for the page. */
const char *api_card_refusal(const struct api_call *c, const struct gate_approval *a,
                             enum gate_decision decision);
/* May the person correct the draft now? */
bool api_card_editable(const struct api_call *c, const struct gate_approval *a,
                       const struct api_card_draft *dr);

/* Renders a filled page as the answer; consumes p. */
void api_card_answer(struct api_call *c, int status, struct page *p);
/* The notice page: unknown, expired, used, refused. One log line. */
/* The page of a person who may take no decision on challenge a (why:
 * api_card_refusal's words): 403, that it is not theirs and who they are
 * signed in as, and nothing of the request. */
void api_card_not_yours(struct api_call *c, const struct gate_approval *a, const char *why,
                        struct log_fields *f);
void api_card_notice(struct api_call *c, int status, const char *event, const char *heading,
                     const char *message, struct log_fields *f);
/* The page of an approval that was decided. */
void api_card_decided(struct api_call *c, int status, const struct gate_approval *a,
                      const json_t *run, const struct api_card_draft *dr);
/* The confirmation card; after a refused correction (status 422) with
 * what the person wrote (values) and why it was refused (edit_errors). */
void api_card_page(struct api_call *c, const struct gate_approval *a, const json_t *run,
                   const struct api_card_draft *dr, const json_t *values,
                   const json_t *edit_errors, int status);

#endif
