import type {
	IDataObject,
	IHttpRequestMethods,
	IHttpRequestOptions,
	INodeCredentialTestResult,
} from 'n8n-workflow';

/** The title of oncegate's OpenAPI document: what identifies an oncegate API root. */
export const API_TITLE = 'oncegate workflow API';

/** What every call to oncegate needs from the node's context. */
export interface OncegateCaller {
	baseUrl: string;
	request(options: IHttpRequestOptions): Promise<unknown>;
}

/** oncegate's answer: its HTTP status and its JSON body (problem documents included). */
export interface OncegateAnswer {
	status: number;
	body: IDataObject;
}

/** The run an item belongs to, carried from node to node with the item. */
export interface RunContext {
	key: string;
	lease_owner: string;
	version: number;
	lease_expires_at?: string;
	attempt?: number;
}

export function runPath(key: string, tail = ''): string {
	return `/v1/runs/${encodeURIComponent(key)}${tail}`;
}

/**
 * One call to oncegate. 4xx and 5xx answers are returned, not thrown: they
 * are outcomes the operations route (a duplicate, a payload mismatch, an
 * invalid output). Only a failure to reach oncegate throws.
 */
export async function oncegateCall(
	caller: OncegateCaller,
	method: IHttpRequestMethods,
	path: string,
	body?: IDataObject,
	headers?: IDataObject,
): Promise<OncegateAnswer> {
	const options: IHttpRequestOptions = {
		method,
		url: caller.baseUrl.replace(/\/+$/, '') + path,
		headers: { Accept: 'application/json, application/problem+json', ...(headers ?? {}) },
		returnFullResponse: true,
		ignoreHttpStatusErrors: true,
		json: true,
		timeout: 15000,
	};
	if (body !== undefined) options.body = body;
	const raw = (await caller.request(options)) as { statusCode?: number; body?: unknown };
	return { status: Number(raw.statusCode ?? 0), body: toObject(raw.body) };
}

/** oncegate answers JSON; problem documents may arrive as text (their media type). */
export function toObject(body: unknown): IDataObject {
	if (body === undefined || body === null || body === '') return {};
	if (typeof body === 'string') {
		try {
			const parsed = JSON.parse(body) as unknown;
			return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)
				? (parsed as IDataObject)
				: { value: parsed as IDataObject };
		} catch {
			return { text: body.slice(0, 2000) };
		}
	}
	if (Buffer.isBuffer(body)) return toObject(body.toString('utf8'));
	if (typeof body === 'object' && !Array.isArray(body)) return body as IDataObject;
	return { value: body as IDataObject };
}

/** The model's answer as the contract check sees it: an object if it parses, else the text. */
export function parseOutput(value: unknown): IDataObject {
	if (typeof value === 'string') {
		try {
			const parsed = JSON.parse(value) as unknown;
			if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) {
				return parsed as IDataObject;
			}
		} catch {
			// handed in as text below: the contract check says what is wrong
		}
		return { unparseable: value.slice(0, 2000) };
	}
	if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
		return value as IDataObject;
	}
	return { unparseable: JSON.stringify(value ?? null).slice(0, 2000) };
}

/** A one-line description of a refusal: its code, title and detail. */
export function describeProblem(answer: OncegateAnswer): string {
	const b = answer.body;
	const code = typeof b.error === 'string' ? b.error : `HTTP ${answer.status}`;
	const detail =
		typeof b.detail === 'string' ? b.detail : typeof b.title === 'string' ? b.title : '';
	return detail ? `${code}: ${detail}` : code;
}

/** The run context from an answer that names the lease (claim, renew, output). */
export function contextFrom(
	prev: RunContext | undefined,
	body: IDataObject,
	key: string,
): RunContext {
	return {
		key,
		lease_owner: String(body.lease_owner ?? prev?.lease_owner ?? ''),
		version: Number(body.version ?? prev?.version ?? 0),
		...(body.lease_expires_at !== undefined || prev?.lease_expires_at !== undefined
			? { lease_expires_at: String(body.lease_expires_at ?? prev?.lease_expires_at) }
			: {}),
		...(body.attempt !== undefined || prev?.attempt !== undefined
			? { attempt: Number(body.attempt ?? prev?.attempt) }
			: {}),
	};
}

export function isRunContext(v: unknown): v is RunContext {
	if (typeof v !== 'object' || v === null) return false;
	const o = v as IDataObject;
	return (
		typeof o.key === 'string' &&
		typeof o.lease_owner === 'string' &&
		o.lease_owner !== '' &&
		typeof o.version === 'number' &&
		Number.isInteger(o.version)
	);
}

/** The effect a person's decision enqueued (or the contract's rules did): its id. */
export function effectOf(run: IDataObject): IDataObject | undefined {
	const effects = Array.isArray(run.effects) ? (run.effects as IDataObject[]) : [];
	return effects.find((e) => e.type !== 'decision.callback' && e.type !== 'approval.notify');
}

async function getJson(
	url: string,
	headers: Record<string, string>,
): Promise<{ status: number; body: IDataObject } | string> {
	try {
		const res = await fetch(url, {
			headers,
			redirect: 'manual',
			signal: AbortSignal.timeout(10000),
		});
		const text = await res.text();
		return { status: res.status, body: toObject(text) };
	} catch (e) {
		const cause = (e as { cause?: { code?: string } }).cause?.code;
		return `${url} could not be reached (${cause ?? (e as Error).message})`;
	}
}

/**
 * The credential test: the base URL must be an oncegate API root (its
 * OpenAPI document answers with oncegate's title, so another service, or
 * the same one under /v1, fails) and the key must be one oncegate knows (a
 * status query of a key nobody claims: 404 for a known key, 401 else).
 */
export async function checkConnection(
	baseUrl: string,
	apiKey: string,
): Promise<INodeCredentialTestResult> {
	const base = baseUrl.trim().replace(/\/+$/, '');
	const fail = (message: string): INodeCredentialTestResult => ({ status: 'Error', message });
	if (!/^https?:\/\/[^/?#]+/i.test(base)) {
		return fail(`The base URL must be http(s)://host[:port] (got "${baseUrl}")`);
	}
	if (/\/v1$/i.test(base)) {
		return fail(
			`The base URL ends in /v1: give oncegate's root, ${base.slice(0, -3)}, without /v1 (the node adds /v1/… itself)`,
		);
	}
	if (apiKey === '' || /[^\x21-\x7e]/.test(apiKey)) {
		return fail(
			'The API key is empty or holds a character no key has (a space, a line break, a non-ASCII letter): paste the key oncegatectl client add printed',
		);
	}
	const doc = await getJson(`${base}/v1/openapi.json`, { Accept: 'application/json' });
	if (typeof doc === 'string') return fail(doc);
	const info = (doc.body.info ?? {}) as IDataObject;
	if (doc.status !== 200 || info.title !== API_TITLE) {
		return fail(
			`${base} is not an oncegate API root: ${base}/v1/openapi.json answered HTTP ${doc.status}` +
				(typeof info.title === 'string' ? ` with "${info.title}"` : '') +
				`, not oncegate's OpenAPI document ("${API_TITLE}"). Give the URL nginx serves oncegate at.`,
		);
	}
	const probe = await getJson(`${base}/v1/runs/n8n-credential-test`, {
		Accept: 'application/json, application/problem+json',
		Authorization: `Bearer ${apiKey}`,
	});
	if (typeof probe === 'string') return fail(probe);
	if ((probe.status === 404 && probe.body.error === 'not_found') || probe.status === 200) {
		return {
			status: 'OK',
			message: `Connection successful: oncegate ${String(info.version ?? '')} accepted the key`,
		};
	}
	if (probe.status === 401) {
		return fail(
			'oncegate refused the API key (unauthorized): it is unknown or revoked; make one with oncegatectl client add NAME',
		);
	}
	return fail(
		`oncegate answered the key check with ${describeProblem({ status: probe.status, body: probe.body })}`,
	);
}

/**
 * The options of the Contract, Effect Type or Effect Target field from the
 * answer of GET /v1/contracts: the contracts' names; or the effect types
 * (targets) the named contract allows — every contract's, without
 * repeats, when none is named or the name is not one of them (an
 * expression, say).
 */
export function contractOptions(
	body: IDataObject,
	member: 'name' | 'effect_types' | 'effect_targets',
	contract?: string,
): Array<{ name: string; value: string; description?: string }> {
	const contracts = (Array.isArray(body.contracts) ? body.contracts : []) as IDataObject[];
	if (member === 'name') {
		return contracts
			.filter((c) => typeof c.name === 'string')
			.map((c) => ({
				name: String(c.name),
				value: String(c.name),
				...(typeof c.description === 'string' ? { description: c.description } : {}),
			}));
	}
	const named = contracts.filter((c) => c.name === contract);
	const seen = new Set<string>();
	for (const c of named.length > 0 ? named : contracts) {
		for (const v of Array.isArray(c[member]) ? (c[member] as unknown[]) : []) {
			if (typeof v === 'string') seen.add(v);
		}
	}
	return [...seen].sort().map((v) => ({ name: v, value: v }));
}

/** The body of POST /v1/approvals/{id}/decisions from the Decide fields (empty ones left out). */
export function decisionBody(f: {
	subject: string;
	groups: string;
	decision: string;
	reason: string;
	edits: unknown;
	draft: string;
}): IDataObject {
	const body: IDataObject = { subject: f.subject.trim(), decision: f.decision };
	const groups = f.groups
		.split(',')
		.map((g) => g.trim())
		.filter((g) => g !== '');
	if (groups.length > 0) body.groups = groups;
	if (f.reason !== '') body.reason = f.reason;
	if (f.draft.trim() !== '') body.draft = f.draft.trim();
	if (
		typeof f.edits === 'object' &&
		f.edits !== null &&
		!Array.isArray(f.edits) &&
		Object.keys(f.edits).length > 0
	) {
		body.edits = f.edits as IDataObject;
	}
	return body;
}
