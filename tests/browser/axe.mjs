// axe.mjs — the accessibility check the browser suites run on a page:
// axe-core (Deque's engine, from the npm registry, pinned in package.json
// and package-lock.json; licence MPL-2.0, shipped in
// node_modules/axe-core/LICENSE), its WCAG 2.x A and AA rules and best
// practices, on the page as it stands.
//
// The approval pages allow no script (Content-Security-Policy default-src
// 'none'); the engine is evaluated through the DevTools protocol, as a
// person's browser extension would, so the page and its policy stay as
// served.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const SOURCE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

// axeViolations(page): axe-core's violations on page, each as
// "rule (impact): help — targets".
export async function axeViolations(page) {
  await page.evaluate(SOURCE);
  const found = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help,
      targets: v.nodes.map((n) => n.target.join(' ')).slice(0, 5),
    }));
  });
  return found.map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.targets.join(', ')}`);
}

// axeVersion(): the engine's version, for the log.
export function axeVersion() {
  return JSON.parse(readFileSync(require.resolve('axe-core/package.json'), 'utf8')).version;
}
