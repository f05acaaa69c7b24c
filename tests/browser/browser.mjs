// browser.mjs — what approve.mjs and decide.mjs share: Debian's Chromium,
// headless, driven by playwright-core, on a fresh profile, as the person
// whose identity the SSO stand-in headers (X-Dev-User, X-Dev-Groups) carry;
// one "ok - " line per check; a full-page screenshot at the end, pass or
// fail; a decision sent by pressing a button of the card.

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

const CHROMIUM = process.env.ONCEGATE_CHROMIUM || '/usr/bin/chromium';
const TIMEOUT_MS = 30000;

// check(ok, what): an "ok - what" line, or a failure that ends the session.
export function check(ok, what) {
  if (!ok) throw new Error(what);
  console.log(`ok - ${what}`);
}

// session(user, groups, screenshot, body): runs `await body(page)` in a new
// browser as user in groups (user null: no identity headers, for a page
// that asks the stack nothing), then saves the page as screenshot. The exit
// status: 0 when body returned, 1 when a check (or anything else) failed.
export async function session(user, groups, screenshot, body) {
  const profile = mkdtempSync(join(tmpdir(), 'oncegate-chromium-'));
  mkdirSync(dirname(screenshot), { recursive: true });
  let context;
  let page;
  let status = 1;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync',
      ],
      viewport: { width: 1000, height: 1400 },
    });
    context.setDefaultTimeout(TIMEOUT_MS);
    page = context.pages()[0] || await context.newPage();
    if (user !== null) await page.setExtraHTTPHeaders({ 'X-Dev-User': user, 'X-Dev-Groups': groups });
    await body(page);
    status = 0;
  } catch (e) {
    console.error(`not ok - ${e.message}`);
  } finally {
    if (page) {
      try {
        await page.screenshot({ path: screenshot, fullPage: true });
        console.log(`screenshot: ${screenshot}`);
      } catch (e) {
        console.error(`no screenshot: ${e.message}`);
      }
    }
    if (context) await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  }
  return status;
}

// decide(page, url, button): presses button on the card at url and
// follows what the browser does: the form POST must answer 303 and the
// decided page it is sent to (the GET of url, which the page now shows)
// 410. Returns that GET's response.
export async function decide(page, url, button) {
  const seen = [];
  page.on('response', (r) => {
    if (r.url() === url) seen.push([r.request().method(), r.status()]);
  });
  const [decided] = await Promise.all([
    page.waitForResponse((r) => r.url() === url && r.request().method() === 'GET'),
    button.click(),
  ]);
  await page.waitForLoadState('load');
  check(seen.some(([m, s]) => m === 'POST' && s === 303),
    `the form POST answered 303 (responses: ${JSON.stringify(seen)})`);
  check(decided.status() === 410, `the decided page answers 410 (got ${decided.status()})`);
  return decided;
}
