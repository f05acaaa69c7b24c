// tests/openapi/validate.mjs DOC RECORD — checks every recorded API answer
// against the OpenAPI document DOC, so the document cannot drift from the
// code. RECORD holds one JSON line per answer, as tests/testlib.c appends
// them: {method, path, status, content_type, body, retry_after, allow,
// location, www_authenticate}.
//
// For each answer: the path is matched against the document's path
// templates ({key} is one non-empty segment); the operation must declare
// the status; the content type must be one the response declares and the
// body must validate against its schema (ajv, JSON Schema 2020-12 as
// OpenAPI 3.1 uses it, formats checked); every header the response marks
// required must have come. An answer to a path or method the document has
// no operation for must be a problem document (the document's Problem
// schema) of 400, 404 or 405, and a 405 must carry Allow. Anything else is
// a failure. Prints the counts; exit 0 when every answer passed.
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [docPath, recordPath] = process.argv.slice(2);
if (!docPath || !recordPath) {
  console.error('usage: node validate.mjs DOC RECORD');
  process.exit(2);
}
const doc = JSON.parse(readFileSync(docPath, 'utf8'));
const ID = 'https://oncegate.invalid/openapi.json';

// Local references (#/components/...) made absolute, so a schema taken out
// of the document still resolves against it.
function absolute(node) {
  if (Array.isArray(node)) return node.map(absolute);
  if (node === null || typeof node !== 'object') return node;
  const out = {};
  for (const [k, v] of Object.entries(node))
    out[k] = k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? ID + v : absolute(v);
  return out;
}
function pointer(ref) {
  let node = doc;
  for (const part of ref.replace(/^#\//, '').split('/'))
    node = node?.[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  if (node === undefined) throw new Error(`unresolved reference ${ref}`);
  return node;
}
// An OpenAPI object (response, header, parameter) behind its $ref.
const deref = (o) => (o && typeof o.$ref === 'string' ? deref(pointer(o.$ref)) : o);

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema({ $id: ID, components: absolute(doc.components) });
const compiled = new Map();
function validator(schema) {
  const key = JSON.stringify(schema);
  if (!compiled.has(key)) compiled.set(key, ajv.compile(absolute(schema)));
  return compiled.get(key);
}
const problemSchema = { $ref: '#/components/schemas/Problem' };

const templates = Object.keys(doc.paths).map((t) => ({
  template: t,
  parts: t.split('/'),
}));
function matchPath(path) {
  const parts = path.split('?')[0].split('/');
  for (const t of templates) {
    if (t.parts.length !== parts.length) continue;
    if (t.parts.every((p, i) => (p.startsWith('{') ? parts[i] !== '' : p === parts[i])))
      return t.template;
  }
  return null;
}

const recorded = { location: 'location', 'www-authenticate': 'www_authenticate',
  'retry-after': 'retry_after', allow: 'allow' };

const failures = [];
const byOperation = new Map();
let checked = 0;

function fail(a, why) {
  failures.push(`${a.method} ${a.path.slice(0, 120)} → ${a.status}: ${why}`);
}

function checkBody(a, content, schema) {
  if (a.method === 'HEAD') return true;
  let body;
  try {
    body = JSON.parse(a.body);
  } catch (e) {
    fail(a, `the body is not JSON (${content}): ${a.body.slice(0, 200)}`);
    return false;
  }
  const v = validator(schema);
  if (!v(body)) {
    fail(a, `the ${content} body does not match the document: ` +
      ajv.errorsText(v.errors, { separator: '; ' }) + ` — body ${a.body.slice(0, 300)}`);
    return false;
  }
  return true;
}

const lines = readFileSync(recordPath, 'utf8').split('\n').filter((l) => l !== '');
for (const line of lines) {
  const a = JSON.parse(line);
  checked++;
  const mediaType = (a.content_type || '').split(';')[0].trim().toLowerCase();
  const template = matchPath(a.path);
  const op = template ? doc.paths[template][a.method.toLowerCase()] : undefined;
  const label = op ? `${a.method} ${template}` : '(no operation)';
  byOperation.set(label, (byOperation.get(label) || 0) + 1);

  if (!op) {
    // No operation: only the refusals of the route table and of nginx.
    if (![400, 404, 405].includes(a.status)) {
      fail(a, `no operation ${a.method} ${template ?? 'for this path'} in the document`);
      continue;
    }
    if (mediaType !== 'application/problem+json') {
      fail(a, `Content-Type ${a.content_type}, not application/problem+json`);
      continue;
    }
    if (a.status === 405 && !a.allow) fail(a, '405 without Allow');
    checkBody(a, mediaType, problemSchema);
    continue;
  }
  const response = deref(op.responses[String(a.status)]);
  if (!response) {
    fail(a, `status ${a.status} is not described for ${a.method} ${template}`);
    continue;
  }
  for (const [name, h] of Object.entries(response.headers || {})) {
    const header = deref(h);
    const field = recorded[name.toLowerCase()];
    if (header.required && field && !a[field]) fail(a, `the required header ${name} is missing`);
  }
  if (!response.content) {
    if (a.body !== '') fail(a, 'a body where the document describes none');
    continue;
  }
  const media = response.content[mediaType];
  if (!media) {
    fail(a, `Content-Type ${a.content_type} is not one of ${Object.keys(response.content).join(', ')}`);
    continue;
  }
  checkBody(a, mediaType, media.schema || {});
}

const rows = [...byOperation.entries()].sort((x, y) => y[1] - x[1]);
console.log(`openapi: ${checked} answers checked against ${docPath}`);
for (const [label, n] of rows) console.log(`  ${String(n).padStart(6)}  ${label}`);
const undescribed = Object.entries(doc.paths).flatMap(([t, item]) =>
  Object.keys(item).map((m) => `${m.toUpperCase()} ${t}`)).filter((l) => !byOperation.has(l));
if (undescribed.length > 0)
  console.log(`  operations no suite exercised: ${undescribed.join(', ')}`);
if (checked === 0) {
  console.error('openapi: FAIL: no answers were recorded');
  process.exit(1);
}
if (failures.length > 0) {
  console.error(`openapi: FAIL: ${failures.length} of ${checked} answers are not what the document says:`);
  for (const f of failures.slice(0, 60)) console.error('  ' + f);
  if (failures.length > 60) console.error(`  … and ${failures.length - 60} more`);
  process.exit(1);
}
console.log(`openapi: ${checked} passed, 0 failed`);
