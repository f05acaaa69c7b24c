/*
 * mcp.h — the Model Context Protocol's messages, without I/O: one
 * JSON-RPC 2.0 message of a Streamable HTTP POST parsed and classified,
 * the protocol revisions this server speaks, the error codes, and the
 * name of the tool that stands for a contract's effect type.
 *
 * Every function is pure and may be called from any thread.
 */
#ifndef OG_MCP_H
#define OG_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* The newest revision first; initialize answers the client's when it is
 * one of these, else the newest. */
#define MCP_PROTOCOL_LATEST "2025-11-25"
/* A request without MCP-Protocol-Version is taken as this revision (the
 * transport's rule for clients that predate the header). */
#define MCP_PROTOCOL_DEFAULT "2025-03-26"

/* JSON-RPC 2.0 error codes. */
enum mcp_code {
	MCP_PARSE_ERROR = -32700,
	MCP_INVALID_REQUEST = -32600,
	MCP_METHOD_NOT_FOUND = -32601,
	MCP_INVALID_PARAMS = -32602,
	MCP_INTERNAL_ERROR = -32603,
	MCP_SERVER_ERROR = -32000,   /* implementation-defined: unavailable, refused */
};

enum mcp_kind {
	MCP_REQUEST,        /* method and id: answered with a result or an error */
	MCP_NOTIFICATION,   /* method, no id: 202, nothing answered */
	MCP_RESPONSE,       /* result or error to a request of ours: 202 */
	MCP_INVALID,        /* not a message: answered with error (code, message) */
};

struct mcp_msg {
	enum mcp_kind kind;
	json_t *doc;        /* owned: the parsed message (NULL when not JSON) */
	json_t *id;         /* borrowed from doc: a string or an integer; NULL */
	const char *method; /* borrowed from doc */
	json_t *params;     /* borrowed from doc: an object, or NULL */
	enum mcp_code code; /* MCP_INVALID */
	char message[256];  /* MCP_INVALID: what is wrong, for the caller */
};

/* Parses body[0..len) as one JSON-RPC 2.0 message under the API's strict
 * JSON rules (canon_validate: no duplicate members, no lone surrogates,
 * numbers a double holds, at most OG_JSON_DEPTH_MAX deep). A batch (an
 * array) is refused: the protocol revisions spoken here have none. Free
 * with mcp_msg_clear. */
void mcp_parse(const char *body, size_t len, struct mcp_msg *m);
void mcp_msg_clear(struct mcp_msg *m);

/* Is v (NUL-terminated) a protocol revision this server speaks? */
bool mcp_version_supported(const char *v);
/* The revision initialize answers a client that asked for requested
 * (NULL or unknown: the newest). */
const char *mcp_version_negotiate(const char *requested);

/* The JSON-RPC answers: a result (reference taken) or an error (data may
 * be NULL; reference taken) to id (NULL: null). New references. */
json_t *mcp_result(json_t *id, json_t *result);
json_t *mcp_error(json_t *id, enum mcp_code code, const char *message, json_t *data);

/* The tool of a contract's effect type: contract "__" type, with each '.'
 * of the type as '_' (tool names of every agent framework take [A-Za-z0-9_-]),
 * e.g. support_reply__email_send. Into out (at least MCP_TOOL_NAME_MAX + 1
 * bytes); false when it would not fit. */
#define MCP_TOOL_NAME_MAX 128
bool mcp_tool_name(const char *contract, const char *type, char *out, size_t outlen);

#endif
