/*
 * clients.h — API clients: the one owner of api_clients.
 *
 * A key is "og_" + base64url of 32 random bytes. Only its SHA-256 is
 * stored; the key is shown once by `oncegatectl client add`.
 */
#ifndef OG_CLIENTS_H
#define OG_CLIENTS_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "db.h"
#include "digest.h"
#include "caps.h"
#include "rc.h"

#define CLIENTS_KEY_LEN (3 + 43 + 1)

struct client {
	long long id;
	char name[OG_CLIENT_NAME_MAX + 1];
};

/* The rule that makes an API key valid, as SQL over one parameter (the
 * hex SHA-256 of the key): the active client it belongs to (id, name). A
 * claim composes it into its one statement, so that its authentication
 * travels with it. */
#define CLIENTS_SQL_ACTIVE(hexparam)                                                      \
	"SELECT id, name FROM api_clients"                                                 \
	" WHERE key_hash = decode(" hexparam ", 'hex') AND revoked_at IS NULL"

/* The look-up of one key. */
struct clients_auth {
	char hash[DIGEST_HEX_LEN];   /* hex SHA-256 of the key */
	const char *params[1];
};

/* The hex SHA-256 of key, which is what is stored; false when the key
 * cannot be one of ours (wrong shape). */
bool clients_key_hash(const char *key, char hash[DIGEST_HEX_LEN]);
/* Fills call with the look-up of key; false when the key cannot be one of
 * ours (wrong shape), which needs no round trip. */
bool clients_auth_call(struct clients_auth *a, const char *key, struct db_call *call);
/* Reads a finished look-up. */
enum og_rc clients_auth_result(const struct db_call *call, struct client *out);

/* Resolves a bearer key to an active client. */
enum og_rc clients_authenticate(struct db *db, const char *key, struct client *out)
	__attribute__((warn_unused_result));
/* Creates a client and writes its new key (NUL-terminated) into key and
 * its id into *id (may be NULL). */
enum og_rc clients_add(struct db *db, const char *name, char key[CLIENTS_KEY_LEN],
                       long long *id) __attribute__((warn_unused_result));
/* The member marking a revoked client in an answer: {"client": NAME, "revoked": true}. */
#define CLIENTS_REVOKED "revoked"

/* Revokes (again: a no-op) client name; *id (may be NULL) gets its id. */
enum og_rc clients_revoke(struct db *db, const char *name, long long *id)
	__attribute__((warn_unused_result));
/* Every client by name: an array of {name, created_at, revoked_at}. */
enum og_rc clients_list(struct db *db, json_t **out)
	__attribute__((warn_unused_result));
int clients_name_valid(const char *name);
/* The name of client id (what the decision log calls a client). */
enum og_rc clients_name(struct db *db, long long id, char *name, size_t len)
	__attribute__((warn_unused_result));

/* The decide scope: which people a client may record decisions for, per
 * contract (client_decide_grants). An approver entry is written as the
 * contract writes it ("alice@example.com", "group:support"); "*" is every
 * entry of the contract.
 * Grants (grant true) or withdraws (false) the scope of client name for
 * one contract and approver entry; *id (may be NULL) gets the client's id.
 * OG_NOT_FOUND: no such active client (grant), or no such grant
 * (withdraw); granting what is granted already is OG_NOT_FOUND too. */
enum og_rc clients_grant_decide(struct db *db, const char *name, const char *contract,
                                const char *approver, bool grant, long long *id)
	__attribute__((warn_unused_result));
/* OG_OK when client_id may decide for approver entry approver of
 * contract; OG_DENIED when not. */
enum og_rc clients_may_decide(struct db *db, long long client_id, const char *contract,
                              const char *approver) __attribute__((warn_unused_result));
/* Every grant: an array of {client, scope, contract, approver, created_at}. */
enum og_rc clients_grants(struct db *db, json_t **out) __attribute__((warn_unused_result));

/* The id of the client named name. OG_NOT_FOUND: none. */
enum og_rc clients_id(struct db *db, const char *name, long long *id)
	__attribute__((warn_unused_result));

#endif
