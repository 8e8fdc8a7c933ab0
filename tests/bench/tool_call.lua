-- make bench: claim then complete, a unique key per tool call, a ~200-byte
-- result, keep-alive. A key is completed only after its claim answered 201.
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local result = '{"message_id":"m-3f9c2a71","status":"sent","to":"ana@example.com",' ..
	'"provider":"smtp-relay-3","queued_at":"2026-11-30T01:29:43.123Z",' ..
	'"size_bytes":18234,"trace":"0123456789abcdef0123456789abcdef"}'
local complete_body = '{"fencing_token":1,"outcome":"succeeded","result":' .. result .. '}'
local pending = {}
local n = 0
local prefix

setup = common.setup

function init(args)
	prefix = common.prefix()
end

function request()
	local rid = table.remove(pending)
	if rid then
		return wrk.format("POST", "/v1/requests/" .. rid .. "/tool-calls/call_01/complete",
			common.headers, complete_body)
	end
	n = n + 1
	rid = prefix .. "-" .. n
	return wrk.format("POST", "/v1/requests/" .. rid .. "/tool-calls/call_01/claim",
		common.headers,
		'{"claim_id":"claim-' .. rid .. '-000000","tool":"send_email",' ..
		'"args":{"to":"ana@example.com","subject":"Your refund"}}')
end

function response(status, headers, body)
	if status == 201 then
		table.insert(pending, body:match('"idempotency_key":"([^:]+):'))
	end
end
