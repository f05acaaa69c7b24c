/*
 * caps.h — every cap and timeout default of oncegate, in one place.
 *
 * Anything that grows from input gets one of these caps when it is created;
 * configurable values take their defaults and bounds from here too.
 */
#ifndef OG_CAPS_H
#define OG_CAPS_H

/* HTTP surface */
#define OG_BODY_MAX_DEFAULT       (256 * 1024) /* claim body cap */
#define OG_BODY_MAX_LIMIT         (4 * 1024 * 1024)
#define OG_BODY_DRAIN_MAX         (8 * 1024 * 1024) /* read and discard past the cap, then stop */
#define OG_URI_MAX                8192
#define OG_KEY_MAX_CHARS          200   /* key is 1–200 printable characters */
#define OG_FIELD_MAX              512   /* bytes of a field in a decision-log line */
/* Text the API takes, in characters (code points, as JSON Schema's
 * maxLength counts them; the OpenAPI document states the same numbers). */
#define OG_CLAIM_FIELD_MAX_CHARS  200   /* workflow_version, trigger, correlation_id, event_id */
#define OG_TEXT_MAX_CHARS         512   /* reason, requested_by */
#define OG_URL_MAX_CHARS          2048  /* source_url, callback_url */
#define OG_SUBJECT_MAX_CHARS      320   /* a person: a mail address at most */
#define OG_GROUP_MAX_CHARS        256   /* one group name */
#define OG_GROUPS_MAX             64    /* group names a decision may carry */
/* Bytes of one text field of a decision-log line: the longest text the
 * API takes (OG_TEXT_MAX_CHARS of up to 4 bytes) fits whole. */
#define OG_LOG_FIELD_MAX          (OG_TEXT_MAX_CHARS * 4)
#define OG_ERROR_CLASS_MAX        64
#define OG_RESULT_MAX             (64 * 1024) /* a run's stored result */
#define OG_JSON_DEPTH_MAX         64
#define OG_JSON_NUMBER_MAX        1000  /* characters of one number (kept as written) */
#define OG_JSON_EXPONENT_MAX      1000  /* |exponent| as written: jsonb's limit */
/* An MCP tool call whose effect the rules approved waits this long for
 * the send, so that it can answer completed. */
#define OG_MCP_SEND_WAIT_MS       3000
#define OG_RESPONSE_MAX           (1024 * 1024)
/* A request whose body or answer is larger than this is "large": its JSON
 * tree or page is many times its size (an output of 16,000 fields takes
 * about 5 MB while it is parsed and checked). At most OG_LARGE_CONCURRENT
 * large bodies are handled at once, and after a large request the heap's
 * free pages go back to the system, so the responder's memory stays
 * bounded whatever its clients send at the same time. */
#define OG_LARGE_BYTES            (64 * 1024)
#define OG_LARGE_CONCURRENT       2
/* An approval page may take OG_RESPONSE_MAX plus this many times the body
 * cap: it shows the output whole and field by field, with HTML escapes. */
#define OG_PAGE_BODY_FACTOR       12

/* Leases (seconds) */
#define OG_LEASE_DEFAULT          300
#define OG_LEASE_MAX              3600
#define OG_LEASE_CAP              86400  /* total lifetime of one claim */
/* The longest duplicate window a configuration may set (days, 100 years) */
#define OG_DUPLICATE_WINDOW_MAX_DAYS 36500

/* Responder */
#define OG_THREADS_DEFAULT        8
#define OG_THREADS_MAX            256
#define OG_LISTEN_BACKLOG         1024
#define OG_RETRY_AFTER_DEFAULT    5      /* seconds, on 503 */
#define OG_SHUTDOWN_GRACE_S       30     /* SIGTERM: in-flight requests get this long */
#define OG_DB_CONNECT_TIMEOUT_S   5
#define OG_DB_STATEMENT_TIMEOUT_MS 10000
#define OG_DB_RETRY_MS            250    /* reconnect attempts while the server is away */
/* A daemon that found the schema behind (or ahead of) its build reads the
 * version again at most this often: a migration ends the wait within it. */
#define OG_SCHEMA_RECHECK_MS      1000
/* A TCP link to PostgreSQL that silently went away (a cut cable, a host
 * gone) is noticed within about 11 s by keepalives, and data unacknowledged
 * for 15 s ends the connection: the request is answered 503, not held for
 * the kernel's ~15 minutes. Ignored on unix sockets; `database` may
 * override each. */
#define OG_DB_KEEPALIVES_IDLE_S     5
#define OG_DB_KEEPALIVES_INTERVAL_S 2
#define OG_DB_KEEPALIVES_COUNT      3
#define OG_DB_TCP_USER_TIMEOUT_MS   15000
/* The server ends a session of ours that sits idle inside a transaction
 * this long (its client was cut off mid-transaction), releasing the row
 * locks it held; oncegate never waits on anything else inside one. */
#define OG_DB_IDLE_IN_TX_MS       30000

/* Output contracts (contract.c) */
#define OG_CONTRACT_FILE_MAX        (256 * 1024)
#define OG_CONTRACTS_MAX            256   /* files in the contracts directory */
#define OG_CONTRACT_NAME_MAX        64    /* contract, effect type and target names */
#define OG_CONTRACT_ERRORS_MAX      50    /* validation errors reported per output */
#define OG_CONTRACT_POINTER_MAX     1024  /* a JSON Pointer, in contracts and in errors */
#define OG_CONTRACT_APPROVERS_MAX   20
#define OG_CONTRACT_APPROVER_MAX    254   /* bytes of one approver entry */
#define OG_NOTIFY_RCPT_MAX          100   /* addresses of one approver entry's notify */
#define OG_CONTRACT_RULES_MAX       32    /* auto_when rules */
#define OG_CONTRACT_ALLOWED_MAX     32    /* effects.allowed_types / allowed_targets */
#define OG_CONTRACT_LOGGABLE_MAX    32
#define OG_CONTRACT_WINDOW_MAX      604800
#define OG_CONTRACT_EXPIRES_DEFAULT 86400
#define OG_CONTRACT_EXPIRES_MIN     60
#define OG_CONTRACT_EXPIRES_MAX     2592000
#define OG_CONTRACT_REPAIR_DEFAULT  1
#define OG_CONTRACT_REPAIR_MAX      10
#define OG_CONTRACT_FROM_OUTPUT_MAX 32    /* effects.types.<type>.from_output entries */
#define OG_CONTRACT_QUORUM_MAX      20    /* gate.min_approvals */
#define OG_CONTRACT_EDITABLE_MAX    32    /* gate.editable entries */

/* Mail effects (effect.c checks them at /output and before sending;
 * provider_smtp.c builds the message). What a contract allows is the limit:
 * these only bound what no contract could sensibly ask for. */
#define OG_MAIL_RCPT_MAX          1000  /* recipients of one message */
#define OG_MAIL_ADDRESS_MAX       254   /* bytes of one address (RFC 5321) */
/* characters of a subject: encoded words fold it over as many lines as
 * it needs */
#define OG_MAIL_SUBJECT_MAX       16384
/* bytes of in_reply_to: it goes out as it is, and "References: " plus it
 * must fit a line of 998 */
#define OG_MAIL_MSGID_MAX         985
/* bytes of the body text: whatever a request may carry */
#define OG_MAIL_BODY_MAX          OG_BODY_MAX_LIMIT
/* The whole message as sent: the body base64-encoded (4/3, plus CRLF per
 * 76 characters), the subject the same, the headers folded, and room for
 * every recipient. */
#define OG_MAIL_MESSAGE_MAX \
	(2 * OG_MAIL_BODY_MAX + 8 * OG_MAIL_SUBJECT_MAX + OG_MAIL_RCPT_MAX * 300 + 64 * 1024)

/* Approval pages */
#define OG_TEMPLATE_MAX           (256 * 1024)  /* one template file */

/* GET /metrics (metrics.c) */
#define OG_METRICS_CACHE_MS       1000   /* a scrape storm costs one query per this */
#define OG_METRICS_FLUSH_MS       1000   /* in-memory claim counts reach the database */
#define OG_METRICS_TEXT_MAX       (256 * 1024)  /* the exposition text */

/* Decision log */
#define OG_LOG_LINE_MAX           (16 * 1024)

/* Config files */
#define OG_CONFIG_LINE_MAX        4096
#define OG_CONFIG_VALUE_MAX       2048
/* A secret file (csrf_secret_file, proxy_secret_file): one line */
#define OG_SECRET_FILE_MAX        512

/* API clients */
#define OG_CLIENT_NAME_MAX        64
#define OG_API_KEY_BYTES          32

#endif
