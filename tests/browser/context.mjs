// context.mjs — what an approver reads before deciding, in a real browser:
// the inbox and the cards of runs that carry a context (the customer's
// message, the ticket's subject, the customer), for two tenants.
//
//   node context.mjs BASE_URL USER GROUPS CASES_JSON SHOT_DIR
//
// CASES_JSON is a file of [{key, client, approval_id, subject, customer,
// message, draft_subject}], one per run. For each: the inbox entry is
// titled by the ticket's subject and names the customer and the draft's
// subject; its card (opened from the inbox, by id) shows the subject as its
// heading and, beside the draft, the subject, the customer and the message
// as plain text, character for character. Whatever markup or links the
// customer wrote stay text: no element, link, dialog or navigation comes
// of them, even when clicked. Screenshots: SHOT_DIR/context-inbox.png and
// context-card-N.png. Exit 0 when every check passed, 1 otherwise.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { check, session } from './browser.mjs';

const [base, user, groups, casesFile, shotDir] = process.argv.slice(2);
if (!base || !user || groups === undefined || !casesFile || !shotDir) {
  console.error('usage: node context.mjs BASE_URL USER GROUPS CASES_JSON SHOT_DIR');
  process.exit(2);
}
const cases = JSON.parse(readFileSync(casesFile, 'utf8'));

process.exit(await session(user, groups, join(shotDir, 'context-final.png'), async (page) => {
  const problems = [];
  page.on('dialog', async (d) => { problems.push(`a dialog opened: ${d.message()}`); await d.dismiss(); });
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('request', (r) => {
    if (!r.url().startsWith(base)) problems.push(`a request left the stack: ${r.url()}`);
  });

  for (const [i, c] of cases.entries()) {
    // The card, opened from the inbox entry that names the ticket.
    const inbox = await page.goto(new URL('/approve/', base).href, { waitUntil: 'load' });
    check(inbox !== null && inbox.status() === 200, `the inbox answers 200 (got ${inbox && inbox.status()})`);
    const entry = page.locator(`ol.inbox li:has(a[href="/approve/card/${c.approval_id}"])`);
    check(await entry.count() === 1, `the inbox lists ${c.client}'s run ${c.key}`);
    const title = await entry.locator('a').innerText();
    check(title === c.subject, `${c.client}'s inbox entry is titled by the ticket's subject (${title})`);
    const about = await entry.locator('.meta').first().innerText();
    check(about.includes(c.customer) && about.includes(c.draft_subject),
      `${c.client}'s inbox entry names the customer and the draft's subject (${about})`);
    if (i === cases.length - 1) {
      await page.screenshot({ path: join(shotDir, 'context-inbox.png'), fullPage: true });
      console.log(`screenshot: ${join(shotDir, 'context-inbox.png')}`);
    }
    await entry.locator('a').click();
    await page.waitForLoadState('load');
    check(page.url().endsWith(`/approve/card/${c.approval_id}`), `the entry opens ${c.client}'s card by id`);
    const h1 = await page.locator('h1').innerText();
    check(h1.includes(c.subject), `the card's heading names the ticket (${h1})`);
    const section = page.locator('section.context');
    check(await section.count() === 1, 'the card has a section of what the run answers');
    check(await section.locator('dd.subject').innerText() === c.subject, 'the card shows the ticket\'s subject');
    check(await section.locator('dt:text-is("Customer") + dd').innerText() === c.customer,
      'the card shows the customer');
    const shown = await section.locator('pre').evaluate((e) => e.textContent);
    check(shown === c.message, `the card shows the customer's message character for character (${[...shown].length} characters)`);
    // beside the draft: the context comes right before what will be sent
    check(await page.locator('section.context + section.effect').count() === 1,
      'the message stands beside the draft (right before what will be sent)');
    // inert: no element of the customer's text, nothing clickable in it
    check(await section.locator('a, img, script, iframe, [onerror], [href]').count() === 0,
      'no link or element came of the customer\'s text');
    check(await page.locator('script').count() === 0, 'the card holds no script');
    const before = page.url();
    for (const needle of ['javascript:', 'https://evil.example', '<a href', '[']) {
      const hit = section.locator('pre', { hasText: needle });
      if (await hit.count() > 0 && c.message.includes(needle)) {
        await hit.click({ position: { x: 5, y: 5 } });
        console.log(`ok - "${needle}" is shown as text`);
      }
    }
    await page.waitForTimeout(300);
    check(page.url() === before, 'clicking the message went nowhere');
    const dir = await section.locator('pre').getAttribute('dir');
    check(dir === 'auto', 'the message takes its direction from its text (dir=auto: Arabic reads right to left)');
    await page.screenshot({ path: join(shotDir, `context-card-${i + 1}.png`), fullPage: true });
    console.log(`screenshot: ${join(shotDir, `context-card-${i + 1}.png`)}`);
  }
  check(problems.length === 0, `no dialog, script error or request off the stack (${problems.join('; ')})`);
}));
