export const NODE = {
	id: 'b8f4c2a0-0000-4000-8000-00000000og01',
	name: 'oncegate',
	type: 'n8n-nodes-oncegate.oncegate',
	typeVersion: 1,
	position: [0, 0],
	parameters: {},
};
export function fakeExecute(o) {
	const run = {
		requests: [],
		waitedUntil: undefined,
		customData: o.customData ?? new Map(),
	};
	const answers = [...o.answers];
	const ctx = {
		getNode: () => NODE,
		getInputData: () => o.items,
		getExecutionId: () => '4711',
		getWorkflow: () => ({ id: 'ogSupportReply01', name: 'oncegate: support reply', active: true }),
		getNodeParameter: (name, _i, fallback) => (name in o.params ? o.params[name] : fallback),
		evaluateExpression: (expr) => {
			if (expr.includes('resumeUrl'))
				return o.resumeUrl ?? 'http://127.0.0.1:5678/webhook-waiting/4711';
			throw new Error(`unexpected expression ${expr}`);
		},
		getCredentials: async (name) => {
			if (name !== 'oncegateApi') throw new Error(`unexpected credential ${name}`);
			return { baseUrl: 'https://gate.example.com/', apiKey: 'og_test_key' };
		},
		getParentNodes: () =>
			(o.parents ?? []).map((p) => ({
				name: p.name,
				type: p.type,
				typeVersion: 1,
				disabled: false,
			})),
		getWorkflowDataProxy: () => ({
			$: (name) => {
				const p = (o.parents ?? []).find((x) => x.name === name);
				if (!p || !p.item) throw new Error(`no paired item from ${name}`);
				return { item: p.item };
			},
			$execution: {
				customData: {
					set: (k, v) => {
						// as n8n checks custom data keys
						if (k.replace(/[A-Za-z0-9_]/g, '') !== '' || k.length > 50)
							throw new Error(`invalid key ${k}`);
						run.customData.set(k, v);
					},
					get: (k) => run.customData.get(k),
				},
			},
		}),
		putExecutionToWait: async (until) => {
			run.waitedUntil = until;
		},
		helpers: {
			httpRequestWithAuthentication: async (credential, req) => {
				run.requests.push({
					method: String(req.method),
					url: String(req.url),
					body: req.body,
					credential,
				});
				const a = answers.shift();
				if (!a) throw new Error(`no canned answer for ${req.method} ${req.url}`);
				if (req.returnFullResponse !== true || req.ignoreHttpStatusErrors !== true) {
					throw new Error('oncegate answers must be read in full, errors included');
				}
				return { statusCode: a.status, body: a.body, headers: {} };
			},
		},
	};
	return { ctx, run };
}
