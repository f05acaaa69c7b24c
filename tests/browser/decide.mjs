// decide.mjs — a person decides an approval in a real browser: approve,
// reject or request changes, whichever button is asked for. The n8n
// end-to-end test (tests/n8n/run.sh) uses it for its rejection, its
// request for changes and the approval of the redraft; approve.mjs, which
// checks the page in more detail, does its first approval.
//
//   node decide.mjs URL USER GROUPS DECISION SCREENSHOT [REASON]
//
// URL is the approval link, USER and GROUPS stand in for the SSO identity
// (the local nginx config maps X-Dev-User / X-Dev-Groups to REMOTE_USER /
// AUTH_GROUPS), DECISION is the value of the button to press (approve,
// reject or changes_requested: then REASON is the feedback, typed into the
// feedback field). Debian's Chromium, headless, driven by playwright-core. Exit 0
// when the form POST answered 303 and the decided page (410, no form) came
// back naming the decision; 1 otherwise, with a screenshot.

import { check, decide, session } from './browser.mjs';

const [url, user, groups, decision, screenshot, reasonArg] = process.argv.slice(2);
if (!url || !user || groups === undefined || !decision || !screenshot) {
  console.error('usage: node decide.mjs URL USER GROUPS DECISION SCREENSHOT [REASON]');
  process.exit(2);
}
const reason = reasonArg || `${decision} in Chromium by tests/browser/decide.mjs`;

process.exit(await session(user, groups, screenshot, async (page) => {

  const card = await page.goto(url, { waitUntil: 'load' });
  check(card !== null && card.status() === 200, `the card answers 200 (got ${card && card.status()})`);
  const button = page.locator(`button[name="decision"][value="${decision}"]`);
  check(await button.count() === 1, `the card has a ${decision} button`);
  if (decision === 'changes_requested') {
    const feedback = page.locator('textarea[name="feedback"]');
    check(await feedback.isVisible(), 'the card shows the feedback field');
    await feedback.fill(reason);
  } else {
    await page.locator('textarea[name="reason"]').fill(reason);
  }
  const decided = await decide(page, url, button);
  const text = await page.locator('body').innerText();
  // in words for a person: "changes requested", never the stored word
  const words = decision.replace(/_/g, ' ');
  check(new RegExp(words, 'i').test(text), `the page names the decision: ${words}`);
  check(words === decision || !text.includes(decision),
    `the page does not show the stored word ${decision}`);
  check(text.includes(user), `the page says who decided: ${user}`);
  check(await page.locator('form').count() === 0, 'the decided page has no form');
}));
