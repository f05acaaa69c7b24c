// tests/mcp/conformance.mjs — the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned by package-lock.json) runs its
// server scenarios (the "active" suite) against /v1/mcp through nginx.
//
// The suite connects without credentials, and /v1/mcp takes an API key: a
// loopback proxy here adds the stack's key (Authorization: Bearer) to each
// request and changes nothing else.
//
// conformance-baseline.yml lists the scenarios expected to fail, each with
// the reason (features oncegate does not offer, which the protocol makes
// optional). The suite itself compares: a failure outside the baseline, or
// a baseline entry that now passes, fails this script. The table printed
// says per scenario how many checks passed, failed, warned or were skipped.
//
// The suite needs Node 22 for one function (fs.globSync), used only by its
// tier-check command; on Node 20 a copy of its entry point without that
// import is run.
//
// Usage: node conformance.mjs WORKDIR   (ONCEGATE_URL, ONCEGATE_API_KEY)
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';

const work = process.argv[2];
const upstream = new URL(process.env.ONCEGATE_URL);
const key = process.env.ONCEGATE_API_KEY;
const here = new URL('.', import.meta.url).pathname;
const dist = join(here, 'node_modules/@modelcontextprotocol/conformance/dist');

// the entry point runnable on Node 20 (see above)
const entry = join(dist, 'index-node20.js');
const src = readFileSync(join(dist, 'index.js'), 'utf8').replace(/^#!.*\n/, '');
if (!src.includes('globSync as o,')) throw new Error('the conformance suite changed: check the Node 20 shim');
writeFileSync(entry, 'const o=()=>{throw Error("fs.globSync needs Node 22 (tier-check only)")};\n' +
  src.replace('globSync as o,', ''));

// the proxy that adds the API key
// It stands in for the server's address, so an Origin of its own address
// is the server's own (upstream's); any other Origin passes unchanged and
// must be refused (the suite's dns-rebinding-protection scenario).
const proxy = http.createServer((req, res) => {
  const headers = { ...req.headers, host: upstream.host, authorization: `Bearer ${key}` };
  const port = proxy.address().port;
  if (headers.origin === `http://localhost:${port}` || headers.origin === `http://127.0.0.1:${port}`)
    headers.origin = upstream.origin;
  const up = http.request({ host: upstream.hostname, port: upstream.port, path: req.url,
    method: req.method, headers }, (r) => { res.writeHead(r.statusCode, r.headers); r.pipe(res); });
  up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
  req.pipe(up);
});
await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
const url = `http://127.0.0.1:${proxy.address().port}/v1/mcp`;

const out = join(work, 'conformance');
const run = await new Promise((resolve) => {
  // spawned, not run synchronously: the proxy serves while the suite runs
  const p = spawn(process.execPath, [entry, 'server', '--url', url, '-o', out,
    '--expected-failures', join(here, 'conformance-baseline.yml')], { cwd: work });
  let text = '';
  p.stdout.on('data', (d) => { text += d; });
  p.stderr.on('data', (d) => { text += d; });
  p.on('close', (code) => resolve({ code, text }));
});
proxy.close();

// per scenario: the counts of each status
const rows = [];
const totals = {};
for (const dir of existsSync(out) ? readdirSync(out) : []) {
  const f = join(out, dir, 'checks.json');
  if (!existsSync(f)) continue;
  const checks = JSON.parse(readFileSync(f, 'utf8'));
  const count = {};
  for (const c of checks) count[c.status] = (count[c.status] || 0) + 1;
  for (const [s, n] of Object.entries(count)) totals[s] = (totals[s] || 0) + n;
  const failed = checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')
    .map((c) => `${c.status} ${c.id}: ${c.errorMessage || c.details?.message || ''}`.slice(0, 200));
  rows.push([dir.replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT.*$/, ''), count, failed]);
}
rows.sort((x, y) => x[0].localeCompare(y[0]));
for (const [name, c, failed] of rows) {
  console.log(`mcp: conformance ${name.padEnd(34)} ${['SUCCESS', 'FAILURE', 'WARNING', 'SKIPPED', 'INFO']
    .map((s) => `${s.toLowerCase()} ${c[s] || 0}`).join(', ')}`);
  for (const f of failed) console.log(`mcp:     ${f}`);
}
console.log(`mcp: conformance totals: ${JSON.stringify(totals)}`);
const tail = run.text.split('\n').filter((l) => /baseline|expected|unexpected|stale|passed|failed/i.test(l)).slice(-8);
for (const l of tail) console.log(`mcp: conformance: ${l}`);
if (run.code !== 0) console.error(`mcp: conformance suite exited ${run.code}:\n${run.text.slice(-3000)}`);
process.exit(run.code === 0 ? 0 : 1);
