#!/usr/bin/env bash
# prod_nginx.sh — the PRODUCTION nginx site (nginx/oncegate.conf) in front of
# the test stack's responder, with tests/identity/sso_standin.py playing
# oauth2-proxy and the identity provider, and tests/identity/prod_flow.py
# playing a person's browser (see there for what is checked: approval
# tokens never reach the SSO side nor the access log, a visitor without a
# session ends up back on the page, identity and groups flow through,
# X-Dev-* headers are ignored).
#
# The site file is used as shipped except for what a deployment edits:
# the listen lines (loopback ports here, no IPv6), the certificate (a
# throwaway self-signed one made with openssl), the responder's socket,
# the oauth2-proxy address, the access log path, the stylesheet path and
# the include of the proxy secret (the stack's).
# Each substitution must apply, or the test fails: a changed config is
# never silently tested in some other shape.
#
# Runs against the stack `./dev test` starts: ONCEGATE_URL,
# ONCEGATE_API_KEY, ONCEGATE_CONF (its `listen` is the responder's
# socket), ONCEGATE_PYTHON. Binds to 127.0.0.1 only; everything it starts
# is stopped by PID on exit. Needs root (nginx's workers run as www-data,
# the responder's socket is group www-data). Exit 0 pass, 1 fail, 77 no stack.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

stack_script prod-nginx ONCEGATE_URL ONCEGATE_API_KEY ONCEGATE_CONF
PYTHON=${ONCEGATE_PYTHON:-/usr/bin/python3}
[[ $EUID == 0 ]] || die "needs root (nginx workers run as www-data)"
SOCKET=$(sed -n 's/^listen *= *//p' "$ONCEGATE_CONF" | head -n1)
[[ $SOCKET == /* && -S $SOCKET ]] || die "the stack's responder socket ($SOCKET) is not there"
# The stack's include of the proxy secret (0600 root), as deploy.md makes
# /etc/nginx/oncegate-proxy-secret.conf.
SECRET_CONF=$(dirname "$ONCEGATE_CONF")/proxy_secret.nginx
[[ -s $SECRET_CONF ]] || die "the stack has no $SECRET_CONF"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-prodnginx.XXXXXX")
chmod 0711 "$TMP"
SSO_PID='' NGINX_PID='' DOWN_PID=''
cleanup() {
	set +e
	nginx_stop "$NGINX_PID" "$TMP/nginx"
	nginx_stop "$DOWN_PID" "$TMP/nginx-down"
	if [[ -n $SSO_PID ]]; then
		kill -TERM "$SSO_PID" 2>/dev/null
		wait "$SSO_PID" 2>/dev/null
	fi
	if [[ ${KEEP:-no} == yes ]]; then echo "prod-nginx: kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

HTTP_PORT=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
HTTPS_PORT=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
[[ $HTTP_PORT != "$HTTPS_PORT" ]] || HTTPS_PORT=$((HTTPS_PORT + 1))

# --- a throwaway certificate for 127.0.0.1 -----------------------------------
mkdir -p "$TMP/tls" "$TMP/nginx/tmp" "$TMP/assets"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" \
	-addext "subjectAltName=IP:127.0.0.1" -keyout "$TMP/tls/key.pem" -out "$TMP/tls/cert.pem" \
	>/dev/null 2>&1 || die "openssl could not make a certificate"
install -m 0644 "$ROOT/templates/approval.css" "$TMP/assets/approval.css"

# --- the stand-in SSO ------------------------------------------------------------
"$PYTHON" "$HERE/sso_standin.py" --port 0 \
	--redirect-url "https://127.0.0.1:$HTTPS_PORT/oauth2/callback" >"$TMP/sso.out" 2>&1 &
SSO_PID=$!
for ((i = 0; i < 100; i++)); do grep -q '^ready' "$TMP/sso.out" 2>/dev/null && break; sleep 0.1; done
SSO_PORT=$(sed -n 's/^ready \([0-9]*\)$/\1/p' "$TMP/sso.out")
[[ -n $SSO_PORT ]] || { cat "$TMP/sso.out" >&2; die "the SSO stand-in did not start"; }

# --- the production site, with a deployment's edits only --------------------------
"$PYTHON" - "$ROOT/nginx/oncegate.conf" "$TMP/oncegate.conf" <<EOF || die "nginx/oncegate.conf changed shape: cannot adapt it"
import re, sys
src, dst = sys.argv[1], sys.argv[2]
text = open(src).read()
edits = [
    (r"^( *)listen 80;$", r"\1listen 127.0.0.1:$HTTP_PORT;"),
    (r"^( *)listen \[::\]:80;\n", ""),
    (r"^( *)listen 443 ssl http2;$", r"\1listen 127.0.0.1:$HTTPS_PORT ssl http2;"),
    (r"^( *)listen \[::\]:443 ssl http2;\n", ""),
    (r"/etc/ssl/oncegate/fullchain\.pem", "$TMP/tls/cert.pem"),
    (r"/etc/ssl/oncegate/privkey\.pem", "$TMP/tls/key.pem"),
    (r"server unix:/run/oncegate/fcgi\.sock;", "server unix:$SOCKET;"),
    (r"/var/log/nginx/oncegate\.access\.log", "$TMP/nginx/access.log"),
    (r"http://127\.0\.0\.1:4180;", "http://127.0.0.1:$SSO_PORT;"),
    (r"/usr/local/share/oncegate/templates/approval\.css", "$TMP/assets/approval.css"),
    (r"include /etc/nginx/oncegate-proxy-secret\.conf;", "include $SECRET_CONF;"),
]
for pat, rep in edits:
    text, n = re.subn(pat, rep, text, flags=re.M)
    if n == 0:
        sys.exit("no match for %s" % pat)
open(dst, "w").write(text)
EOF
cat >"$TMP/nginx/nginx.conf" <<EOF
# prod_nginx.sh: nginx/oncegate.conf as Debian's nginx.conf would include it.
user www-data;
worker_processes 1;
daemon on;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 256; }
http {
    client_body_temp_path $TMP/nginx/tmp/client_body;
    proxy_temp_path       $TMP/nginx/tmp/proxy;
    fastcgi_temp_path     $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path       $TMP/nginx/tmp/uwsgi;
    scgi_temp_path        $TMP/nginx/tmp/scgi;
    access_log off;
    include $TMP/oncegate.conf;
}
EOF
chmod -R a+rX "$TMP/nginx" "$TMP/assets"
NGINX_PID=$(nginx_start "$TMP/nginx") || die "nginx rejects the production config or did not start"
curl -fsS -o /dev/null --max-time 5 --cacert "$TMP/tls/cert.pem" "https://127.0.0.1:$HTTPS_PORT/healthz" ||
	die "the production site does not answer /healthz"

say "production site on https://127.0.0.1:$HTTPS_PORT, SSO stand-in on 127.0.0.1:$SSO_PORT"
"$PYTHON" "$HERE/prod_flow.py" --https "https://127.0.0.1:$HTTPS_PORT" --ca "$TMP/tls/cert.pem" \
	--sso "http://127.0.0.1:$SSO_PORT" --access-log "$TMP/nginx/access.log" \
	--error-log "$TMP/nginx/error.log" || { KEEP=yes; die "see above (kept $TMP)"; }

# --- nginx's own errors are problem documents -----------------------------------
# expect_problem STATUS CODE WHAT CURL-ARGS...: nginx answers STATUS as
# application/problem+json with type .../CODE, its title and status.
fail=0
expect_problem() {
	local status=$1 code=$2 what=$3 got
	shift 3
	got=$(curl -sS -o "$TMP/answer" -D "$TMP/headers" -w '%{http_code} %{content_type}' \
		--max-time 10 --cacert "$TMP/tls/cert.pem" "$@") || got="no answer"
	check "$what: $status $code as a problem document (got $got)" "$("$PYTHON" - "$TMP/answer" \
		"$status" "$code" "$got" <<-'PY'
		import json, sys
		path, status, code, got = sys.argv[1:]
		try:
		    doc = json.load(open(path))
		except ValueError:
		    doc = {}
		ok = (got == status + " application/problem+json"
		      and doc.get("type") == "https://oncegate.dev/problems/" + code
		      and doc.get("status") == int(status) and bool(doc.get("title")))
		print("yes" if ok else "no")
		PY
	)"
}
SITE=https://127.0.0.1:$HTTPS_PORT
LONG=$(head -c 20000 /dev/zero | tr '\0' a)
expect_problem 405 method_not_allowed "TRACE on the API" -X TRACE "$SITE/v1/runs"
expect_problem 405 method_not_allowed "POST to the stylesheet" -X POST "$SITE/approve-assets/approval.css"
check "the stylesheet's 405 names GET, HEAD in Allow" \
	"$(yn grep -qi '^Allow: GET, HEAD' "$TMP/headers")"
# (over HTTP/1.1: over HTTP/2 nginx resets the stream of a request whose
# headers are too large, and no page at all comes back)
expect_problem 414 uri_too_long "a 20 KB request line" --http1.1 "$SITE/v1/runs/$LONG"
expect_problem 400 header_too_large "a 20 KB header" --http1.1 -H "X-Big: $LONG" "$SITE/healthz"
head -c 2000000 /dev/zero | tr '\0' 'x' >"$TMP/big.json"
expect_problem 413 body_too_large "a 2 MB body" -H 'Content-Type: application/json' \
	--data-binary @"$TMP/big.json" "$SITE/v1/runs"
expect_problem 404 not_found "a path outside every route" "$SITE/nothing/here"

# The responder down: the same site in front of a socket nobody listens on.
mkdir -p "$TMP/nginx-down/tmp"
DOWN_HTTP=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
DOWN_HTTPS=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
[[ $DOWN_HTTP != "$DOWN_HTTPS" ]] || DOWN_HTTPS=$((DOWN_HTTPS + 1))
sed -e "s|server unix:$SOCKET;|server unix:$TMP/nobody.sock;|" \
	-e "s|127.0.0.1:$HTTP_PORT;|127.0.0.1:$DOWN_HTTP;|" -e "s|127.0.0.1:$HTTPS_PORT ssl|127.0.0.1:$DOWN_HTTPS ssl|" \
	"$TMP/oncegate.conf" >"$TMP/oncegate-down.conf"
sed -e "s|$TMP/nginx/|$TMP/nginx-down/|g" -e "s|$TMP/oncegate.conf|$TMP/oncegate-down.conf|" \
	"$TMP/nginx/nginx.conf" >"$TMP/nginx-down/nginx.conf"
chmod -R a+rX "$TMP/nginx-down"
DOWN_PID=$(nginx_start "$TMP/nginx-down") || die "nginx with the responder down did not start"
expect_problem 502 unavailable "the responder down" "https://127.0.0.1:$DOWN_HTTPS/v1/runs/x" \
	-H "Authorization: Bearer $ONCEGATE_API_KEY"
check "the 502 carries Retry-After" "$(yn grep -qi '^Retry-After: ' "$TMP/headers")"
nginx_stop "$DOWN_PID" "$TMP/nginx-down"
DOWN_PID=''
((fail == 0)) || { KEEP=yes; die "nginx answered an error that is not a problem document (kept $TMP)"; }
say "passed"
