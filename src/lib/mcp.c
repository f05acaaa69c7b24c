/*
 * mcp.c — the Model Context Protocol's messages, without I/O (mcp.h).
 */
#include <stdio.h>
#include <string.h>

#include "canon.h"
#include "mcp.h"

static const char *const versions[] = { MCP_PROTOCOL_LATEST, "2025-06-18", "2025-03-26",
	                                "2024-11-05" };

#define NVERSIONS (sizeof(versions) / sizeof(versions[0]))

bool
mcp_version_supported(const char *v)
{
	size_t i;

	for (i = 0; v != NULL && i < NVERSIONS; i++)
		if (strcmp(v, versions[i]) == 0)
			return true;
	return false;
}

const char *
mcp_version_negotiate(const char *requested)
{
	return mcp_version_supported(requested) ? requested : MCP_PROTOCOL_LATEST;
}

static void
invalid(struct mcp_msg *m, enum mcp_code code, const char *message)
{
	m->kind = MCP_INVALID;
	m->code = code;
	snprintf(m->message, sizeof(m->message), "%s", message);
}

/* A request's id: a string or an integer (JSON-RPC allows null, MCP does
 * not; a fraction could not be echoed back exactly). */
static bool
id_ok(const json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

void
mcp_parse(const char *body, size_t len, struct mcp_msg *m)
{
	struct canon_where where;
	json_error_t jerr;
	char problem[160];
	const json_t *jsonrpc, *method;
	json_t *params;
	enum canon_rc crc;

	memset(m, 0, sizeof(*m));
	if (body == NULL || len == 0) {
		invalid(m, MCP_PARSE_ERROR, "the body is empty: send one JSON-RPC 2.0 message");
		return;
	}
	crc = canon_validate(body, len, &where);
	if (crc != CANON_OK) {
		char msg[sizeof(m->message)];

		canon_describe(crc, &where, problem, sizeof(problem));
		snprintf(msg, sizeof(msg), "the body is not valid JSON: %s", problem);
		invalid(m, MCP_PARSE_ERROR, msg);
		return;
	}
	m->doc = canon_json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (m->doc == NULL) {
		invalid(m, MCP_PARSE_ERROR, "the body is not valid JSON");
		return;
	}
	if (json_is_array(m->doc)) {
		invalid(m, MCP_INVALID_REQUEST,
		        "batches are not supported: send one JSON-RPC message per request");
		return;
	}
	if (!json_is_object(m->doc)) {
		invalid(m, MCP_INVALID_REQUEST, "a JSON-RPC message must be an object");
		return;
	}
	jsonrpc = json_object_get(m->doc, "jsonrpc");
	if (!json_is_string(jsonrpc) || strcmp(json_string_value(jsonrpc), "2.0") != 0) {
		invalid(m, MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
		return;
	}
	m->id = json_object_get(m->doc, "id");
	method = json_object_get(m->doc, "method");
	if (method == NULL) {
		/* a response to a request of ours (we send none) */
		if (id_ok(m->id) &&
		    (json_object_get(m->doc, "result") != NULL) !=
		        (json_object_get(m->doc, "error") != NULL)) {
			m->kind = MCP_RESPONSE;
			return;
		}
		m->id = id_ok(m->id) ? m->id : NULL;
		invalid(m, MCP_INVALID_REQUEST, "method is required");
		return;
	}
	if (m->id != NULL && !id_ok(m->id)) {
		m->id = NULL;
		invalid(m, MCP_INVALID_REQUEST, "id must be a string or an integer");
		return;
	}
	if (!json_is_string(method) || json_string_length(method) == 0 ||
	    json_string_length(method) > 128 ||
	    strlen(json_string_value(method)) != json_string_length(method)) {
		invalid(m, MCP_INVALID_REQUEST, "method must be a string of 1 to 128 bytes");
		return;
	}
	params = json_object_get(m->doc, "params");
	if (params != NULL && !json_is_object(params)) {
		invalid(m, MCP_INVALID_REQUEST, "params must be an object");
		return;
	}
	m->method = json_string_value(method);
	m->params = params;
	m->kind = m->id != NULL ? MCP_REQUEST : MCP_NOTIFICATION;
}

void
mcp_msg_clear(struct mcp_msg *m)
{
	if (m == NULL)
		return;
	json_decref(m->doc);
	memset(m, 0, sizeof(*m));
}

json_t *
mcp_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id != NULL ? id : json_null(),
	                 "result", result != NULL ? result : json_object());
}

json_t *
mcp_error(json_t *id, enum mcp_code code, const char *message, json_t *data)
{
	json_t *err = json_pack("{s:i, s:s}", "code", (int)code, "message", message);

	if (data != NULL)
		json_object_set_new(err, "data", data);
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id != NULL ? id : json_null(),
	                 "error", err);
}

bool
mcp_tool_name(const char *contract, const char *type, char *out, size_t outlen)
{
	size_t n, i;
	int w = snprintf(out, outlen, "%s__%s", contract, type);

	if (w < 0 || (size_t)w >= outlen || (size_t)w > MCP_TOOL_NAME_MAX)
		return false;
	n = strlen(contract) + 2;
	for (i = n; out[i] != '\0'; i++)
		if (out[i] == '.')
			out[i] = '_';
	return true;
}
