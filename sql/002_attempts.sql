-- 002: inference attempts and failover decisions. An attempt is one try of
-- a logical request on one replica, fenced by its epoch and a lease on the
-- database clock; 'expired' is derived from the lease, never stored.

CREATE TABLE attempts (
    tenant                  text NOT NULL,
    request_id              text NOT NULL,
    attempt_id              text NOT NULL,
    epoch                   integer NOT NULL CHECK (epoch > 0),
    replica                 text,
    model_revision          text,
    revision_given          boolean NOT NULL, -- model_revision came in the body
    state                   text NOT NULL CHECK (state IN ('live', 'cancel_requested',
                            'cancelled', 'dead', 'superseded', 'finished', 'failed')),
    lease_until             timestamptz NOT NULL,
    is_retry                boolean NOT NULL, -- not the request's first attempt
    delivered_output_tokens bigint NOT NULL DEFAULT 0,
    outcome                 text CHECK (outcome IN ('completed', 'failed')),
    created_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at                timestamptz,
    PRIMARY KEY (tenant, request_id, attempt_id),
    UNIQUE (tenant, request_id, epoch),
    FOREIGN KEY (tenant, request_id) REFERENCES requests ON DELETE CASCADE
);

-- Invariant 1, held by the database itself: at most one live attempt per
-- request. (A live attempt whose lease ran out has no rights, but it stays
-- 'live' until a newer attempt supersedes it.)
CREATE UNIQUE INDEX attempts_one_live ON attempts (tenant, request_id) WHERE state = 'live';

-- The pool-wide retry budget counts a tenant's attempts in a sliding window.
CREATE INDEX attempts_tenant_created ON attempts (tenant, created_at);

-- Final failover decisions, by source attempt and signal, so that a retried
-- call gets the decision already taken, word for word.
CREATE TABLE failover_decisions (
    tenant            text NOT NULL,
    request_id        text NOT NULL,
    source_attempt_id text NOT NULL,
    signal            text NOT NULL,
    action            text NOT NULL,
    response          text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, request_id, source_attempt_id, signal),
    FOREIGN KEY (tenant, request_id) REFERENCES requests ON DELETE CASCADE
);

-- Invariant 2, held by the database itself: no attempt is created once a
-- delta of the request reached the client.
CREATE FUNCTION attempts_after_first_delta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM requests r WHERE r.tenant = NEW.tenant
               AND r.request_id = NEW.request_id AND r.first_delta_sent) THEN
        RAISE EXCEPTION 'no attempt after the first delta of request %', NEW.request_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER attempts_after_first_delta BEFORE INSERT ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_after_first_delta();

-- A client error is replayed as written, like a result: keep its text.
ALTER TABLE requests ALTER COLUMN client_error TYPE text USING client_error::text;
