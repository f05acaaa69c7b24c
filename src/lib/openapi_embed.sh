#!/bin/sh
# openapi_embed.sh OPENAPI.json — writes to stdout the C file that compiles
# the OpenAPI document into the library (api_openapi_json, its bytes, and
# api_openapi_json_len), so a program always serves the description of its
# own code. Used by make and by the fuzz build alike.
set -eu
printf '/* Generated from src/lib/openapi.json by openapi_embed.sh: do not edit. */\n'
printf '#include "api_int.h"\n\nconst unsigned char api_openapi_json[] = {\n'
od -An -v -tx1 "$1" | sed -e 's/[0-9a-f][0-9a-f]/0x&,/g' -e 's/^ */\t/'
printf '};\nconst size_t api_openapi_json_len = sizeof(api_openapi_json);\n'
