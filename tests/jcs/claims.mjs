// tests/jcs/claims.mjs — what an n8n Code node does to know a payload's hash
// before it claims: RFC 8785 with a stock library (canonicalize, from npm),
// SHA-256, "sha256:" + hex. Each payload of the corpus (long mails in
// several scripts, member names in Cyrillic, Han, Arabic, Hebrew, emoji,
// names that sort differently by code point and by UTF-16) and a payload of
// numbers as people write them (19.90, 0.80, 1E21, 1e-7, -0) is claimed
// through nginx as its source wrote it; the hash oncegate answers, shows in
// GET /v1/runs/{key} and keeps in workflow_runs must be the one computed
// here. A second claim of each, written differently (members reordered,
// numbers as JavaScript writes them), is a duplicate, never a mismatch.
//
// Usage: node claims.mjs OUTPUTS_JSON   (ONCEGATE_URL, ONCEGATE_API_KEY, PG*)
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import canonicalize from 'canonicalize';

const url = process.env.ONCEGATE_URL;
const apiKey = process.env.ONCEGATE_API_KEY;
const corpus = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const stamp = `${Date.now()}-${process.pid}`;
let failures = 0;

const fail = (msg) => { failures++; console.error(`jcs: FAIL: ${msg}`); };
const hashOf = (value) =>
	'sha256:' + createHash('sha256').update(canonicalize(value), 'utf8').digest('hex');

async function api(method, path, body) {
	const res = await fetch(url + path, {
		method,
		headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' },
		body,
	});
	return { status: res.status, json: await res.json() };
}

function stored(key) {
	const out = execFileSync('psql', ['-XAtq', '-F', '|', '-v', 'ON_ERROR_STOP=1', '-c',
		"SELECT payload_hash, payload_canon FROM workflow_runs WHERE idempotency_key = '" +
		key.replaceAll("'", "''") + "'"], { encoding: 'utf8' }).trim();
	const [hash, canon] = out.split('|');
	return { hash, canon };
}

// The payloads as their sources write them (text), and how JavaScript
// rewrites them after JSON.parse (members reversed, numbers its own way).
const cases = corpus.payloads.map((p, i) => ({ name: `corpus payload ${i}`,
	text: JSON.stringify(p.payload, null, 2), published: p.payload_hash }));
cases.push({ name: 'jcs_order (UTF-16 member order)', text: JSON.stringify(corpus.jcs_order.payload),
	published: corpus.jcs_order.payload_hash });
cases.push({ name: 'numbers as written', text:
	'{"order":"ORD-2026-0042","total":19.90,"discount":0.80,"big":1E21,"tiny":1e-7,' +
	'"zero":-0,"count":1.0,"id":9007199254740991,"price_eur":1234.5600,' +
	'"\u{1F69A} Lieferung":"Заказ 注文 طلب הזמנה","\uff61":1,"\u{1F600}":2}' });

let matched = 0;
for (const c of cases) {
	const value = JSON.parse(c.text);
	const want = hashOf(value);
	if (c.published && c.published !== want)
		fail(`${c.name}: the corpus says ${c.published}, canonicalize gives ${want}`);
	const key = `jcs-${stamp}:${matched}:${c.name.replace(/[^a-z0-9]+/gi, '-')}`;
	const claim = await api('POST', '/v1/runs', `{"key":${JSON.stringify(key)},"payload":${c.text}}`);
	if (claim.status !== 201) { fail(`${c.name}: claim HTTP ${claim.status} ${JSON.stringify(claim.json)}`); continue; }
	if (claim.json.payload_hash !== want)
		fail(`${c.name}: claim answered ${claim.json.payload_hash}, JavaScript computes ${want}`);
	const run = await api('GET', '/v1/runs/' + encodeURIComponent(key));
	if (run.status !== 200 || run.json.payload_hash !== want)
		fail(`${c.name}: GET /v1/runs: HTTP ${run.status} payload_hash ${run.json.payload_hash}, want ${want}`);
	const row = stored(key);
	if (row.hash !== want || row.canon !== 'jcs')
		fail(`${c.name}: workflow_runs has ${row.hash} (${row.canon}), want ${want} (jcs)`);
	// the same payload as a JavaScript client re-sends it: a duplicate
	const reordered = Object.fromEntries(Object.entries(value).reverse());
	const again = await api('POST', '/v1/runs',
		JSON.stringify({ key, payload: reordered }));
	if (again.status !== 200 || again.json.outcome !== 'duplicate')
		fail(`${c.name}: the same payload written by JavaScript: HTTP ${again.status} ${JSON.stringify(again.json)}`);
	if (claim.json.payload_hash === want && row.hash === want && again.status === 200)
		matched++;
}
console.log(`jcs: ${matched} of ${cases.length} payloads: the hash oncegate stores is the one canonicalize (npm) computes`);
process.exit(failures > 0 || matched !== cases.length ? 1 : 0);
