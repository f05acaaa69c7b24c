/*
 * ledger.c — the run ledger: claims, leases, transitions and status.
 *
 * Every write is one statement that checks what it relies on in its own
 * WHERE clause (compare-and-set), and writes its timeline entry in the same
 * statement, so there is no window between deciding and acting. Reads that
 * follow a write that matched nothing only explain the answer; they never
 * decide anything.
 *
 * The one file with SQL text for workflow_runs and run_events: every
 * statement that moves a run (the responder's, the dispatcher's, the
 * operator's, a replay's, the retention purge's) and every read of a run
 * the use cases need. Every run_events row is written by a statement here,
 * in the same statement as the move it records. Its length (over 1,000
 * lines, about half of it SQL) is that of the one owner of the two central
 * tables; splitting it would give the tables two owners.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clients.h"
#include "ledger.h"

static const char *const state_names[RUN_STATE_COUNT] = {
	"processing", "awaiting_human", "approved", "completed",
	"failed_retryable", "failed_terminal", "rejected",
};

/*
 * The one way a run_events row is written: the CTE `ev` of each statement
 * that moves a run, over the rows the move returned (src), so the entry
 * commits exactly with the move. The other arguments are SQL expressions
 * (NULL when the entry has none).
 */
#define LEDGER_EVENT(src, event, from, to, actor, reason)                                  \
	"ev AS (INSERT INTO run_events (client_id, idempotency_key, event, state_from,"       \
	"    state_to, version, attempt, actor, reason)"                                       \
	"  SELECT client_id, idempotency_key, " event ", " from ", " to ", version, attempt, " \
	actor ", " reason " FROM " src ")"

/* How long ago a finished run last changed, in whole seconds (NULL while
 * it is not finished): what the duplicate window is measured against. */
#define LEDGER_FINISHED_SECONDS(r)                                                  \
	" CASE WHEN " r "state IN ('completed', 'failed_terminal', 'rejected')"         \
	"   THEN floor(extract(epoch FROM now() - " r "updated_at))::bigint"            \
	" END AS finished_seconds"

/* The read-only look-up: answers duplicates and mismatches without taking
 * a row lock or writing WAL. It never decides to claim. */
static const struct db_stmt st_lookup = {
	"ledger_lookup",
	"SELECT state, version, attempt, payload_hash, payload_canon, lease_owner,"
	"       og_ts(lease_expires_at) AS lease_expires_at,"
	"       (state = 'processing' AND lease_expires_at > now()) AS lease_live,"
	"       (lease_expires_at >= claim_started_at + make_interval(secs => $3::int))"
	"           AS at_cap,"
	"       result::text AS result,"
	"       CASE WHEN decision IS NOT NULL THEN json_build_object('decision', decision,"
	"           'decided_by', decided_by, 'decided_at', og_ts(decided_at))::text"
	"       END AS decision," LEDGER_FINISHED_SECONDS("")
	"  FROM workflow_runs WHERE client_id = $1 AND idempotency_key = $2",
	3, true,
};

/* The claim: ONE atomic statement. A new key inserts; an
 * existing key is taken over only when its payload is the same (under the
 * rule its hash was computed with: $3 RFC 8785, $11 as written) and it is
 * failed_retryable or its lease has expired. */
static const struct db_stmt st_claim = {
	"ledger_claim",
	"WITH claimed AS ("
	"  INSERT INTO workflow_runs AS r (client_id, idempotency_key, payload_hash,"
	"      payload, state, lease_owner, lease_expires_at, claim_started_at,"
	"      version, attempt, workflow_version, trigger, correlation_id, event_id,"
	"      payload_canon)"
	"  VALUES ($1, $2, $3, $4::jsonb, 'processing', gen_random_uuid(),"
	"      now() + make_interval(secs => LEAST($5::int, $6::int)), now(), 1, 1,"
	"      $7, $8, $9, $10, 'jcs')"
	"  ON CONFLICT (client_id, idempotency_key) DO UPDATE"
	"    SET state = 'processing', lease_owner = EXCLUDED.lease_owner,"
	"        lease_expires_at = EXCLUDED.lease_expires_at,"
	"        claim_started_at = EXCLUDED.claim_started_at,"
	"        version = r.version + 1, attempt = r.attempt + 1,"
	"        workflow_version = COALESCE(EXCLUDED.workflow_version, r.workflow_version),"
	"        trigger = COALESCE(EXCLUDED.trigger, r.trigger),"
	"        correlation_id = COALESCE(EXCLUDED.correlation_id, r.correlation_id),"
	"        event_id = COALESCE(EXCLUDED.event_id, r.event_id),"
	"        result = NULL, error_class = NULL, reason = NULL, updated_at = now()"
	"    WHERE r.payload_hash = CASE r.payload_canon WHEN 'og1' THEN $11"
	"                                 ELSE EXCLUDED.payload_hash END"
	"      AND (r.state = 'failed_retryable'"
	"           OR (r.state = 'processing' AND r.lease_expires_at <= now()))"
	"  RETURNING r.client_id, r.idempotency_key, r.lease_owner, r.version,"
	"            r.attempt, r.lease_expires_at, r.payload_hash, r.payload_canon"
	"), " LEDGER_EVENT("claimed", "'run.claimed'", "NULL", "'processing'",
	                   "NULL", "NULL")
	"SELECT lease_owner, version, attempt, payload_hash, payload_canon,"
	"       og_ts(lease_expires_at) AS lease_expires_at FROM claimed",
	11, false,
};

/* The read a claim whose API key is not yet authenticated may start with,
 * in ONE statement: the key's client and its run under the key, without a
 * row lock or WAL. Cheaper than st_claim_first when the key exists, which
 * repeated deliveries mostly hit; a new key then needs st_claim. No row:
 * the key is unknown or revoked. */
static const struct db_stmt st_claim_read = {
	"ledger_claim_read",
	"SELECT client.id AS client_id, client.name AS client_name,"
	"       r.version IS NOT NULL AS found, r.state, r.version, r.attempt,"
	"       r.payload_hash, r.payload_canon, r.lease_owner,"
	"       og_ts(r.lease_expires_at) AS lease_expires_at,"
	"       (r.state = 'processing' AND r.lease_expires_at > now()) AS lease_live,"
	"       r.result::text AS result,"
	"       CASE WHEN r.decision IS NOT NULL THEN json_build_object('decision', r.decision,"
	"           'decided_by', r.decided_by, 'decided_at', og_ts(r.decided_at))::text"
	"       END AS decision," LEDGER_FINISHED_SECONDS("r.")
	"  FROM (" CLIENTS_SQL_ACTIVE("$1") ") client"
	"  LEFT JOIN workflow_runs r"
	"         ON r.client_id = client.id AND r.idempotency_key = $2",
	2, true,
};

/* A claim whose API key is not yet authenticated, in ONE statement: it
 * authenticates the key (the clients' rule) and inserts the run under the
 * key with its timeline entry. A key that has a run already is left as it
 * is (DO NOTHING: no lock, no WAL); the caller then reads it with
 * st_lookup. Reading the run here as well would answer that case in the
 * same round trip, but costs every new key a third scan and a join, and new
 * keys are what this statement is chosen for. No row: the API key is
 * unknown or revoked, and nothing was written. It may run again on a fresh
 * session when the connection was found lost: that is the caller's own
 * retry, and a claim that committed before the connection went is then
 * answered as a duplicate, never made twice. */
static const struct db_stmt st_claim_first = {
	"ledger_claim_first",
	"WITH client AS (" CLIENTS_SQL_ACTIVE("$1") "), claimed AS ("
	"  INSERT INTO workflow_runs AS r (client_id, idempotency_key, payload_hash,"
	"      payload, state, lease_owner, lease_expires_at, claim_started_at,"
	"      version, attempt, workflow_version, trigger, correlation_id, event_id,"
	"      payload_canon)"
	"  SELECT client.id, $2, $3, $4::jsonb, 'processing', gen_random_uuid(),"
	"      now() + make_interval(secs => LEAST($5::int, $6::int)), now(), 1, 1,"
	"      $7, $8, $9, $10, 'jcs'"
	"    FROM client"
	"  ON CONFLICT (client_id, idempotency_key) DO NOTHING"
	"  RETURNING r.client_id, r.idempotency_key, r.lease_owner, r.version,"
	"            r.attempt, r.lease_expires_at, r.payload_hash, r.payload_canon"
	"), " LEDGER_EVENT("claimed", "'run.claimed'", "NULL", "'processing'",
	                   "NULL", "NULL")
	"SELECT client.id AS client_id, client.name AS client_name,"
	"       claimed.version IS NOT NULL AS claimed, claimed.version,"
	"       claimed.attempt, claimed.payload_hash, claimed.payload_canon,"
	"       claimed.lease_owner, og_ts(claimed.lease_expires_at) AS lease_expires_at"
	"  FROM client LEFT JOIN claimed ON true",
	10, true,
};

/* Renewal: only the owner, with the current version, before expiry, and
 * never past claim_started_at + cap. */
static const struct db_stmt st_renew = {
	"ledger_renew",
	"UPDATE workflow_runs"
	"   SET lease_expires_at = LEAST(now() + make_interval(secs => $5::int),"
	"           claim_started_at + make_interval(secs => $6::int)),"
	"       version = version + 1, updated_at = now()"
	" WHERE client_id = $1 AND idempotency_key = $2 AND lease_owner = $3::uuid"
	"   AND version = $4::bigint AND state = 'processing'"
	"   AND lease_expires_at > now()"
	"   AND lease_expires_at < claim_started_at + make_interval(secs => $6::int)"
	" RETURNING version, attempt, og_ts(lease_expires_at) AS lease_expires_at",
	6, false,
};

static const struct db_stmt st_transition = {
	"ledger_transition",
	"WITH moved AS ("
	"  UPDATE workflow_runs"
	"     SET state = $5, version = version + 1, result = $6::jsonb,"
	"         error_class = $7, reason = $8, lease_expires_at = NULL,"
	"         updated_at = now()"
	"   WHERE client_id = $1 AND idempotency_key = $2 AND lease_owner = $3::uuid"
	"     AND version = $4::bigint AND state = 'processing'"
	"     AND lease_expires_at > now()"
	"  RETURNING client_id, idempotency_key, state, version, attempt"
	"), " LEDGER_EVENT("moved", "'run.transitioned'", "'processing'", "state",
	                   "NULL", "$8")
	"SELECT state, version, attempt FROM moved",
	8, false,
};

static const struct db_stmt st_status = {
	"ledger_status",
	"SELECT idempotency_key, state, version, attempt, payload_hash,"
	"       workflow_version, trigger, correlation_id, event_id, lease_owner,"
	"       og_ts(lease_expires_at) AS lease_expires_at,"
	"       og_ts(claim_started_at) AS claim_started_at, result::text AS result,"
	"       error_class, reason, og_ts(created_at) AS created_at,"
	"       og_ts(updated_at) AS updated_at, contract, contract_hash,"
	"       output::text AS output, output_hash, model::text AS model,"
	"       effect::text AS effect, source_url, requested_by, callback_url,"
	"       invalid_outputs, validation::text AS validation, decision, decided_by,"
	"       og_ts(decided_at) AS decided_at, edited_output::text AS edited_output,"
	"       edited_output_hash, edited_by, og_ts(edited_at) AS edited_at,"
	"       array_to_json(edited_fields)::text AS edited_fields, round,"
	"       context::text AS context"
	"  FROM workflow_runs WHERE client_id = $1 AND idempotency_key = $2",
	2, true,
};

static const struct db_stmt st_timeline = {
	"ledger_timeline",
	"SELECT og_ts(ts) AS ts, event, state_from, state_to, version, attempt,"
	"       actor, reason"
	"  FROM run_events WHERE client_id = $1 AND idempotency_key = $2"
	" ORDER BY id LIMIT 1000",
	2, true,
};


static const struct db_stmt st_output_invalid = {
	"ledger_output_invalid",
	"WITH moved AS ("
	"  UPDATE workflow_runs"
	"     SET invalid_outputs = invalid_outputs + 1, validation = $7::jsonb,"
	"         contract = $5, contract_hash = $6, version = version + 1,"
	"         state = CASE WHEN invalid_outputs + round > $8::int THEN 'failed_terminal'"
	"                      ELSE state END,"
	"         error_class = CASE WHEN invalid_outputs + round > $8::int THEN 'validation'"
	"                            ELSE error_class END,"
	"         reason = CASE WHEN invalid_outputs + round > $8::int"
	"                       THEN 'model output failed the contract after the repair budget'"
	"                       ELSE reason END,"
	"         lease_expires_at = CASE WHEN invalid_outputs + round > $8::int THEN NULL"
	"                                 ELSE lease_expires_at END,"
	"         updated_at = now()"
	"   WHERE client_id = $1 AND idempotency_key = $2 AND lease_owner = $3::uuid"
	"     AND version = $4::bigint AND state = 'processing'"
	"     AND lease_expires_at > now()"
	"  RETURNING client_id, idempotency_key, state, version, attempt, invalid_outputs, round"
	"), " LEDGER_EVENT("moved", "'run.output_invalid'", "'processing'", "state",
	                   "NULL", "'invalid output ' || invalid_outputs")
	/* the repairs spent: invalid outputs and redrafts */
	"SELECT state, version, invalid_outputs + round - 1 AS spent FROM moved",
	8, false,
};

static const struct db_stmt st_output_accept = {
	"ledger_output_accept",
	"WITH moved AS ("
	"  UPDATE workflow_runs"
	"     SET state = $5::text, contract = $6, contract_hash = $7, output = $8::jsonb,"
	"         output_hash = $9, model = $10::jsonb, effect = $11::jsonb,"
	"         source_url = $12, requested_by = $13, callback_url = $14,"
	"         context = $15::jsonb, version = version + 1, lease_expires_at = NULL,"
	"         decision = CASE WHEN $5::text = 'approved' THEN 'auto' END,"
	"         decided_at = CASE WHEN $5::text = 'approved' THEN now() END,"
	"         updated_at = now()"
	"   WHERE client_id = $1 AND idempotency_key = $2 AND lease_owner = $3::uuid"
	"     AND version = $4::bigint AND state = 'processing'"
	"     AND lease_expires_at > now()"
	"  RETURNING client_id, idempotency_key, state, version, attempt"
	"), " LEDGER_EVENT("moved", "'run.output_accepted'", "'processing'", "state",
	                   "CASE WHEN state = 'approved' THEN 'gate:auto' END", "NULL")
	"SELECT state, version, attempt FROM moved",
	15, false,
};

/* Also the row lock of the consume transaction: the UPDATE locks
 * the run and checks it is still awaiting_human in one step. */
static const struct db_stmt st_decide = {
	"ledger_decide",
	"WITH moved AS ("
	"  UPDATE workflow_runs"
	"     SET state = CASE WHEN $3::text = 'approve' THEN 'approved' ELSE 'rejected' END,"
	"         decision = $3::text, decided_by = $4, decided_at = now(),"
	"         error_class = CASE WHEN $3::text = 'approve' THEN error_class ELSE 'rejected' END,"
	"         reason = CASE WHEN $3::text = 'approve' THEN reason ELSE $5 END,"
	"         version = version + 1, updated_at = now()"
	"   WHERE client_id = $1 AND idempotency_key = $2 AND state = 'awaiting_human'"
	"  RETURNING client_id, idempotency_key, state, version, attempt, contract,"
	"            coalesce(edited_output, output) AS output, round"
	"), " LEDGER_EVENT("moved", "'run.decided'", "'awaiting_human'", "state",
	                   "$4", "$5")
	/* what was decided on, for the contract's loggable fields */
	"SELECT state, version, attempt, round,"
	"       json_build_object('contract', contract, 'output', output)::text AS decided"
	"  FROM moved",
	5, false,
};

/* A request for changes that ends a round: awaiting_human → processing
 * for the next round's draft, under the run's lease owner with a fresh
 * lease ($6 seconds, its cap counted from now), the round's correction
 * dropped; when the repairs are spent ($5: the contract's repair_attempts,
 * which invalid outputs and redrafts share) → failed_terminal
 * (error_class redrafts_spent) instead. The decision columns stay unset:
 * the run is not decided. The feedback ($4) is the event's reason. */
#define REDRAFT_ALLOWED "invalid_outputs + round <= $5::int"
static const struct db_stmt st_redraft = {
	"ledger_redraft",
	"WITH moved AS ("
	"  UPDATE workflow_runs"
	"     SET state = CASE WHEN " REDRAFT_ALLOWED " THEN 'processing'"
	"                      ELSE 'failed_terminal' END,"
	"         round = CASE WHEN " REDRAFT_ALLOWED " THEN round + 1 ELSE round END,"
	"         lease_owner = coalesce(lease_owner, gen_random_uuid()),"
	"         lease_expires_at = CASE WHEN " REDRAFT_ALLOWED
	"                                 THEN now() + make_interval(secs => $6::int) END,"
	"         claim_started_at = CASE WHEN " REDRAFT_ALLOWED " THEN now()"
	"                                 ELSE claim_started_at END,"
	"         error_class = CASE WHEN " REDRAFT_ALLOWED " THEN error_class"
	"                            ELSE 'redrafts_spent' END,"
	"         reason = CASE WHEN " REDRAFT_ALLOWED " THEN reason"
	"                       ELSE 'changes were requested, but the contract''s repair attempts"
	" are spent' END,"
	"         edited_output = NULL, edited_output_hash = NULL, edited_by = NULL,"
	"         edited_at = NULL, edited_fields = NULL,"
	"         version = version + 1, updated_at = now()"
	"   WHERE client_id = $1 AND idempotency_key = $2 AND state = 'awaiting_human'"
	"  RETURNING client_id, idempotency_key, state, version, attempt, round, lease_owner,"
	"            lease_expires_at"
	"), " LEDGER_EVENT("moved", "'run.changes_requested'", "'awaiting_human'", "state",
	                   "$3", "$4")
	"SELECT state, version, attempt, round, lease_owner,"
	"       og_ts(lease_expires_at) AS lease_expires_at FROM moved",
	6, false,
};

/* The first step of a person's decision: the run's row lock, taken while
 * it awaits a decision, which serialises the votes of one run (a vote
 * waiting here sees every vote committed before it), with the hash of the
 * draft now decided on (the edited output's, else the output's). */
static const struct db_stmt st_lock_draft = {
	"ledger_lock_draft",
	"SELECT coalesce(edited_output_hash, output_hash) AS draft_hash,"
	"       edited_output IS NOT NULL AS edited"
	"  FROM workflow_runs"
	" WHERE client_id = $1 AND idempotency_key = $2 AND state = 'awaiting_human'"
	" FOR UPDATE",
	2, false,
};

/* An approver's correction of the output, kept beside it (once: the
 * first approving vote may edit, and only a draft nobody edited yet). */
static const struct db_stmt st_edit = {
	"ledger_edit",
	"WITH moved AS ("
	"  UPDATE workflow_runs"
	"     SET edited_output = $3::jsonb, edited_output_hash = $4, edited_by = $5,"
	"         edited_at = now(),"
	"         edited_fields = ARRAY(SELECT json_array_elements_text($6::json)),"
	"         updated_at = now()"
	"   WHERE client_id = $1 AND idempotency_key = $2 AND state = 'awaiting_human'"
	"     AND edited_output IS NULL"
	"  RETURNING client_id, idempotency_key, state, version, attempt"
	"), " LEDGER_EVENT("moved", "'run.edited'", "state", "state", "$5",
	                   "'edited before approving: ' || array_to_string("
	                   "ARRAY(SELECT json_array_elements_text($6::json)), ', ')")
	"SELECT state FROM moved",
	6, false,
};

static const struct db_stmt st_cancel = {
	"ledger_cancel",
	"WITH moved AS ("
	"  UPDATE workflow_runs"
	"     SET state = 'failed_terminal', error_class = 'cancelled', reason = $3,"
	"         version = version + 1, updated_at = now()"
	"   WHERE client_id = $1 AND idempotency_key = $2 AND state = 'approved'"
	"  RETURNING client_id, idempotency_key, state, version, attempt"
	"), " LEDGER_EVENT("moved", "'run.cancelled'", "'approved'", "state",
	                   "$4", "$3")
	"SELECT state, version, attempt FROM moved",
	4, false,
};

/* The draw of the gate's sample, once per run: a draw already kept wins,
 * so a resubmitted output cannot roll again. $3 the fresh draw, $4 the
 * contract's rate now. */
static const struct db_stmt st_sample = {
	"ledger_sample",
	"UPDATE workflow_runs"
	"   SET sample_draw = coalesce(sample_draw, $3::float8), sample_rate = $4::float8"
	" WHERE client_id = $1 AND idempotency_key = $2 AND state = 'processing'"
	" RETURNING sample_draw",
	4, false,
};

/* A run nobody can decide any more (every challenge revoked): ended like
 * an expired approval, under its own error class. */
static const struct db_stmt st_end_undecided = {
	"ledger_end_undecided",
	"WITH moved AS ("
	"  UPDATE workflow_runs r"
	"     SET state = 'failed_terminal', error_class = $3, reason = $4,"
	"         decision = 'expired', decided_at = now(), version = version + 1,"
	"         updated_at = now()"
	"   WHERE r.client_id = $1 AND r.idempotency_key = $2 AND r.state = 'awaiting_human'"
	"     AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.client_id = r.client_id"
	"          AND a.idempotency_key = r.idempotency_key AND a.state = 'pending')"
	"  RETURNING client_id, idempotency_key, state, version, attempt, callback_url, round"
	"), " LEDGER_EVENT("moved", "'run.' || $3", "'awaiting_human'", "state",
	                   "$5", "$4")
	"SELECT state, version, attempt, callback_url, round FROM moved",
	5, false,
};

static const struct db_stmt st_expire = {
	"ledger_expire",
	"WITH moved AS ("
	"  UPDATE workflow_runs r"
	"     SET state = 'failed_terminal', error_class = 'approval_expired',"
	"         reason = 'the approval expired before anyone decided',"
	"         decision = 'expired', decided_at = now(), version = version + 1,"
	"         updated_at = now()"
	"   WHERE r.client_id = $1::bigint AND r.idempotency_key = $2"
	"     AND r.state = 'awaiting_human'"
	"     AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.client_id = r.client_id"
	"          AND a.idempotency_key = r.idempotency_key AND a.state = 'pending')"
	"  RETURNING client_id, idempotency_key, version, attempt, callback_url,"
	"            correlation_id, workflow_version, round"
	"), " LEDGER_EVENT("moved", "'run.approval_expired'", "'awaiting_human'", "'failed_terminal'",
	                   "'dispatcher'", "'approval_expired'")
	"SELECT version, callback_url, correlation_id, workflow_version, round FROM moved",
	2, false,
};

/* The run, locked: every operator path (resume, replay, reject, cancel)
 * decides under this lock, so two operators racing are serialised, and a
 * completing settle of the dispatcher takes it first, so two effects of one
 * run completing at once see each other and the second one completes the
 * run (lock order everywhere: the run, then its effects). What
 * the first one did is read by the second in statements after this one
 * (a statement that waited for a lock still sees its own older snapshot
 * in everything but the locked row). */
static const struct db_stmt st_lock = {
	"ledger_lock",
	"SELECT state, version, callback_url, lease_expires_at < now() AS lease_over, round"
	"  FROM workflow_runs WHERE client_id = $1::bigint AND idempotency_key = $2"
	"   FOR UPDATE",
	2, false,
};

/* approved → completed once every effect of the run is completed (or was
 * cancelled inside its window): after the dispatcher's last settle, or an
 * operator's finding. Notices to approvers (approval.notify) are not the
 * run's effects: one still queued when the run was decided never holds it
 * back. $3 is the actor. */
static const struct db_stmt st_complete = {
	"ledger_complete",
	"WITH moved AS ("
	"  UPDATE workflow_runs r SET state = 'completed', version = version + 1,"
	"         updated_at = now()"
	"   WHERE r.client_id = $1::bigint AND r.idempotency_key = $2 AND r.state = 'approved'"
	"     AND NOT EXISTS (SELECT 1 FROM effect_outbox e"
	"          WHERE e.client_id = r.client_id AND e.idempotency_key = r.idempotency_key"
	"            AND e.state NOT IN ('completed', 'cancelled')"
	"            AND e.effect_type <> 'approval.notify')"
	"  RETURNING client_id, idempotency_key, version, attempt"
	"), " LEDGER_EVENT("moved", "'run.completed'", "'approved'", "'completed'",
	                   "$3", "NULL")
	"SELECT version FROM moved",
	3, false,
};

/* $1 client $2 key $3 reason $4 actor $5 states it may leave (text[]) */
static const struct db_stmt st_fail = {
	"ledger_fail",
	"WITH moved AS ("
	"  UPDATE workflow_runs r"
	"     SET state = 'failed_terminal', error_class = 'operator_rejected', reason = $3,"
	"         lease_owner = NULL, lease_expires_at = NULL,"
	"         version = version + 1, updated_at = now()"
	"    FROM (SELECT state AS old FROM workflow_runs"
	"           WHERE client_id = $1::bigint AND idempotency_key = $2) o"
	"   WHERE r.client_id = $1::bigint AND r.idempotency_key = $2"
	"     AND r.state = ANY($5::text[])"
	"  RETURNING r.client_id, r.idempotency_key, r.version, r.attempt, o.old"
	"), " LEDGER_EVENT("moved", "'run.rejected_by_operator'", "old", "'failed_terminal'",
	                   "$4", "$3")
	"SELECT old, version FROM moved",
	5, false,
};

static const struct db_stmt st_runs_by_key = {
	"ledger_runs_by_key",
	"SELECT r.client_id, c.name AS client_name FROM workflow_runs r"
	"  LEFT JOIN api_clients c ON c.id = r.client_id"
	" WHERE r.idempotency_key = $1 AND ($2::text IS NULL OR c.name = $2)"
	" ORDER BY r.client_id LIMIT 3",
	2, false,
};

/* The original (after st_lock_original), and what its effects say. live_effects: an effect
 * still pending (it will go out), or a decision callback in flight —
 * always refused. sent: the business effects that were sent, are being
 * sent, are unknown, or were resumed by an operator ("type id state",
 * comma-separated) — a replay could make a second business effect, so
 * only with force. An approver's notice (approval.notify) is neither: it
 * only tells, and a replay tells the new run's approvers afresh. LIMIT 2 tells an ambiguous key (several clients) from a
 * unique one. */
static const struct db_stmt st_original = {
	"ledger_original",
	"SELECT r.client_id, r.state, r.payload::text AS payload, r.payload_hash,"
	"       r.contract, r.contract_hash, r.output::text AS output, r.output_hash,"
	"       r.model::text AS model,"
	"       r.effect::text AS effect, r.source_url, r.context::text AS context,"
	"       r.workflow_version, r.correlation_id,"
	"       (SELECT count(*) FROM effect_outbox e"
	"         WHERE e.client_id = r.client_id AND e.idempotency_key = r.idempotency_key"
	"           AND e.effect_type <> 'approval.notify'"
	"           AND (e.state = 'pending' OR (e.effect_type = 'decision.callback'"
	"                AND e.state IN ('sending', 'unknown')))) AS live_effects,"
	"       (SELECT string_agg(e.effect_type || ' ' || e.id || ' ' ||"
	"                CASE WHEN e.state IN ('completed', 'sending', 'unknown') THEN e.state"
	"                     ELSE 'resumed' END, ', ' ORDER BY e.created_at, e.id)"
	"          FROM effect_outbox e"
	"         WHERE e.client_id = r.client_id AND e.idempotency_key = r.idempotency_key"
	"           AND e.effect_type NOT IN ('decision.callback', 'approval.notify')"
	"           AND (e.state IN ('completed', 'sending', 'unknown') OR EXISTS ("
	"                SELECT 1 FROM operator_actions o"
	"                 WHERE o.effect_id = e.id AND o.action = 'resume'))) AS sent"
	"  FROM workflow_runs r"
	" WHERE r.idempotency_key = $1 AND ($2::bigint IS NULL OR r.client_id = $2::bigint)"
	" ORDER BY r.client_id LIMIT 2",
	2, false,
};

/* The original's row lock, taken before st_original reads (a statement
 * that waited for a lock would read the rest with its older snapshot): the
 * lock that resume, reject and cancel take too, held to the commit. */
static const struct db_stmt st_lock_original = {
	"ledger_lock_original",
	"SELECT client_id FROM workflow_runs"
	" WHERE idempotency_key = $1 AND ($2::bigint IS NULL OR client_id = $2::bigint)"
	" ORDER BY client_id LIMIT 2 FOR UPDATE",
	2, false,
};

static const struct db_stmt st_exists = {
	"ledger_exists",
	"SELECT 1 FROM workflow_runs WHERE client_id = $1 AND idempotency_key = $2",
	2, true,
};

/* The new run and its first timeline entry, in one statement. ON CONFLICT
 * DO NOTHING: a key that exists (even one created a moment ago by a claim)
 * is never overwritten, and zero rows means "refused". */
static const struct db_stmt st_replay = {
	"ledger_replay",
	"WITH ins AS ("
	"  INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	"      state, claim_started_at, version, attempt, workflow_version, trigger,"
	"      correlation_id, contract, contract_hash, output, output_hash, model, effect,"
	"      source_url, requested_by, error_class, reason, context)"
	"  VALUES ($1, $2, $3, $4::jsonb, $5, now(), 1, 1, $6, 'replay', $7, $8, $9,"
	"      $10::jsonb, $11, $12::jsonb, $13::jsonb, $14, $15, $16, $17, $19::jsonb)"
	"  ON CONFLICT (client_id, idempotency_key) DO NOTHING"
	"  RETURNING client_id, idempotency_key, state, version, attempt"
	"), " LEDGER_EVENT("ins", "'run.replayed'", "NULL", "state",
	                   "$15", "$18")
	"SELECT state FROM ins",
	19, false,
};

static const struct db_stmt st_audit = {
	"ledger_audit",
	"SELECT client_id, (SELECT name FROM api_clients c WHERE c.id = r.client_id) AS client,"
	"       state, og_ts(created_at) AS created_at, og_ts(updated_at) AS updated_at,"
	"       attempt, version, payload_hash, payload IS NOT NULL AS payload_kept,"
	"       output IS NOT NULL AS output_kept, output_hash, model::text AS model, contract,"
	"       contract_hash, workflow_version, trigger, correlation_id, decision, decided_by,"
	"       og_ts(decided_at) AS decided_at, error_class, reason,"
	"       sample_draw, sample_rate, edited_by, og_ts(edited_at) AS edited_at,"
	"       array_to_string(edited_fields, ', ') AS edited_fields, edited_output_hash,"
	"       effect->>'type' AS effect_type, effect->>'target' AS effect_target,"
	"       (SELECT count(*) FROM run_events v WHERE v.client_id = r.client_id"
	"           AND v.idempotency_key = r.idempotency_key AND v.event = 'run.claimed') AS claims"
	"  FROM workflow_runs r"
	" WHERE idempotency_key = $1 AND ($2::text IS NULL OR client_id ="
	"       (SELECT id FROM api_clients WHERE name = $2))"
	" ORDER BY client_id LIMIT 2",
	2, true,
};

/* Everything that happened to the run, from every table that records it,
 * in time order. */
static const struct db_stmt st_history = {
	"ledger_history",
	"SELECT og_ts(t.ts) AS ts, t.source, t.event, t.detail, t.actor FROM ("
	"  SELECT ts, id AS n, 'run' AS source, event,"
	"         concat_ws(' ', nullif(concat_ws(' -> ', state_from, state_to), ''),"
	"                   'v' || version, CASE WHEN attempt > 1 THEN 'attempt ' || attempt END,"
	"                   reason) AS detail, actor"
	"    FROM run_events WHERE client_id = $1 AND idempotency_key = $2"
	"  UNION ALL"
	"  SELECT created_at, 0, 'approval', 'approval.created',"
	"         'challenge ' || id || ' for ' || approver, NULL"
	"    FROM approvals WHERE client_id = $1 AND idempotency_key = $2"
	"  UNION ALL"
	"  SELECT coalesce(consumed_at, expires_at), 0, 'approval', 'approval.' || state,"
	"         concat_ws(': ', 'challenge ' || id || coalesce(' ' || decision, ''), reason),"
	"         approver_subject"
	"    FROM approvals WHERE client_id = $1 AND idempotency_key = $2"
	"     AND state <> 'pending'"
	"  UNION ALL"
	"  SELECT created_at, 0, 'effect', 'effect.enqueued',"
	"         effect_type || ' to ' || target || ' (' || id || ')', NULL"
	"    FROM effect_outbox WHERE client_id = $1 AND idempotency_key = $2"
	"  UNION ALL"
	"  SELECT a.started_at, a.id, 'effect', 'effect.' || a.kind,"
	"         concat_ws(' ', 'attempt ' || a.attempt, a.classification, a.reason,"
	"                   'status ' || a.status, 'provider id ' || a.provider_id),"
	"         a.dispatcher"
	"    FROM effect_attempts a JOIN effect_outbox e ON e.id = a.effect_id"
	"   WHERE e.client_id = $1 AND e.idempotency_key = $2"
	"  UNION ALL"
	"  SELECT d.created_at, 0, 'effect', 'effect.dead_letter',"
	"         concat_ws(' ', d.error_class, d.reason, 'resolution: ' || d.resolution), d.owner"
	"    FROM dead_letters d WHERE d.client_id = $1 AND d.idempotency_key = $2"
	"  UNION ALL"
	"  SELECT ts, id, 'operator', 'operator.' || action, reason, operator"
	"    FROM operator_actions"
	"   WHERE client_id = $1 AND (idempotency_key = $2 OR details->>'original_key' = $2)"
	") t ORDER BY t.ts, t.n LIMIT 2000",
	2, true,
};

/* What retention may take: runs finished (completed, failed_terminal or rejected)
 * longer ago than $1 days that still hold content. */
#define PURGE_RUNS                                                                   \
	"SELECT client_id, idempotency_key FROM workflow_runs"                           \
	" WHERE state IN ('completed', 'failed_terminal', 'rejected')"                   \
	"   AND updated_at < now() - make_interval(days => $1::int)"                     \
	"   AND (payload IS NOT NULL OR output IS NOT NULL OR edited_output IS NOT NULL"  \
	"        OR coalesce(effect ? 'payload', false) OR result IS NOT NULL"             \
	"        OR reason IS NOT NULL OR validation IS NOT NULL OR source_url IS NOT NULL"\
	"        OR requested_by IS NOT NULL OR context IS NOT NULL)"

static const struct db_stmt st_purge_count = {
	"ledger_purge_count",
	"WITH runs AS (" PURGE_RUNS ")"
	"SELECT (SELECT count(*) FROM runs) AS runs,"
	"       (SELECT count(*) FROM effect_outbox o JOIN runs USING (client_id, idempotency_key)"
	"         WHERE o.payload IS NOT NULL) AS effects,"
	"       (SELECT count(*) FROM approvals a JOIN runs USING (client_id, idempotency_key)"
	"         WHERE a.effect IS NOT NULL) AS approvals",
	1, true,
};

/* The runs' content goes, their hashes stay; the purged runs' keys come
 * back as two arrays (array text) for their effects and challenges, which
 * the same transaction purges next while these rows stay locked. */
static const struct db_stmt st_purge = {
	"ledger_purge",
	"WITH runs AS (" PURGE_RUNS " FOR UPDATE),"
	" r AS (UPDATE workflow_runs w SET payload = NULL, output = NULL, edited_output = NULL,"
	"         effect = CASE WHEN w.effect IS NULL THEN NULL ELSE w.effect - 'payload' END,"
	/* the free text a run carries; error_class, hashes, state, decision,
	 * who and when stay for the audit */
	"         result = NULL, reason = NULL, validation = NULL, source_url = NULL,"
	"         requested_by = NULL, context = NULL"
	"         FROM runs WHERE w.client_id = runs.client_id"
	"          AND w.idempotency_key = runs.idempotency_key"
	"       RETURNING w.client_id, w.idempotency_key, w.state, w.version, w.attempt),"
	" " LEDGER_EVENT("r", "'run.purged'", "state", "state", "$2",
	                 "'retention: payload, model output, result and free text removed; hashes kept'")
	"SELECT count(*) AS runs, array_agg(client_id)::text AS clients,"
	"       array_agg(idempotency_key)::text AS keys FROM r",
	2, false,
};

OG_NAME_FN(ledger_state_name, enum run_state, state_names, "unknown");
OG_PARSE_FN(ledger_state_parse, int, state_names, -1);

static const char *const decision_names[RUN_DECISION_COUNT] = {
	"auto", "approve", "reject", "expired",
};

static const char *const error_names[RUN_ERROR_COUNT] = {
	"validation", "rejected", "operator_rejected", "cancelled", "approval_expired",
	"approval_revoked",
};

static const char *const outcome_names[RUN_OUTCOME_COUNT] = {
	"unknown", "in_progress", "awaiting_approval", "queued", "completed", "failed",
	"rejected", "cancelled", "expired", "invalid",
};

OG_NAME_FN(ledger_decision_name, enum run_decision, decision_names, "");
OG_PARSE_FN(ledger_decision_parse, int, decision_names, -1);
OG_NAME_FN(ledger_outcome_name, enum run_outcome, outcome_names,
           outcome_names[RUN_OUTCOME_UNKNOWN]);
OG_NAME_FN(ledger_error_name, enum run_error, error_names, "");
OG_PARSE_FN(ledger_error_parse, int, error_names, -1);

bool
ledger_uuid_valid(const char *s)
{
	static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
	size_t i;

	for (i = 0; shape[i] != '\0'; i++) {
		if (shape[i] == '-' ? s[i] != '-'
		                    : !((s[i] >= '0' && s[i] <= '9') ||
		                        (s[i] >= 'a' && s[i] <= 'f') ||
		                        (s[i] >= 'A' && s[i] <= 'F')))
			return false;
	}
	return s[i] == '\0';
}

void
ledger_run_clear(struct ledger_run *run)
{
	json_decref(run->result);
	json_decref(run->decision);
	json_decref(run->decided);
	memset(run, 0, sizeof(*run));
}

bool
ledger_past_window(const struct ledger_run *run, int window_days)
{
	return window_days > 0 && run->finished_seconds >= (long long)window_days * 86400;
}

/* Fills run from the one row a state-changing statement returned
 * (version, attempt). */
static void
ledger_moved(struct ledger_run *run, const PGresult *res, enum run_state from,
             enum run_state to)
{
	run->state_from = from;
	run->state = to;
	run->version = db_get_ll(res, 0, "version");
	run->attempt = (int)db_get_ll(res, 0, "attempt");
	run->round = db_get(res, 0, "round") != NULL ? (int)db_get_ll(res, 0, "round") : 1;
}

/* After a compare-and-set from processing: true (run filled) when it moved
 * the run to `to`, false when it matched nothing. Clears res. */
static bool
ledger_cas_moved(PGresult *res, struct ledger_run *run, enum run_state to)
{
	bool moved = PQntuples(res) == 1;

	if (moved)
		ledger_moved(run, res, RUN_PROCESSING, to);
	PQclear(res);
	return moved;
}

static void
copy_field(char *dst, size_t len, const PGresult *res, const char *col)
{
	const char *v = db_get(res, 0, col);

	snprintf(dst, len, "%s", v != NULL ? v : "");
}

/* Fills run from a ledger_lookup row. */
static void
ledger_fill(struct ledger_run *run, const PGresult *res)
{
	const char *v;

	v = db_get(res, 0, "state");
	run->state = (enum run_state)ledger_state_parse(v);
	run->version = db_get_ll(res, 0, "version");
	run->attempt = (int)db_get_ll(res, 0, "attempt");
	copy_field(run->payload_hash, sizeof(run->payload_hash), res, "payload_hash");
	run->payload_canon = canon_rule_parse(db_get(res, 0, "payload_canon"));
	copy_field(run->lease_owner, sizeof(run->lease_owner), res, "lease_owner");
	copy_field(run->lease_expires_at, sizeof(run->lease_expires_at), res,
	           "lease_expires_at");
	run->lease_live = db_get_bool(res, 0, "lease_live");
	v = db_get(res, 0, "result");
	json_decref(run->result);
	run->result = v != NULL ? json_loads(v, JSON_DECODE_ANY, NULL) : NULL;
	v = db_get(res, 0, "decision");
	json_decref(run->decision);
	run->decision = v != NULL ? json_loads(v, 0, NULL) : NULL;
	v = db_get(res, 0, "finished_seconds");
	run->finished_seconds = v != NULL ? strtoll(v, NULL, 10) : -1;
}

/* The read-only look-up's parameters. */
struct ledger_lookup {
	char client[24];
	char cap[16];
	const char *params[3];
};

static void
ledger_lookup_call(struct ledger_lookup *l, long long client_id, const char *key,
                   int cap_seconds, struct db_call *call)
{
	snprintf(l->client, sizeof(l->client), "%lld", client_id);
	snprintf(l->cap, sizeof(l->cap), "%d", cap_seconds);
	l->params[0] = l->client;
	l->params[1] = key;
	l->params[2] = l->cap;
	call->stmt = &st_lookup;
	call->params = l->params;
}

/* Reads a finished look-up; OG_NOT_FOUND when this client has no such
 * key. *at_cap tells whether its lease already reaches the cap. */
static enum og_rc
ledger_lookup_result(const struct db_call *call, struct ledger_run *run, bool *at_cap)
{
	if (call->rc != DB_OK)
		return og_rc_of(call->rc);
	if (PQntuples(call->res) == 0)
		return OG_NOT_FOUND;
	ledger_fill(run, call->res);
	if (at_cap != NULL)
		*at_cap = db_get_bool(call->res, 0, "at_cap");
	return OG_OK;
}

static enum og_rc
ledger_lookup(struct db *db, long long client_id, const char *key, int cap_seconds,
              struct ledger_run *run, bool *at_cap)
{
	struct ledger_lookup l;
	struct db_call call = { 0 };
	enum og_rc lrc;

	ledger_lookup_call(&l, client_id, key, cap_seconds, &call);
	call.rc = db_exec(db, call.stmt, call.params, &call.res);
	lrc = ledger_lookup_result(&call, run, at_cap);
	PQclear(call.res);
	return lrc;
}

const char *
ledger_claim_hash(const struct ledger_claim *c, const struct ledger_run *run)
{
	return run->payload_canon == CANON_AS_WRITTEN && c->payload_hash_as_written != NULL
	               ? c->payload_hash_as_written
	               : c->payload_hash;
}

/* What an existing, unclaimable key answers. */
static enum og_rc
ledger_settle(const struct ledger_run *run, const struct ledger_claim *c)
{
	return strcmp(run->payload_hash, ledger_claim_hash(c, run)) != 0 ? OG_MISMATCH
	                                                                 : OG_DUPLICATE;
}

static bool
ledger_claimable(const struct ledger_run *run)
{
	return run->state == RUN_FAILED_RETRYABLE ||
	       (run->state == RUN_PROCESSING && !run->lease_live);
}

/* Fills run from the claim statements' row of a run they claimed. */
static void
ledger_claimed(struct ledger_run *run, const PGresult *res, bool reclaimed)
{
	ledger_run_clear(run);
	ledger_moved(run, res, RUN_PROCESSING, RUN_PROCESSING);
	run->lease_live = true;
	run->lease_reclaimed = reclaimed;
	/* a reclaim keeps the row's hash and the rule it was computed with */
	copy_field(run->payload_hash, sizeof(run->payload_hash), res, "payload_hash");
	run->payload_canon = canon_rule_parse(db_get(res, 0, "payload_canon"));
	copy_field(run->lease_owner, sizeof(run->lease_owner), res, "lease_owner");
	copy_field(run->lease_expires_at, sizeof(run->lease_expires_at), res,
	           "lease_expires_at");
}

/* The first statement of a claim whose key is not yet authenticated
 * (st_claim_first, or st_claim_read when an existing run is expected):
 * OG_CLAIMED (a new run), OG_OK (an existing run, read into run),
 * OG_NOT_FOUND (no run, or one another claim inserted meanwhile),
 * OG_DENIED (the API key is not valid); c->client is filled unless
 * denied. When st_claim_first finds the key taken, the run is read with
 * st_lookup. */
static enum og_rc
ledger_claim_first(struct db *db, const struct ledger_claim *c, const char *lease,
                   const char *cap, struct ledger_run *run)
{
	const struct db_stmt *stmt = c->expect_new ? &st_claim_first : &st_claim_read;
	const char *params[10] = { c->client_key_hash, c->key, c->payload_hash, c->payload,
		                   lease, cap, c->workflow_version, c->trigger,
		                   c->correlation_id, c->event_id };
	const char *v;
	PGresult *res;
	enum og_rc lrc = OG_NOT_FOUND;
	enum db_rc rc;
	bool taken = false;

	if ((rc = db_exec(db, stmt, params, &res)) != DB_OK)
		return og_rc_of(rc);
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_DENIED;
	}
	c->client->id = db_get_ll(res, 0, "client_id");
	v = db_get(res, 0, "client_name");
	snprintf(c->client->name, sizeof(c->client->name), "%s", v != NULL ? v : "");
	if (stmt == &st_claim_first) {
		taken = !db_get_bool(res, 0, "claimed");
		if (!taken) {
			ledger_claimed(run, res, false);
			lrc = OG_CLAIMED;
		}
	} else if (db_get_bool(res, 0, "found")) {
		ledger_fill(run, res);
		lrc = OG_OK;
	}
	PQclear(res);
	if (taken)
		return ledger_lookup(db, c->client->id, c->key, c->cap_seconds, run, NULL);
	return lrc;
}

enum og_rc
ledger_claim(struct db *db, const struct ledger_claim *c, struct ledger_run *run)
{
	char client[24], lease[16], cap[16];
	const char *params[11];
	PGresult *res;
	enum og_rc lrc;
	enum db_rc rc;
	long long client_id;
	bool expired_lease = false;
	char prev_owner[LEDGER_UUID_LEN] = "";

	snprintf(lease, sizeof(lease), "%d", c->lease_seconds);
	snprintf(cap, sizeof(cap), "%d", c->cap_seconds);

	/* A new key is claimed by the first statement. A repeated delivery
	 * mostly hits a key that cannot be claimed now: answering it from a
	 * read keeps it off the write path. */
	lrc = c->client_key_hash != NULL
	              ? ledger_claim_first(db, c, lease, cap, run)
	              : ledger_lookup(db, c->client_id, c->key, c->cap_seconds, run, NULL);
	if (lrc == OG_CLAIMED || lrc == OG_DENIED)
		return lrc;
	if (lrc == OG_OK) {
		if (strcmp(run->payload_hash, ledger_claim_hash(c, run)) != 0 ||
		    !ledger_claimable(run))
			return ledger_settle(run, c);
		expired_lease = run->state == RUN_PROCESSING;
		if (expired_lease)
			snprintf(prev_owner, sizeof(prev_owner), "%s", run->lease_owner);
	} else if (lrc != OG_NOT_FOUND) {
		return lrc;
	}

	client_id = c->client_key_hash != NULL ? c->client->id : c->client_id;
	snprintf(client, sizeof(client), "%lld", client_id);
	params[0] = client;
	params[1] = c->key;
	params[2] = c->payload_hash;
	params[3] = c->payload;
	params[4] = lease;
	params[5] = cap;
	params[6] = c->workflow_version;
	params[7] = c->trigger;
	params[8] = c->correlation_id;
	params[9] = c->event_id;
	params[10] = c->payload_hash_as_written;
	if ((rc = db_exec(db, &st_claim, params, &res)) != DB_OK)
		return og_rc_of(rc);
	if (PQntuples(res) == 1) {
		ledger_claimed(run, res, expired_lease);
		memcpy(run->reclaimed_from, prev_owner, sizeof(prev_owner));
		PQclear(res);
		return OG_CLAIMED;
	}
	PQclear(res);
	/* Someone else claimed or settled the key between our look-up and the
	 * claim: the atomic statement decided; read back what it saw. */
	lrc = ledger_lookup(db, client_id, c->key, c->cap_seconds, run, NULL);
	if (lrc != OG_OK)
		return lrc == OG_NOT_FOUND ? OG_ERROR : lrc;
	return ledger_settle(run, c);
}

/* After a compare-and-set matched nothing: tell the caller why. */
static enum og_rc
ledger_explain(struct db *db, long long client_id, const char *key, const char *owner,
               long long version, int cap_seconds, struct ledger_run *run)
{
	bool at_cap = false;
	enum og_rc lrc;

	lrc = ledger_lookup(db, client_id, key, cap_seconds, run, &at_cap);
	if (lrc != OG_OK)
		return lrc;
	if (run->state == RUN_PROCESSING && run->lease_live && run->version == version &&
	    strcasecmp(run->lease_owner, owner) == 0 && at_cap)
		return OG_CAP_REACHED;
	return OG_LEASE_LOST;
}

enum og_rc
ledger_renew(struct db *db, long long client_id, const char *key, const char *owner,
             long long version, int lease_seconds, int cap_seconds,
             struct ledger_run *run)
{
	char client[24], ver[24], lease[16], cap[16];
	const char *params[6] = { client, key, owner, ver, lease, cap };
	PGresult *res;
	enum db_rc rc;

	snprintf(client, sizeof(client), "%lld", client_id);
	snprintf(ver, sizeof(ver), "%lld", version);
	snprintf(lease, sizeof(lease), "%d", lease_seconds);
	snprintf(cap, sizeof(cap), "%d", cap_seconds);
	if ((rc = db_exec(db, &st_renew, params, &res)) != DB_OK)
		return og_rc_of(rc);
	if (PQntuples(res) == 1) {
		ledger_moved(run, res, RUN_PROCESSING, RUN_PROCESSING);
		copy_field(run->lease_expires_at, sizeof(run->lease_expires_at), res,
		           "lease_expires_at");
		PQclear(res);
		return OG_OK;
	}
	PQclear(res);
	return ledger_explain(db, client_id, key, owner, version, cap_seconds, run);
}

enum og_rc
ledger_transition(struct db *db, long long client_id, const char *key, const char *owner,
                  long long version, enum run_state to, const char *result,
                  const char *error_class, const char *reason, struct ledger_run *run)
{
	char client[24], ver[24];
	const char *params[8] = { client, key, owner, ver, ledger_state_name(to),
	                          result, error_class, reason };
	PGresult *res;
	enum db_rc rc;
	enum og_rc lrc;

	snprintf(client, sizeof(client), "%lld", client_id);
	snprintf(ver, sizeof(ver), "%lld", version);
	if ((rc = db_exec(db, &st_transition, params, &res)) != DB_OK)
		return og_rc_of(rc);
	if (ledger_cas_moved(res, run, to))
		return OG_OK;
	lrc = ledger_explain(db, client_id, key, owner, version, 0, run);
	/* A transition is never refused for the cap, only for a lost lease. */
	return lrc == OG_CAP_REACHED ? OG_LEASE_LOST : lrc;
}

/* Sets obj[name] from a column: a string, or nothing when NULL. */
static void
set_str(json_t *obj, const char *name, const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	if (v != NULL)
		json_object_set_new(obj, name, json_string(v));
}

static void
set_json(json_t *obj, const char *name, const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	if (v != NULL)
		json_object_set_new(obj, name, json_loads(v, JSON_DECODE_ANY, NULL));
}

static void
set_int(json_t *obj, const char *name, const PGresult *res, int row, const char *col)
{
	if (db_get(res, row, col) != NULL)
		json_object_set_new(obj, name, json_integer(db_get_ll(res, row, col)));
}

void
ledger_status_call(struct og_key_call *k, long long client_id, const char *key,
                   struct db_call *call)
{
	og_key_call(k, &st_status, client_id, key, call);
}

enum og_rc
ledger_status_read(const struct db_call *call, json_t **out)
{
	const PGresult *res = call->res;
	const char *v;
	json_t *run;

	*out = NULL;
	if (call->rc != DB_OK)
		return og_rc_of(call->rc);
	if (PQntuples(res) == 0)
		return OG_NOT_FOUND;
	run = json_object();
	if (run == NULL)
		return OG_ERROR;
	set_str(run, "key", res, 0, "idempotency_key");
	set_str(run, "state", res, 0, "state");
	set_int(run, "version", res, 0, "version");
	set_int(run, "attempt", res, 0, "attempt");
	set_str(run, "payload_hash", res, 0, "payload_hash");
	set_str(run, "workflow_version", res, 0, "workflow_version");
	set_str(run, "trigger", res, 0, "trigger");
	set_str(run, "correlation_id", res, 0, "correlation_id");
	set_str(run, "event_id", res, 0, "event_id");
	set_str(run, "lease_owner", res, 0, "lease_owner");
	set_str(run, "lease_expires_at", res, 0, "lease_expires_at");
	set_str(run, "claim_started_at", res, 0, "claim_started_at");
	v = db_get(res, 0, "result");
	if (v != NULL)
		json_object_set_new(run, "result", json_loads(v, JSON_DECODE_ANY, NULL));
	set_str(run, "error_class", res, 0, "error_class");
	set_str(run, "reason", res, 0, "reason");
	set_str(run, "created_at", res, 0, "created_at");
	set_str(run, "updated_at", res, 0, "updated_at");
	set_str(run, "contract", res, 0, "contract");
	set_str(run, "contract_hash", res, 0, "contract_hash");
	set_json(run, "output", res, 0, "output");
	set_str(run, "output_hash", res, 0, "output_hash");
	set_json(run, "model", res, 0, "model");
	set_json(run, "proposed_effect", res, 0, "effect");
	set_str(run, "source_url", res, 0, "source_url");
	set_str(run, "requested_by", res, 0, "requested_by");
	set_str(run, "callback_url", res, 0, "callback_url");
	set_json(run, "context", res, 0, "context");
	set_int(run, "invalid_outputs", res, 0, "invalid_outputs");
	set_int(run, "round", res, 0, "round");
	set_json(run, "validation_errors", res, 0, "validation");
	set_str(run, "decision", res, 0, "decision");
	set_str(run, "decided_by", res, 0, "decided_by");
	set_str(run, "decided_at", res, 0, "decided_at");
	if (db_get(res, 0, "edited_by") != NULL) {
		json_t *edit = json_object();

		set_str(edit, "by", res, 0, "edited_by");
		set_str(edit, "at", res, 0, "edited_at");
		set_json(edit, "fields", res, 0, "edited_fields");
		set_str(edit, "output_hash", res, 0, "edited_output_hash");
		set_json(edit, "output", res, 0, "edited_output");
		json_object_set_new(run, "edit", edit);
	}
	/* approvals and effects are added by their owners (gate.c, outbox.c) */
	*out = run;
	return OG_OK;
}

/* A timeline entry's members, each its column of the same name: a string
 * or an integer, left out when NULL. */
static const struct {
	const char *name;
	bool integer;
} timeline_members[] = {
	{ "ts", false },      { "event", false },   { "state_from", false }, { "state_to", false },
	{ "version", true },  { "attempt", true },  { "actor", false },      { "reason", false },
};

enum og_rc
ledger_status(struct db *db, long long client_id, const char *key, bool with_timeline,
              json_t **out)
{
	struct og_key_call k;
	struct db_call call;
	PGresult *res = NULL;
	json_t *run = NULL, *timeline = NULL;
	enum og_rc lrc;
	enum db_rc rc;
	size_t m;
	int i;

	*out = NULL;
	ledger_status_call(&k, client_id, key, &call);
	call.rc = db_exec(db, call.stmt, call.params, &call.res);
	lrc = ledger_status_read(&call, &run);
	PQclear(call.res);
	if (lrc != OG_OK || !with_timeline) {
		*out = run;
		return lrc;
	}
	if ((rc = db_exec(db, &st_timeline, call.params, &res)) != DB_OK) {
		lrc = og_rc_of(rc);
		goto out;
	}
	timeline = json_array();
	for (i = 0; i < PQntuples(res); i++) {
		json_t *ev = json_object();

		for (m = 0; m < sizeof(timeline_members) / sizeof(timeline_members[0]); m++)
			(timeline_members[m].integer ? set_int : set_str)(
				ev, timeline_members[m].name, res, i, timeline_members[m].name);
		json_array_append_new(timeline, ev);
	}
	json_object_set_new(run, "timeline", timeline);
	*out = run;
	run = NULL;
	lrc = OG_OK;
out:
	PQclear(res);
	json_decref(run);
	return lrc;
}

enum og_rc
ledger_output_invalid(struct db *db, const struct ledger_output *o, int repair_budget,
                      struct ledger_run *run)
{
	char client[24], ver[24], budget[16];
	const char *params[8] = { client, o->key, o->owner, ver, o->contract, o->contract_hash,
		                  o->validation, budget };
	PGresult *res;
	enum db_rc rc;

	snprintf(client, sizeof(client), "%lld", o->client_id);
	snprintf(ver, sizeof(ver), "%lld", o->version);
	snprintf(budget, sizeof(budget), "%d", repair_budget);
	if ((rc = db_exec(db, &st_output_invalid, params, &res)) != DB_OK)
		return og_rc_of(rc);
	if (PQntuples(res) == 1) {
		run->state_from = RUN_PROCESSING;
		run->state = (enum run_state)ledger_state_parse(db_get(res, 0, "state"));
		run->version = db_get_ll(res, 0, "version");
		run->attempt = (int)db_get_ll(res, 0, "spent");
		PQclear(res);
		return OG_OK;
	}
	PQclear(res);
	return ledger_explain(db, o->client_id, o->key, o->owner, o->version, 0, run) ==
	               OG_NOT_FOUND
	           ? OG_NOT_FOUND
	           : OG_LEASE_LOST;
}

enum og_rc
ledger_output_accept(struct db *db, const struct ledger_output *o, enum run_state to,
                     struct ledger_run *run)
{
	char client[24], ver[24];
	const char *params[15] = { client, o->key, o->owner, ver, ledger_state_name(to),
		                   o->contract, o->contract_hash, o->output, o->output_hash,
		                   o->model, o->effect, o->source_url, o->requested_by,
		                   o->callback_url, o->context };
	PGresult *res;
	enum db_rc rc;

	snprintf(client, sizeof(client), "%lld", o->client_id);
	snprintf(ver, sizeof(ver), "%lld", o->version);
	if ((rc = db_exec(db, &st_output_accept, params, &res)) != DB_OK)
		return og_rc_of(rc);
	if (ledger_cas_moved(res, run, to))
		return OG_OK;
	/* inside a transaction the explaining read is harmless */
	return ledger_explain(db, o->client_id, o->key, o->owner, o->version, 0, run) ==
	               OG_NOT_FOUND
	           ? OG_NOT_FOUND
	           : OG_LEASE_LOST;
}

void
ledger_decide_call(struct ledger_decide_call *d, long long client_id, const char *key,
                   const char *decision, const char *subject, const char *reason,
                   struct db_call *call)
{
	snprintf(d->client, sizeof(d->client), "%lld", client_id);
	d->params[0] = d->client;
	d->params[1] = key;
	d->params[2] = decision;
	d->params[3] = subject;
	d->params[4] = reason;
	call->stmt = &st_decide;
	call->params = d->params;
}

enum og_rc
ledger_decide_result(const struct db_call *call, struct ledger_run *run)
{
	const PGresult *res = call->res;

	if (call->rc != DB_OK)
		return og_rc_of(call->rc);
	if (PQntuples(res) != 1)
		return OG_LEASE_LOST;
	ledger_moved(run, res, RUN_AWAITING_HUMAN,
	             (enum run_state)ledger_state_parse(db_get(res, 0, "state")));
	json_decref(run->decided);
	run->decided = db_get(res, 0, "decided") != NULL
	                   ? json_loads(db_get(res, 0, "decided"), 0, NULL)
	                   : NULL;
	return OG_OK;
}

enum og_rc
ledger_decide(struct db *db, long long client_id, const char *key, const char *decision,
              const char *subject, const char *reason, struct ledger_run *run)
{
	struct ledger_decide_call d;
	struct db_call call = { 0 };
	enum og_rc lrc;

	ledger_decide_call(&d, client_id, key, decision, subject, reason, &call);
	call.rc = db_exec(db, call.stmt, call.params, &call.res);
	lrc = ledger_decide_result(&call, run);
	PQclear(call.res);
	return lrc;
}

enum og_rc
ledger_redraft(struct db *db, long long client_id, const char *key, const char *subject,
               const char *feedback, int repair_budget, int lease_seconds,
               struct ledger_run *run)
{
	char client[24], budget[16], lease[16];
	const char *params[6] = { client, key, subject, feedback, budget, lease };
	PGresult *res = NULL;
	enum db_rc rc;
	int n;

	snprintf(client, sizeof(client), "%lld", client_id);
	snprintf(budget, sizeof(budget), "%d", repair_budget);
	snprintf(lease, sizeof(lease), "%d", lease_seconds);
	if ((rc = db_exec(db, &st_redraft, params, &res)) != DB_OK)
		return og_rc_of(rc);
	n = PQntuples(res);
	if (n == 1) {
		ledger_moved(run, res, RUN_AWAITING_HUMAN,
		             (enum run_state)ledger_state_parse(db_get(res, 0, "state")));
		copy_field(run->lease_owner, sizeof(run->lease_owner), res, "lease_owner");
		copy_field(run->lease_expires_at, sizeof(run->lease_expires_at), res,
		           "lease_expires_at");
	}
	PQclear(res);
	return n == 1 ? OG_OK : OG_LEASE_LOST;
}

void
ledger_lock_draft_call(struct ledger_lock_draft_call *d, long long client_id,
                       const char *key, struct db_call *call)
{
	snprintf(d->client, sizeof(d->client), "%lld", client_id);
	d->params[0] = d->client;
	d->params[1] = key;
	call->stmt = &st_lock_draft;
	call->params = d->params;
}

enum og_rc
ledger_lock_draft_result(const struct db_call *call, char draft_hash[CANON_HASH_LEN],
                         bool *edited)
{
	const char *h;

	draft_hash[0] = '\0';
	*edited = false;
	if (call->rc != DB_OK)
		return og_rc_of(call->rc);
	if (PQntuples(call->res) != 1)
		return OG_NOT_AWAITING;
	h = db_get(call->res, 0, "draft_hash");
	snprintf(draft_hash, CANON_HASH_LEN, "%s", h != NULL ? h : "");
	*edited = db_get_bool(call->res, 0, "edited");
	return OG_OK;
}

void
ledger_edit_call(struct ledger_edit_call *d, long long client_id, const char *key,
                 const char *output, const char *output_hash, const char *subject,
                 const char *fields, struct db_call *call)
{
	snprintf(d->client, sizeof(d->client), "%lld", client_id);
	d->params[0] = d->client;
	d->params[1] = key;
	d->params[2] = output;
	d->params[3] = output_hash;
	d->params[4] = subject;
	d->params[5] = fields;
	call->stmt = &st_edit;
	call->params = d->params;
}

enum og_rc
ledger_edit_result(const struct db_call *call)
{
	if (call->rc != DB_OK)
		return og_rc_of(call->rc);
	return PQntuples(call->res) == 1 ? OG_OK : OG_CHANGED;
}

enum og_rc
ledger_cancel(struct db *db, long long client_id, const char *key, const char *reason,
              struct ledger_run *run)
{
	return ledger_cancel_by(db, client_id, key, reason, "client", run);
}

enum og_rc
ledger_cancel_by(struct db *db, long long client_id, const char *key, const char *reason,
                 const char *actor, struct ledger_run *run)
{
	char client[24];
	const char *params[4] = { client, key, reason, actor };
	PGresult *res;
	enum db_rc rc;
	int n;

	snprintf(client, sizeof(client), "%lld", client_id);
	if ((rc = db_exec(db, &st_cancel, params, &res)) != DB_OK)
		return og_rc_of(rc);
	n = PQntuples(res);
	if (n == 1)
		ledger_moved(run, res, RUN_APPROVED, RUN_FAILED_TERMINAL);
	PQclear(res);
	return n == 1 ? OG_OK : OG_LEASE_LOST;
}

enum og_rc
ledger_sample_draw(struct db *db, long long client_id, const char *key, double fresh,
                   double rate, double *draw)
{
	char client[24], f[32], r[32];
	const char *params[4] = { client, key, f, r };
	PGresult *res;
	enum db_rc rc;
	int n;

	snprintf(client, sizeof(client), "%lld", client_id);
	snprintf(f, sizeof(f), "%.17g", fresh);
	snprintf(r, sizeof(r), "%.17g", rate);
	if ((rc = db_exec(db, &st_sample, params, &res)) != DB_OK)
		return og_rc_of(rc);
	n = PQntuples(res);
	if (n == 1)
		*draw = strtod(db_get(res, 0, "sample_draw"), NULL);
	PQclear(res);
	return n == 1 ? OG_OK : OG_LEASE_LOST;
}

enum og_rc
ledger_end_undecided(struct db *db, long long client_id, const char *key,
                     const char *error_class, const char *reason, const char *actor,
                     struct ledger_run *run, char **callback_url)
{
	char client[24];
	const char *params[5] = { client, key, error_class, reason, actor };
	PGresult *res;
	enum db_rc rc;
	int n;

	*callback_url = NULL;
	snprintf(client, sizeof(client), "%lld", client_id);
	if ((rc = db_exec(db, &st_end_undecided, params, &res)) != DB_OK)
		return og_rc_of(rc);
	n = PQntuples(res);
	if (n == 1) {
		ledger_moved(run, res, RUN_AWAITING_HUMAN, RUN_FAILED_TERMINAL);
		if (db_get(res, 0, "callback_url") != NULL &&
		    (*callback_url = strdup(db_get(res, 0, "callback_url"))) == NULL) {
			PQclear(res);
			return OG_ERROR;
		}
	}
	PQclear(res);
	return n == 1 ? OG_OK : OG_LEASE_LOST;
}

/* A dry run's counts, or a purge's runs and their clients and keys (the
 * columns the statement has not are left 0 and NULL). */
#define PU(kind, f) DB_##kind(struct ledger_purge, f)
static const struct db_col purge_cols[] = {
	PU(INT, runs), PU(INT, effects), PU(INT, approvals), PU(TEXT, clients), PU(TEXT, keys),
};
#undef PU

void
ledger_purge_clear(struct ledger_purge *p)
{
	db_row_clear(purge_cols, DB_NCOLS(purge_cols), p, sizeof(*p));
}

enum db_rc
ledger_purge(struct db *db, int days, bool dry_run, const char *actor, struct ledger_purge *p)
{
	char d[16];
	const char *params[2] = { d, actor };
	PGresult *res = NULL;
	enum db_rc rc;

	memset(p, 0, sizeof(*p));
	snprintf(d, sizeof(d), "%d", days);
	if ((rc = db_exec(db, dry_run ? &st_purge_count : &st_purge, params, &res)) != DB_OK)
		return rc;
	if (db_row_get(res, 0, purge_cols, DB_NCOLS(purge_cols), p) != OG_OK) {
		ledger_purge_clear(p);
		rc = DB_ERROR;
	}
	PQclear(res);
	return rc;
}

enum db_rc
ledger_complete(struct db *db, const char *client, const char *key, const char *actor,
                long long *version)
{
	const char *p[3] = { client, key, actor };

	return db_exec_ll(db, &st_complete, p, "version", version);
}

enum db_rc
ledger_reject(struct db *db, const char *client, const char *key, const char *reason,
              const char *actor, unsigned from, long long *version)
{
	char states[160] = "{";
	const char *p[5] = { client, key, reason, actor, states };
	int s;

	for (s = 0; s < RUN_STATE_COUNT; s++)
		if (from & 1u << s) {
			if (states[1] != '\0')
				strcat(states, ",");
			strcat(states, ledger_state_name((enum run_state)s));
		}
	strcat(states, "}");
	return db_exec_ll(db, &st_fail, p, "version", version);
}

void
ledger_lock_call(struct ledger_key_call *k, long long client_id, const char *key,
                 struct db_call *call)
{
	snprintf(k->client, sizeof(k->client), "%lld", client_id);
	k->params[0] = k->client;
	k->params[1] = key;
	k->params[2] = NULL;
	call->stmt = &st_lock;
	call->params = k->params;
}

void
ledger_complete_call(struct ledger_key_call *k, long long client_id, const char *key,
                     const char *actor, struct db_call *call)
{
	ledger_lock_call(k, client_id, key, call);
	k->params[2] = actor;
	call->stmt = &st_complete;
}

bool
ledger_completed(const struct db_call *call)
{
	return call->rc == DB_OK && PQntuples(call->res) == 1;
}

enum og_rc
ledger_lock(struct db *db, long long client_id, const char *key, struct ledger_locked *out)
{
	char client[24];
	const char *p[2] = { client, key };
	PGresult *res = NULL;
	const char *v;
	enum og_rc rc;
	int st;

	memset(out, 0, sizeof(*out));
	snprintf(client, sizeof(client), "%lld", client_id);
	if ((rc = og_exec_one(db, &st_lock, p, OG_NOT_FOUND, &res)) != OG_OK)
		return rc;
	st = ledger_state_parse(db_get(res, 0, "state"));
	out->state = st >= 0 ? (enum run_state)st : RUN_PROCESSING;
	out->version = db_get_ll(res, 0, "version");
	out->round = (int)db_get_ll(res, 0, "round");
	out->lease_over = db_get_bool(res, 0, "lease_over");
	if ((v = db_get(res, 0, "callback_url")) != NULL && (out->callback_url = strdup(v)) == NULL)
		rc = OG_ERROR;
	PQclear(res);
	return st >= 0 ? rc : OG_ERROR;
}

void
ledger_locked_clear(struct ledger_locked *l)
{
	free(l->callback_url);
	memset(l, 0, sizeof(*l));
}

/* A statement over every client's runs with key ($1), or client_name's
 * ($2, NULL: any). */
static enum og_rc
rows_by_key(struct db *db, const struct db_stmt *stmt, const char *key,
            const char *client_name, PGresult **rows)
{
	const char *p[2] = { key, client_name };

	*rows = NULL;
	return og_rc_of(db_exec(db, stmt, p, rows));
}

static const struct db_col key_client_cols[] = {
	DB_INT(struct ledger_key_client, client_id),
	DB_TEXT(struct ledger_key_client, client_name),
};

enum og_rc
ledger_runs_by_key(struct db *db, const char *key, const char *client_name,
                   struct ledger_key_clients *out)
{
	PGresult *res = NULL;
	enum og_rc rc = rows_by_key(db, &st_runs_by_key, key, client_name, &res);
	void *v;

	rc = db_rows_take(rc, res, key_client_cols, DB_NCOLS(key_client_cols), sizeof(*out->v),
	                  &v, &out->n);
	out->v = v;
	return rc;
}

DB_LIST_CLEAR(ledger_key_clients_clear, ledger_key_clients, key_client_cols);

/* The one run of rows (*found of them) into out by cols, its state parsed;
 * out stays zeroed unless exactly one. */
static enum og_rc
one_run(PGresult *rows, const struct db_col *cols, size_t ncols, void *out,
        enum run_state *state, int *found)
{
	enum og_rc rc = OG_OK;

	*found = PQntuples(rows);
	if (*found == 1) {
		rc = db_row_get(rows, 0, cols, ncols, out);
		*state = (enum run_state)ledger_state_parse(db_get(rows, 0, "state"));
	}
	PQclear(rows);
	return rc;
}

/* The expired run's columns but its round (an int). */
#define EX(kind, f) DB_##kind(struct ledger_expired, f)
static const struct db_col expired_cols[] = {
	EX(INT, version), EX(TEXT, callback_url), EX(TEXT, correlation_id),
	EX(TEXT, workflow_version),
};
#undef EX

enum og_rc
ledger_expire(struct db *db, long long client_id, const char *key, struct ledger_expired *out)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_expire, client_id, key, &res);

	memset(out, 0, sizeof(*out));
	if (rc == OG_OK && PQntuples(res) != 1)
		rc = OG_LEASE_LOST;
	if (rc == OG_OK) {
		out->round = (int)db_get_ll(res, 0, "round");
		rc = db_row_get(res, 0, expired_cols, DB_NCOLS(expired_cols), out);
	}
	PQclear(res);
	return rc;
}

void
ledger_expired_clear(struct ledger_expired *e)
{
	db_row_clear(expired_cols, DB_NCOLS(expired_cols), e, sizeof(*e));
}

#define EX(type, f) DB_##type(struct ledger_explain, f)
static const struct db_col explain_cols[] = {
	EX(INT, client_id), EX(INT, attempt), EX(INT, claims),
	EX(BOOL, payload_kept), EX(BOOL, output_kept),
	EX(TEXT, client), EX(TEXT, created_at), EX(TEXT, updated_at), EX(TEXT, payload_hash),
	EX(TEXT, output_hash), EX(TEXT, model), EX(TEXT, contract), EX(TEXT, contract_hash),
	EX(TEXT, workflow_version), EX(TEXT, trigger), EX(TEXT, correlation_id),
	EX(TEXT, decision), EX(TEXT, decided_by), EX(TEXT, decided_at), EX(TEXT, error_class),
	EX(TEXT, reason), EX(TEXT, sample_draw), EX(TEXT, sample_rate), EX(TEXT, edited_by),
	EX(TEXT, edited_at), EX(TEXT, edited_fields), EX(TEXT, edited_output_hash),
};
#undef EX

enum og_rc
ledger_audit(struct db *db, const char *key, const char *client_name,
             struct ledger_explain *out, int *found)
{
	PGresult *res = NULL;
	enum og_rc rc = rows_by_key(db, &st_audit, key, client_name, &res);

	memset(out, 0, sizeof(*out));
	*found = 0;
	if (rc != OG_OK)
		return rc;
	return one_run(res, explain_cols, DB_NCOLS(explain_cols), out, &out->state, found);
}

void
ledger_explain_clear(struct ledger_explain *r)
{
	db_row_clear(explain_cols, DB_NCOLS(explain_cols), r, sizeof(*r));
}

#define EV(f) DB_TEXT(struct ledger_event, f)
static const struct db_col event_cols[] = {
	EV(ts), EV(source), EV(event), EV(detail), EV(actor),
};
#undef EV

OG_KEY_LIST(ledger_history, ledger_events, &st_history, event_cols);
DB_LIST_CLEAR(ledger_events_clear, ledger_events, event_cols);

#define OR(type, f) DB_##type(struct ledger_original, f)
static const struct db_col original_cols[] = {
	OR(INT, client_id), OR(INT, live_effects),
	OR(TEXT, payload), OR(TEXT, payload_hash), OR(TEXT, contract), OR(TEXT, contract_hash),
	OR(TEXT, output), OR(TEXT, output_hash), OR(TEXT, model), OR(TEXT, effect),
	OR(TEXT, source_url), OR(TEXT, context), OR(TEXT, workflow_version),
	OR(TEXT, correlation_id), OR(TEXT, sent),
};
#undef OR

enum og_rc
ledger_original(struct db *db, const char *key, long long client_id, bool lock,
                struct ledger_original *out, int *found)
{
	char cid[24];
	const char *p[2] = { key, client_id > 0 ? cid : NULL };
	long long n = 0;
	PGresult *res = NULL;
	enum db_rc rc;

	memset(out, 0, sizeof(*out));
	*found = 0;
	snprintf(cid, sizeof(cid), "%lld", client_id);
	if (lock && (rc = db_exec_count(db, &st_lock_original, p, &n)) != DB_OK)
		return og_rc_of(rc);
	if ((rc = db_exec(db, &st_original, p, &res)) != DB_OK)
		return og_rc_of(rc);
	return one_run(res, original_cols, DB_NCOLS(original_cols), out, &out->state, found);
}

void
ledger_original_clear(struct ledger_original *o)
{
	db_row_clear(original_cols, DB_NCOLS(original_cols), o, sizeof(*o));
}

enum og_rc
ledger_exists(struct db *db, long long client_id, const char *key, bool *exists)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_exists, client_id, key, &res);

	*exists = rc == OG_OK && PQntuples(res) > 0;
	PQclear(res);
	return rc;
}

enum og_rc
ledger_replay(struct db *db, const struct ledger_replay *r)
{
	char cid[24];
	const char *p[19] = {
		cid, r->key, r->payload_hash, r->payload, r->state, r->workflow_version,
		r->correlation_id, r->contract, r->contract_hash, r->output, r->output_hash,
		r->model, r->effect, r->source_url, r->requested_by, r->error_class, r->reason,
		r->event_reason, r->context,
	};

	snprintf(cid, sizeof(cid), "%lld", r->client_id);
	return og_exec_one(db, &st_replay, p, OG_EXISTS, NULL);
}

/* ---- a client's runs, a page at a time ---------------------------------- */

/* Oldest first by (created_at, key): a page continues after the last row
 * of the one before (keyset), so runs created meanwhile never shift what
 * is still to come; at_us is created_at in microseconds, the cursor's
 * exact half. The ORDER BY and the cursor's compare name the same thing,
 * the column to the microsecond: both are qualified (r.), since a bare
 * "created_at" in ORDER BY would be the output column of that name, the
 * text to the millisecond, and rows of one millisecond would then sort by
 * key while the cursor compares microseconds (a row listed twice, another
 * skipped). */
static const struct db_stmt st_list_runs = {
	"ledger_list",
	"SELECT r.idempotency_key AS key, r.state, r.contract, r.decision, r.decided_by,"
	"       og_ts(r.created_at) AS created_at, og_ts(r.updated_at) AS updated_at,"
	"       (extract(epoch FROM r.created_at) * 1000000)::bigint AS at_us"
	"  FROM workflow_runs r"
	" WHERE r.client_id = $1::bigint AND ($2::text IS NULL OR r.state = $2)"
	"   AND ($3::timestamptz IS NULL OR r.created_at >= $3::timestamptz)"
	"   AND ($4::text IS NULL OR r.contract = $4)"
	"   AND ($5::bigint IS NULL OR (r.created_at, r.idempotency_key) >"
	"        ('epoch'::timestamptz + $5::bigint * interval '1 microsecond', $6::text))"
	" ORDER BY r.created_at, r.idempotency_key LIMIT $7::int",
	7, true,
};

static json_t *
run_json(const PGresult *res, int i, void *arg)
{
	static const char *const opt[] = { "contract", "decision", "decided_by" };
	json_t *r = json_pack("{s:s, s:s, s:s, s:s, s:I}", "key", db_get(res, i, "key"),
	                      "state", db_get(res, i, "state"), "created_at",
	                      db_get(res, i, "created_at"), "updated_at",
	                      db_get(res, i, "updated_at"), "at_us",
	                      (json_int_t)db_get_ll(res, i, "at_us"));
	size_t k;

	for (k = 0; r != NULL && k < sizeof(opt) / sizeof(opt[0]); k++)
		if (db_get(res, i, opt[k]) != NULL)
			json_object_set_new(r, opt[k], json_string(db_get(res, i, opt[k])));
	return r;
}

enum og_rc
ledger_list(struct db *db, const struct og_list_query *q, json_t **out)
{
	struct og_list_params lp;

	og_list_params(q, &lp);
	return og_rc_of(db_json_rows(db, &st_list_runs, lp.p, run_json, NULL, out));
}
