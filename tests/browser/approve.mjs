// approve.mjs — a person corrects a draft and approves it in a real
// browser (issue 3).
//
//   node approve.mjs URL USER GROUPS KEY SCREENSHOT [EDITED_BODY_FILE [PREFIX]]
//
// With EDITED_BODY_FILE, the body field of the card's correction form is
// replaced with that file's text (typed into the textarea as a person
// would) before Approve is clicked.
// URL is the approval link the output submission returned, USER and GROUPS
// stand in for the SSO identity (the local nginx config maps the request
// headers X-Dev-User / X-Dev-Groups to REMOTE_USER / AUTH_GROUPS), KEY is the
// run's idempotency key the card must show, SCREENSHOT the PNG to write of
// the page the browser lands on after approving.
//
// Debian's Chromium (/usr/bin/chromium), headless, driven by playwright-core,
// with a fresh profile and no background networking (the machine's network
// is closed). Exit 0 when the card was shown, Approve was clicked and the
// decided page came back; 1 otherwise (with a screenshot of where it stood).
// The card itself is saved beside SCREENSHOT as NAME-card.png, and as
// card-desktop.png; the card on a 390×844 phone screen (whose decision
// buttons must lie within it, and whose recipients and message must come
// before the correction form) as card-phone.png; the card passes axe-core
// with 0 violations on both screens; the inbox, which must list
// the run and open its card by id, as inbox.png. With PREFIX, those three
// names start with it (PREFIX card-desktop.png ...), so a second run of this
// script in the same directory keeps the first one's screenshots.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { axeVersion, axeViolations } from './axe.mjs';
import { check, decide, session } from './browser.mjs';
const REASON = 'Approved in Chromium by tests/browser/approve.mjs';
const PHONE = { width: 390, height: 844 };

const [url, user, groups, key, screenshot, editedFile, prefix = ''] = process.argv.slice(2);
const edited = editedFile ? readFileSync(editedFile, 'utf8') : null;
const shot = (name) => join(dirname(screenshot), `${prefix}${name}.png`);
if (!url || !user || groups === undefined || !key || !screenshot) {
  console.error('usage: node approve.mjs URL USER GROUPS KEY SCREENSHOT [EDITED_BODY_FILE [PREFIX]]');
  process.exit(2);
}
const masked = url.replace(/\/approve\/.*/, '/approve/[token]');

function checkHeaders(resp, what) {
  const h = resp.headers();
  check((h['cache-control'] || '').includes('no-store'), `${what}: Cache-Control no-store`);
  check(h['referrer-policy'] === 'no-referrer', `${what}: Referrer-Policy no-referrer`);
  check((h['content-security-policy'] || '').includes("default-src 'none'"),
    `${what}: a strict Content-Security-Policy`);
  check(h['x-content-type-options'] === 'nosniff', `${what}: X-Content-Type-Options nosniff`);
}

// axe-core finds nothing on the page as it stands.
async function expectAccessible(page, what) {
  const found = await axeViolations(page);
  check(found.length === 0,
    `${what}: axe-core ${axeVersion()} reports 0 violations (found ${found.length}: ${found.join('; ')})`);
}

// On the phone, what will be sent (its recipients, then its message) comes
// before the correction form, in the document and on the screen: an
// approver reads what they approve before what they may change.
async function expectReadFirst(page) {
  const rcpt = await page.locator('div.mail ul.rcpt').boundingBox();
  const body = await page.locator('div.mail pre.body').boundingBox();
  const edit = page.locator('fieldset.edit');
  check(rcpt !== null && body !== null, 'the recipients and the message have boxes on the phone');
  console.log(`measure - phone ${PHONE.width}x${PHONE.height}: recipients at ${rcpt.y.toFixed(0)} px `
    + `(${(rcpt.y / PHONE.height).toFixed(2)} screens), message at ${body.y.toFixed(0)} px`);
  check(rcpt.y < body.y, 'the recipients come before the message');
  if (await edit.count() === 0) return;
  const form = await edit.boundingBox();
  console.log(`measure - phone: the correction form at ${form.y.toFixed(0)} px (${(form.y / PHONE.height).toFixed(2)} screens)`);
  check(body.y + body.height <= form.y,
    `the message ends (${(body.y + body.height).toFixed(0)} px) before the correction form starts (${form.y.toFixed(0)} px)`);
  const ordered = await page.evaluate(() => {
    const [r, b, f] = ['div.mail ul.rcpt', 'div.mail pre.body', 'fieldset.edit']
      .map((q) => document.querySelector(q));
    const before = (x, y) => Boolean(x.compareDocumentPosition(y) & Node.DOCUMENT_POSITION_FOLLOWING);
    return before(r, b) && before(b, f);
  });
  check(ordered, 'in the document: recipients, message, then the correction form');
  check(await page.locator('fieldset.edit textarea[form="decide"]').count() >= 1
    && await page.locator('form#decide').count() === 1,
    'the correction fields belong to the decision form (form="decide")');
}

process.exit(await session(user, groups, screenshot, async (page) => {
  // Script errors, CSP violations, and subresources that failed (the pages
  // themselves answer 410 once decided; the browser's own favicon request
  // is not the page's).
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('response', (r) => {
    const u = new URL(r.url());
    if (r.status() >= 400 && r.url() !== url && u.pathname !== '/favicon.ico') {
      problems.push(`${r.request().resourceType()} ${u.pathname} answered ${r.status()}`);
    }
  });
  page.on('requestfailed', (r) => problems.push(`${r.url()} failed: ${r.failure()?.errorText}`));

  // 1. The card.
  const card = await page.goto(url, { waitUntil: 'load' });
  check(card !== null && card.status() === 200, `GET ${masked} answers 200 (got ${card && card.status()})`);
  checkHeaders(card, 'the card');
  const cardText = await page.locator('body').innerText();
  check(cardText.includes(key), `the card shows the key ${key}`);
  check(cardText.includes(user), `the card shows the signed-in approver ${user}`);
  check(await page.locator('form[method="post"]').count() === 1, 'the card has one POST form');
  const approve = page.locator('button[name="decision"][value="approve"]');
  check(await approve.count() === 1, 'the card has an Approve button');
  check(await approve.isVisible(), 'the Approve button is visible');
  const cardShot = screenshot.replace(/(\.png)?$/, '-card.png');
  await page.screenshot({ path: cardShot, fullPage: true });
  console.log(`screenshot: ${cardShot}`);
  const desktopShot = shot('card-desktop');
  await page.screenshot({ path: desktopShot, fullPage: true });
  console.log(`screenshot: ${desktopShot}`);
  // The mail as it will be sent: From, To, Subject, body.
  for (const dt of ['From', 'Subject']) {
    check(await page.locator('div.mail dt', { hasText: dt }).count() === 1, `the card shows the mail's ${dt}`);
  }
  check(await page.locator('div.mail ul.rcpt li').count() >= 1, 'the card lists the recipients');
  check(await page.locator('div.mail pre.body').count() === 1, "the card shows the mail's body");
  await expectAccessible(page, 'the card on a desktop screen (1000×1400)');

  // 1b. On a phone (390×844): the decision buttons are on the first screen.
  await page.setViewportSize({ width: PHONE.width, height: PHONE.height });
  await page.goto(url, { waitUntil: 'load' });
  await page.evaluate(() => window.scrollTo(0, 0));
  // every button the card offers: a contract that allows it adds Request
  // changes, with its feedback field
  const offered = [];
  for (const value of ['approve', 'reject', 'changes_requested']) {
    if (await page.locator(`button[name="decision"][value="${value}"]`).count() === 1) offered.push(value);
  }
  check(offered.includes('approve') && offered.includes('reject'), `the card offers Approve and Reject (${offered})`);
  if (offered.includes('changes_requested')) {
    check(await page.locator('button[name="decision"][value="changes_requested"]').innerText() === 'Request changes',
      'the third button says Request changes');
    check(await page.locator('textarea[name="feedback"]').isVisible(), 'the card shows the feedback field');
  }
  for (const value of offered) {
    const box = await page.locator(`button[name="decision"][value="${value}"]`).boundingBox();
    check(box !== null, `the ${value} button has a box on the phone`);
    console.log(`measure - phone ${PHONE.width}x${PHONE.height}: ${value} button top ${box.y.toFixed(0)} px, bottom ${(box.y + box.height).toFixed(0)} px`);
    check(box.y >= 0 && box.y + box.height <= PHONE.height,
      `the ${value} button is within the first ${PHONE.height} px of the phone screen (bottom at ${(box.y + box.height).toFixed(0)})`);
  }
  await expectReadFirst(page);
  await expectAccessible(page, `the card on a phone screen (${PHONE.width}×${PHONE.height})`);
  const phoneShot = shot('card-phone');
  await page.screenshot({ path: phoneShot, fullPage: false });
  console.log(`screenshot: ${phoneShot}`);

  // 1c. The inbox lists this run and opens its card by id, never by token.
  const inbox = await page.goto(new URL('/approve/', url).href, { waitUntil: 'load' });
  check(inbox !== null && inbox.status() === 200, `GET /approve/ answers 200 (got ${inbox && inbox.status()})`);
  checkHeaders(inbox, 'the inbox');
  const entry = page.locator('ol.inbox li', { hasText: key });
  check(await entry.count() === 1, `the inbox lists the run ${key}`);
  const href = await entry.locator('a').getAttribute('href');
  check(/^\/approve\/card\/[0-9a-f-]{36}$/.test(href || ''), `the inbox entry opens the card by id (${href})`);
  const token = new URL(url).pathname.split('/').pop();
  check(!(await page.content()).includes(token), 'the inbox holds no token');
  const inboxShot = shot('inbox');
  await page.setViewportSize({ width: 1000, height: 900 });
  await page.screenshot({ path: inboxShot, fullPage: true });
  console.log(`screenshot: ${inboxShot}`);
  const byId = await page.goto(new URL(href, url).href, { waitUntil: 'load' });
  check(byId !== null && byId.status() === 200, `the card by id answers 200 (got ${byId && byId.status()})`);
  check((await page.locator('body').innerText()).includes(key), 'the card by id shows the key');
  await page.setViewportSize({ width: 1000, height: 1400 });
  await page.goto(url, { waitUntil: 'load' });

  // 2. Approve: POST, 303, then the GET of the decided page. First, with a
  // corrected body, the correction: the form offers the draft's text.
  if (edited !== null) {
    const field = page.locator('textarea[name="edit.body"]');
    check(await field.count() === 1, 'the card offers the body in a correction form');
    const draft = await field.inputValue();
    check(draft.length > 0 && (await page.locator('div.mail pre.body').innerText()).includes(draft.split('\n')[0]),
      'the correction form holds the draft as it would be sent');
    await field.fill(edited);
    console.log(`ok - the body corrected in the form (${[...edited].length} characters)`);
  }
  await page.locator('textarea[name="reason"]').fill(REASON);
  const decided = await decide(page, url, approve);
  checkHeaders(decided, 'the decided page');
  const text = await page.locator('body').innerText();
  check(/decided/i.test(text), 'the page says the request is decided');
  check(/approve/i.test(text), 'the page says the decision: approve');
  check(text.includes(user), `the page says who decided: ${user}`);
  check(text.includes(REASON), 'the page shows the reason given');
  check(text.includes(key), 'the page shows the key');
  check(/Sent\?/.test(text) && /(queued|held by the kill switch|sent|being sent)/.test(text),
    'the decided page says whether the action has gone out');
  check(await page.locator('form').count() === 0, 'the decided page has no form');
  check(problems.length === 0, `no script errors, CSP violations or failed subresources (${problems.join('; ')})`);
  const css = await page.evaluate(() => document.styleSheets.length).catch(() => -1);
  console.log(`note - the decided page has ${css} style sheet(s) loaded`);
}));
