/*
 * fuzz_mcp.c — the MCP message parser (src/lib/mcp.c): mcp_parse on
 * arbitrary bytes, and mcp_tool_name, mcp_version_negotiate and the
 * JSON-RPC answers built from what it parsed.
 *
 * Properties, beyond "no crash, no leak": every input is exactly one of a
 * request (a method of 1 to 128 bytes, an id that is a string or an
 * integer, params absent or an object), a notification (the same, no id),
 * a response (an id, exactly one of result and error) or invalid with a
 * JSON-RPC error code and a message; invalid input's id, when kept, is
 * one the answer can echo. An answer to any parsed id serialises. A tool
 * name is at most MCP_TOOL_NAME_MAX bytes, has no '.', and starts with the
 * contract's name and "__".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "fuzzlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_answer(json_t *id)
{
	json_t *a = mcp_error(id, MCP_INVALID_REQUEST, "x", NULL);
	char *text = json_dumps(a, JSON_COMPACT);

	FUZZ_ASSERT(text != NULL);
	free(text);
	json_decref(a);
	a = mcp_result(id, json_object());
	text = json_dumps(a, JSON_COMPACT);
	FUZZ_ASSERT(text != NULL);
	free(text);
	json_decref(a);
}

static void
check_tool_name(const uint8_t *data, size_t size)
{
	char contract[80], type[80], out[MCP_TOOL_NAME_MAX + 1];
	size_t n = size < 2 ? 0 : size / 2 > 79 ? 79 : size / 2, m = size - n > 79 ? 79 : size - n;

	memcpy(contract, data, n);
	contract[n] = '\0';
	memcpy(type, data + n, m);
	type[m] = '\0';
	if (strlen(contract) != n || strlen(type) != m)
		return;
	if (mcp_tool_name(contract, type, out, sizeof(out))) {
		FUZZ_ASSERT(strlen(out) <= MCP_TOOL_NAME_MAX);
		FUZZ_ASSERT(strncmp(out, contract, n) == 0 && strncmp(out + n, "__", 2) == 0);
		FUZZ_ASSERT(strchr(out + n + 2, '.') == NULL);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_msg m;
	char version[16];

	mcp_parse((const char *)data, size, &m);
	switch (m.kind) {
	case MCP_REQUEST:
	case MCP_NOTIFICATION:
		FUZZ_ASSERT(m.method != NULL && strlen(m.method) >= 1 && strlen(m.method) <= 128);
		FUZZ_ASSERT(m.params == NULL || json_is_object(m.params));
		FUZZ_ASSERT((m.kind == MCP_REQUEST) == (m.id != NULL));
		break;
	case MCP_RESPONSE:
		FUZZ_ASSERT(m.id != NULL && m.method == NULL);
		break;
	case MCP_INVALID:
		FUZZ_ASSERT(m.code <= -32600 && m.message[0] != '\0');
		break;
	}
	FUZZ_ASSERT(m.id == NULL || json_is_string(m.id) || json_is_integer(m.id));
	check_answer(m.id);
	mcp_msg_clear(&m);

	snprintf(version, sizeof(version), "%.*s", (int)(size < 15 ? size : 15), (const char *)data);
	FUZZ_ASSERT(mcp_version_supported(mcp_version_negotiate(version)));
	check_tool_name(data, size);
	return 0;
}
