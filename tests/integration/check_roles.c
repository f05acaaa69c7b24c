/*
 * check_roles.c — integration suite: least privilege in PostgreSQL. Each
 * program of the stack of ./dev test connects as a login role of its own
 * (ONCEGATE_PGUSER_FCGI, _DISPATCH, _OPERATOR, _AUDITOR: members of the
 * group roles oncegate_fcgi, oncegate_dispatch, oncegate_operator and
 * oncegate_auditor); this suite logs in as each of them for real (peer
 * authentication on the stack's socket) and tries what that program must
 * never do.
 *
 *   tenants    two tenants hand in a mail for approval under the same
 *              business key, through the responder (which runs as its
 *              role): both runs wait for a person, each with its own
 *              challenge;
 *   fcgi       the responder's role reads runs but cannot write a dead
 *              letter or an operator action, nor turn the kill switch;
 *   dispatch   the dispatcher's role cannot decide or consume one of those
 *              challenges (no decision column, no vote, no decided
 *              challenge of its own) nor turn the kill switch; it can
 *              count the sends it held. It cannot approve the run in
 *              alice's name and queue a mail to another recipient, nor a
 *              notice of the challenge to one, nor write the run's
 *              timeline under another actor; it cannot add a challenge
 *              naming any person, change whom a challenge tells or
 *              escalates to, or expire a live challenge; it can add the
 *              challenge the run's escalation names;
 *   sent       a mail approved through the page and delivered by a real
 *              dispatcher: the responder's role cannot set it back to
 *              pending (it would go out twice) nor change its payload or
 *              target, the dispatcher's role cannot change its payload or
 *              its hash nor set it back to pending; it stays completed,
 *              received once;
 *   operator   the operator's role cannot decide a challenge or a run in
 *              alice's name, nor cast a vote; a change it makes commits
 *              only with an operator_actions row of its own transaction
 *              (a setting made by hand naming an older row is not one),
 *              and that row names the session's role whatever it says;
 *   auditor    the auditor's role reads every table and writes none;
 *              `oncegatectl report` and `explain` answer as it, a change
 *              (client add) is refused and leaves nothing;
 *   operator   `oncegatectl client add` as the operator's role, with
 *              another name in $USER and LOGNAME, records the session's
 *              role as the operator;
 *   second     a second oncegate database on the same server: the schema's
 *              owner, who may not create roles, migrates it with the group
 *              roles the first one made, and the same grants hold there.
 *
 * Every refusal is SQLSTATE 42501 (insufficient_privilege), by a missing
 * grant or by a rule of sql/018_invariants.sql, and leaves the rows as they
 * were, as the schema owner sees them.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "pagelib.h"
#include "testlib.h"

#define CONTRACT  "inbox_mail"
#define REQUESTER "support-inbox@workflows.example"
/* a member of the contract's approver groups, as oauth2-proxy sends them */
#define PERSON        "olga.petrova@example.com"
#define PERSON_GROUPS "sales team,customer support,служба поддержки"
/* whose name the attempts forge, and where they redirect mail */
#define ALICE    "alice@example.com"
#define MALLORY  "mallory@evil.example"
#define SETTLE_S 60

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* The business key both tenants use (each test runs in a process of its
 * own: derived from the run's name, not kept from one test to the next). */
static const char *
shared_key(void)
{
	static char key[160];

	snprintf(key, sizeof(key), "%s:support:тикет-4711:v1", tl_run);
	return key;
}

/* A real login as the role in environment variable var (its name). */
static PGconn *
login_as(const char *var)
{
	const char *role = tl_env(var);
	const char *keys[] = { "user", "fallback_application_name", NULL };
	const char *values[] = { role, "check_roles", NULL };
	PGconn *c;

	ck_assert_msg(role != NULL, "%s is not set: the stack has no such login role", var);
	c = PQconnectdbParams(keys, values, 1);
	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "login as %s: %s", role, PQerrorMessage(c));
	return c;
}

/* sql run as c must be refused for want of privilege. */
static void
refused(PGconn *c, const char *what, const char *sql)
{
	PGresult *res = PQexec(c, sql);
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	ck_assert_msg(PQresultStatus(res) == PGRES_FATAL_ERROR && state != NULL &&
	                  strcmp(state, "42501") == 0,
	              "%s as %s: want 42501 (insufficient privilege), got %s %s: %s", what,
	              PQuser(c), PQresStatus(PQresultStatus(res)), state ? state : "-",
	              PQresultErrorMessage(res));
	PQclear(res);
	/* statements that opened a transaction leave it aborted */
	if (PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
}

/* refused() of the statement fmt makes (printf). */
static void __attribute__((format(printf, 3, 4)))
refusedf(PGconn *c, const char *what, const char *fmt, ...)
{
	char *sql = NULL;
	va_list ap;

	va_start(ap, fmt);
	ck_assert(vasprintf(&sql, fmt, ap) > 0);
	va_end(ap);
	refused(c, what, sql);
	free(sql);
}

/* sql run as c must succeed; inside a transaction rolled back after. */
static void
allowed(PGconn *c, const char *what, const char *sql)
{
	PGresult *res;

	PQclear(PQexec(c, "BEGIN"));
	res = PQexec(c, sql);
	ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK ||
	                  PQresultStatus(res) == PGRES_TUPLES_OK,
	              "%s as %s: %s", what, PQuser(c), PQresultErrorMessage(res));
	PQclear(res);
	PQclear(PQexec(c, "ROLLBACK"));
}

/* What must not change: the rows of the tables the refusals aim at. */
static char *
fingerprint(PGconn *owner)
{
	return qstr(owner,
	            "SELECT (SELECT count(*) FROM dead_letters) || '/' ||"
	            "       (SELECT count(*) FROM operator_actions) || '/' ||"
	            "       (SELECT count(*) FROM approval_votes) || '/' ||"
	            "       (SELECT count(*) FROM run_events) || '/' ||"
	            "       (SELECT md5(string_agg(a.id || a.state || coalesce(a.decision, '-')"
	            "                              || a.approver || a.token_hash::text"
	            "                              || coalesce(a.notify::text, '-')"
	            "                              || coalesce(a.escalate_to::text, '-'),"
	            "                              ',' ORDER BY a.id)) FROM approvals a) || '/' ||"
	            "       (SELECT md5(string_agg(r.client_id || r.idempotency_key || r.state"
	            "                              || r.version || coalesce(r.decision, '-')"
	            "                              || coalesce(r.decided_by, '-'),"
	            "                              ',' ORDER BY r.client_id, r.idempotency_key))"
	            "          FROM workflow_runs r) || '/' ||"
	            "       (SELECT count(*) || md5(coalesce(string_agg(e.id || e.state || e.target"
	            "                              || e.payload_hash || coalesce(e.payload::text, '-')"
	            "                              || e.attempt, ',' ORDER BY e.id), ''))"
	            "          FROM effect_outbox e) || '/' ||"
	            "       (SELECT actions_enabled || changed_at::text FROM dispatch_control)",
	            (char *)NULL);
}

/* A pending challenge of the second tenant's run under the shared key (the
 * tenants test made it): its id, malloc'd. */
static char *
pending_challenge(PGconn *owner)
{
	char *id = qstr(owner,
	                "SELECT min(a.id::text) FROM approvals a JOIN api_clients c ON c.id = a.client_id"
	                " WHERE a.idempotency_key = $1 AND a.state = 'pending' AND c.name = $2",
	                shared_key(), dl_client_b, (char *)NULL);

	ck_assert_msg(id != NULL, "no pending challenge (the tenants test failed)");
	return id;
}

/* The fingerprint now is still before (which it frees). */
static void
unchanged(PGconn *owner, char *before)
{
	char *after = fingerprint(owner);

	ck_assert_msg(strcmp(after, before) == 0, "the refused statements changed rows: %s → %s",
	              before, after);
	free(before);
	free(after);
}

START_TEST(test_tenants_share_a_key)
{
	const char *bearer[2] = { dl_key_dev, dl_key_b };
	PGconn *owner = tl_pg_connect();
	char approval[2][64];
	struct tl_resp r;
	int i;

	ck_assert_msg(dl_key_b != NULL, "the second tenant's client could not be added");
	for (i = 0; i < 2; i++) {
		dl_claim_and_output(
		    bearer[i], shared_key(), CONTRACT,
		    json_pack("{s:s, s:s}", "subject", tl_corpus_mail_str("ru_reply", "subject"),
		              "body", tl_corpus_mail_str(i == 0 ? "zh_reply" : "ar_reply", "body")),
		    json_pack("{s:s, s:s, s:{s:[s]}}", "type", "email.send", "target", "demo_smtp",
		              "payload", "to", i == 0 ? "kunde@example.de" : "mariam.haddad@example.ae"),
		    REQUESTER, &r);
		ck_assert_msg(r.status == 202 &&
		                  strcmp(JSTR(r.json, "outcome"), "awaiting_human") == 0,
		              "tenant %d output: HTTP %ld %.1000s", i, r.status, r.body);
		free(dl_token_of(&r, 0, approval[i], sizeof(approval[i])));
		tl_resp_free(&r);
	}
	ck_assert_str_ne(approval[0], approval[1]);
	ck_assert_int_eq(qnum(owner,
	                      "SELECT count(DISTINCT client_id) FROM approvals"
	                      " WHERE idempotency_key = $1 AND state = 'pending'",
	                      shared_key(), (char *)NULL),
	                 2);
	PQfinish(owner);
}
END_TEST

START_TEST(test_fcgi_role)
{
	PGconn *owner = tl_pg_connect(), *c = login_as("ONCEGATE_PGUSER_FCGI");
	char *before = fingerprint(owner);

	ck_assert_int_eq(qnum(c, "SELECT pg_has_role(session_user, 'oncegate_fcgi', 'MEMBER')::int",
	                      (char *)NULL),
	                 1);
	allowed(c, "reading runs", "SELECT count(*) FROM workflow_runs");
	refused(c, "writing a dead letter",
	        "INSERT INTO dead_letters (effect_id, client_id, idempotency_key, component,"
	        " error_class, reason, evidence, next_action, retention_until, owner)"
	        " SELECT id, client_id, idempotency_key, 'dispatcher', 'x', 'x', '{}', 'x',"
	        " now(), 'x' FROM effect_outbox LIMIT 1");
	refused(c, "resolving dead letters", "UPDATE dead_letters SET resolution = 'rejected'");
	refused(c, "writing an operator action",
	        "INSERT INTO operator_actions (operator, action, reason)"
	        " VALUES ('night-op', 'kill_switch.on', 'from the responder')");
	refused(c, "changing operator actions", "UPDATE operator_actions SET reason = 'x'");
	refused(c, "turning the kill switch", "UPDATE dispatch_control SET actions_enabled = true");
	refused(c, "deleting runs", "DELETE FROM workflow_runs WHERE idempotency_key = 'none'");
	unchanged(owner, before);
	PQfinish(c);
	PQfinish(owner);
}
END_TEST

START_TEST(test_dispatch_role)
{
	PGconn *owner = tl_pg_connect(), *c = login_as("ONCEGATE_PGUSER_DISPATCH");
	char *before = fingerprint(owner), sql[512];
	char *id = qstr(owner, "SELECT min(id::text) FROM approvals"
	                       " WHERE idempotency_key = $1 AND state = 'pending'",
	                shared_key(), (char *)NULL);

	ck_assert_msg(id != NULL, "no pending challenge (the tenants test failed)");
	allowed(c, "reading the challenge", "SELECT state, notify FROM approvals LIMIT 1");
	allowed(c, "counting held sends",
	        "UPDATE dispatch_control SET blocked_sends = blocked_sends + 1");
	snprintf(sql, sizeof(sql),
	         "UPDATE approvals SET state = 'decided', consumed_at = now(),"
	         " decision = 'approve', approver_subject = 'dispatcher' WHERE id = '%s'",
	         id);
	refused(c, "consuming a challenge", sql);
	snprintf(sql, sizeof(sql), "UPDATE approvals SET decision = 'approve' WHERE id = '%s'", id);
	refused(c, "setting a decision", sql);
	snprintf(sql, sizeof(sql), "UPDATE approvals SET consumed_at = now() WHERE id = '%s'", id);
	refused(c, "marking a challenge consumed", sql);
	snprintf(sql, sizeof(sql),
	         "INSERT INTO approval_votes (approval_id, client_id, idempotency_key, subject,"
	         " decision) SELECT id, client_id, idempotency_key, 'dispatcher', 'approve'"
	         " FROM approvals WHERE id = '%s'",
	         id);
	refused(c, "casting a vote", sql);
	snprintf(sql, sizeof(sql),
	         "INSERT INTO approvals (client_id, idempotency_key, token_hash, approver,"
	         " allowed_decisions, separation_of_duties, expires_at, state, consumed_at,"
	         " decision, approver_subject)"
	         " SELECT client_id, idempotency_key, sha256('forged'::bytea), approver,"
	         " allowed_decisions, false, expires_at, 'decided', now(), 'approve', 'dispatcher'"
	         " FROM approvals WHERE id = '%s'",
	         id);
	refused(c, "adding a decided challenge", sql);
	refused(c, "turning the kill switch", "UPDATE dispatch_control SET actions_enabled = true");
	refused(c, "writing an operator action",
	        "INSERT INTO operator_actions (operator, action, reason) VALUES ('x', 'x', 'x')");
	unchanged(owner, before);
	ck_assert_int_eq(qnum(owner, "SELECT count(*) FROM approvals WHERE id = $1::uuid"
	                             " AND state = 'pending' AND consumed_at IS NULL",
	                      id, (char *)NULL),
	                 1);
	free(id);
	PQfinish(c);
	PQfinish(owner);
}
END_TEST

/* An INSERT of a challenge copied from the one whose id is the last %s,
 * with approver, separation of duties and expiry as given (SQL) and more
 * columns (", col…") and their values. */
#define COPY_CHALLENGE(approver, sod, expires, cols, values)                                  \
	"INSERT INTO approvals (client_id, idempotency_key, token_hash, approver,"             \
	" allowed_decisions, requested_by, separation_of_duties, expires_at, effect,"           \
	" callback_url, min_approvals" cols ")"                                                 \
	" SELECT client_id, idempotency_key, sha256(gen_random_uuid()::text::bytea), " approver \
	", allowed_decisions, requested_by, " sod ", " expires ", effect, callback_url,"        \
	" min_approvals" values " FROM approvals WHERE id = '%s'"

/* The run (WHERE … of run_of) approved in alice's name. */
#define DECIDED_BY_ALICE                                                        \
	"UPDATE workflow_runs SET state = 'approved', decision = 'approve',"    \
	" decided_by = '" ALICE "', decided_at = now() %s"

/* The run of challenge id, as "WHERE …" of workflow_runs (into out). */
static void
run_of(char *out, size_t n, const char *id)
{
	snprintf(out, n,
	         " WHERE (client_id, idempotency_key) = (SELECT client_id, idempotency_key"
	         " FROM approvals WHERE id = '%s')",
	         id);
}

START_TEST(test_dispatch_cannot_forge)
{
	PGconn *owner = tl_pg_connect(), *c = login_as("ONCEGATE_PGUSER_DISPATCH");
	char *id = pending_challenge(owner), *before, run[256], sql[2048];
	static const char escalation[] = "eskalation.leitung@example.de";

	/* the run's escalation names one person (as a contract's escalate_to
	 * would have made it): the one challenge the dispatcher may add */
	snprintf(sql, sizeof(sql),
	         "UPDATE approvals SET escalate_to = '[{\"approver\": \"%s\"}]' WHERE id = '%s'",
	         escalation, id);
	PQclear(PQexec(owner, sql));
	before = fingerprint(owner);
	run_of(run, sizeof(run), id);

	/* alice approved it, and the mail goes to another recipient */
	refusedf(c, "deciding the run in alice's name", DECIDED_BY_ALICE, run);
	refusedf(c, "approving the run",
	         "UPDATE workflow_runs SET state = 'approved', decision = 'approve',"
	         " decided_at = now() %s",
	         run);
	refusedf(c, "rejecting the run",
	         "UPDATE workflow_runs SET state = 'rejected', decision = 'reject' %s", run);
	refusedf(c, "queueing a mail to another recipient",
	         "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	         " payload, payload_hash, provider_key)"
	         " SELECT client_id, idempotency_key, 'email.send', 'demo_smtp',"
	         " '{\"to\": [\"" MALLORY "\"], \"subject\": \"Ihre Rechnung\","
	         " \"body\": \"Zahlung bitte an IBAN DE00 0000\"}',"
	         " 'sha256:' || repeat('0', 64), 'forged-by-dispatcher'"
	         " FROM workflow_runs %s",
	         run);
	refusedf(c, "queueing the challenge's notice to another recipient",
	         "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	         " payload, payload_hash, provider_key, approval_id, slot)"
	         " SELECT client_id, idempotency_key, 'approval.notify', 'demo_smtp',"
	         " jsonb_build_object('approval_id', id, 'to', jsonb_build_array('" MALLORY "')),"
	         " 'sha256:' || repeat('0', 64), 'forged-notice', id, 99"
	         " FROM approvals WHERE id = '%s'",
	         id);
	refusedf(c, "telling the workflow alice approved",
	         "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	         " payload, payload_hash, provider_key)"
	         " SELECT client_id, idempotency_key, 'decision.callback', 'callback',"
	         " jsonb_build_object('url', 'https://n8n.example/webhook', 'key', idempotency_key,"
	         " 'decision', 'approve', 'decided_by', '" ALICE "'),"
	         " 'sha256:' || repeat('0', 64), 'forged-callback'"
	         " FROM workflow_runs %s",
	         run);
	refusedf(c, "writing the run's timeline in alice's name",
	         "INSERT INTO run_events (client_id, idempotency_key, event, state_from, state_to,"
	         " actor, reason) SELECT client_id, idempotency_key, 'run.decided', 'awaiting_human',"
	         " 'approved', '" ALICE "', 'sieht gut aus' FROM workflow_runs %s",
	         run);

	/* a challenge naming any person, who would then approve it */
	refusedf(c, "adding a challenge naming another person",
	         COPY_CHALLENGE("'" MALLORY "'", "separation_of_duties", "expires_at", "", ""), id);
	refusedf(c, "adding an escalation nobody named",
	         COPY_CHALLENGE("'" MALLORY "'", "separation_of_duties", "expires_at",
	                        ", notify, escalated",
	                        ", '{\"target\": \"demo_smtp\", \"to\": [\"" MALLORY "\"]}', true"),
	         id);
	refusedf(c, "adding the named escalation without separation of duties, for longer",
	         COPY_CHALLENGE("'%s'", "false", "expires_at + interval '30 days'", ", escalated",
	                        ", true"),
	         escalation, id);
	refusedf(c, "changing whom the challenge tells",
	         "UPDATE approvals SET notify = '{\"target\": \"demo_smtp\","
	         " \"to\": [\"" MALLORY "\"]}' WHERE id = '%s'",
	         id);
	refusedf(c, "changing whom the run escalates to",
	         "UPDATE approvals SET escalate_to = '[{\"approver\": \"" MALLORY "\"}]'"
	         " WHERE id = '%s'",
	         id);
	refusedf(c, "expiring a challenge that has not expired",
	         "UPDATE approvals SET state = 'expired' WHERE id = '%s'", id);

	/* the escalation the run names: allowed (and rolled back) */
	snprintf(sql, sizeof(sql),
	         COPY_CHALLENGE("'%s'", "separation_of_duties", "expires_at", ", escalated", ", true"),
	         escalation, id);
	allowed(c, "adding the escalation the run names", sql);
	unchanged(owner, before);
	snprintf(sql, sizeof(sql), "UPDATE approvals SET escalate_to = NULL WHERE id = '%s'", id);
	PQclear(PQexec(owner, sql));
	ck_assert_int_eq(qnum(owner,
	                      "SELECT count(*) FROM approvals a JOIN workflow_runs r"
	                      "    ON r.client_id = a.client_id AND r.idempotency_key = a.idempotency_key"
	                      " WHERE a.id = $1::uuid AND a.state = 'pending'"
	                      "   AND r.state = 'awaiting_human' AND r.decided_by IS NULL",
	                      id, (char *)NULL),
	                 1);
	free(id);
	PQfinish(c);
	PQfinish(owner);
}
END_TEST

START_TEST(test_operator_leaves_a_record)
{
	PGconn *owner = tl_pg_connect(), *c = login_as("ONCEGATE_PGUSER_OPERATOR");
	const char *role = tl_env("ONCEGATE_PGUSER_OPERATOR");
	char *id = pending_challenge(owner), *before = fingerprint(owner), *who, *old;
	char run[256], sql[2048];
	PGresult *res;

	run_of(run, sizeof(run), id);
	refusedf(c, "deciding the challenge in alice's name, unrecorded",
	         "UPDATE approvals SET state = 'decided', consumed_at = now(), decision = 'approve',"
	         " approver_subject = '" ALICE "' WHERE id = '%s'",
	         id);
	refusedf(c, "deciding the run in alice's name", DECIDED_BY_ALICE, run);
	refusedf(c, "casting a vote in alice's name",
	         "INSERT INTO approval_votes (approval_id, client_id, idempotency_key, subject,"
	         " decision) SELECT id, client_id, idempotency_key, '" ALICE "', 'approve'"
	         " FROM approvals WHERE id = '%s'",
	         id);
	refusedf(c, "revoking the challenge, unrecorded",
	         "UPDATE approvals SET state = 'revoked' WHERE id = '%s'", id);
	/* an older record, named by hand, proves nothing */
	old = qstr(owner, "SELECT max(id)::text FROM operator_actions", (char *)NULL);
	ck_assert_msg(old != NULL, "no operator action yet (client add of the tenants)");
	refusedf(c, "revoking the challenge under another transaction's record",
	         "BEGIN; SET LOCAL oncegate.operator_action = '%s';"
	         " UPDATE approvals SET state = 'revoked' WHERE id = '%s'; COMMIT",
	         old, id);
	free(old);
	unchanged(owner, before);

	/* recorded in the same transaction: the change passes the check (made
	 * at once rather than at a commit, which the rollback spares), and the
	 * record names the session's role, not what the INSERT said */
	snprintf(sql, sizeof(sql),
	         "INSERT INTO operator_actions (operator, action, reason, approval_id)"
	         " VALUES ('" ALICE "', 'approval_revoke', 'Прошу отозвать', '%s');"
	         " UPDATE approvals SET state = 'revoked' WHERE id = '%s';"
	         " SET CONSTRAINTS ALL IMMEDIATE",
	         id, id);
	PQclear(PQexec(c, "BEGIN"));
	res = PQexec(c, sql);
	ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "a recorded revoke as %s: %s", role,
	              PQresultErrorMessage(res));
	PQclear(res);
	who = qstr(c,
	           "SELECT operator FROM operator_actions WHERE approval_id = $1::uuid"
	           " ORDER BY id DESC LIMIT 1",
	           id, (char *)NULL);
	ck_assert_msg(who != NULL && strcmp(who, role) == 0,
	              "the record names \"%s\", want the session's role %s", who ? who : "(none)",
	              role);
	free(who);
	PQclear(PQexec(c, "ROLLBACK"));
	ck_assert_int_eq(qnum(owner, "SELECT count(*) FROM approvals WHERE id = $1::uuid"
	                             " AND state = 'pending'",
	                      id, (char *)NULL),
	                 1);
	free(id);
	PQfinish(c);
	PQfinish(owner);
}
END_TEST

/* The email.send effect under key once it is in state want (within secs),
 * else the test fails: its id, malloc'd. */
static char *
effect_when(PGconn *owner, const char *key, const char *want, double secs)
{
	double deadline = tl_now() + secs;
	char *id = NULL;

	for (;;) {
		id = qstr(owner,
		          "SELECT id::text FROM effect_outbox WHERE idempotency_key = $1"
		          " AND effect_type = 'email.send' AND state = $2",
		          key, want, (char *)NULL);
		if (id != NULL || tl_now() > deadline)
			break;
		tl_sleep_ms(200);
	}
	ck_assert_msg(id != NULL, "the mail of %s is not %s after %.0f s", key, want, secs);
	return id;
}

START_TEST(test_sent_mail_stays_sent)
{
	PGconn *owner = tl_pg_connect(), *fcgi, *disp;
	char key[160], path[256], sql[1024], *token, *id, *before, *mail_from;
	const char *rcpt = "kunde.einmal@example.de";
	struct dl_disp d;
	struct tl_resp r;
	json_t *mails, *m;
	size_t i, n = 0;

	snprintf(key, sizeof(key), "%s:roles:gesendet-✉-1", tl_run);
	dl_claim_and_output(dl_key_dev, key, CONTRACT,
	                    json_pack("{s:s, s:s}", "subject",
	                              tl_corpus_mail_str("ru_reply", "subject"), "body",
	                              tl_corpus_mail_str("zh_reply", "body")),
	                    json_pack("{s:s, s:s, s:{s:[s]}}", "type", "email.send", "target",
	                              "demo_smtp", "payload", "to", rcpt),
	                    REQUESTER, &r);
	ck_assert_msg(r.status == 202 && strcmp(JSTR(r.json, "outcome"), "awaiting_human") == 0,
	              "output: HTTP %ld %.1000s", r.status, r.body);
	token = dl_token_of(&r, 0, NULL, 0);
	tl_resp_free(&r);
	snprintf(path, sizeof(path), "/approve/%s", token);
	ck_assert_int_eq(pl_decide_at(path, PERSON, PERSON_GROUPS, "approve", NULL, 0), 303);
	free(token);

	/* delivered by a real dispatcher to the suite's SMTP sink */
	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_roles sends to loopback",
	             (char *)NULL);
	mail_from = pl_stack_mail_from();
	dl_disp_start_demo(&d, mail_from);
	free(mail_from);
	id = effect_when(owner, key, "completed", SETTLE_S);
	(void)dl_disp_stop(&d, 20);
	before = fingerprint(owner);

	fcgi = login_as("ONCEGATE_PGUSER_FCGI");
	disp = login_as("ONCEGATE_PGUSER_DISPATCH");
	refusedf(fcgi, "setting the delivered mail back to pending, with its schedule",
	         "UPDATE effect_outbox SET state = 'pending', next_attempt_at = now()"
	         " WHERE id = '%s'",
	         id);
	snprintf(sql, sizeof(sql),
	         "UPDATE effect_outbox SET state = 'pending', updated_at = now() WHERE id = '%s'", id);
	refused(fcgi, "setting the delivered mail back to pending", sql);
	refused(disp, "setting the delivered mail back to pending", sql);
	snprintf(sql, sizeof(sql),
	         "UPDATE effect_outbox SET payload = jsonb_set(payload, '{to}', '[\"" MALLORY "\"]')"
	         " WHERE id = '%s'",
	         id);
	refused(fcgi, "changing the mail's recipients", sql);
	refused(disp, "changing the mail's recipients", sql);
	refusedf(disp, "changing the mail's payload hash",
	         "UPDATE effect_outbox SET payload_hash = 'sha256:' || repeat('0', 64)"
	         " WHERE id = '%s'",
	         id);
	snprintf(sql, sizeof(sql), "UPDATE effect_outbox SET target = 'demo_http' WHERE id = '%s'",
	         id);
	refused(fcgi, "changing the mail's target", sql);
	refused(disp, "changing the mail's target", sql);
	/* what the dispatcher does to an effect it holds back stays its own */
	snprintf(sql, sizeof(sql), "UPDATE effect_outbox SET held_at = held_at WHERE id = '%s'", id);
	allowed(disp, "marking a held send", sql);
	unchanged(owner, before);

	mails = dl_mails_received();
	json_array_foreach(mails, i, m)
		if (strcmp(json_string_value(json_array_get(json_object_get(m, "rcpt"), 0)) ?: "",
		           rcpt) == 0)
			n++;
	json_decref(mails);
	ck_assert_msg(n == 1, "the mail to %s arrived %zu times", rcpt, n);
	ck_assert_int_eq(qnum(owner, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                             " AND state = 'completed'",
	                      id, (char *)NULL),
	                 1);
	free(id);
	PQfinish(fcgi);
	PQfinish(disp);
	PQfinish(owner);
}
END_TEST

/* Runs oncegatectl ARGS (shell words) with PGUSER=role and USER, LOGNAME
 * = user; its exit status, stdout and stderr in *out. */
static int
ctl_as(const char *role, const char *user, char **out, const char *args)
{
	char *cmd = NULL, *mark;
	int rc = -1;

	ck_assert(asprintf(&cmd,
	                   "env PGUSER='%s' USER='%s' LOGNAME='%s' '%s' -c '%s' %s 2>&1;"
	                   " echo \"exit=$?\"",
	                   role, user, user, tl_env("ONCEGATE_CTL"), tl_env("ONCEGATE_CONF"),
	                   args) > 0);
	*out = tl_shell_output(cmd);
	free(cmd);
	ck_assert_msg(*out != NULL, "oncegatectl %s did not run", args);
	if ((mark = strstr(*out, "exit=")) != NULL)
		rc = atoi(mark + 5);
	return rc;
}

START_TEST(test_auditor_role)
{
	static const char *const tables[] = {
		"api_clients", "workflow_runs", "run_events", "approvals", "approval_votes",
		"approval_replaced_links", "effect_outbox", "effect_attempts", "dead_letters",
		"dispatch_control", "operator_actions", "run_replays", "replay_jobs",
		"replay_job_items", "resume_job_items", "metric_counters", "metric_route_latency",
		"metric_attempts", "schema_migrations",
	};
	PGconn *owner = tl_pg_connect(), *c = login_as("ONCEGATE_PGUSER_AUDITOR");
	const char *role = tl_env("ONCEGATE_PGUSER_AUDITOR");
	char *before = fingerprint(owner), *out = NULL, sql[256], args[512];
	long long clients = qnum(owner, "SELECT count(*) FROM api_clients", (char *)NULL);
	size_t i;

	for (i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", tables[i]);
		allowed(c, "reading", sql);
		snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE false", tables[i]);
		refused(c, "deleting", sql);
		snprintf(sql, sizeof(sql), "INSERT INTO %s DEFAULT VALUES", tables[i]);
		refused(c, "inserting", sql);
	}
	refused(c, "turning the kill switch", "UPDATE dispatch_control SET actions_enabled = true");
	refused(c, "changing a run", "UPDATE workflow_runs SET state = 'completed'");

	ck_assert_msg(ctl_as(role, "auditor", &out, "report") == 0, "report as %s: %s", role,
	              out);
	free(out);
	snprintf(args, sizeof(args), "explain '%s' --client '%s'", shared_key(), dl_client_b);
	ck_assert_msg(ctl_as(role, "auditor", &out, args) == 0, "explain as %s: %s", role, out);
	ck_assert_msg(strstr(out, "awaiting_human") != NULL, "explain says: %s", out);
	free(out);
	snprintf(args, sizeof(args), "client add '%s-auditor' --reason 'an auditor tries'",
	         tl_run);
	ck_assert_msg(ctl_as(role, "auditor", &out, args) != 0, "client add as %s worked: %s",
	              role, out);
	free(out);
	ck_assert_int_eq(qnum(owner, "SELECT count(*) FROM api_clients", (char *)NULL), clients);
	unchanged(owner, before);
	PQfinish(c);
	PQfinish(owner);
}
END_TEST

START_TEST(test_operator_is_session_user)
{
	PGconn *owner = tl_pg_connect();
	const char *role = tl_env("ONCEGATE_PGUSER_OPERATOR");
	char name[128], args[512], *out = NULL, *who;

	ck_assert_msg(role != NULL, "ONCEGATE_PGUSER_OPERATOR is not set");
	snprintf(name, sizeof(name), "%s-roles", tl_run);
	snprintf(args, sizeof(args), "client add '%s' --reason 'Zugang für die Buchhaltung'", name);
	ck_assert_msg(ctl_as(role, "mallory", &out, args) == 0, "client add as %s: %s", role, out);
	free(out);
	who = qstr(owner,
	           "SELECT string_agg(o.operator, ',') FROM operator_actions o"
	           "  JOIN api_clients c ON c.id = o.client_id"
	           " WHERE c.name = $1 AND o.action = 'client.add'",
	           name, (char *)NULL);
	ck_assert_msg(who != NULL && strcmp(who, role) == 0,
	              "the operator recorded is \"%s\", want the session's role \"%s\"",
	              who ? who : "(none)", role);
	free(who);
	snprintf(args, sizeof(args), "client revoke '%s' --reason 'Test vorbei'", name);
	ck_assert_msg(ctl_as(role, "mallory", &out, args) == 0, "client revoke: %s", out);
	free(out);
	ck_assert_int_eq(qnum(owner,
	                      "SELECT count(*) FROM operator_actions o"
	                      "  JOIN api_clients c ON c.id = o.client_id"
	                      " WHERE c.name = $1 AND o.operator = $2",
	                      name, role, (char *)NULL),
	                 2);
	ck_assert_int_eq(qnum(owner, "SELECT count(*) FROM operator_actions WHERE operator = 'mallory'",
	                      (char *)NULL),
	                 0);
	PQfinish(owner);
}
END_TEST

/* A connection as the cluster's superuser (root may be postgres on the
 * stack's socket) to dbname. */
static PGconn *
superuser(const char *dbname)
{
	const char *keys[] = { "user", "dbname", NULL };
	const char *values[] = { "postgres", dbname, NULL };
	PGconn *c = PQconnectdbParams(keys, values, 0);

	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "login as postgres: %s", PQerrorMessage(c));
	return c;
}

START_TEST(test_second_database)
{
	char db[96], conf[] = "/tmp/check_roles.XXXXXX", *text, *at, *out = NULL, sql[256];
	const char *src = tl_env("ONCEGATE_CONF");
	PGconn *pg = superuser("postgres"), *c;
	const char *keys[] = { "user", "dbname", NULL };
	const char *values[] = { "oncegate", db, NULL };
	FILE *f;
	int fd;

	snprintf(db, sizeof(db), "%s_second", tl_run);
	for (at = db; *at != '\0'; at++)
		if (*at == '-')
			*at = '_';
	snprintf(sql, sizeof(sql), "CREATE DATABASE \"%s\" OWNER oncegate", db);
	PQclear(PQexec(pg, sql));
	ck_assert_int_eq(qnum(pg, "SELECT count(*) FROM pg_database WHERE datname = $1", db,
	                      (char *)NULL),
	                 1);
	/* the stack's configuration with the other database */
	text = tl_file_slurp(src, NULL);
	ck_assert_msg(text != NULL && (at = strstr(text, "dbname=oncegate")) != NULL,
	              "%s names no dbname=oncegate", src);
	ck_assert((fd = mkstemp(conf)) >= 0);
	ck_assert((f = fdopen(fd, "w")) != NULL);
	fprintf(f, "%.*sdbname=%s%s", (int)(at - text), text, db, at + strlen("dbname=oncegate"));
	fclose(f);
	free(text);

	snprintf(sql, sizeof(sql), "env PGUSER=oncegate '%s' -c '%s' migrate 2>&1; echo \"exit=$?\"",
	         tl_env("ONCEGATE_CTL"), conf);
	out = tl_shell_output(sql);
	unlink(conf);
	ck_assert_msg(out != NULL && strstr(out, "exit=0") != NULL,
	              "migrate of a second database as the owner: %s", out ? out : "(did not run)");
	ck_assert_msg(strstr(out, "015_roles") != NULL, "migrate says: %s", out);
	free(out);

	c = PQconnectdbParams(keys, values, 0);
	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s as oncegate: %s", db, PQerrorMessage(c));
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM pg_roles WHERE rolname IN ('oncegate_fcgi',"
	                         " 'oncegate_dispatch', 'oncegate_operator', 'oncegate_auditor')"
	                         " AND NOT rolcanlogin",
	                      (char *)NULL),
	                 4);
	ck_assert_int_eq(qnum(c, "SELECT (has_table_privilege('oncegate_dispatch', 'dead_letters',"
	                         " 'INSERT') AND NOT has_table_privilege('oncegate_fcgi',"
	                         " 'dead_letters', 'INSERT') AND NOT has_column_privilege("
	                         "'oncegate_dispatch', 'approvals', 'consumed_at', 'UPDATE')"
	                         " AND NOT has_table_privilege('oncegate_auditor', 'workflow_runs',"
	                         " 'UPDATE') AND has_table_privilege('oncegate_operator',"
	                         " 'operator_actions', 'INSERT'))::int",
	                      (char *)NULL),
	                 1);
	PQfinish(c);
	snprintf(sql, sizeof(sql), "DROP DATABASE \"%s\" WITH (FORCE)", db);
	PQclear(PQexec(pg, sql));
	ck_assert_int_eq(qnum(pg, "SELECT count(*) FROM pg_database WHERE datname = $1", db,
	                      (char *)NULL),
	                 0);
	PQfinish(pg);
}
END_TEST

TL_SUITE(roles_suite, "roles",
         {"roles", 120,
          .tests = TL_LIST(test_tenants_share_a_key, test_fcgi_role, test_dispatch_role,
                           test_dispatch_cannot_forge, test_operator_leaves_a_record,
                           test_auditor_role, test_operator_is_session_user,
                           test_second_database)},
         /* with a dispatcher, the suite's providers and its SMTP sink */
         {"sent", SETTLE_S + 60, dl_tcase, .tests = TL_LIST(test_sent_mail_stays_sent)})

DL_SUITE_MAIN(.name = "check_roles", .prefix = "ro",
              .needed = "ONCEGATE_API_KEY ONCEGATE_CTL ONCEGATE_CONF ONCEGATE_PGUSER_FCGI "
              "ONCEGATE_PGUSER_DISPATCH ONCEGATE_PGUSER_OPERATOR ONCEGATE_PGUSER_AUDITOR",
              .suite = roles_suite, .prepare = dl_tenants_prepare, .finish = dl_tenants_finish,
              .smtp = true)
