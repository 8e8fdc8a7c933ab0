-- make bench: claims of keys completed before the run (a failed-over rerun
-- asking again): every answer is the stored result, replayed.
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local keys = tonumber(os.getenv("BENCH_REPLAY_KEYS") or "1000")
local body = '{"tool":"send_email","args":{"to":"ana@example.com","subject":"Your refund"}}'

setup = common.setup

function init(args)
	math.randomseed(os.time() + (tid or 0))
end

function request()
	return wrk.format("POST", "/v1/requests/" .. math.random(1, keys) ..
		"/tool-calls/call_01/claim", common.headers, body)
end
