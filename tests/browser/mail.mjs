// mail.mjs — renders one mail as a mail client shows it (Date, From, To,
// Subject, the plain-text body) and screenshots it, so the notice an
// approver receives can be looked at beside the pages it leads to.
//
//   node mail.mjs MAIL_JSON SCREENSHOT
//
// MAIL_JSON is one line of `tests/providers/mailbox.py --json` (the mail as
// the demo SMTP server received it, MIME-decoded). Every value is set as
// text (textContent), never as markup. Debian's Chromium, headless,
// driven by playwright-core (browser.mjs). Exit 0 with the screenshot
// written.

import { readFileSync } from 'node:fs';
import { check, session } from './browser.mjs';

const [mailFile, screenshot] = process.argv.slice(2);
if (!mailFile || !screenshot) {
  console.error('usage: node mail.mjs MAIL_JSON SCREENSHOT');
  process.exit(2);
}
const mail = JSON.parse(readFileSync(mailFile, 'utf8'));

process.exit(await session(null, null, screenshot, async (page) => {
  await page.setViewportSize({ width: 900, height: 700 });
  await page.setContent(`<!doctype html><html><head><meta charset="utf-8"><style>
    body { font: 15px/1.45 system-ui, sans-serif; margin: 0; background: #eef1f5; }
    .mail { background: #fff; margin: 24px; border: 1px solid #ccd3dc; border-radius: 6px; }
    table { border-collapse: collapse; width: 100%; border-bottom: 1px solid #dde2e8; }
    th { text-align: left; color: #5a6470; font-weight: 600; padding: 6px 12px; width: 6em; vertical-align: top; }
    td { padding: 6px 12px; }
    #subject { font-weight: 700; }
    pre { white-space: pre-wrap; word-break: break-word; margin: 0; padding: 16px 12px;
          font: 14px/1.5 ui-monospace, monospace; }
    </style></head><body><div class="mail"><table>
    <tr><th>Date</th><td id="date"></td></tr><tr><th>From</th><td id="from"></td></tr>
    <tr><th>To</th><td id="to"></td></tr><tr><th>Subject</th><td id="subject"></td></tr>
    </table><pre id="body"></pre></div></body></html>`);
  await page.evaluate((m) => {
    for (const k of ['date', 'from', 'subject', 'body']) document.getElementById(k).textContent = m[k];
    document.getElementById('to').textContent = m.to.join(', ');
  }, mail);
  check(await page.locator('#subject').textContent() === mail.subject,
    'the rendered notice shows its subject');
}));
