-- 001: tenants' tokens, logical requests, tool calls, tombstones and the
-- append-only event history. Every row is keyed by tenant first: no
-- statement of ledgerd reads or writes a row without its tenant.

CREATE TABLE api_tokens (
    token_sha256 bytea PRIMARY KEY CHECK (length(token_sha256) = 32),
    tenant       text NOT NULL,
    role         text NOT NULL CHECK (role IN ('agent', 'router', 'reviewer', 'admin')),
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    revoked_at   timestamptz
);

-- One row per logical request. Every mutation of a request's rows locks
-- this row first, so it is the unit of serialisation.
CREATE TABLE requests (
    tenant                  text NOT NULL,
    request_id              text NOT NULL,
    status                  text NOT NULL DEFAULT 'open'
                            CHECK (status IN ('open', 'completed', 'failed', 'terminated', 'abandoned')),
    phase                   text NOT NULL DEFAULT 'prefill' CHECK (phase IN ('prefill', 'decode')),
    first_delta_sent        boolean NOT NULL DEFAULT false,
    delivered_output_tokens bigint NOT NULL DEFAULT 0,
    attempt_count           integer NOT NULL DEFAULT 0,
    max_attempts            integer,
    model_revision          text,
    client_error            jsonb,
    created_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at               timestamptz,
    PRIMARY KEY (tenant, request_id)
);

-- One row per idempotency key "request_id:tool_call_id". The state stored
-- is never 'unknown': that is derived from lease_until and the database
-- clock at read time, so no sweeper has to run for leases to expire.
CREATE TABLE tool_calls (
    tenant          text NOT NULL,
    request_id      text NOT NULL,
    tool_call_id    text NOT NULL,
    tool            text,
    args_sha256     text CHECK (args_sha256 ~ '^[0-9a-f]{64}$'),
    args            text,               -- exact text, only when store_args
    tool_dedupes    boolean NOT NULL,
    state           text NOT NULL CHECK (state IN ('in_progress', 'succeeded', 'failed', 'released')),
    fencing_token   bigint NOT NULL CHECK (fencing_token > 0),
    claim_id        text,               -- holder of the current token; NULL: anonymous
    attempt_id      text,
    owner           text,
    lease_until     timestamptz,        -- of the current holder
    renewed_at      timestamptz,
    outcome         text CHECK (outcome IN ('succeeded', 'failed')),
    result          text,               -- exact JSON text received, replayed verbatim
    completed_token bigint,             -- token the stored completion carried
    completed_by    text CHECK (completed_by IN ('holder', 'late', 'resolve')),
    completed_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, request_id, tool_call_id),
    FOREIGN KEY (tenant, request_id) REFERENCES requests ON DELETE CASCADE,
    CHECK ((state IN ('succeeded', 'failed')) = (outcome IS NOT NULL AND result IS NOT NULL))
);

-- Calls that may need attention (in progress, or unknown once the lease ran
-- out) are few: a partial index keeps listing them cheap.
CREATE INDEX tool_calls_open ON tool_calls (tenant, request_id, tool_call_id)
    WHERE state = 'in_progress';

-- What retention leaves of a settled call, so that a late redelivery is
-- refused (410 result_expired) instead of executed again.
CREATE TABLE tool_call_tombstones (
    tenant       text NOT NULL,
    request_id   text NOT NULL,
    tool_call_id text NOT NULL,
    args_sha256  text,
    outcome      text NOT NULL,
    completed_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, request_id, tool_call_id)
);

-- The history of every transition and every refusal, written in the same
-- transaction as the change it records. seq orders a request's events:
-- they are all written under the request's row lock.
CREATE TABLE events (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text NOT NULL,
    request_id   text NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    type         text NOT NULL,
    attempt_id   text,
    tool_call_id text,
    detail       jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_request ON events (tenant, request_id, seq);

-- Events are only appended. Retention, and nothing else, may delete them:
-- it says so for its own transaction with SET LOCAL ledger.retention = 'on'.
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('ledger.retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();
