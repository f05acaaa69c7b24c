// n8n's community-package scan (@n8n/scan-community-package) on this
// package before it is published: the scanner's own two legs and rule set
// (the sources, then the files of the tarball `npm pack` made), without its
// npm download and provenance steps, which need a published version.
//
//     node scripts/scan.mjs n8n-nodes-oncegate-0.1.0.tgz
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import {
	analyzePackage,
	SOURCE_FILE_PATTERNS,
} from '@n8n/scan-community-package/scanner/scanner.mjs';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const tarball = process.argv[2];
if (!tarball) {
	console.error('usage: node scripts/scan.mjs TARBALL');
	process.exit(2);
}
const unpacked = fs.mkdtempSync(path.join(os.tmpdir(), 'oncegate-scan-'));
let failed = false;
try {
	execFileSync('tar', ['-xzf', path.resolve(tarball), '-C', unpacked, '--strip-components=1']);
	const legs = [
		['sources', root, SOURCE_FILE_PATTERNS],
		['tarball', unpacked, ['**/*.js', 'package.json']],
	];
	for (const [name, dir, patterns] of legs) {
		const result = await analyzePackage(dir, patterns);
		if (result.passed) {
			console.log(`scan ${name}: passed${result.message ? ` (${result.message})` : ''}`);
		} else {
			failed = true;
			console.log(`scan ${name}: FAILED: ${result.message}`);
			if (result.details) console.log(result.details);
		}
	}
} finally {
	fs.rmSync(unpacked, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
