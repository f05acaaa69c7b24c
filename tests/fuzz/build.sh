#!/usr/bin/env bash
# build.sh OUTDIR — builds every libFuzzer target tests/fuzz/fuzz_NAME.c into
# OUTDIR/fuzz_NAME with clang, ASan and UBSan, linking the sources of libog
# (all of them, as Makefile.am lists them: api.c needs the whole library).
#
# Incremental: an object is rebuilt when its source, any header of src/lib
# or tests/fuzz, this script or the flags changed; the library objects are
# compiled once for all targets, in parallel.
#
#   CC=clang-14 tests/fuzz/build.sh .dev/fuzz
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
OUT=${1:?usage: build.sh OUTDIR}
CC=${CC:-clang}
JOBS=${JOBS:-$(nproc)}
PKGS="jansson libpq libxml-2.0 libcrypto libcurl libsystemd"

mkdir -p "$OUT/obj"
OUT=$(cd "$OUT" && pwd -P)

# Paths oncegate would take from configure: none is used by a target.
CFLAGS=(-g -O1 -fno-omit-frame-pointer -pthread
	-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
	-Wall -Wextra -Wno-unused-parameter
	-I"$ROOT/src/lib" -I"$HERE" -I"$OUT"
	-DOG_SYSCONFDIR='"/nonexistent/etc"' -DOG_PKGDATADIR='"/nonexistent/share"'
	-DOG_FUZZ_SRCDIR="\"$ROOT\""
	-DPACKAGE_VERSION="\"$(sed -n 's/^AC_INIT(\[oncegate\], \[\([^]]*\)\].*/\1/p' "$ROOT/configure.ac")\""
	$(pkg-config --cflags $PKGS))
LDFLAGS=(-pthread -fsanitize=fuzzer,address,undefined)
LIBS=($(pkg-config --libs $PKGS))

# A change of compiler or flags rebuilds everything.
stamp=$OUT/obj/flags
flags="$CC ${CFLAGS[*]} ${LDFLAGS[*]} ${LIBS[*]}"
if [[ ! -f $stamp || $(cat "$stamp") != "$flags" ]]; then
	rm -f "$OUT"/obj/*.o
	printf '%s' "$flags" >"$stamp"
fi

# The newest header or build input: objects older than it are stale.
newest=$stamp
for f in "$ROOT"/src/lib/*.h "$HERE"/*.h "${BASH_SOURCE[0]}"; do
	[[ $f -nt $newest ]] && newest=$f
done

# stale SRC OBJ
stale() { [[ ! -f $2 || $1 -nt $2 || $newest -nt $2 ]]; }

# compile SRC OBJ; a failure leaves a mark, since jobs are not waited for
# one by one.
compile() {
	if "$CC" "${CFLAGS[@]}" -c "$1" -o "$2.tmp"; then
		mv "$2.tmp" "$2"
	else
		touch "$OUT/obj/failed"
	fi
}

# run_job SRC OBJ: compile in the background, at most JOBS at once.
run_job() {
	while [[ $(jobs -pr | wc -l) -ge $JOBS ]]; do
		wait -n || true
	done
	printf '  CC       %s\n' "${1#"$ROOT"/}"
	compile "$1" "$2" &
}

rm -f "$OUT/obj/failed"
# libog_la_SOURCES in Makefile.am, so a file not yet part of the library
# never breaks the fuzz build.
lib_srcs=$(sed -n '/^libog_la_SOURCES[[:space:]]*=/,/[^\\]$/p' "$ROOT/Makefile.am" |
	tr -s ' \t\\' '\n\n\n' | grep '\.c$')
[[ -n $lib_srcs ]] || { echo "build.sh: no libog_la_SOURCES in Makefile.am" >&2; exit 1; }
lib_objs=()
# The library's one generated source: the OpenAPI document compiled in.
sh "$ROOT/src/lib/openapi_embed.sh" "$ROOT/src/lib/openapi.json" >"$OUT/openapi_doc.c.tmp"
cmp -s "$OUT/openapi_doc.c.tmp" "$OUT/openapi_doc.c" 2>/dev/null ||
	mv "$OUT/openapi_doc.c.tmp" "$OUT/openapi_doc.c"
rm -f "$OUT/openapi_doc.c.tmp"
# ... and the schema version it expects: the highest migration in sql/ (as
# make generates src/lib/schema_expected.h).
high=$(cd "$ROOT/sql" && ls | LC_ALL=C grep -E '^[0-9]{3,}_.*\.sql$' | LC_ALL=C sort | tail -n 1)
printf '#define SCHEMA_VERSION_EXPECTED "%s"\n' "${high%.sql}" >"$OUT/schema_expected.h.tmp"
cmp -s "$OUT/schema_expected.h.tmp" "$OUT/schema_expected.h" 2>/dev/null ||
	mv "$OUT/schema_expected.h.tmp" "$OUT/schema_expected.h"
rm -f "$OUT/schema_expected.h.tmp"
for src in $lib_srcs tests/fuzz/fuzzlib.c "$OUT/openapi_doc.c"; do
	[[ $src == /* ]] || src=$ROOT/$src
	obj=$OUT/obj/lib-$(basename "${src%.c}").o
	lib_objs+=("$obj")
	stale "$src" "$obj" && run_job "$src" "$obj"
done
targets=()
for src in "$HERE"/fuzz_*.c; do
	name=$(basename "${src%.c}")
	targets+=("$name")
	stale "$src" "$OUT/obj/$name.o" && run_job "$src" "$OUT/obj/$name.o"
done
wait
[[ ! -e $OUT/obj/failed ]] || { echo "build.sh: compilation failed" >&2; exit 1; }

# One archive: each target links only the objects it needs.
archive=$OUT/obj/libog-fuzz.a
rebuild=no
[[ -f $archive && $(cat "$OUT/obj/members" 2>/dev/null) == "${lib_objs[*]}" ]] || rebuild=yes
for obj in "${lib_objs[@]}"; do
	[[ $obj -nt $archive ]] && rebuild=yes
done
if [[ $rebuild == yes ]]; then
	rm -f "$archive"
	ar rcs "$archive" "${lib_objs[@]}"
	printf '%s' "${lib_objs[*]}" >"$OUT/obj/members"
fi

for name in "${targets[@]}"; do
	if [[ ! -x $OUT/$name || $OUT/obj/$name.o -nt $OUT/$name || $archive -nt $OUT/$name ]]; then
		printf '  LD       %s\n' "$name"
		"$CC" "${LDFLAGS[@]}" "$OUT/obj/$name.o" "$archive" "${LIBS[@]}" -o "$OUT/$name"
	fi
done
printf '%s\n' "${targets[@]}" >"$OUT/targets"
