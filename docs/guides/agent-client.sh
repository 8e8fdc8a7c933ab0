node docs/guides/agent-client.mjs run-829   # asks the model twice, sends the email once
node docs/guides/agent-client.mjs run-829   # a restart of the run: every step replayed, nothing sent
