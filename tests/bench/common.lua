-- Shared by the wrk scripts of `make bench`: headers, and a per-thread prefix
-- so that every thread of every run makes keys nobody used before.
local M = {}

M.headers = {
	["Authorization"] = "Bearer " .. (os.getenv("LEDGER_TOKEN") or ""),
	["Content-Type"] = "application/json",
}

local threads = 0

function M.setup(thread)
	threads = threads + 1
	thread:set("tid", threads)
end

function M.prefix()
	return string.format("%s-%d", os.getenv("BENCH_RUN") or "run", tid or 0)
end

return M
