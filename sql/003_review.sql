-- 003: what incident review and retention read. Requests are listed newest
-- first per tenant; retention finds closed requests by the time they closed.

CREATE INDEX requests_newest ON requests (tenant, created_at DESC, request_id DESC);
CREATE INDEX requests_closed ON requests (closed_at) WHERE closed_at IS NOT NULL;

-- Tombstones are removed when their period ends.
CREATE INDEX tool_call_tombstones_expiry ON tool_call_tombstones (expires_at);

-- Requests without attempts are never closed by a router: retention finds
-- the old ones here, and keeps those with a call still held.
CREATE INDEX requests_unattempted ON requests (created_at)
    WHERE status = 'open' AND attempt_count = 0;
