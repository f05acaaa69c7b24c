import type {
	IAuthenticateGeneric,
	Icon,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

export class OncegateApi implements ICredentialType {
	name = 'oncegateApi';

	displayName = 'Oncegate API';

	icon: Icon = {
		light: 'file:../nodes/Oncegate/oncegate.svg',
		dark: 'file:../nodes/Oncegate/oncegate.dark.svg',
	};

	documentationUrl = 'https://github.com/oncegate/oncegate/tree/main/integrations/n8n#credentials';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: '',
			placeholder: 'https://gate.example.com',
			description: 'Where oncegate answers behind nginx, without a trailing /v1',
			required: true,
		},
		{
			displayName: 'API Key',
			name: 'apiKey',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description: 'A client key from <code>oncegatectl client add NAME</code>',
			required: true,
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '=Bearer {{$credentials.apiKey}}',
			},
		},
	};

	// A status query of a key no one claims, read-only: oncegate answers an
	// unknown API key with the problem `unauthorized` (401), a known one with
	// `not_found` (404); the body, not the status, tells them apart.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/v1/runs/n8n-credential-test',
			method: 'GET',
			json: true,
			ignoreHttpStatusErrors: true,
		},
		rules: [
			{
				type: 'responseSuccessBody',
				properties: {
					key: 'error',
					value: 'unauthorized',
					message: 'oncegate refused the API key',
				},
			},
		],
	};
}
