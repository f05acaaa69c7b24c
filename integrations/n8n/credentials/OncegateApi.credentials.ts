import type { IAuthenticateGeneric, Icon, ICredentialType, INodeProperties } from 'n8n-workflow';

export class OncegateApi implements ICredentialType {
	name = 'oncegateApi';

	// n8n-node lint: title case (cred-class-field-display-name-miscased)
	// and the suffix " API" (cred-class-field-display-name-missing-api);
	// "oncegate API" and "Oncegate" each fail one of them.
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
			description:
				'Where oncegate answers behind nginx, without /v1 (the test refuses a URL ending in /v1, and one where no oncegate answers)',
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

	// Tested by the oncegate node (testedBy: oncegateApiTest): the base URL must
	// be an oncegate API root and the key one oncegate knows.
}
