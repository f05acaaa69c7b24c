#!/usr/bin/env bash
# tests/browser/context.sh — what an approver reads before deciding, in
# headless Chromium, against the stack that `./dev test` started (it exports
# ONCEGATE_URL, ONCEGATE_API_KEY, ONCEGATE_CTL and PG*).
#
#   1. a second tenant (`oncegatectl client add`) beside the stack's "dev";
#   2. each tenant hands in a support_reply draft under the SAME business
#      key, with a context: the customer's mail (several lines, with
#      markup, javascript: and markdown links in it), its subject (Cyrillic
#      and emoji for one, Arabic and CJK for the other) and the customer;
#   3. psql: each run's row holds its own context, the effects of both are
#      identical and hold none of it;
#   4. context.mjs, as sam@example.com (group support): the inbox entries
#      are titled by the tickets' subjects and name the customers; each card
#      shows the ticket's subject, the customer and their message as plain
#      text beside the draft; nothing of the customer's text became a link,
#      an element, a dialog or a request. Screenshots in ARTIFACTS:
#      context-inbox.png, context-card-1.png, context-card-2.png.
#
# Exit 0 pass, 1 fail, 77 skipped (no stack: ONCEGATE_URL is unset).
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"
stack_script browser-context ONCEGATE_URL ONCEGATE_API_KEY ONCEGATE_CTL ONCEGATE_CONF \
	ONCEGATE_PYTHON PGHOST PGPORT PGDATABASE PGUSER
ARTIFACTS=${ONCEGATE_ARTIFACTS:-$HERE/artifacts}
bash "$HERE/ensure.sh" || die "the browser tooling is not in place"

WORK=$(mktemp -d)
CLIENT_B="ctx-b-$(date +%s)-$$"
cleanup() {
	"$ONCEGATE_CTL" -c "$ONCEGATE_CONF" client revoke "$CLIENT_B" \
		--reason "browser context test done" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# --- 1. two tenants -------------------------------------------------------------

KEY_B=$("$ONCEGATE_CTL" -c "$ONCEGATE_CONF" client add "$CLIENT_B" \
	--reason "browser context test: a second tenant sharing business keys") ||
	die "oncegatectl client add $CLIENT_B failed"
[[ -n $KEY_B ]] || die "client add printed no key"

# --- 2. one business key, two tenants, two contexts ---------------------------------

KEY="browser-ctx-$(date +%s)-$$:ticket-4821"
"$ONCEGATE_PYTHON" - "$WORK/cases.json" "$KEY" "$ONCEGATE_API_KEY" "$KEY_B" "$CLIENT_B" <<'PY' ||
import json, sys, urllib.parse, urllib.request, os

out, key, key_dev, key_b, client_b = sys.argv[1:6]
base = os.environ['ONCEGATE_URL']
cases = [
    dict(client='dev', bearer=key_dev,
         subject='Заказ №4821 не пришёл — где моя посылка? 📦',
         customer='Мария Иванова <maria.ivanova@example.com>',
         message='Здравствуйте!\nМой заказ №4821 так и не пришёл.\n'
                 '<a href="javascript:alert(1)">Нажмите здесь</a> или '
                 '[подтвердите](https://evil.example/confirm) <script>alert("x")</script>\n'
                 'javascript:alert(document.cookie)\nС уважением, Мария 🙏'),
    dict(client=client_b, bearer=key_b,
         subject='طلب رقم ٤٨٢١: لم يصل الطرد — 订单未送达 🚚',
         customer='محمد العلي <m.alali@example.com>',
         message='مرحبًا،\nلم يصل طلبي رقم ٤٨٢١ بعد.\n您好，我的订单还没有到。\n'
                 '<img src=x onerror=alert(1)> [اضغط هنا](javascript:alert(2)) '
                 'https://evil.example/login\nشكرًا 😀'),
]
draft = 'Re: ваш заказ 4821 / طلبك / 您的订单'

def call(path, bearer, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method='POST',
                                 headers={'Authorization': 'Bearer ' + bearer,
                                          'Content-Type': 'application/json'})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

done = []
for c in cases:
    st, a = call('/v1/runs', c['bearer'], {'key': key, 'payload': {'ticket': 4821}})
    assert st == 201, ('claim', c['client'], st, a)
    st, a = call('/v1/runs/' + urllib.parse.quote(key, safe='') + '/output', c['bearer'], {
        'lease_owner': a['lease_owner'], 'version': a['version'], 'contract': 'support_reply',
        'output': {'subject': draft, 'body': 'Здравствуйте! Ваша посылка отправлена сегодня.',
                   'tone': 'friendly', 'confidence': 0.9},
        'model': {'provider': 'openai-compatible', 'name': 'qwen2.5-7b-instruct',
                  'revision': '2024-09-19'},
        'effect': {'type': 'email.send', 'target': 'demo_smtp',
                   'payload': {'to': 'customer-4821@example.com', 'ticket': 4821}},
        'requested_by': 'alice@example.com',
        'context': {'subject': c['subject'], 'customer': c['customer'], 'message': c['message']}})
    assert st == 202 and a['outcome'] == 'awaiting_human', ('output', c['client'], st, a)
    done.append(dict(key=key, client=c['client'], approval_id=a['approvals'][0]['approval_id'],
                     subject=c['subject'], customer=c['customer'], message=c['message'],
                     draft_subject=draft))
json.dump(done, open(out, 'w'), ensure_ascii=False)
PY
	die "the two runs could not be handed in"
say "two tenants' runs of $KEY await approval"

# --- 3. what the database holds ---------------------------------------------------

q() { psql -X -q -At -v ON_ERROR_STOP=1 -v key="$KEY" <<<"$1"; }
n=$(q "SELECT count(DISTINCT context->>'subject') FROM workflow_runs WHERE idempotency_key = :'key'")
[[ $n == 2 ]] || die "the two runs hold $n distinct contexts, expected 2"
n=$(q "SELECT count(DISTINCT effect::text) FROM workflow_runs WHERE idempotency_key = :'key'")
[[ $n == 1 ]] || die "the two runs' effects differ ($n): the context reached the effect"
n=$(q "SELECT count(*) FROM workflow_runs r WHERE idempotency_key = :'key'
	AND (strpos(effect::text, 'Мария') > 0 OR strpos(effect::text, 'javascript') > 0
	     OR EXISTS (SELECT 1 FROM approvals a WHERE a.client_id = r.client_id
	                AND a.idempotency_key = r.idempotency_key
	                AND strpos(a.effect::text, 'evil.example') > 0))")
[[ $n == 0 ]] || die "$n runs carry the context in their effect"

# --- 4. the browser -------------------------------------------------------------------

mkdir -p "$ARTIFACTS"
rm -f "$ARTIFACTS"/context-*.png
node "$HERE/context.mjs" "$ONCEGATE_URL" sam@example.com support "$WORK/cases.json" \
	"$ARTIFACTS" || die "context.mjs failed (screenshots in $ARTIFACTS)"
for shot in context-inbox context-card-1 context-card-2; do
	[[ -s $ARTIFACTS/$shot.png ]] || die "context.mjs left no $shot.png"
done
say "ok: two tenants' cards and inbox entries show the ticket's subject, the customer and their message as inert text; screenshots in $ARTIFACTS"
