/*
 * edit.h — an approver's correction of a draft before approving.
 *
 * A contract's gate.editable names top-level members of the output that a
 * person may correct as text on the approval card. What they post is
 * applied to the draft, and the corrected output must pass the same
 * contract as the model's: the output's schema, and the payload built from
 * it (effects.types.<type>.from_output, the type's schema, and for mail
 * what SMTP can carry). The effect then carries the corrected text, built
 * from it exactly as the model's output would have been.
 *
 * Text arrives as a browser sends a textarea: line ends as CRLF. Line ends
 * are compared and kept as LF, so a field sent back unchanged is no edit.
 *
 * Pure: no database, no I/O; callable from any thread.
 */
#ifndef OG_EDIT_H
#define OG_EDIT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "contract.h"

/* CRLF and lone CR become LF, in place; returns the new length. */
size_t edit_text_lf(char *s, size_t n);

/* The draft with values applied: values is an object {name: text} of
 * editable members (any other name is an error "/name" rule "editable").
 * A text equal to the member's current value once both have LF line ends
 * is no change. Returns a new output (a copy of draft when nothing
 * changed) and, in *changed, a new array of the names that changed, in the
 * contract's order; NULL (errors appended, or none when memory ran out)
 * when a name may not be edited. */
json_t *edit_apply(const struct contract *c, const json_t *draft, const json_t *values,
                   json_t **changed, json_t *errors) __attribute__((warn_unused_result));

/* Checks a corrected output against the contract and builds the effect
 * payload from it: proposed is the payload as the run proposed it (built
 * from the model's output); its from_output members are taken from output
 * instead. Errors as contract_validate's (paths into the output) and
 * effect_build's ("/effect/payload/…") are appended to errors; the new
 * payload, or NULL when there are any. */
json_t *edit_check(const struct contract *c, const char *type, bool mail,
                   const json_t *proposed, const json_t *output, json_t *errors)
	__attribute__((warn_unused_result));

#endif
