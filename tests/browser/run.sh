#!/usr/bin/env bash
# tests/browser/run.sh — issue 3's real-browser test, against the stack that
# `./dev test` started (it exports ONCEGATE_URL, ONCEGATE_API_KEY and PG*).
#
#   1. makes sure Debian's chromium, Node.js and playwright-core are in place
#      (ensure.sh, shared with tests/n8n/run.sh);
#   2. creates a run waiting for a person: a claim, then a support_reply
#      output, through the API with curl;
#   3. runs approve.mjs: headless Chromium opens the approval link as
#      sam@example.com (group support), sees the card (the mail as it will
#      be sent), checks on a 390×844 phone screen that the decision buttons
#      are on the first screen and that the recipients and the message come
#      before the correction form, runs axe-core on the card at both sizes
#      (0 violations), finds the run in the inbox (GET /approve/),
#      replaces the drafted body in the card's correction form with a long
#      multilingual text, clicks Approve and lands on the decided page;
#      screenshots go to
#      ARTIFACTS: approval.png (the decided page), approval-card.png and
#      card-desktop.png (the card), card-phone.png, inbox.png;
#   4. checks with psql that the run is approved by that person, that it
#      records the correction (by whom, which field), and that exactly one
#      outbox row (email.send, for that approval) exists, carrying the
#      corrected body;
#   5. sends it: a dispatcher of its own to a loopback SMTP sink
#      (tests/providers/smtp_sink.py), which must receive the corrected text
#      exactly once;
#   6. a run of notify_reply, whose approvers are told: a dispatcher of its
#      own sends the notice to a demo mailbox, Chromium (approve.mjs again)
#      opens the link from that mail, corrects the draft's body with another
#      long multilingual text and approves; the demo mailbox receives the
#      corrected text exactly once. The notice is rendered to notify-mail.png
#      (its text in notify-mail.txt); the browser's screenshots are
#      notify-approved.png, notify-approved-card.png, notify-card-desktop.png,
#      notify-card-phone.png and notify-inbox.png.
#
# Exit 0 pass, 1 fail, 77 skipped (no stack: ONCEGATE_URL is unset).
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ARTIFACTS=${ONCEGATE_ARTIFACTS:-$HERE/artifacts}
APPROVER=sam@example.com
APPROVER_GROUPS=support

SAY_PREFIX='browser:' DIE_PREFIX='browser: FAIL'

need_stack browser ONCEGATE_API_KEY PGHOST PGPORT PGDATABASE PGUSER \
	ONCEGATE_DISPATCH ONCEGATE_PROVIDERS ONCEGATE_CONF ONCEGATE_CTL

# --- 1. chromium, node, playwright-core --------------------------------------

bash "$HERE/ensure.sh" || die "the browser tooling is not in place"

# --- 2. a run waiting for a person ---------------------------------------------

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# api METHOD PATH [BODY]: prints the HTTP status; the answer is in $WORK/answer.
api() {
	local args=(-sS --noproxy '*' --max-time 30 -o "$WORK/answer" -w '%{http_code}'
		-X "$1" -H "Authorization: Bearer $ONCEGATE_API_KEY")
	if [[ $# -ge 3 ]]; then args+=(-H 'Content-Type: application/json' --data-binary "$3"); fi
	curl "${args[@]}" "$ONCEGATE_URL$2"
}

# field EXPR: a value of the last JSON answer (j is the parsed answer).
field() {
	node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		const v = eval(process.argv[2]); if (v === undefined || v === null) process.exit(1);
		process.stdout.write(String(v));' "$WORK/answer" "$1"
}

KEY="browser-$(date +%s)-$$:support-reply:v1"
st=$(api POST /v1/runs "{\"key\":\"$KEY\",\"payload\":{\"ticket\":4242}}")
[[ $st == 201 ]] || die "claim: HTTP $st $(cat "$WORK/answer")"
if ! OWNER=$(field j.lease_owner) || ! VERSION=$(field j.version); then
	die "claim answer: $(cat "$WORK/answer")"
fi

KEY_PATH=$(node -p 'encodeURIComponent(process.argv[1])' "$KEY")
st=$(api POST "/v1/runs/$KEY_PATH/output" "$(
	cat <<-EOF
		{"lease_owner":"$OWNER","version":$VERSION,"contract":"support_reply",
		 "output":{"subject":"Re: your parcel 4242","body":"Hello,\nyour parcel left the warehouse today and arrives on Friday.\nBest regards, Support","tone":"friendly","confidence":0.9},
		 "model":{"provider":"openai-compatible","name":"qwen2.5-7b-instruct","revision":"2024-09-19"},
		 "effect":{"type":"email.send","target":"demo_smtp","payload":{"to":"customer@example.com","ticket":4242}},
		 "source_url":"https://crm.example/ticket/4242","requested_by":"alice@example.com"}
	EOF
)")
[[ $st == 202 ]] || die "output: HTTP $st $(cat "$WORK/answer")"
[[ $(field j.outcome) == awaiting_human ]] || die "output: $(cat "$WORK/answer")"
if ! URL=$(field 'j.approvals[0].url') || ! APPROVAL_ID=$(field 'j.approvals[0].approval_id'); then
	die "output answer has no approval"
fi
[[ $URL == "$ONCEGATE_URL/approve/"* ]] || die "the approval url is not under $ONCEGATE_URL/approve/"
say "run $KEY awaits approval $APPROVAL_ID"

# --- 3. the browser -----------------------------------------------------------

mkdir -p "$ARTIFACTS"
rm -f "$ARTIFACTS/approval.png" "$ARTIFACTS/approval-card.png" "$ARTIFACTS/card-desktop.png" \
	"$ARTIFACTS/card-phone.png" "$ARTIFACTS/inbox.png"
# the corrected body: several scripts and emoji, over several lines
EDITED="$WORK/edited.txt"
{
	printf 'Здравствуйте, Ольга!\n\nВаша посылка 4242 покинула склад сегодня и прибудет в пятницу.\n'
	printf '您好！您的包裹 4242 今天已从仓库发出，预计星期五送达。\n'
	printf 'مرحبًا، غادرت طردك رقم 4242 المستودع اليوم وسيصل يوم الجمعة.\n'
	for i in $(seq 1 20); do printf 'Строка %d — 第%d行 — السطر %d 📦✅\n' "$i" "$i" "$i"; done
	printf '\nС уважением, служба поддержки'
} >"$EDITED"
rc=0
node "$HERE/approve.mjs" "$URL" "$APPROVER" "$APPROVER_GROUPS" "$KEY" "$ARTIFACTS/approval.png" \
	"$EDITED" || rc=$?
[[ -s $ARTIFACTS/approval.png ]] || die "approve.mjs left no screenshot"
[[ $rc -eq 0 ]] || die "approve.mjs exited $rc (screenshot: $ARTIFACTS/approval.png)"
for shot in card-desktop card-phone inbox; do
	[[ -s $ARTIFACTS/$shot.png ]] || die "approve.mjs left no $shot.png"
done

# --- 4. what the database says -------------------------------------------------

# psql -c does not interpolate variables: the statement goes on stdin.
q() {
	psql -X -q -At -v ON_ERROR_STOP=1 -v key="$KEY" -v approval="$APPROVAL_ID" <<<"$1"
}

run=$(q "SELECT state || ' ' || coalesce(decided_by, '-') || ' ' || coalesce(decision, '-')
	FROM workflow_runs WHERE idempotency_key = :'key'")
[[ $run == "approved $APPROVER approve" ]] || die "the run is \"$run\", not \"approved $APPROVER approve\""
appr=$(q "SELECT state || ' ' || approver_subject || ' ' || decision FROM approvals
	WHERE id = :'approval'::uuid")
[[ $appr == "decided $APPROVER approve" ]] || die "the approval is \"$appr\""
n=$(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key = :'key'")
[[ $n == 1 ]] || die "$n outbox rows for the run, expected exactly 1"
# the provider key: this client's own, og1/c<client id>/<key>/<type>/<slot>/<sha256 hex>
row=$(q "SELECT effect_type || ' ' || target || ' ' || (approval_id = :'approval'::uuid)::text
	|| ' ' || (provider_key ~ ('^og1/c' || client_id || '/[A-Za-z0-9._-]+/email\.send/0/[0-9a-f]{64}$'))::text
	FROM effect_outbox WHERE idempotency_key = :'key'")
[[ $row == "email.send demo_smtp true true" ]] || die "the outbox row is \"$row\""

edit=$(q "SELECT edited_by || ' ' || array_to_string(edited_fields, ',') || ' '
	|| (edited_output_hash <> output_hash)::text FROM workflow_runs WHERE idempotency_key = :'key'")
[[ $edit == "$APPROVER body true" ]] || die "the run records the correction as \"$edit\""
# the outbox row carries the corrected body, byte for byte
q "SELECT payload->>'body' FROM effect_outbox WHERE idempotency_key = :'key'" >"$WORK/queued.txt"
printf '\n' >>"$EDITED"
cmp -s "$WORK/queued.txt" "$EDITED" || die "the queued body is not the corrected text"

# --- 5. sent: the corrected text, once ---------------------------------------------

need_stack browser ONCEGATE_DISPATCH ONCEGATE_PYTHON ONCEGATE_PROVIDERS ONCEGATE_CTL ONCEGATE_CONF
SMTP_PID='' DISPATCH_PID=''
trap 'kill -TERM $SMTP_PID $DISPATCH_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
provider_start SMTP_PID SMTP_PORT "$WORK/smtp.out" smtp_sink.py --record "$WORK/mail.jsonl"
{
	echo "# tests/browser/run.sh"
	conf_lines log_file="$WORK/dispatch.log" contracts_dir="$(conf_value contracts_dir)" \
		dispatch_workers=1 dispatch_poll_ms=100 dispatch_shutdown_seconds=2
	target_conf demo_smtp smtp "smtp://127.0.0.1:$SMTP_PORT" mail_from=support@oncegate.example \
		timeout_ms=5000 max_attempts=2
} >"$WORK/dispatch.conf"
# Nothing else may be sent by this dispatcher: other pending work is cancelled.
outbox_quiet "browser test sends to loopback" "$KEY"
AI_ACTIONS_ENABLED=true "$ONCEGATE_DISPATCH" -c "$WORK/dispatch.conf" </dev/null \
	>"$WORK/dispatch.stderr" 2>&1 &
DISPATCH_PID=$!
for ((i = 0; i < 300; i++)); do
	[[ $(q "SELECT state FROM effect_outbox WHERE idempotency_key = :'key'") == completed ]] && break
	sleep 0.1
done
stop_child "$DISPATCH_PID" 5 dispatcher
DISPATCH_PID=
"$ONCEGATE_CTL" sends stop --reason "browser test done" 2>/dev/null
sent=$(q "SELECT state FROM effect_outbox WHERE idempotency_key = :'key'")
[[ $sent == completed ]] || die "the effect is $sent, not completed (dispatcher: $(tail -n 5 "$WORK/dispatch.stderr"))"
"$ONCEGATE_PYTHON" - "$WORK/mail.jsonl" "$EDITED" <<'PY' || die "the SMTP sink did not receive the corrected text exactly once"
import email, email.policy, json, sys
want = open(sys.argv[2], encoding='utf-8').read()[:-1]
mails = [email.message_from_string(json.loads(l)['data'], policy=email.policy.default)
         for l in open(sys.argv[1], encoding='utf-8')]
got = [m.get_content().replace('\r\n', '\n') for m in mails]
print('browser: the SMTP sink received %d mail(s)' % len(got), file=sys.stderr)
sys.exit(0 if len(got) == 1 and got[0] == want else 1)
PY

say "ok: corrected and approved in Chromium by $APPROVER; one outbox row ($row); the SMTP sink received the corrected text once; screenshot $ARTIFACTS/approval.png"

# --- 6. told by mail: the link from the notice -----------------------------------
#
# The test contract notify_reply tells group support by mail. A dispatcher
# of this test sends to a demo mailbox (the loopback SMTP server) and a
# loopback HTTP provider (the other approvers' chat webhook); the link is
# taken from the mail as it arrived, opened in Chromium, the draft's body
# corrected in the card's form and approved, and the corrected reply reaches
# the mailbox once. The notice is rendered to ARTIFACTS/notify-mail.png (its
# text in notify-mail.txt).

PY=$ONCEGATE_PYTHON
PIDS=("$SMTP_PID")
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
# start_provider NAME ARGS...: starts it in the background (PID in PIDS);
# wait_port NAME: its port once it said "ready PORT"
start_provider() {
	local name=$1
	shift
	"$PY" "$ONCEGATE_PROVIDERS/$name" --port 0 "$@" >"$WORK/$name.out" 2>&1 &
	PIDS+=($!)
}
wait_port() {
	local port
	port=$(ready_port "$WORK/$1.out")
	[[ -n $port ]] || die "$1 did not start: $(cat "$WORK/$1.out")"
	echo "$port"
}
start_provider smtp_sink.py --record "$WORK/mailbox.jsonl"
start_provider http_provider.py
SMTP_PORT=$(wait_port smtp_sink.py)
HTTP_PORT=$(wait_port http_provider.py)
CONTRACTS=$(conf_value contracts_dir)
{
	echo "log_file = $WORK/dispatch.log"
	echo "log_level = info"
	echo "dispatch_workers = 2"
	echo "dispatch_poll_ms = 200"
	echo "public_url = $ONCEGATE_URL"
	echo "contracts_dir = $CONTRACTS"
	echo
	echo "[target demo_smtp]"
	echo "kind = smtp"
	echo "url = smtp://127.0.0.1:$SMTP_PORT"
	echo "mail_from = oncegate@demo.example"
	echo "timeout_ms = 5000"
	echo
	echo "[target demo_http]"
	echo "kind = http"
	echo "url = http://127.0.0.1:$HTTP_PORT/idem/effects"
	echo "timeout_ms = 5000"
} >"$WORK/dispatch.conf"
"$ONCEGATE_CTL" -c "$ONCEGATE_CONF" sends resume \
	--reason "browser test: the notice and the reply go to loopback" >/dev/null
AI_ACTIONS_ENABLED=true "$ONCEGATE_DISPATCH" -c "$WORK/dispatch.conf" >"$WORK/dispatch.out" 2>&1 &
PIDS+=($!)

KEY="browser-$(date +%s)-$$:notify:v1"
st=$(api POST /v1/runs "{\"key\":\"$KEY\",\"payload\":{\"ticket\":4343}}")
[[ $st == 201 ]] || die "claim: HTTP $st $(cat "$WORK/answer")"
if ! OWNER=$(field j.lease_owner) || ! VERSION=$(field j.version); then
	die "claim answer: $(cat "$WORK/answer")"
fi
SUBJECT="Re: Заказ № 4821-77 — посылка 📦 / 订单 / طلب — arrives on Friday"
KEY_PATH=$(node -p 'encodeURIComponent(process.argv[1])' "$KEY")
OUTPUT=$(printf '{"lease_owner":"%s","version":%s,"contract":"notify_reply",
 "output":{"subject":"%s","body":"Здравствуйте!\\nYour parcel left the warehouse today and arrives on Friday.\\nС уважением, Support"},
 "model":{"provider":"openai-compatible","name":"qwen2.5-7b-instruct","revision":"2024-09-19"},
 "effect":{"type":"email.send","target":"demo_smtp","payload":{"to":["customer-4343@example.com"]}},
 "source_url":"https://crm.example/ticket/4343","requested_by":"alice@example.com"}' \
	"$OWNER" "$VERSION" "$SUBJECT")
st=$(api POST "/v1/runs/$KEY_PATH/output" "$OUTPUT")
[[ $st == 202 ]] || die "output (notify_reply): HTTP $st $(cat "$WORK/answer")"
if field 'j.approvals[0].url' >/dev/null; then
	die "the answer holds a link although the approvers are told"
fi
mailbox() { "$PY" "$ONCEGATE_PROVIDERS/mailbox.py" "$WORK/mailbox.jsonl" "$@"; }
NOTICE_URL=
for ((i = 0; i < 150; i++)); do
	NOTICE_URL=$(mailbox --to support-team@support.example.test --grep "$KEY" --link) && break
	sleep 0.2
done
[[ $NOTICE_URL == "$ONCEGATE_URL/approve/"* ]] || die "no notice with a link in the demo mailbox"
mailbox --to support-team@support.example.test --grep "$KEY" --json --last 1 >"$WORK/notice.json"
mailbox --to support-team@support.example.test --grep "$KEY" --last 1 >"$ARTIFACTS/notify-mail.txt"
rm -f "$ARTIFACTS"/notify-*.png
node "$HERE/mail.mjs" "$WORK/notice.json" "$ARTIFACTS/notify-mail.png" ||
	die "mail.mjs could not render the notice"
# the correction: another text than part 3's, several scripts and emoji
EDITED="$WORK/notify-edited.txt"
{
	printf 'Здравствуйте, Ольга!\n\nЗаказ № 4821-77: посылка 4343 уже в пути, курьер позвонит заранее.\n'
	printf '您好！订单 4343 已经发货，快递员会提前致电。\n'
	printf 'שלום! ההזמנה 4343 נשלחה, השליח יתקשר מראש.\n'
	printf 'مرحبًا، تم شحن الطلب 4343 وسيتصل بك المندوب مسبقًا.\n'
	for i in $(seq 1 15); do printf 'Пункт %d — 第%d项 — البند %d — סעיף %d 🚚✉️\n' "$i" "$i" "$i" "$i"; done
	printf '\nС уважением, служба поддержки'
} >"$EDITED"
rc=0
node "$HERE/approve.mjs" "$NOTICE_URL" "$APPROVER" "$APPROVER_GROUPS" "$KEY" \
	"$ARTIFACTS/notify-approved.png" "$EDITED" notify- || rc=$?
[[ $rc -eq 0 ]] || die "correcting and approving from the notice's link failed (screenshot: $ARTIFACTS/notify-approved.png)"
for shot in notify-approved notify-approved-card notify-card-desktop notify-card-phone notify-inbox \
	approval approval-card card-desktop card-phone inbox; do
	[[ -s $ARTIFACTS/$shot.png ]] || die "no $shot.png after both browser runs"
done
edit=$(q "SELECT coalesce(edited_by, '-') || ' ' || coalesce(array_to_string(edited_fields, ','), '-')
	FROM workflow_runs WHERE idempotency_key = :'key'")
[[ $edit == "$APPROVER body" ]] || die "the run records the correction as \"$edit\""
replies() { mailbox --to customer-4343@example.com --json | grep -c . || true; }
for ((i = 0; i < 150; i++)); do
	[[ $(replies) -ge 1 ]] && break
	sleep 0.2
done
sleep 1
n=$(replies)
[[ $n == 1 ]] || die "the approved reply reached the demo mailbox $n times, expected once"
mailbox --to customer-4343@example.com --json >"$WORK/reply.jsonl"
"$PY" - "$WORK/reply.jsonl" "$EDITED" "$SUBJECT" <<'PY' || die "the reply in the demo mailbox is not the corrected text"
import json, sys
want = open(sys.argv[2], encoding='utf-8').read()
got = [json.loads(l) for l in open(sys.argv[1], encoding='utf-8') if l.strip()]
if len(got) != 1 or got[0]['subject'] != sys.argv[3] or got[0]['body'].rstrip('\n') != want:
    print('browser: the demo mailbox holds %r' % [(m['subject'], m['body'][:120]) for m in got],
          file=sys.stderr)
    sys.exit(1)
PY
say "ok: told by mail ($ARTIFACTS/notify-mail.png), corrected and approved from its link in Chromium, the corrected reply received once"
