// tests/mcp/client.mjs — an AI agent's view of oncegate, through the
// official MCP TypeScript SDK client (Streamable HTTP) and nginx:
//
//   * initialize negotiates the SDK's newest protocol revision; tools/list
//     has one tool per contract × effect type (support_reply__email_send
//     with the output schema and the payload schema less the members taken
//     from the output, not read-only, not idempotent) and oncegate_run;
//   * an automatically approved call (pkey_auto, a mail in Cyrillic, CJK,
//     Arabic and emoji) answers completed with the provider's id, and the
//     loopback SMTP sink received it once; the same call again answers the
//     same run and nothing more is sent;
//   * a gated call (support_reply) answers awaiting_approval with the
//     approvers and no approval link; a person approves it on the real
//     approval card (GET, then the form POST with its CSRF value, 303);
//     oncegate_run then answers completed, the mail arrived once, and the
//     call repeated sends nothing;
//   * refused calls are tool errors the model can read (no requested_by;
//     an output the contract refuses, with the errors; an unknown argument;
//     an idempotency_key reused for another call), and leave no run;
//   * tenant B (another API key) makes the identical call with the same
//     idempotency_key: a run of its own, its own mail; A's is untouched;
//   * 30 identical calls at once: one run, one mail;
//   * hostile JSON-RPC (malformed, batch, oversized, wrong media type,
//     unknown method, unsupported protocol revision, no key, GET, DELETE):
//     a JSON-RPC error or a 4xx, never a 5xx, and nothing changed.
//
// Usage: node client.mjs   (ONCEGATE_URL, ONCEGATE_API_KEY, MCP_KEY_B,
// MCP_SMTP_LOG, PG*)
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

const base = process.env.ONCEGATE_URL;
const endpoint = new URL('/v1/mcp', base);
const keyA = process.env.ONCEGATE_API_KEY;
const keyB = process.env.MCP_KEY_B;
const mailLog = process.env.MCP_SMTP_LOG;
const stamp = `${Date.now()}-${process.pid}`;
const t0 = Date.now();
let failures = 0;

const check = (ok, what) => {
  const at = `${((Date.now() - t0) / 1000).toFixed(1)}s`.padStart(6);
  if (ok) console.log(`mcp: ${at} ok - ${what}`);
  else { failures++; console.error(`mcp: ${at} FAIL - ${what}`); }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const q = (sql, ...params) => execFileSync('psql', ['-XAtq', '-v', 'ON_ERROR_STOP=1',
  ...params.flatMap((p, i) => ['-v', `p${i + 1}=${p}`])], { input: sql, encoding: 'utf8' }).trim();
const mails = () => readFileSync(mailLog, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const mailsWith = (text) => mails().filter((m) => m.data.includes(text) || (m.subject || '').includes(text));
const runCount = () => Number(q('SELECT count(*) FROM workflow_runs'));

async function connect(key, name = 'oncegate-test-agent') {
  const client = new Client({ name, version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(endpoint, {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

// Polls oncegate_run until the status is no longer one of `waiting`.
async function outcome(client, key, waiting = ['queued', 'in_progress']) {
  let r;
  for (let i = 0; i < 100; i++) {
    r = await client.callTool({ name: 'oncegate_run', arguments: { key } });
    if (!waiting.includes(r.structuredContent.status)) break;
    await sleep(100);
  }
  return r;
}

// No more than were there: a second send, were there one, arrives in this
// time (the dispatcher is woken by NOTIFY and sends to loopback).
async function mailsAfterAWhile(text) {
  await sleep(500);
  return mailsWith(text).length;
}

async function waitMails(text, n) {
  for (let i = 0; i < 100 && mailsWith(text).length < n; i++) await sleep(100);
  await sleep(300); // a second send, were there one, would arrive now
  return mailsWith(text).length;
}

// A multilingual mail: Cyrillic, CJK, Arabic (RTL) and emoji.
const subject = (tag) => `Заказ ${tag} — 您的订单 — طلبك 📦 ${stamp}`;
const body = (tag) => `Здравствуйте, Ольга!\nВаш заказ ${tag} отправлен.\n` +
  `您好！您的订单已发货。\nمرحبًا، تم شحن طلبك.\n🚚✅ ${'Строка — 行 — سطر. '.repeat(40)}`;

const { client: a, transport: ta } = await connect(keyA);

// --- initialize, tools/list ---------------------------------------------------
check(ta.protocolVersion === LATEST_PROTOCOL_VERSION || a.getServerVersion() !== undefined,
  `initialize negotiated ${ta.protocolVersion} (SDK newest ${LATEST_PROTOCOL_VERSION})`);
check(a.getServerVersion()?.name === 'oncegate', 'the server says it is oncegate');
check(a.getServerCapabilities()?.tools !== undefined, 'the server offers tools');
const { tools } = await a.listTools();
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
const sr = byName.support_reply__email_send;
check(sr !== undefined, `tools/list has support_reply__email_send (${tools.length} tools)`);
check(byName.crm_tag__crm_tag !== undefined && byName.oncegate_run !== undefined,
  'tools/list has crm_tag__crm_tag and oncegate_run');
check(sr && sr.inputSchema.properties.output.required.includes('confidence') &&
  sr.inputSchema.properties.payload.properties.to !== undefined &&
  sr.inputSchema.properties.payload.properties.subject === undefined &&
  sr.inputSchema.required.includes('requested_by'),
  'its inputSchema: the output schema, the payload schema less from_output, requested_by required');
check(sr && sr.annotations.readOnlyHint === false && sr.annotations.idempotentHint === false,
  'its annotations: not read-only, not idempotent by itself');
check(sr && /support/i.test(sr.description) && /at most once/.test(sr.description),
  'its description comes from the contract and says what oncegate does');

// --- an automatically approved call --------------------------------------------
const autoArgs = {
  output: { subject: subject('A-1'), body: body('A-1') },
  payload: { to: 'olga@example.com' },
  target: 'demo_smtp',
  requested_by: 'Мария Иванова <maria@example.com>',
};
let r = await a.callTool({ name: 'pkey_auto__email_send', arguments: autoArgs });
const autoKey = r.structuredContent?.key;
check(!r.isError && ['completed', 'queued'].includes(r.structuredContent.status),
  `the automatic call answers ${r.structuredContent?.status} (key ${autoKey})`);
check(/^mcp:pkey_auto__email_send:[0-9a-f]{32}$/.test(autoKey || ''),
  'without idempotency_key, the key is derived from the call');
check(r.content[0].type === 'text' && JSON.parse(r.content[0].text).key === autoKey,
  'the result is also text (the same JSON) for clients that read text only');
r = await outcome(a, autoKey);
check(r.structuredContent.status === 'completed' && r.structuredContent.effect?.provider_id,
  `oncegate_run: completed with the provider's id ${r.structuredContent.effect?.provider_id}`);
check(await waitMails(stamp, 1) === 1, 'the SMTP sink received the mail once');
check(mailsWith(stamp)[0]?.subject === subject('A-1'), 'the subject arrived as written (Cyrillic, CJK, Arabic, emoji)');
r = await a.callTool({ name: 'pkey_auto__email_send', arguments: autoArgs });
check(r.structuredContent.key === autoKey && r.structuredContent.status === 'completed',
  'the same call again: the same run, completed');
check(await mailsAfterAWhile(stamp) === 1, 'and no second mail');

// --- a gated call, approved on the real approval card ----------------------------
const gatedArgs = {
  output: { subject: subject('G-1'), body: body('G-1'), tone: 'friendly', confidence: 0.72 },
  payload: { to: 'customer+gated@example.com', ticket: `T-${stamp}` },
  requested_by: 'Алиса Петрова <alice@example.com>',
  source_url: 'https://crm.example/ticket/מספר-4242',
};
r = await a.callTool({ name: 'support_reply__email_send', arguments: gatedArgs });
const gatedKey = r.structuredContent?.key;
check(!r.isError && r.structuredContent.status === 'awaiting_approval',
  `the gated call awaits approval (${r.structuredContent?.status})`);
check(r.structuredContent.approvers?.[0]?.approver === 'group:support' &&
  !JSON.stringify(r.structuredContent).includes('/approve/'),
  'the approvers are named, and no approval link reaches the agent');
const approval = q(`SELECT id FROM approvals WHERE idempotency_key = :'p1' AND state = 'pending'`, gatedKey);
const card = new URL(`/approve/card/${approval}`, base);
const person = { 'X-Dev-User': 'sam@example.com', 'X-Dev-Groups': 'support' };
let res = await fetch(card, { headers: person });
const page = await res.text();
const csrf = /name="csrf"[^>]*value="([^"]+)"/.exec(page)?.[1];
check(res.status === 200 && csrf && page.includes(gatedKey), 'the approver opens the card (200, CSRF value)');
res = await fetch(card, {
  method: 'POST', redirect: 'manual',
  headers: { ...person, Origin: base, 'Content-Type': 'application/x-www-form-urlencoded' },
  body: new URLSearchParams({ decision: 'approve', csrf, reason: 'Проверено — 已核对 — تم التحقق' }),
});
check(res.status === 303, `the approval POST answers 303 (${res.status})`);
r = await outcome(a, gatedKey, ['queued', 'in_progress', 'awaiting_approval']);
check(r.structuredContent.status === 'completed' && r.structuredContent.effect?.provider_id,
  `after the approval, oncegate_run answers ${r.structuredContent.status}`);
check(await waitMails('G-1', 1) === 1, 'the approved mail arrived once');
r = await a.callTool({ name: 'support_reply__email_send', arguments: gatedArgs });
check(r.structuredContent.key === gatedKey && r.structuredContent.status === 'completed',
  'the gated call again: the same run, completed');
check(await mailsAfterAWhile('G-1') === 1, 'and no second mail');

// --- refused calls: tool errors, nothing recorded ----------------------------------
const before = runCount();
r = await a.callTool({ name: 'support_reply__email_send',
  arguments: { ...gatedArgs, requested_by: undefined, idempotency_key: `nobody-${stamp}` } });
check(r.isError && r.structuredContent.error === 'requested_by_required' &&
  /separation of duties/.test(r.structuredContent.message),
  'without requested_by: a tool error that says why');
r = await a.callTool({ name: 'support_reply__email_send',
  arguments: { ...gatedArgs, output: { ...gatedArgs.output, confidence: 7, tone: 'rude' } } });
check(r.isError && r.structuredContent.status === 'invalid' &&
  r.structuredContent.errors.some((e) => e.path === '/confidence') &&
  r.structuredContent.errors.some((e) => e.path === '/tone'),
  'an output the contract refuses: status invalid, with the errors to repair');
r = await a.callTool({ name: 'support_reply__email_send', arguments: { ...gatedArgs, cc: 'x@example.com' } });
check(r.isError && r.structuredContent.error === 'invalid_arguments', 'an unknown argument: a tool error');
r = await a.callTool({ name: 'pkey_auto__email_send', arguments: { ...autoArgs, target: 'nowhere' } });
check(r.isError && r.structuredContent.error === 'effect_not_allowed', 'a target the contract does not allow: a tool error');
check(runCount() === before, 'the refused calls left no run');
const idem = `заказ/${stamp}/📦`;
r = await a.callTool({ name: 'pkey_auto__email_send',
  arguments: { ...autoArgs, output: { subject: subject('K-1'), body: body('K-1') }, idempotency_key: idem } });
check(!r.isError && r.structuredContent.key === idem, 'with idempotency_key, the key is the agent\'s');
r = await a.callTool({ name: 'pkey_auto__email_send',
  arguments: { ...autoArgs, output: { subject: subject('K-2'), body: body('K-2') }, idempotency_key: idem } });
check(r.isError && r.structuredContent.error === 'payload_mismatch',
  'the same idempotency_key for another call: payload_mismatch, nothing sent');
let unknown;
try { await a.callTool({ name: 'no_such_tool', arguments: {} }); } catch (e) { unknown = e; }
check(unknown && /unknown tool/.test(unknown.message), 'an unknown tool: a JSON-RPC error');

// --- tenant B: same tool, same key, a run of its own ---------------------------------
const { client: b } = await connect(keyB, 'tenant-b-agent');
r = await b.callTool({ name: 'pkey_auto__email_send',
  arguments: { ...autoArgs, output: { subject: subject('K-1'), body: body('K-1') }, idempotency_key: idem } });
check(!r.isError && r.structuredContent.key === idem, 'tenant B: the same idempotency_key, its own run');
r = await outcome(b, idem);
check(r.structuredContent.status === 'completed', 'tenant B\'s run completed');
check(await waitMails('K-1', 2) === 2, 'each tenant\'s mail arrived once (two in all)');
check(q(`SELECT count(DISTINCT client_id) FROM workflow_runs WHERE idempotency_key = :'p1'`, idem) === '2',
  'two runs under the key, one per tenant');
check(mailsWith('K-2').length === 0, 'the mismatched call sent nothing');

// --- 30 identical calls at once -----------------------------------------------------
const burst = { ...autoArgs, output: { subject: subject('C-30'), body: body('C-30') } };
const answers = await Promise.all(Array.from({ length: 30 }, () =>
  a.callTool({ name: 'pkey_auto__email_send', arguments: burst })));
const keys = new Set(answers.map((x) => x.structuredContent.key));
check(keys.size === 1 && answers.every((x) => !x.isError), `30 identical calls at once: one key, no error (${[...new Set(answers.map((x) => x.structuredContent.status))]})`);
check(q(`SELECT count(*) FROM workflow_runs WHERE idempotency_key = :'p1'`, [...keys][0]) === '1', 'one run');
await outcome(a, [...keys][0]);
check(await waitMails('C-30', 1) === 1, 'one mail');

// --- hostile JSON-RPC: a JSON-RPC error or a 4xx, nothing changed ---------------------
const runsBefore = runCount();
const post = (body, headers = {}) => fetch(endpoint, {
  method: 'POST',
  headers: { Authorization: `Bearer ${keyA}`, 'Content-Type': 'application/json',
    Accept: 'application/json, text/event-stream', ...headers },
  body,
});
const call = (args) => JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call',
  params: { name: 'pkey_auto__email_send', arguments: args } });
const hostile = [
  ['malformed JSON', () => post('{"jsonrpc":"2.0","id":1,"method":'), 400, -32700],
  ['a duplicate member', () => post('{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}'), 400, -32700],
  ['a lone surrogate', () => post('{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}'), 400, -32700],
  ['a batch', () => post('[{"jsonrpc":"2.0","id":1,"method":"ping"}]'), 400, -32600],
  ['jsonrpc 1.0', () => post('{"jsonrpc":"1.0","id":1,"method":"ping"}'), 400, -32600],
  ['an id that is an object', () => post('{"jsonrpc":"2.0","id":{},"method":"ping"}'), 400, -32600],
  ['params an array', () => post('{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}'), 400, -32600],
  ['an unknown method', () => post('{"jsonrpc":"2.0","id":1,"method":"resources/subscribe"}'), 200, -32601],
  ['arguments a string', () => post('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":"x"}}'), 200, -32602],
  ['nesting 10,000 deep', () => post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pkey_auto__email_send","arguments":{"output":${'['.repeat(10000)}${']'.repeat(10000)}}}}`), 400, -32700],
  ['300 KB body', () => post(call({ output: { subject: 'x', body: 'я'.repeat(150000) }, payload: { to: 'a@example.com' }, target: 'demo_smtp' })), 413, null],
  ['text/plain', () => post('{"jsonrpc":"2.0","id":1,"method":"ping"}', { 'Content-Type': 'text/plain' }), 415, null],
  ['an unsupported MCP-Protocol-Version', () => post('{"jsonrpc":"2.0","id":1,"method":"ping"}', { 'MCP-Protocol-Version': '1999-01-01' }), 400, null],
  ['no API key', () => fetch(endpoint, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"ping"}' }), 401, null],
  ['another Origin', () => post('{"jsonrpc":"2.0","id":1,"method":"ping"}', { Origin: 'http://evil.example' }), 403, null],
  ['GET (no SSE stream)', () => fetch(endpoint, { headers: { Authorization: `Bearer ${keyA}`, Accept: 'text/event-stream' } }), 405, null],
  ['DELETE (no session)', () => fetch(endpoint, { method: 'DELETE', headers: { Authorization: `Bearer ${keyA}` } }), 405, null],
  ['a member name with NUL', () => post(call({ output: { 'a\u0000b': 1 }, payload: { to: 'a@example.com' }, target: 'demo_smtp' })), 400, -32700],
];
for (const [what, send, status, code] of hostile) {
  const res = await send();
  const text = await res.text();
  let j = null;
  try { j = JSON.parse(text); } catch { /* not JSON */ }
  check(res.status === status && (code === null || j?.error?.code === code),
    `${what}: ${res.status}${j?.error ? ` ${j.error.code} "${j.error.message}"` : ''} (want ${status}${code !== null ? ` ${code}` : ''})`);
}
const ping = await post('{"jsonrpc":"2.0","id":"p","method":"ping"}');
check(ping.status === 200 && (await ping.json()).result !== undefined, 'ping still answers');
const note = await post('{"jsonrpc":"2.0","method":"notifications/initialized"}');
check(note.status === 202 && (await note.text()) === '', 'a notification: 202, no body');
check(runCount() === runsBefore, 'the hostile requests changed nothing');

await a.close();
await b.close();
console.log(failures === 0 ? 'mcp: client: all checks passed' : `mcp: client: ${failures} check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
