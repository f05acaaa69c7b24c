import { createHash } from 'crypto';
import type {
	ICredentialsDecrypted,
	ICredentialTestFunctions,
	IDataObject,
	IExecuteFunctions,
	IHttpRequestOptions,
	ILoadOptionsFunctions,
	INodeCredentialTestResult,
	INodeExecutionData,
	INodePropertyOptions,
	INodeType,
	INodeTypeDescription,
	IWebhookDescription,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError, WAIT_INDEFINITELY } from 'n8n-workflow';

import {
	checkConnection,
	contractOptions,
	contextFrom,
	decisionBody,
	describeProblem,
	effectOf,
	isRunContext,
	oncegateCall,
	parseOutput,
	runPath,
	type OncegateAnswer,
	type OncegateCaller,
	type RunContext,
} from './api';

/** The outputs of each operation, in order (the node's outputs follow the operation). */
export const OUTPUTS: Record<string, string[]> = {
	claim: ['claimed', 'duplicate', 'error'],
	submitAndWait: ['loop back', 'approved', 'rejected', 'expired', 'invalid', 'changes requested'],
	complete: ['completed'],
	fail: ['reported'],
	renewLease: ['renewed'],
	getRun: ['run'],
	decide: ['decided', 'refused'],
};

const CONTEXT_MARK = 'oncegate run: ';

// Serialised into the description as an expression, so it names its table
// itself (n8n evaluates it in the editor, without this module).
function configuredOutputs(parameters: { operation?: string }) {
	const names: Record<string, string[]> = {
		claim: ['claimed', 'duplicate', 'error'],
		submitAndWait: ['loop back', 'approved', 'rejected', 'expired', 'invalid', 'changes requested'],
		complete: ['completed'],
		fail: ['reported'],
		renewLease: ['renewed'],
		getRun: ['run'],
		decide: ['decided', 'refused'],
	};
	return (names[parameters.operation ?? 'claim'] ?? ['main']).map((name) => ({
		type: 'main',
		displayName: name,
	}));
}

function subtitle(parameters: { operation?: string }) {
	const names: Record<string, string> = {
		claim: 'Claim the run',
		submitAndWait: 'Submit output, wait for decision',
		complete: 'Complete the run',
		fail: 'Report failure',
		renewLease: 'Renew the lease',
		getRun: 'Get the run',
		decide: 'Record a person’s decision',
	};
	return names[parameters.operation ?? 'claim'] ?? parameters.operation ?? '';
}

/** Is this node n8n's AI-agent tool variant of the oncegate node? */
function isTool(fns: IExecuteFunctions): boolean {
	return fns.getNode().type.endsWith('Tool');
}

async function caller(
	ctx: IExecuteFunctions | IWebhookFunctions | ILoadOptionsFunctions,
): Promise<OncegateCaller> {
	const credentials = await ctx.getCredentials('oncegateApi');
	const node = ctx;
	return {
		baseUrl: String(credentials.baseUrl ?? ''),
		request: async (options: IHttpRequestOptions) =>
			await node.helpers.httpRequestWithAuthentication.call(node, 'oncegateApi', options),
	};
}

function memoKey(key: string): string {
	// n8n takes custom data keys of A-Za-z0-9_ only, at most 50 characters.
	return 'oncegate_' + createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 40);
}

/** The execution's own record of the newest lease version of each run it holds. */
function remember(fns: IExecuteFunctions, run: RunContext): void {
	try {
		fns
			.getWorkflowDataProxy(0)
			.$execution?.customData?.set(
				memoKey(run.key),
				JSON.stringify({ o: run.lease_owner, v: run.version }),
			);
	} catch {
		// custom data is a convenience: the item carries the run anyway
	}
}

function remembered(fns: IExecuteFunctions, run: RunContext): RunContext {
	try {
		const text = fns.getWorkflowDataProxy(0).$execution?.customData?.get(memoKey(run.key));
		if (typeof text === 'string' && text !== '') {
			const m = JSON.parse(text) as { o?: string; v?: number };
			if (m.o === run.lease_owner && typeof m.v === 'number' && m.v > run.version) {
				return { ...run, version: m.v };
			}
		}
	} catch {
		// as above
	}
	return run;
}

/**
 * The run an item belongs to: on the item itself (right after an oncegate
 * node), else on its ancestor from the nearest oncegate node upstream (the
 * model's answer replaces the item's fields), at the newest lease version
 * this execution saw.
 */
export function findRun(fns: IExecuteFunctions, itemIndex: number): RunContext {
	const item = fns.getInputData()[itemIndex];
	const own = item?.json?.oncegate;
	let found: RunContext | undefined = isRunContext(own) ? own : undefined;
	if (found === undefined) {
		const me = fns.getNode();
		const upstream = fns
			.getParentNodes(me.name)
			.filter((n) => n.type === me.type && n.disabled !== true);
		const proxy = fns.getWorkflowDataProxy(itemIndex);
		// The nearest run upstream names the key; a later node of the same
		// run (after an invalid output, say) may hold a newer version.
		for (const n of upstream) {
			try {
				const ancestor = proxy.$(n.name).item as INodeExecutionData | undefined;
				const run = ancestor?.json?.oncegate;
				if (
					isRunContext(run) &&
					(found === undefined ||
						(run.key === found.key &&
							run.lease_owner === found.lease_owner &&
							run.version > found.version))
				) {
					found = run;
				}
			} catch {
				// that node did not run for this item: try the next one
			}
		}
	}
	if (found === undefined) {
		throw new NodeOperationError(
			fns.getNode(),
			'No oncegate run for this item: put an oncegate Claim before this node',
			{ itemIndex },
		);
	}
	return remembered(fns, {
		key: found.key,
		lease_owner: found.lease_owner,
		version: found.version,
	});
}

/** A failure that names its run, so the error workflow can report it. */
function runError(
	fns: IExecuteFunctions,
	message: string,
	run: RunContext | undefined,
	itemIndex: number,
	description?: string,
): NodeOperationError {
	const tail = run
		? ` (${CONTEXT_MARK}${JSON.stringify({ key: run.key, lease_owner: run.lease_owner, version: run.version })})`
		: '';
	return new NodeOperationError(fns.getNode(), message + tail, { itemIndex, description });
}

/** The run named in an error of an oncegate node, as the Error Trigger hands it on. */
export function runFromFailure(failure: IDataObject): RunContext | undefined {
	const execution = (failure.execution ?? {}) as IDataObject;
	const error = (execution.error ?? {}) as IDataObject;
	for (const text of [error.message, error.description]) {
		if (typeof text !== 'string') continue;
		const at = text.lastIndexOf(CONTEXT_MARK);
		if (at < 0) continue;
		let json = text.slice(at + CONTEXT_MARK.length);
		const end = json.lastIndexOf('}');
		json = json.slice(0, end + 1);
		try {
			const run = JSON.parse(json) as unknown;
			if (isRunContext(run)) return run;
		} catch {
			// not ours
		}
	}
	return undefined;
}

function refusal(answer: OncegateAnswer): IDataObject {
	return {
		status: answer.status,
		code: typeof answer.body.error === 'string' ? answer.body.error : `http_${answer.status}`,
		message: describeProblem(answer),
		...answer.body,
	};
}

function infrastructure(answer: OncegateAnswer): boolean {
	return (
		answer.status === 0 ||
		answer.status === 401 ||
		answer.status === 403 ||
		answer.status === 429 ||
		answer.status >= 500
	);
}

/**
 * The resume webhook of a waiting execution ($execution.resumeUrl), which
 * oncegate's decision callback calls: n8n registers nothing with a third
 * party for it.
 */
const decisionWebhooks: IWebhookDescription[] = [
	{
		name: 'default',
		httpMethod: 'POST',
		responseMode: 'onReceived',
		path: '',
		restartWebhook: true,
	},
];

export class Oncegate implements INodeType {
	description: INodeTypeDescription = {
		// One name in n8n's lists for node and credential: "Oncegate" (the
		// credential is "Oncegate API": n8n-node lint requires a credential's
		// displayName in title case and ending in " API").
		displayName: 'Oncegate',
		name: 'oncegate',
		icon: { light: 'file:oncegate.svg', dark: 'file:oncegate.dark.svg' },
		group: ['transform'],
		version: 1,
		subtitle: `={{(${subtitle})($parameter)}}`,
		description:
			'Run each business event once, have a person approve what the model proposes, and let oncegate send it exactly once',
		defaults: {
			name: 'Oncegate',
		},
		inputs: [NodeConnectionTypes.Main],
		outputs: `={{(${configuredOutputs})($parameter)}}`,
		credentials: [
			{
				name: 'oncegateApi',
				required: true,
				testedBy: 'oncegateApiTest',
			},
		],
		webhooks: decisionWebhooks,
		// An agent may claim, read and settle runs; it cannot wait for a
		// person (a tool call returns at once), so Submit Output and Wait is
		// not offered to it (hidden on the tool variant, refused there).
		usableAsTool: true,
		hints: [
			{
				message:
					'Connect the first output, <b>loop back</b>, to this node’s own input: n8n resumes a waiting node only on its first output, and the node then routes the decision to <b>approved</b>, <b>rejected</b>, <b>expired</b> or <b>changes requested</b> (connect that one back to the model: it carries the approver’s feedback).',
				type: 'info',
				location: 'outputPane',
				whenToDisplay: 'always',
				displayCondition: '={{ $parameter["operation"] === "submitAndWait" }}',
			},
		],
		properties: [
			{
				displayName: 'Resource',
				name: 'resource',
				type: 'options',
				noDataExpression: true,
				options: [{ name: 'Run', value: 'run' }],
				default: 'run',
			},
			{
				displayName: 'Operation',
				name: 'operation',
				displayOptions: { show: { resource: ['run'] } },
				type: 'options',
				noDataExpression: true,
				options: [
					{
						name: 'Claim',
						value: 'claim',
						description: 'Claim the run of a business event: claimed, duplicate or error',
						action: 'Claim a run',
					},
					{
						name: 'Complete',
						value: 'complete',
						description: 'Report the run done, with its result',
						action: 'Complete a run',
					},
					{
						name: 'Decide',
						value: 'decide',
						description:
							'Record the decision of a person this workflow vouches for (the client needs the decide scope)',
						action: 'Record a decision',
						displayOptions: { hide: { '@tool': [true] } },
					},
					{
						name: 'Fail',
						value: 'fail',
						description:
							'Report the run failed: retryable (the next delivery reclaims it) or terminal',
						action: 'Fail a run',
					},
					{
						name: 'Get Run',
						value: 'getRun',
						description: 'Read a run: its state, approvals, effects and timeline',
						action: 'Get a run',
					},
					{
						name: 'Renew Lease',
						value: 'renewLease',
						description: 'Keep the claim of a long step alive',
						action: 'Renew a lease',
					},
					{
						name: 'Submit Output and Wait for Decision',
						value: 'submitAndWait',
						description:
							'Hand in the model output and the proposed effect; wait until a person decides',
						action: 'Submit output and wait for decision',
						displayOptions: { hide: { '@tool': [true] } },
					},
				],
				default: 'claim',
			},
			// ---- claim
			{
				displayName: 'Idempotency Key',
				name: 'key',
				type: 'string',
				required: true,
				default: '',
				placeholder: 'acme:support-reply:ticket-{{ $json.body.ticket_id }}:v1',
				description:
					'The business identity of the event (tenant:operation:object:version), never the execution ID',
				displayOptions: { show: { operation: ['claim'] } },
			},
			{
				displayName: 'Payload',
				name: 'payload',
				type: 'json',
				default: '={{ $json.body }}',
				description:
					'The event as it arrived; a later delivery of the same key with another payload is refused',
				displayOptions: { show: { operation: ['claim'] } },
			},
			{
				displayName: 'Workflow Version',
				name: 'workflowVersion',
				type: 'string',
				default: '={{ $workflow.name }}@{{ $workflow.id }}',
				description: 'Recorded with the run, so an audit can tell which flow handled it',
				displayOptions: { show: { operation: ['claim'] } },
			},
			{
				displayName: 'Lease Seconds',
				name: 'leaseSeconds',
				type: 'number',
				typeOptions: { minValue: 0 },
				default: 0,
				description:
					'How long this execution holds the run before another delivery may reclaim it (0: oncegate’s default)',
				displayOptions: { show: { operation: ['claim', 'renewLease'] } },
			},
			{
				displayName: 'Check the Callback Origin',
				name: 'checkCallback',
				type: 'boolean',
				default: true,
				description:
					'Whether to send this execution’s resume URL with the claim, so that oncegate refuses an n8n origin it could not call back now, before the model is paid for (turn off in a flow that never waits for a decision)',
				displayOptions: { show: { operation: ['claim'] } },
			},
			{
				displayName: 'Trigger',
				name: 'trigger',
				type: 'string',
				default: 'webhook:n8n',
				description: 'Where the event came from',
				displayOptions: { show: { operation: ['claim'] } },
			},
			// ---- submit output and wait
			{
				displayName:
					'Connect the first output, <b>loop back</b>, to this node’s own input: the execution waits here, and n8n resumes a waiting node only on its first output; the node then routes the decision to approved, rejected, expired or changes requested (the approver’s feedback, for a new draft: connect it back to the model, then to this node).',
				name: 'loopNotice',
				type: 'notice',
				default: '',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Contract Name or ID',
				name: 'contract',
				type: 'options',
				typeOptions: { loadOptionsMethod: 'getContracts' },
				required: true,
				default: '',
				description:
					'The contract the output is checked against, and whose gate decides. Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Model Output',
				name: 'output',
				type: 'string',
				typeOptions: { rows: 3 },
				default: '={{ $json.choices[0].message.content }}',
				description:
					'The model’s answer: a JSON object, or its text (parsed here; text that is not JSON is handed in as it is, and the contract check says what is wrong)',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Model Name',
				name: 'modelName',
				type: 'string',
				default: '={{ $json.model }}',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Model Revision',
				name: 'modelRevision',
				type: 'string',
				default: '={{ $json.system_fingerprint || $json.id }}',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Model Provider',
				name: 'modelProvider',
				type: 'string',
				default: 'openai-compatible',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Effect Type Name or ID',
				name: 'effectType',
				type: 'options',
				typeOptions: { loadOptionsMethod: 'getEffectTypes', loadOptionsDependsOn: ['contract'] },
				required: true,
				default: '',
				description:
					'What oncegate does once approved: the types the contract allows. Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Effect Target Name or ID',
				name: 'effectTarget',
				type: 'options',
				typeOptions: { loadOptionsMethod: 'getEffectTargets', loadOptionsDependsOn: ['contract'] },
				required: true,
				default: '',
				description:
					'A target of oncegate’s configuration the contract allows (never a URL). Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Effect Payload',
				name: 'effectPayload',
				type: 'json',
				default: '{}',
				description: 'What the effect needs besides the output (e.g. the recipient)',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Requested By',
				name: 'requestedBy',
				type: 'string',
				default: '',
				placeholder: 'olga.petrova@helpdesk.example',
				description:
					'The mail address of the person who asked for this action, from the trigger’s data (e.g. the helpdesk agent). Under separation of duties that person cannot approve it, and oncegate refuses a requester that is not a mail address.',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Source URL',
				name: 'sourceUrl',
				type: 'string',
				default: '',
				description: 'The record the approvers open to check the draft',
				displayOptions: { show: { operation: ['submitAndWait'] } },
			},
			{
				displayName: 'Context for the Approver',
				name: 'approverContext',
				type: 'collection',
				placeholder: 'Add Context',
				default: {},
				description:
					'What the draft answers, shown to the approver beside it on the card (as plain text) and named in the inbox and the notices. Never sent, never part of the effect.',
				displayOptions: { show: { operation: ['submitAndWait'] } },
				options: [
					{
						displayName: 'Subject',
						name: 'subject',
						type: 'string',
						default: '',
						placeholder: 'Where is my order 4711?',
						description: 'The subject of the ticket or mail answered (one line, at most 300 characters)',
					},
					{
						displayName: 'Customer',
						name: 'customer',
						type: 'string',
						default: '',
						placeholder: 'Maria Ivanova <maria@example.com>',
						description: 'Who wrote it (one line, at most 300 characters)',
					},
					{
						displayName: 'Message',
						name: 'message',
						type: 'string',
						typeOptions: { rows: 6 },
						default: '',
						description: 'Their message as plain text (at most 20,000 characters)',
					},
				],
			},
			// ---- complete
			{
				displayName: 'Result',
				name: 'result',
				type: 'json',
				default: '{}',
				description: 'What a later duplicate delivery is answered with',
				displayOptions: { show: { operation: ['complete'] } },
			},
			// ---- fail
			{
				displayName: 'Run From',
				name: 'runFrom',
				type: 'options',
				options: [
					{
						name: 'The Input Item',
						value: 'item',
						description: 'The run the item carries (after a Claim)',
					},
					{
						name: 'An Error Trigger',
						value: 'errorTrigger',
						description: 'The run named by the failed oncegate node of another workflow',
					},
				],
				default: 'item',
				displayOptions: { show: { operation: ['fail'] } },
			},
			{
				displayName: 'Failure',
				name: 'failure',
				type: 'options',
				options: [
					{
						name: 'Retryable',
						value: 'failed_retryable',
						description: 'The next delivery of the event reclaims the run',
					},
					{
						name: 'Terminal',
						value: 'failed_terminal',
						description: 'The run stays failed until an operator replays it',
					},
				],
				default: 'failed_retryable',
				displayOptions: { show: { operation: ['fail'] } },
			},
			{
				displayName: 'Error Class',
				name: 'errorClass',
				type: 'string',
				default: '',
				placeholder: 'model_unavailable',
				description: 'A short stable class for dashboards and retries',
				displayOptions: { show: { operation: ['fail'] } },
			},
			{
				displayName: 'Reason',
				name: 'reason',
				type: 'string',
				default:
					'=n8n execution {{ $execution.id }}: {{ $json.error?.message || $json.execution?.error?.message || "failed" }}',
				displayOptions: { show: { operation: ['fail'] } },
			},
			// ---- get run
			{
				displayName: 'Idempotency Key',
				name: 'runKey',
				type: 'string',
				default: '',
				description: 'Empty: the run the item carries',
				displayOptions: { show: { operation: ['getRun'] } },
			},
			// ---- decide
			{
				displayName: 'Approval ID',
				name: 'approvalId',
				type: 'string',
				required: true,
				default: '',
				placeholder: '5b0e7a52-6c1d-4f0e-9a51-0c3a7d2b9e14',
				description:
					'The challenge decided on: an approval_id of GET /v1/approvals?state=pending (one per approver entry)',
				displayOptions: { show: { operation: ['decide'] } },
			},
			{
				displayName: 'Subject',
				name: 'subject',
				type: 'string',
				required: true,
				default: '',
				placeholder: 'anna.kowalska@example.com',
				description:
					'The person deciding, as the contract’s approvers name people; this workflow vouches for who they are',
				displayOptions: { show: { operation: ['decide'] } },
			},
			{
				displayName: 'Groups',
				name: 'groups',
				type: 'string',
				default: '',
				placeholder: 'support, billing',
				description:
					'The person’s groups, separated by commas, for approver entries group:NAME (empty: none)',
				displayOptions: { show: { operation: ['decide'] } },
			},
			{
				displayName: 'Decision',
				name: 'decision',
				type: 'options',
				options: [
					{ name: 'Approve', value: 'approve' },
					{ name: 'Reject', value: 'reject' },
				],
				default: 'approve',
				displayOptions: { show: { operation: ['decide'] } },
			},
			{
				displayName: 'Reason',
				name: 'decisionReason',
				type: 'string',
				default: '',
				description: 'Why, in the person’s words (plain text, at most 512 bytes)',
				displayOptions: { show: { operation: ['decide'] } },
			},
			{
				displayName: 'Edits',
				name: 'edits',
				type: 'json',
				default: '{}',
				description:
					'With Approve: corrections of the contract’s editable members, {"body": "…"} (empty: none)',
				displayOptions: { show: { operation: ['decide'] } },
			},
			{
				displayName: 'Draft Hash',
				name: 'draft',
				type: 'string',
				default: '',
				description:
					'The output_hash of the draft the person read (empty: not checked); another current draft is refused',
				displayOptions: { show: { operation: ['decide'] } },
			},
		],
	};

	methods = {
		// The choices come from GET /v1/contracts; an expression may name
		// anything else (the contract check then says what is wrong).
		loadOptions: {
			async getContracts(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				return await loadChoices(this, 'name');
			},
			async getEffectTypes(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				return await loadChoices(this, 'effect_types');
			},
			async getEffectTargets(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				return await loadChoices(this, 'effect_targets');
			},
		},
		credentialTest: {
			async oncegateApiTest(
				this: ICredentialTestFunctions,
				credential: ICredentialsDecrypted,
			): Promise<INodeCredentialTestResult> {
				const data = credential.data ?? {};
				return await checkConnection(String(data.baseUrl ?? ''), String(data.apiKey ?? ''));
			},
		},
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const operation = this.getNodeParameter('operation', 0) as string;
		if (operation === 'decide' && isTool(this)) {
			throw new NodeOperationError(
				this.getNode(),
				'Decide cannot run as an AI-agent tool: it records a person’s decision, which an agent cannot vouch for.',
			);
		}
		if (operation === 'submitAndWait' && isTool(this)) {
			throw new NodeOperationError(
				this.getNode(),
				'Submit Output and Wait for Decision cannot run as an AI-agent tool: a tool call cannot wait for a person. Use it in the workflow itself.',
			);
		}
		const api = await caller(this);
		switch (operation) {
			case 'claim':
				return await claim(this, api);
			case 'submitAndWait':
				return await submitAndWait(this, api);
			case 'complete':
			case 'fail':
				return await transition(this, api, operation);
			case 'renewLease':
				return await renew(this, api);
			case 'getRun':
				return await getRun(this, api);
			case 'decide':
				return await decide(this, api);
			default:
				throw new NodeOperationError(this.getNode(), `Unknown operation ${operation}`);
		}
	}

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		return await decisionCallback(this, await caller(this));
	}
}

function jsonParameter(fns: IExecuteFunctions, name: string, i: number): unknown {
	const v = fns.getNodeParameter(name, i, undefined) as unknown;
	if (typeof v === 'string') {
		if (v.trim() === '') return {};
		try {
			return JSON.parse(v) as unknown;
		} catch {
			throw new NodeOperationError(fns.getNode(), `${name} is not JSON`, { itemIndex: i });
		}
	}
	return v;
}

async function claim(fns: IExecuteFunctions, api: OncegateCaller): Promise<INodeExecutionData[][]> {
	const items = fns.getInputData();
	const out: INodeExecutionData[][] = [[], [], []];
	for (let i = 0; i < items.length; i++) {
		const key = String(fns.getNodeParameter('key', i));
		const body: IDataObject = {
			key,
			payload: jsonParameter(fns, 'payload', i) as IDataObject,
			workflow_version: String(fns.getNodeParameter('workflowVersion', i, '')),
			trigger: String(fns.getNodeParameter('trigger', i, 'webhook:n8n')),
			correlation_id: `n8n-execution-${fns.getExecutionId()}`,
		};
		const lease = Number(fns.getNodeParameter('leaseSeconds', i, 0));
		if (lease > 0) body.lease_seconds = lease;
		if (fns.getNodeParameter('checkCallback', i, true) !== false) {
			body.callback_url = String(fns.evaluateExpression('{{ $execution.resumeUrl }}', i));
		}
		const answer = await oncegateCall(api, 'POST', '/v1/runs', body);
		const json = items[i].json;
		if (answer.body.error === 'callback_not_allowed') {
			// a setup error, not an outcome of the event: the execution stops here
			throw new NodeOperationError(
				fns.getNode(),
				`oncegate could not call this n8n back: ${describeProblem(answer)}`,
				{
					itemIndex: i,
					description:
						'n8n builds resume URLs from its WEBHOOK_URL setting; oncegate calls back only the origins listed in callback_origins (oncegate.conf). Make them agree.',
				},
			);
		}
		if (answer.status === 201) {
			const run = contextFrom(undefined, answer.body, key);
			remember(fns, run);
			out[0].push({
				json: { ...json, oncegate: { ...run, state: answer.body.state as string } },
				pairedItem: i,
			});
		} else if (answer.status === 200 && answer.body.outcome === 'duplicate') {
			out[1].push({
				json: {
					...json,
					oncegate: {
						key,
						state: answer.body.state,
						version: answer.body.version,
						...(answer.body.result !== undefined ? { result: answer.body.result } : {}),
						// who decided a finished run (a rejected one reads rejected, not failed)
						...(answer.body.decision !== undefined ? { decision: answer.body.decision } : {}),
						...(answer.body.lease_expires_at !== undefined
							? { lease_expires_at: answer.body.lease_expires_at }
							: {}),
					},
				},
				pairedItem: i,
			});
		} else if (infrastructure(answer)) {
			throw new NodeOperationError(
				fns.getNode(),
				`oncegate could not claim ${key}: ${describeProblem(answer)}`,
				{
					itemIndex: i,
				},
			);
		} else {
			out[2].push({ json: { ...json, oncegate: { key }, error: refusal(answer) }, pairedItem: i });
		}
	}
	return out;
}

// The context for the approver: the members the user filled (empty ones
// left out), or nothing at all.
function approverContext(fns: IExecuteFunctions, i: number): IDataObject | undefined {
	const given = (fns.getNodeParameter('approverContext', i, {}) ?? {}) as IDataObject;
	const context: IDataObject = {};
	for (const name of ['subject', 'customer', 'message']) {
		const v = given[name];
		if (typeof v === 'string' && v.trim() !== '') context[name] = v;
	}
	return Object.keys(context).length > 0 ? context : undefined;
}

async function submitAndWait(
	fns: IExecuteFunctions,
	api: OncegateCaller,
): Promise<INodeExecutionData[][]> {
	const items = fns.getInputData();
	const out: INodeExecutionData[][] = [[], [], [], [], [], []];
	let waiting: INodeExecutionData | undefined;
	for (let i = 0; i < items.length; i++) {
		const json = items[i].json;
		const back = json.oncegate as IDataObject | undefined;
		// The decision, back from the wait: routed to its output.
		if (back && back.resumed === true && typeof back.decision === 'string') {
			const index = { approved: 1, rejected: 2, expired: 3, changes_requested: 5 }[
				back.decision
			];
			if (index === undefined) {
				throw new NodeOperationError(fns.getNode(), `Unknown decision ${back.decision}`, {
					itemIndex: i,
				});
			}
			// changes requested: the run is this execution's again (a new
			// draft under the same lease owner, at the version read back)
			if (index === 5 && isRunContext(back)) remember(fns, back);
			out[index].push({ json: { ...json, oncegate: { ...back, resumed: false } }, pairedItem: i });
			continue;
		}
		const run = findRun(fns, i);
		const contract = String(fns.getNodeParameter('contract', i));
		const sourceUrl = String(fns.getNodeParameter('sourceUrl', i, ''));
		// Who asked, as the workflow knows it: never a name of this node's
		// own making, which would be nobody separation of duties can compare.
		const requestedBy = String(fns.getNodeParameter('requestedBy', i, '') ?? '').trim();
		const body: IDataObject = {
			lease_owner: run.lease_owner,
			version: run.version,
			contract,
			output: parseOutput(fns.getNodeParameter('output', i, '')),
			model: {
				provider: String(
					fns.getNodeParameter('modelProvider', i, 'openai-compatible') || 'unknown',
				),
				name: String(fns.getNodeParameter('modelName', i, '') || 'unknown'),
				revision: String(fns.getNodeParameter('modelRevision', i, '') || 'unknown'),
			},
			effect: {
				type: String(fns.getNodeParameter('effectType', i)),
				target: String(fns.getNodeParameter('effectTarget', i)),
				payload: jsonParameter(fns, 'effectPayload', i) as IDataObject,
			},
			callback_url: String(fns.evaluateExpression('{{ $execution.resumeUrl }}', i)),
		};
		if (requestedBy !== '') body.requested_by = requestedBy;
		if (sourceUrl !== '') body.source_url = sourceUrl;
		const context = approverContext(fns, i);
		if (context !== undefined) body.context = context;
		const answer = await oncegateCall(api, 'POST', runPath(run.key, '/output'), body);
		const outcome = answer.body.outcome;
		if (answer.status === 202 && outcome === 'approved') {
			const next = { ...run, version: Number(answer.body.version ?? run.version) };
			remember(fns, next);
			out[1].push({
				json: {
					oncegate: {
						...next,
						state: 'approved',
						decision: 'approved',
						decided_by: 'contract',
						effect_id: answer.body.effect_id,
						...(answer.body.not_before !== undefined ? { not_before: answer.body.not_before } : {}),
					},
				},
				pairedItem: i,
			});
		} else if (answer.status === 202 && outcome === 'awaiting_human') {
			if (items.length !== 1) {
				throw runError(
					fns,
					'Submit Output and Wait for Decision waits for one run per execution: split the items first',
					run,
					i,
				);
			}
			const next = { ...run, version: Number(answer.body.version ?? run.version) };
			remember(fns, next);
			waiting = {
				json: {
					oncegate: { ...next, state: 'awaiting_human', notified: answer.body.notified === true },
				},
				pairedItem: i,
			};
		} else if (answer.status === 422 && outcome === 'invalid') {
			const next = { ...run, version: Number(answer.body.version ?? run.version) };
			remember(fns, next);
			out[4].push({
				json: {
					oncegate: { ...next, state: 'processing' },
					errors: answer.body.errors,
					repairs_left: answer.body.repairs_left,
				},
				pairedItem: i,
			});
		} else if (answer.status === 422 && outcome === 'failed_terminal') {
			const next = { ...run, version: Number(answer.body.version ?? run.version) };
			throw runError(
				fns,
				`The model output broke contract ${contract} after its repairs: oncegate made run ${run.key} failed_terminal (validation)`,
				next,
				i,
				JSON.stringify(answer.body.errors ?? []),
			);
		} else {
			throw runError(
				fns,
				`oncegate refused the output of ${run.key}: ${describeProblem(answer)}`,
				run,
				i,
			);
		}
	}
	if (waiting !== undefined) {
		// oncegate calls $execution.resumeUrl with the decision (approved,
		// rejected, or expired when nobody decides in time): no wait limit here.
		await fns.putExecutionToWait(WAIT_INDEFINITELY);
		return [[waiting], [], [], [], [], []];
	}
	return out;
}

/**
 * oncegate's decision callback ({key, decision, decided_by, approval_id,
 * feedback?}).
 * The run is read back from oncegate with the node's credential, and the
 * decision is taken from it (not from the request), so only a decision
 * oncegate recorded for the run this execution waits on resumes it.
 */
export async function decisionCallback(
	fns: IWebhookFunctions,
	api: OncegateCaller,
): Promise<IWebhookResponseData> {
	const body = fns.getBodyData();
	const res = fns.getResponseObject();
	const key = typeof body.key === 'string' ? body.key : '';
	const ignore = (status: number, error: string): IWebhookResponseData => {
		res.status(status).json({ error });
		return { noWebhookResponse: true };
	};
	if (key === '') return ignore(400, 'no run key');
	const answer = await oncegateCall(api, 'GET', runPath(key));
	if (answer.status !== 200) return ignore(409, 'no such run');
	const run = answer.body;
	const req = fns.getRequestObject();
	const here = new URL(req.originalUrl ?? req.url ?? '/', 'http://n8n.invalid').pathname;
	const waitsHere =
		typeof run.callback_url === 'string' &&
		new URL(run.callback_url, 'http://n8n.invalid').pathname === here;
	if (!waitsHere) return ignore(409, 'this execution does not wait for that run');
	const votes = Array.isArray(run.votes) ? (run.votes as IDataObject[]) : [];
	// the final vote of the newest round that has one
	const final = votes.filter((v) => v.final === true).pop();
	const changes = final?.decision === 'changes_requested';
	let decision: string | undefined;
	if (run.decision === 'approve') decision = 'approved';
	else if (run.decision === 'reject') decision = 'rejected';
	else if (run.state === 'failed_terminal' && run.error_class === 'approval_expired')
		decision = 'expired';
	else if (changes && run.state === 'processing') decision = 'changes_requested';
	// changes requested once the repair attempts were spent: the run ended
	else if (changes && run.state === 'failed_terminal' && run.error_class === 'redrafts_spent')
		decision = 'rejected';
	if (decision === undefined) return ignore(409, 'the run is not decided');
	const effect = decision === 'approved' ? effectOf(run) : undefined;
	const item: IDataObject = {
		oncegate: {
			key,
			version: run.version,
			state: run.state,
			decision,
			resumed: true,
			...(run.decided_by !== undefined ? { decided_by: run.decided_by } : {}),
			...(run.decided_at !== undefined ? { decided_at: run.decided_at } : {}),
			...(decision === 'rejected' && !changes
				? { reason: final?.reason ?? run.reason ?? '' }
				: {}),
			...(decision === 'rejected' && changes
				? { reason: `${String(run.reason ?? '')}; feedback: ${String(final?.reason ?? '')}` }
				: {}),
			// a new draft: the lease to hand it in under, the feedback and
			// the draft it is about
			...(decision === 'changes_requested'
				? {
						lease_owner: run.lease_owner,
						round: run.round,
						feedback: final?.reason ?? '',
						changes_requested_by: final?.subject,
						previous_output: run.output,
					}
				: {}),
			...(decision === 'expired' ? { reason: run.reason ?? 'approval expired' } : {}),
			...(effect ? { effect_id: effect.effect_id, effect_type: effect.type } : {}),
			...(run.edit !== undefined ? { edited: true } : {}),
		},
	};
	return { webhookResponse: { received: true }, workflowData: [[{ json: item }]] };
}

async function transition(
	fns: IExecuteFunctions,
	api: OncegateCaller,
	operation: 'complete' | 'fail',
): Promise<INodeExecutionData[][]> {
	const items = fns.getInputData();
	const out: INodeExecutionData[][] = [[]];
	for (let i = 0; i < items.length; i++) {
		let run: RunContext;
		if (operation === 'fail' && fns.getNodeParameter('runFrom', i, 'item') === 'errorTrigger') {
			const named = runFromFailure(items[i].json);
			if (named === undefined) {
				out[0].push({
					json: { oncegate: { reported: false, why: 'the failed node named no oncegate run' } },
					pairedItem: i,
				});
				continue;
			}
			run = named;
		} else {
			run = findRun(fns, i);
		}
		const body: IDataObject = { lease_owner: run.lease_owner, version: run.version };
		if (operation === 'complete') {
			body.to = 'completed';
			body.result = jsonParameter(fns, 'result', i) as IDataObject;
		} else {
			body.to = String(fns.getNodeParameter('failure', i));
			const errorClass = String(fns.getNodeParameter('errorClass', i, ''));
			if (errorClass !== '') body.error_class = errorClass;
			body.reason = String(fns.getNodeParameter('reason', i, '')).slice(0, 1000);
		}
		const answer = await oncegateCall(api, 'POST', runPath(run.key, '/transition'), body);
		if (answer.status === 200) {
			const next = { ...run, version: Number(answer.body.version ?? run.version) };
			remember(fns, next);
			out[0].push({
				json: { oncegate: { ...next, state: answer.body.state, reported: true } },
				pairedItem: i,
			});
			continue;
		}
		if (answer.status === 409 && answer.body.error === 'lease_lost' && operation === 'fail') {
			// oncegate may have settled the run already (the repair budget
			// spent): then there is nothing left to report.
			const now = await oncegateCall(api, 'GET', runPath(run.key));
			const state = now.body.state;
			if (
				now.status === 200 &&
				(state === 'failed_terminal' ||
					state === 'failed_retryable' ||
					state === 'completed' ||
					state === 'rejected')
			) {
				out[0].push({
					json: {
						oncegate: {
							key: run.key,
							version: now.body.version,
							state,
							error_class: now.body.error_class,
							reported: false,
							already_settled: true,
						},
					},
					pairedItem: i,
				});
				continue;
			}
		}
		throw runError(
			fns,
			`oncegate refused to ${operation} ${run.key}: ${describeProblem(answer)}`,
			run,
			i,
		);
	}
	return out;
}

async function renew(fns: IExecuteFunctions, api: OncegateCaller): Promise<INodeExecutionData[][]> {
	const items = fns.getInputData();
	const out: INodeExecutionData[][] = [[]];
	for (let i = 0; i < items.length; i++) {
		const run = findRun(fns, i);
		const body: IDataObject = { lease_owner: run.lease_owner, version: run.version };
		const lease = Number(fns.getNodeParameter('leaseSeconds', i, 0));
		if (lease > 0) body.lease_seconds = lease;
		const answer = await oncegateCall(api, 'POST', runPath(run.key, '/lease'), body);
		if (answer.status !== 200) {
			throw runError(
				fns,
				`oncegate refused to renew the lease of ${run.key}: ${describeProblem(answer)}`,
				run,
				i,
			);
		}
		const next = contextFrom(run, answer.body, run.key);
		remember(fns, next);
		out[0].push({ json: { ...items[i].json, oncegate: next }, pairedItem: i });
	}
	return out;
}

async function getRun(
	fns: IExecuteFunctions,
	api: OncegateCaller,
): Promise<INodeExecutionData[][]> {
	const items = fns.getInputData();
	const out: INodeExecutionData[][] = [[]];
	for (let i = 0; i < items.length; i++) {
		let key = String(fns.getNodeParameter('runKey', i, ''));
		if (key === '') key = findRun(fns, i).key;
		const answer = await oncegateCall(api, 'GET', runPath(key));
		if (answer.status !== 200) {
			throw new NodeOperationError(
				fns.getNode(),
				`oncegate has no run ${key}: ${describeProblem(answer)}`,
				{
					itemIndex: i,
				},
			);
		}
		out[0].push({ json: answer.body, pairedItem: i });
	}
	return out;
}

/** The choices of one Contract / Effect Type / Effect Target field, from GET /v1/contracts. */
async function loadChoices(
	fns: ILoadOptionsFunctions,
	member: 'name' | 'effect_types' | 'effect_targets',
): Promise<INodePropertyOptions[]> {
	const answer = await oncegateCall(await caller(fns), 'GET', '/v1/contracts');
	if (answer.status !== 200) {
		throw new NodeOperationError(
			fns.getNode(),
			`oncegate did not list its contracts: ${describeProblem(answer)}`,
		);
	}
	const contract = member === 'name' ? undefined : fns.getCurrentNodeParameter('contract');
	return contractOptions(answer.body, member, typeof contract === 'string' ? contract : undefined);
}

async function decide(fns: IExecuteFunctions, api: OncegateCaller): Promise<INodeExecutionData[][]> {
	const items = fns.getInputData();
	const out: INodeExecutionData[][] = [[], []];
	for (let i = 0; i < items.length; i++) {
		const id = String(fns.getNodeParameter('approvalId', i, '')).trim();
		if (id === '') {
			throw new NodeOperationError(fns.getNode(), 'Decide needs the Approval ID', { itemIndex: i });
		}
		const body = decisionBody({
			subject: String(fns.getNodeParameter('subject', i, '')),
			groups: String(fns.getNodeParameter('groups', i, '')),
			decision: String(fns.getNodeParameter('decision', i, 'approve')),
			reason: String(fns.getNodeParameter('decisionReason', i, '')),
			edits: jsonParameter(fns, 'edits', i),
			draft: String(fns.getNodeParameter('draft', i, '')),
		});
		const answer = await oncegateCall(
			api,
			'POST',
			`/v1/approvals/${encodeURIComponent(id)}/decisions`,
			body,
		);
		if (answer.status === 200) {
			out[0].push({ json: { ...items[i].json, oncegate: answer.body }, pairedItem: i });
		} else if (infrastructure(answer)) {
			// no decide scope (403 forbidden) is a setup error, as an unknown key is
			const person = answer.body.error === 'not_an_approver' || answer.body.error === 'separation_of_duties';
			if (!person) {
				throw new NodeOperationError(
					fns.getNode(),
					`oncegate could not record the decision on ${id}: ${describeProblem(answer)}`,
					{
						itemIndex: i,
						description:
							answer.body.error === 'forbidden'
								? 'The API client needs the decide scope for this contract and approver: oncegatectl client grant NAME --decide CONTRACT --approver ENTRY --reason TEXT'
								: undefined,
					},
				);
			}
			out[1].push({ json: { ...items[i].json, error: refusal(answer) }, pairedItem: i });
		} else {
			out[1].push({ json: { ...items[i].json, error: refusal(answer) }, pairedItem: i });
		}
	}
	return out;
}
