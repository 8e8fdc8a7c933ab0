-- make bench: a router's attempt cycle per request: begin an attempt, deliver
-- the first delta, finish. Each step is sent after the previous one answered.
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local to_deliver, to_finish = {}, {}
local n = 0
local prefix

setup = common.setup

function init(args)
	prefix = common.prefix()
end

function request()
	local rid = table.remove(to_finish)
	if rid then
		return wrk.format("POST", "/v1/requests/" .. rid .. "/attempts/a1/finish",
			common.headers, '{"outcome":"completed","delivered_output_tokens":64}')
	end
	rid = table.remove(to_deliver)
	if rid then
		return wrk.format("POST", "/v1/requests/" .. rid .. "/attempts/a1/deliver",
			common.headers, '{"delivered_output_tokens":0}')
	end
	n = n + 1
	return wrk.format("POST", "/v1/requests/" .. prefix .. "-" .. n .. "/attempts",
		common.headers, '{"attempt_id":"a1","replica":"gpu-a/3","model_revision":"m@1"}')
end

function response(status, headers, body)
	if status == 201 then
		table.insert(to_deliver, body:match('"request_id":"([^"]+)"'))
	elseif status == 200 and body:find('"first_delta_sent":true', 1, true) and
		not body:find('"state"', 1, true) then
		table.insert(to_finish, body:match('"request_id":"([^"]+)"'))
	end
end
