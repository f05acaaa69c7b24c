// The node's unit tests: each operation against canned oncegate answers
// (test/harness.mjs records the requests in place of the network), on the
// built package (dist/), as n8n loads it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { describe, it } from 'node:test';
import { createRequire } from 'node:module';
const { WAIT_INDEFINITELY } = createRequire(import.meta.url)('n8n-workflow');
import { OncegateApi } from '../dist/credentials/OncegateApi.credentials.js';
import { Oncegate, OUTPUTS, runFromFailure } from '../dist/nodes/Oncegate/Oncegate.node.js';
import { fakeExecute, NODE } from './harness.mjs';
const node = new Oncegate();
const KEY = 'acme:support-reply:ticket-Ж-4711:v1';
const OWNER = '1c0f6c1e-8a4b-4f5e-9d3c-2b7a9e0d4f11';
const TICKET = {
	ticket_id: 4711,
	customer_email: 'ольга.петрова@пример.рф',
	subject: 'Где моя посылка? 荷物はどこ? 📦',
	message:
		'Здравствуйте! Заказ №4711 не пришёл уже две недели. 注文した商品がまだ届いていません。 مرحبا، أين طلبي؟ 🙏',
};
const DRAFT = {
	subject: 'Re: Где моя посылка? 荷物はどこ? 📦',
	body: 'Ольга, простите за задержку — посылка в пути. 配送状況を確認しました。 🚚',
	tone: 'friendly',
	confidence: 0.92,
};
async function run(ctx) {
	return await node.execute.call(ctx);
}
function claimedItem(version = 1) {
	return { json: { body: TICKET, oncegate: { key: KEY, lease_owner: OWNER, version } } };
}
/** The model's answer, as an HTTP Request node hands it on: no oncegate fields left. */
function modelAnswer(content) {
	return {
		json: {
			id: 'chatcmpl-81',
			model: 'gpt-4o-mini-2024-07-18',
			system_fingerprint: 'fp_0ba0d124f1',
			choices: [{ index: 0, message: { role: 'assistant', content } }],
		},
		pairedItem: 0,
	};
}
const SUBMIT = {
	operation: 'submitAndWait',
	contract: 'support_reply',
	output: JSON.stringify(DRAFT),
	modelName: 'gpt-4o-mini-2024-07-18',
	modelRevision: 'fp_0ba0d124f1',
	modelProvider: 'openai-compatible',
	effectType: 'email.send',
	effectTarget: 'demo_smtp',
	effectPayload: JSON.stringify({ to: TICKET.customer_email, ticket: 4711 }),
	sourceUrl: 'https://crm.example/ticket/4711',
	requestedBy: ' Ольга Петрова <olga.petrova@helpdesk.example> ',
};
const UPSTREAM = [{ name: 'Claim the ticket', type: NODE.type, item: claimedItem() }];
// The body Submit hands in with these parameters over SUBMIT's (a person decides).
async function submittedBody(params) {
	const { ctx, run: r } = fakeExecute({
		params: { ...SUBMIT, ...params },
		items: [modelAnswer(JSON.stringify(DRAFT))],
		parents: UPSTREAM,
		answers: [
			{
				status: 202,
				body: { outcome: 'awaiting_human', approvals: [], notified: true, version: 1 },
			},
		],
	});
	await run(ctx);
	return r.requests[0].body;
}
describe('Claim', () => {
	const params = {
		operation: 'claim',
		key: KEY,
		payload: TICKET,
		workflowVersion: 'support-reply@ogSupportReply01',
		trigger: 'webhook:helpdesk',
		leaseSeconds: 120,
	};
	it('refuses an n8n origin oncegate cannot call back: the node fails at the claim', async () => {
		const { ctx, run: r } = fakeExecute({
			params,
			items: [{ json: { body: TICKET } }],
			resumeUrl: 'http://127.0.0.1:5679/webhook-waiting/4711',
			answers: [
				{
					status: 422,
					body: {
						error: 'callback_not_allowed',
						detail:
							"callback_url's origin http://127.0.0.1:5679 is not one of oncegate's callback_origins; add http://127.0.0.1:5679 to callback_origins in oncegate.conf and reload, or set n8n's WEBHOOK_URL to an origin listed there",
					},
				},
			],
		});
		await assert.rejects(
			run(ctx),
			/could not call this n8n back: callback_not_allowed: callback_url's origin http:\/\/127\.0\.0\.1:5679 /,
		);
		assert.equal(r.requests[0].body.callback_url, 'http://127.0.0.1:5679/webhook-waiting/4711');
		const off = fakeExecute({
			params: { ...params, checkCallback: false },
			items: [{ json: { body: TICKET } }],
			answers: [
				{ status: 201, body: { outcome: 'claimed', key: KEY, lease_owner: OWNER, version: 1 } },
			],
		});
		await run(off.ctx);
		assert.equal(off.run.requests[0].body.callback_url, undefined);
	});
	it('claims a new key: the run travels on the claimed output with its lease', async () => {
		const { ctx, run: r } = fakeExecute({
			params,
			items: [{ json: { body: TICKET } }],
			answers: [
				{
					status: 201,
					body: {
						outcome: 'claimed',
						key: KEY,
						state: 'processing',
						lease_owner: OWNER,
						version: 1,
						lease_expires_at: '2026-12-01T20:40:00.000Z',
						attempt: 1,
						payload_hash: 'sha256:' + 'a'.repeat(64),
					},
				},
			],
		});
		const out = await run(ctx);
		assert.equal(r.requests.length, 1);
		assert.equal(r.requests[0].method, 'POST');
		assert.equal(r.requests[0].url, 'https://gate.example.com/v1/runs');
		assert.equal(r.requests[0].credential, 'oncegateApi');
		assert.deepEqual(r.requests[0].body, {
			key: KEY,
			payload: TICKET,
			workflow_version: 'support-reply@ogSupportReply01',
			trigger: 'webhook:helpdesk',
			correlation_id: 'n8n-execution-4711',
			lease_seconds: 120,
			callback_url: 'http://127.0.0.1:5678/webhook-waiting/4711',
		});
		assert.equal(out.length, 3);
		assert.equal(out[1].length + out[2].length, 0);
		assert.deepEqual(out[0][0].json.body, TICKET, 'the event stays on the item');
		assert.deepEqual(out[0][0].json.oncegate, {
			key: KEY,
			lease_owner: OWNER,
			version: 1,
			lease_expires_at: '2026-12-01T20:40:00.000Z',
			attempt: 1,
			state: 'processing',
		});
	});
	it('answers a duplicate on its own output, with the prior result', async () => {
		const result = { mail: 'sent', message_id: '<4711@demo.example>', текст: '返信済み ✅' };
		const { ctx } = fakeExecute({
			params,
			items: [{ json: { body: TICKET } }],
			answers: [
				{
					status: 200,
					body: { outcome: 'duplicate', key: KEY, state: 'completed', version: 4, result },
				},
			],
		});
		const out = await run(ctx);
		assert.equal(out[0].length, 0);
		assert.deepEqual(out[1][0].json.oncegate, { key: KEY, state: 'completed', version: 4, result });
		assert.equal(out[1][0].json.oncegate.lease_owner, undefined, 'a duplicate holds no lease');
	});
	it('puts a payload mismatch on the error output, with both hashes', async () => {
		const problem = {
			type: 'https://oncegate.dev/problems/payload_mismatch',
			title: 'Payload mismatch',
			status: 422,
			detail: 'the key was claimed with another payload',
			error: 'payload_mismatch',
			key: KEY,
			payload_hash: 'sha256:' + 'b'.repeat(64),
			stored_payload_hash: 'sha256:' + 'c'.repeat(64),
		};
		const { ctx } = fakeExecute({
			params,
			items: [{ json: { body: { ...TICKET, message: 'другое сообщение' } } }],
			answers: [{ status: 422, body: JSON.stringify(problem) }],
		});
		const out = await run(ctx);
		assert.equal(out[0].length + out[1].length, 0);
		const error = out[2][0].json.error;
		assert.equal(error.code, 'payload_mismatch');
		assert.equal(error.status, 422);
		assert.equal(error.stored_payload_hash, problem.stored_payload_hash);
		assert.match(
			String(error.message),
			/payload_mismatch: the key was claimed with another payload/,
		);
	});
	it('fails the node when oncegate is unavailable or the key is refused', async () => {
		for (const status of [503, 401]) {
			const { ctx } = fakeExecute({
				params,
				items: [{ json: { body: TICKET } }],
				answers: [
					{ status, body: { error: status === 401 ? 'unauthorized' : 'unavailable', status } },
				],
			});
			await assert.rejects(run(ctx), /oncegate could not claim/);
		}
	});
});
describe('Submit output and wait for decision', () => {
	it('hands in the output with the lease of the claim upstream and waits for the callback', async () => {
		const { ctx, run: r } = fakeExecute({
			params: SUBMIT,
			items: [modelAnswer(JSON.stringify(DRAFT))],
			parents: UPSTREAM,
			answers: [
				{
					status: 202,
					body: { outcome: 'awaiting_human', approvals: [], notified: true, version: 1 },
				},
			],
		});
		const out = await run(ctx);
		const req = r.requests[0];
		assert.equal(req.url, `https://gate.example.com/v1/runs/${encodeURIComponent(KEY)}/output`);
		assert.deepEqual(req.body, {
			lease_owner: OWNER,
			version: 1,
			contract: 'support_reply',
			output: DRAFT,
			model: {
				provider: 'openai-compatible',
				name: 'gpt-4o-mini-2024-07-18',
				revision: 'fp_0ba0d124f1',
			},
			effect: {
				type: 'email.send',
				target: 'demo_smtp',
				payload: { to: TICKET.customer_email, ticket: 4711 },
			},
			requested_by: 'Ольга Петрова <olga.petrova@helpdesk.example>',
			callback_url: 'http://127.0.0.1:5678/webhook-waiting/4711',
			source_url: 'https://crm.example/ticket/4711',
		});
		assert.equal(
			r.waitedUntil?.getTime(),
			WAIT_INDEFINITELY.getTime(),
			'oncegate ends the wait (expired), not n8n',
		);
		assert.equal(out[0].length, 1);
		assert.equal(out[0][0].json.oncegate.state, 'awaiting_human');
	});
	it('takes the requester from the field the user fills, never from the workflow', async () => {
		for (const [requestedBy, want] of [
			['agent.ivanova@helpdesk.example', 'agent.ivanova@helpdesk.example'],
			[
				'Мария Иванова <maria.ivanova@helpdesk.example>',
				'Мария Иванова <maria.ivanova@helpdesk.example>',
			],
			['', undefined],
			['   ', undefined],
		]) {
			const body = await submittedBody({ requestedBy });
			assert.equal(body.requested_by, want, `requestedBy ${JSON.stringify(requestedBy)}`);
			assert.ok(!JSON.stringify(body).includes('n8n:'), 'no requester of the node’s own making');
			assert.ok(!JSON.stringify(body).includes('support reply'), 'the workflow’s name is nobody');
		}
	});
	it('hands in the context for the approver apart from the effect, only what is filled', async () => {
		const message = 'Здравствуйте!\nГде мой заказ 4711? <a href="javascript:alert(1)">x</a>';
		for (const [approverContext, want] of [
			[
				{ subject: 'Заказ 4711 — где посылка? 📦', customer: 'Мария <maria@example.com>', message },
				{ subject: 'Заказ 4711 — где посылка? 📦', customer: 'Мария <maria@example.com>', message },
			],
			[{ subject: 'طلب ٤٧١١', customer: '  ', message: '' }, { subject: 'طلب ٤٧١١' }],
			[{}, undefined],
		]) {
			const body = await submittedBody({ approverContext });
			assert.deepEqual(body.context, want, `approverContext ${JSON.stringify(approverContext)}`);
			assert.deepEqual(body.effect.payload, { to: TICKET.customer_email, ticket: 4711 });
		}
	});
	it('continues at once on approved when the contract’s rules approve', async () => {
		const { ctx, run: r } = fakeExecute({
			params: { ...SUBMIT, contract: 'crm_tag', effectType: 'crm.tag', effectTarget: 'demo_http' },
			items: [modelAnswer('{"tag":"lead","confidence":0.97,"reason":"спрашивает цену 💶"}')],
			parents: UPSTREAM,
			answers: [
				{
					status: 202,
					body: {
						outcome: 'approved',
						effect_id: '0d6e7a52-3c55-4d3f-9a0a-2c0c5d1e9b77',
						version: 2,
					},
				},
			],
		});
		const out = await run(ctx);
		assert.equal(r.waitedUntil, undefined);
		const og = out[1][0].json.oncegate;
		assert.equal(og.decision, 'approved');
		assert.equal(og.effect_id, '0d6e7a52-3c55-4d3f-9a0a-2c0c5d1e9b77');
		assert.equal(og.decided_by, 'contract');
	});
	it('answers an invalid output on invalid; the repair is handed in under the new version', async () => {
		const errors = [{ path: '/tone', rule: 'enum', message: 'must be one of formal, friendly' }];
		const custom = new Map();
		const first = fakeExecute({
			params: SUBMIT,
			items: [modelAnswer('{"subject":"Re","body":"…","tone":"sarcastic","confidence":7}')],
			parents: UPSTREAM,
			customData: custom,
			answers: [
				{
					status: 422,
					body: { outcome: 'invalid', errors, repairs_left: 1, state: 'processing', version: 2 },
				},
			],
		});
		const out = await run(first.ctx);
		assert.equal(first.run.waitedUntil, undefined);
		assert.deepEqual(out[4][0].json.errors, errors);
		assert.equal(out[4][0].json.repairs_left, 1);
		assert.equal(out[4][0].json.oncegate.version, 2);
		// The repaired answer comes back through the model node: the lease is
		// found on the claim upstream, the version in the execution's record.
		const second = fakeExecute({
			params: SUBMIT,
			items: [modelAnswer(JSON.stringify(DRAFT))],
			parents: UPSTREAM,
			customData: custom,
			answers: [
				{
					status: 202,
					body: { outcome: 'awaiting_human', approvals: [], notified: true, version: 2 },
				},
			],
		});
		await run(second.ctx);
		assert.equal(second.run.requests[0].body?.version, 2);
	});
	it('takes the newest version of the run upstream, from the invalid output the repair came through', async () => {
		const invalidItem = {
			json: {
				oncegate: { key: KEY, lease_owner: OWNER, version: 2, state: 'processing' },
				errors: [],
			},
		};
		const { ctx, run: r } = fakeExecute({
			params: SUBMIT,
			items: [modelAnswer(JSON.stringify(DRAFT))],
			parents: [...UPSTREAM, { name: 'Submit the draft', type: NODE.type, item: invalidItem }],
			answers: [
				{
					status: 202,
					body: { outcome: 'awaiting_human', approvals: [], notified: true, version: 2 },
				},
			],
		});
		await run(ctx);
		assert.equal(r.requests[0].body?.version, 2);
	});

	it('hands text that is not JSON in as it is, for the contract to judge', async () => {
		const { ctx, run: r } = fakeExecute({
			params: { ...SUBMIT, output: 'Конечно! Вот ответ: 你好' },
			items: [modelAnswer('x')],
			parents: UPSTREAM,
			answers: [
				{ status: 422, body: { outcome: 'invalid', errors: [], repairs_left: 1, version: 2 } },
			],
		});
		await run(ctx);
		assert.deepEqual(r.requests[0].body?.output, { unparseable: 'Конечно! Вот ответ: 你好' });
	});
	it('fails with the run named when the repair budget is spent, so the error workflow can find it', async () => {
		const { ctx } = fakeExecute({
			params: SUBMIT,
			items: [modelAnswer('{"tone":"sarcastic"}')],
			parents: UPSTREAM,
			answers: [
				{
					status: 422,
					body: {
						outcome: 'failed_terminal',
						errors: [],
						repairs_left: 0,
						state: 'failed_terminal',
						version: 3,
					},
				},
			],
		});
		let message = '';
		await assert.rejects(run(ctx), (e) => {
			message = e.message;
			return /broke contract support_reply/.test(e.message);
		});
		const named = runFromFailure({ execution: { error: { message } } });
		assert.deepEqual(named, { key: KEY, lease_owner: OWNER, version: 3 });
	});
	it('fails on a refusal (the lease was lost)', async () => {
		const { ctx } = fakeExecute({
			params: SUBMIT,
			items: [claimedItem()],
			answers: [{ status: 409, body: { error: 'lease_lost', detail: 'the lease expired' } }],
		});
		await assert.rejects(run(ctx), /refused the output.*lease_lost/);
	});
	it('needs a claim upstream', async () => {
		const { ctx } = fakeExecute({ params: SUBMIT, items: [modelAnswer('{}')], answers: [] });
		await assert.rejects(run(ctx), /put an oncegate Claim before this node/);
	});
	it('routes a decision back from the wait to its output, without calling oncegate', async () => {
		for (const [decision, index] of [
			['approved', 1],
			['rejected', 2],
			['expired', 3],
			['changes_requested', 5],
		]) {
			const { ctx, run: r } = fakeExecute({
				params: SUBMIT,
				items: [
					{ json: { oncegate: { key: KEY, decision, resumed: true, reason: 'Тон не тот 🙅' } } },
				],
				answers: [],
			});
			const out = await run(ctx);
			assert.equal(r.requests.length, 0);
			assert.equal(out[index].length, 1, decision);
			assert.equal(out[index][0].json.oncegate.resumed, false);
		}
	});
});
describe('Decision callback', () => {
	function hook(body, path, answers) {
		const { ctx, run: r } = fakeExecute({ params: {}, items: [], answers });
		const sent = {};
		const res = {
			status(s) {
				sent.status = s;
				return this;
			},
			json(b) {
				sent.body = b;
				return this;
			},
		};
		Object.assign(ctx, {
			getBodyData: () => body,
			getRequestObject: () => ({ originalUrl: path, url: path }),
			getResponseObject: () => res,
		});
		return { ctx: ctx, r, sent };
	}
	const waiting = 'http://127.0.0.1:5678/webhook-waiting/4711';
	it('resumes with the decision oncegate recorded, the reason of a reject included', async () => {
		const run = {
			key: KEY,
			state: 'failed_terminal',
			version: 2,
			decision: 'reject',
			decided_by: 'sam@example.com',
			callback_url: waiting,
			error_class: 'rejected',
			reason: 'Wrong tone for a refund',
			votes: [
				{ decision: 'reject', final: true, reason: 'Неверный тон 🙅', subject: 'sam@example.com' },
			],
			effects: [],
		};
		const { ctx, r } = hook({ key: KEY, decision: 'rejected' }, '/webhook-waiting/4711', [
			{ status: 200, body: run },
		]);
		const answer = await node.webhook.call(ctx);
		assert.equal(r.requests[0].method, 'GET');
		const og = answer.workflowData?.[0][0].json.oncegate;
		assert.equal(og.decision, 'rejected');
		assert.equal(og.reason, 'Неверный тон 🙅');
		assert.equal(og.resumed, true);
	});
	it('names the effect of an approved run', async () => {
		const run = {
			key: KEY,
			state: 'approved',
			version: 2,
			decision: 'approve',
			decided_by: 'sam@example.com',
			callback_url: waiting,
			effects: [
				{ effect_id: 'e-notify', type: 'approval.notify' },
				{ effect_id: 'e-mail', type: 'email.send' },
			],
		};
		const { ctx } = hook({ key: KEY, decision: 'approved' }, '/webhook-waiting/4711', [
			{ status: 200, body: run },
		]);
		const og = (await node.webhook.call(ctx)).workflowData?.[0][0].json.oncegate;
		assert.equal(og.effect_id, 'e-mail');
		assert.equal(og.effect_type, 'email.send');
	});
	it('resumes a request for changes with the feedback, the draft and the lease to redraft under', async () => {
		const run = {
			key: KEY,
			state: 'processing',
			version: 5,
			round: 2,
			lease_owner: '0b9e6c1e-3f0a-4d47-9a53-5d8c0f2f9d11',
			callback_url: waiting,
			output: { subject: 'Возврат', body: 'Черновик один' },
			votes: [
				{ decision: 'approve', final: false, subject: 'li.wei@example.com', round: 1 },
				{
					decision: 'changes_requested',
					final: true,
					subject: 'sam@example.com',
					reason: 'Добавьте номер заказа · أضف رقم الطلب · 请加订单号 🙏',
					round: 1,
				},
			],
			effects: [],
		};
		const { ctx } = hook({ key: KEY, decision: 'changes_requested' }, '/webhook-waiting/4711', [
			{ status: 200, body: run },
		]);
		const og = (await node.webhook.call(ctx)).workflowData?.[0][0].json.oncegate;
		assert.equal(og.decision, 'changes_requested');
		assert.equal(og.feedback, 'Добавьте номер заказа · أضف رقم الطلب · 请加订单号 🙏');
		assert.equal(og.lease_owner, run.lease_owner);
		assert.equal(og.version, 5);
		assert.equal(og.round, 2);
		assert.deepEqual(og.previous_output, run.output);
		// the repair attempts spent: the run ended, and the workflow hears a reject
		const ended = {
			...run,
			state: 'failed_terminal',
			error_class: 'redrafts_spent',
			reason: 'changes were requested, but the contract’s repair attempts are spent',
		};
		const b = hook({ key: KEY, decision: 'changes_requested' }, '/webhook-waiting/4711', [
			{ status: 200, body: ended },
		]);
		const og2 = (await node.webhook.call(b.ctx)).workflowData?.[0][0].json.oncegate;
		assert.equal(og2.decision, 'rejected');
		assert.match(og2.reason, /repair attempts are spent; feedback: Добавьте/);
	});
	it('resumes an expired approval on expired', async () => {
		const run = {
			key: KEY,
			state: 'failed_terminal',
			version: 2,
			error_class: 'approval_expired',
			callback_url: waiting,
			effects: [],
		};
		const { ctx } = hook({ key: KEY, decision: 'expired' }, '/webhook-waiting/4711', [
			{ status: 200, body: run },
		]);
		const og = (await node.webhook.call(ctx)).workflowData?.[0][0].json.oncegate;
		assert.equal(og.decision, 'expired');
	});
	it('ignores a callback for a run another execution waits on, or one nobody decided', async () => {
		const other = {
			key: KEY,
			state: 'approved',
			decision: 'approve',
			callback_url: 'http://127.0.0.1:5678/webhook-waiting/9999',
			effects: [],
		};
		const a = hook({ key: KEY, decision: 'approved' }, '/webhook-waiting/4711', [
			{ status: 200, body: other },
		]);
		const first = await node.webhook.call(a.ctx);
		assert.equal(first.workflowData, undefined);
		assert.equal(a.sent.status, 409);
		const pending = { key: KEY, state: 'awaiting_human', callback_url: waiting, effects: [] };
		const b = hook({ key: KEY, decision: 'approved' }, '/webhook-waiting/4711', [
			{ status: 200, body: pending },
		]);
		assert.equal((await node.webhook.call(b.ctx)).workflowData, undefined);
		assert.equal(b.sent.status, 409);
	});
});
describe('Complete, Fail, Renew lease, Get run', () => {
	it('completes with the result, under the lease the item carries', async () => {
		const { ctx, run: r } = fakeExecute({
			params: { operation: 'complete', result: '{"sent":"письмо 📨"}' },
			items: [claimedItem(2)],
			answers: [{ status: 200, body: { state: 'completed', version: 3 } }],
		});
		const out = await run(ctx);
		assert.deepEqual(r.requests[0].body, {
			lease_owner: OWNER,
			version: 2,
			to: 'completed',
			result: { sent: 'письмо 📨' },
		});
		assert.equal(out[0][0].json.oncegate.state, 'completed');
	});
	it('fails retryable with its class and reason', async () => {
		const { ctx, run: r } = fakeExecute({
			params: {
				operation: 'fail',
				runFrom: 'item',
				failure: 'failed_retryable',
				errorClass: 'model_unavailable',
				reason: 'n8n execution 4711: 503 模型不可用',
			},
			items: [{ json: { error: { message: '503' } }, pairedItem: 0 }],
			parents: UPSTREAM,
			answers: [{ status: 200, body: { state: 'failed_retryable', version: 2 } }],
		});
		await run(ctx);
		assert.deepEqual(r.requests[0].body, {
			lease_owner: OWNER,
			version: 1,
			to: 'failed_retryable',
			error_class: 'model_unavailable',
			reason: 'n8n execution 4711: 503 模型不可用',
		});
	});
	it('in an error workflow, reports the run the failed node named; a run oncegate settled is left alone', async () => {
		const failure = {
			execution: {
				id: '4711',
				lastNodeExecuted: 'Submit the draft',
				error: {
					message: `The model output broke contract support_reply after its repairs (oncegate run: {"key":"${KEY}","lease_owner":"${OWNER}","version":3})`,
				},
			},
			workflow: { id: 'ogSupportReply01', name: 'support reply' },
		};
		const { ctx, run: r } = fakeExecute({
			params: {
				operation: 'fail',
				runFrom: 'errorTrigger',
				failure: 'failed_terminal',
				errorClass: 'validation',
				reason: 'x',
			},
			items: [{ json: failure }],
			answers: [
				{ status: 409, body: { error: 'lease_lost' } },
				{
					status: 200,
					body: { key: KEY, state: 'failed_terminal', version: 3, error_class: 'validation' },
				},
			],
		});
		const out = await run(ctx);
		assert.equal(r.requests[0].body?.lease_owner, OWNER);
		assert.equal(r.requests[0].body?.version, 3);
		const og = out[0][0].json.oncegate;
		assert.equal(og.already_settled, true);
		assert.equal(og.state, 'failed_terminal');
	});
	it('in an error workflow, passes over a failure that names no run', async () => {
		const { ctx, run: r } = fakeExecute({
			params: { operation: 'fail', runFrom: 'errorTrigger', failure: 'failed_retryable' },
			items: [{ json: { execution: { error: { message: 'ECONNRESET' } } } }],
			answers: [],
		});
		const out = await run(ctx);
		assert.equal(r.requests.length, 0);
		assert.equal(out[0][0].json.oncegate.reported, false);
	});
	it('renews the lease and carries the new version on', async () => {
		const { ctx, run: r } = fakeExecute({
			params: { operation: 'renewLease', leaseSeconds: 300 },
			items: [claimedItem(1)],
			answers: [
				{ status: 200, body: { version: 2, lease_expires_at: '2026-12-01T20:50:00.000Z' } },
			],
		});
		const out = await run(ctx);
		assert.equal(
			r.requests[0].url,
			`https://gate.example.com/v1/runs/${encodeURIComponent(KEY)}/lease`,
		);
		assert.deepEqual(r.requests[0].body, { lease_owner: OWNER, version: 1, lease_seconds: 300 });
		assert.equal(out[0][0].json.oncegate.version, 2);
		assert.deepEqual(out[0][0].json.body, TICKET);
	});
	it('gets a run by key; an unknown key fails the node', async () => {
		const { ctx, run: r } = fakeExecute({
			params: { operation: 'getRun', runKey: 'globex:support-reply:ticket-4711:v1' },
			items: [{ json: {} }],
			answers: [
				{ status: 200, body: { key: 'globex:support-reply:ticket-4711:v1', state: 'completed' } },
			],
		});
		const out = await run(ctx);
		assert.equal(
			r.requests[0].url,
			'https://gate.example.com/v1/runs/globex%3Asupport-reply%3Aticket-4711%3Av1',
		);
		assert.equal(out[0][0].json.state, 'completed');
		const missing = fakeExecute({
			params: { operation: 'getRun', runKey: 'nope' },
			items: [{ json: {} }],
			answers: [{ status: 404, body: { error: 'not_found' } }],
		});
		await assert.rejects(run(missing.ctx), /oncegate has no run nope/);
	});
});
describe('Credential', () => {
	// oncegate, another service and nothing at all, on loopback ports of
	// this process (the test of the credential makes real requests).
	const OPENAPI = { openapi: '3.1.0', info: { title: 'oncegate workflow API', version: '0.1.0' } };
	async function serve(handler) {
		const server = http.createServer(handler);
		await new Promise((r) => server.listen(0, '127.0.0.1', r));
		return { server, base: `http://127.0.0.1:${server.address().port}` };
	}
	function oncegate(req, res) {
		const json = (status, body, type = 'application/json') => {
			res.writeHead(status, { 'Content-Type': type });
			res.end(JSON.stringify(body));
		};
		if (req.url === '/v1/openapi.json') return json(200, OPENAPI);
		if (req.url === '/v1/runs/n8n-credential-test') {
			return req.headers.authorization === 'Bearer og_live_k7Q2x9Lm4Zp8Rt3v'
				? json(404, { error: 'not_found', title: 'No such run' }, 'application/problem+json')
				: json(401, { error: 'unauthorized' }, 'application/problem+json');
		}
		return json(404, { error: 'not_found', title: 'No such route' }, 'application/problem+json');
	}
	const test = (base, key) =>
		node.methods.credentialTest.oncegateApiTest.call(
			{},
			{ id: '1', name: 'oncegate', type: 'oncegateApi', data: { baseUrl: base, apiKey: key } },
		);
	it('is the node’s own test; the key goes in the Bearer header', () => {
		const c = new OncegateApi();
		assert.equal(c.name, 'oncegateApi');
		assert.equal(c.displayName, 'Oncegate API');
		assert.equal(c.test, undefined);
		assert.equal(node.description.credentials[0].testedBy, 'oncegateApiTest');
		assert.deepEqual(c.authenticate.properties.headers, {
			Authorization: '=Bearer {{$credentials.apiKey}}',
		});
	});
	it('passes an oncegate root and a known key only', async (t) => {
		const og = await serve(oncegate);
		const other = await serve((req, res) => {
			// a service that answers everything, as a catch-all web app does
			res.writeHead(200, { 'Content-Type': 'application/json' });
			res.end(JSON.stringify({ ok: true, info: { title: 'Grafana' } }));
		});
		t.after(() => {
			for (const s of [og, other]) {
				s.server.closeAllConnections();
				s.server.close();
			}
		});
		const good = await test(og.base + '/', 'og_live_k7Q2x9Lm4Zp8Rt3v');
		assert.equal(good.status, 'OK', good.message);
		const v1 = await test(og.base + '/v1/', 'og_live_k7Q2x9Lm4Zp8Rt3v');
		assert.equal(v1.status, 'Error');
		assert.match(
			v1.message,
			/ends in \/v1: give oncegate's root, http:\/\/127\.0\.0\.1:\d+, without \/v1/,
		);
		const key = await test(og.base, 'og_live_wrong');
		assert.equal(key.status, 'Error');
		assert.match(key.message, /refused the API key/);
		const wrong = await test(other.base, 'og_live_k7Q2x9Lm4Zp8Rt3v');
		assert.equal(wrong.status, 'Error');
		assert.match(wrong.message, /is not an oncegate API root: .*answered HTTP 200 with "Grafana"/);
		const sub = await test(og.base + '/gate', 'og_live_k7Q2x9Lm4Zp8Rt3v');
		assert.equal(sub.status, 'Error');
		assert.match(sub.message, /answered HTTP 404/);
		const closed = await serve(oncegate);
		await new Promise((r) => closed.server.close(r));
		const gone = await test(closed.base, 'og_live_k7Q2x9Lm4Zp8Rt3v');
		assert.equal(gone.status, 'Error');
		assert.match(gone.message, /could not be reached \(ECONNREFUSED\)/);
		const pasted = await test(og.base, 'og_live_k7Q2x9Lm4Zp8Rt3v\n');
		assert.match(pasted.message, /holds a character no key has/);
		const cyrillic = await test(og.base, 'og_live_Ключ');
		assert.match(cyrillic.message, /holds a character no key has/);
		const notUrl = await test('gate.example.com', 'k');
		assert.match(notUrl.message, /must be http\(s\):\/\/host/);
	});
});
describe('The node as n8n shows it', () => {
	const d = node.description;
	const evaluate = (expr, parameters) =>
		// the editor evaluates these expressions with $parameter bound
		new Function('$parameter', `return ${expr.slice(3, -2)}`)(parameters);
	it('names its outputs and explains the loop', () => {
		assert.deepEqual(
			evaluate(d.outputs, { operation: 'submitAndWait' }).map((o) => o.displayName),
			['loop back', 'approved', 'rejected', 'expired', 'invalid', 'changes requested'],
		);
		assert.match(d.hints[0].message, /loop back<\/b>, to this node’s own input/);
		const notice = d.properties.find((p) => p.name === 'loopNotice');
		assert.equal(notice.type, 'notice');
	});
	it('has a readable subtitle, one name, and placeholders without a leading =', () => {
		assert.equal(
			evaluate(d.subtitle, { operation: 'submitAndWait' }),
			'Submit output, wait for decision',
		);
		assert.equal(evaluate(d.subtitle, { operation: 'claim' }), 'Claim the run');
		assert.equal(d.displayName, 'Oncegate');
		for (const p of d.properties) {
			if (p.placeholder !== undefined) assert.ok(!String(p.placeholder).startsWith('='), p.name);
		}
	});
	it('does not offer Submit Output and Wait to AI agents, and refuses it there', async () => {
		const op = d.properties.find((p) => p.name === 'operation');
		const submit = op.options.find((o) => o.value === 'submitAndWait');
		assert.deepEqual(submit.displayOptions, { hide: { '@tool': [true] } });
		const { ctx } = fakeExecute({
			params: SUBMIT,
			items: [modelAnswer(JSON.stringify(DRAFT))],
			parents: UPSTREAM,
			answers: [],
		});
		ctx.getNode = () => ({ ...NODE, type: NODE.type + 'Tool' });
		await assert.rejects(run(ctx), /cannot run as an AI-agent tool/);
	});
});
describe('The examples', () => {
	// examples/n8n beside this package (absent from a copy of the package alone)
	const dir = new URL('../../../examples/n8n/', import.meta.url);
	const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
	it('lay their nodes out so that none covers another (labels of the outputs included)', (t) => {
		if (files.length === 0) return t.skip('no examples/n8n here');
		for (const f of files) {
			const wf = JSON.parse(fs.readFileSync(new URL(f, dir), 'utf8'));
			// a node as n8n's canvas draws it: 100 wide, 100 high and 40 px
			// more per output beyond two, its name and subtitle below it
			// (50 px), its outputs' labels (about 8 px a character) to its right
			const boxes = wf.nodes.map((n) => {
				const op = n.parameters?.operation;
				const outs = n.type === NODE.type ? OUTPUTS[op ?? 'claim'] : ['success', 'error'];
				const label = Math.max(...outs.map((o) => o.length)) * 8;
				return {
					name: n.name,
					x0: n.position[0],
					y0: n.position[1],
					x1: n.position[0] + 100 + label,
					y1: n.position[1] + 100 + Math.max(0, outs.length - 2) * 40 + 50,
				};
			});
			for (const a of boxes)
				for (const b of boxes) {
					if (a === b) continue;
					const apart = a.x1 <= b.x0 || b.x1 <= a.x0 || a.y1 <= b.y0 || b.y1 <= a.y0;
					assert.ok(apart, `${f}: ${a.name} covers ${b.name}`);
				}
		}
	});
});
describe('Decide', () => {
	const ID = '5b0e7a52-6c1d-4f0e-9a51-0c3a7d2b9e14';
	const DECIDE = {
		operation: 'decide',
		approvalId: ID,
		subject: ' anna.kowalska@example.com ',
		groups: 'support, служба поддержки',
		decision: 'approve',
		decisionReason: 'Проверила — всё верно ✅ 確認済み',
		edits: JSON.stringify({ body: 'Ольга, посылка будет у вас в пятницу. 🚚' }),
		draft: '',
	};
	const DECIDED = {
		approval_id: ID,
		key: KEY,
		decision: 'approve',
		decided_by: 'anna.kowalska@example.com',
		via_client: 'teams-bot',
		final: true,
		approvals: 1,
		needed: 1,
		state: 'approved',
		effect_id: '0d5c8f1e-4c59-4d35-9d64-3f0a0f4ff1aa',
	};
	it('records the decision of the person the workflow vouches for, edits and groups included', async () => {
		const { ctx, run: r } = fakeExecute({
			params: DECIDE,
			items: [{ json: { from: 'teams' } }],
			answers: [{ status: 200, body: DECIDED }],
		});
		const out = await run(ctx);
		assert.equal(r.requests.length, 1);
		assert.equal(r.requests[0].method, 'POST');
		assert.equal(r.requests[0].url, `https://gate.example.com/v1/approvals/${ID}/decisions`);
		assert.deepEqual(r.requests[0].body, {
			subject: 'anna.kowalska@example.com',
			decision: 'approve',
			groups: ['support', 'служба поддержки'],
			reason: 'Проверила — всё верно ✅ 確認済み',
			edits: { body: 'Ольга, посылка будет у вас в пятницу. 🚚' },
		});
		assert.equal(out.length, 2);
		assert.deepEqual(out[0][0].json, { from: 'teams', oncegate: DECIDED });
		assert.equal(out[1].length, 0);
	});
	it('routes a refusal about the person or the challenge to refused; a missing scope fails the node', async () => {
		const used = { status: 409, body: { error: 'used', detail: 'another decision settled the run' } };
		const sod = { status: 403, body: { error: 'separation_of_duties', detail: 'the requester' } };
		const { ctx, run: r } = fakeExecute({
			params: { ...DECIDE, decision: 'reject', edits: '{}', groups: '' },
			items: [{ json: {} }, { json: {} }],
			answers: [used, sod],
		});
		const out = await run(ctx);
		assert.deepEqual(r.requests[0].body, {
			subject: 'anna.kowalska@example.com',
			decision: 'reject',
			reason: DECIDE.decisionReason,
		});
		assert.equal(out[0].length, 0);
		assert.deepEqual(
			out[1].map((x) => x.json.error.code),
			['used', 'separation_of_duties'],
		);
		const { ctx: ctx2 } = fakeExecute({
			params: DECIDE,
			items: [{ json: {} }],
			answers: [{ status: 403, body: { error: 'forbidden', detail: 'no decide scope' } }],
		});
		await assert.rejects(run(ctx2), (e) => {
			assert.match(e.message, /forbidden: no decide scope/);
			assert.match(e.description, /oncegatectl client grant NAME --decide/);
			return true;
		});
	});
	it('is not offered to AI agents, and refused there', async () => {
		const op = node.description.properties.find((p) => p.name === 'operation');
		const decide = op.options.find((o) => o.value === 'decide');
		assert.deepEqual(decide.displayOptions, { hide: { '@tool': [true] } });
		assert.deepEqual(OUTPUTS.decide, ['decided', 'refused']);
		const { ctx } = fakeExecute({ params: DECIDE, items: [{ json: {} }], answers: [] });
		ctx.getNode = () => ({ ...NODE, type: NODE.type + 'Tool' });
		await assert.rejects(run(ctx), /Decide cannot run as an AI-agent tool/);
	});
});
describe('Contract, Effect Type and Effect Target choices', () => {
	const CONTRACTS = {
		contracts: [
			{
				name: 'quorum_mail',
				gate_mode: 'approve_before_act',
				effect_types: ['email.send'],
				effect_targets: ['demo_smtp'],
				allowed_decisions: ['approve', 'reject'],
				editable: [],
			},
			{
				name: 'support_reply',
				description: 'Ответ клиенту · 返信',
				gate_mode: 'approve_before_act',
				effect_types: ['email.send', 'crm.tag'],
				effect_targets: ['demo_smtp', 'demo_http'],
				allowed_decisions: ['approve', 'reject'],
				editable: ['body'],
			},
		],
	};
	function loadContext(contract, answer = { status: 200, body: CONTRACTS }) {
		const requests = [];
		const ctx = {
			getNode: () => NODE,
			getCurrentNodeParameter: (name) => (name === 'contract' ? contract : undefined),
			getCredentials: async () => ({ baseUrl: 'https://gate.example.com', apiKey: 'og_test_key' }),
			helpers: {
				httpRequestWithAuthentication: async (credential, req) => {
					requests.push({ credential, method: req.method, url: req.url });
					return { statusCode: answer.status, body: answer.body, headers: {} };
				},
			},
		};
		return { ctx, requests };
	}
	const load = node.methods.loadOptions;
	it('offers the contracts oncegate lists, with their descriptions', async () => {
		const { ctx, requests } = loadContext(undefined);
		assert.deepEqual(await load.getContracts.call(ctx), [
			{ name: 'quorum_mail', value: 'quorum_mail' },
			{ name: 'support_reply', value: 'support_reply', description: 'Ответ клиенту · 返信' },
		]);
		assert.deepEqual(requests, [
			{ credential: 'oncegateApi', method: 'GET', url: 'https://gate.example.com/v1/contracts' },
		]);
	});
	it('offers the effect types and targets of the chosen contract; every contract’s for an expression', async () => {
		assert.deepEqual(
			(await load.getEffectTypes.call(loadContext('support_reply').ctx)).map((o) => o.value),
			['crm.tag', 'email.send'],
		);
		assert.deepEqual(
			(await load.getEffectTargets.call(loadContext('quorum_mail').ctx)).map((o) => o.value),
			['demo_smtp'],
		);
		assert.deepEqual(
			(await load.getEffectTargets.call(loadContext('={{ $json.contract }}').ctx)).map(
				(o) => o.value,
			),
			['demo_http', 'demo_smtp'],
		);
	});
	it('says why when oncegate does not list them', async () => {
		const { ctx } = loadContext('support_reply', {
			status: 401,
			body: { error: 'unauthorized', detail: 'unknown API key' },
		});
		await assert.rejects(load.getContracts.call(ctx), /did not list its contracts: unauthorized/);
	});
	it('are choices that still take an expression (free text)', () => {
		for (const [name, method] of [
			['contract', 'getContracts'],
			['effectType', 'getEffectTypes'],
			['effectTarget', 'getEffectTargets'],
		]) {
			const p = node.description.properties.find((x) => x.name === name);
			assert.equal(p.type, 'options');
			assert.equal(p.typeOptions.loadOptionsMethod, method);
			assert.notEqual(p.noDataExpression, true);
		}
	});
});
