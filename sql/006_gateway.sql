-- 006: what API 1.1 records for ledger-gateway. An attempt names the
-- gateway process that runs it; a request keeps the fingerprint of its
-- input, fixed by the first attempt that gives one, so that a key reused
-- with another body is refused; and a request that ended keeps the answer
-- its client was sent, in a table of its own, so that a retry of the key
-- through any gateway of the pool gets the same bytes.
--
-- Additive: an older ledgerd never reads these columns nor the table, and
-- the rows it writes leave them NULL. Its retention deletes a request and,
-- through the foreign key below, the request's answer with it.

ALTER TABLE attempts ADD COLUMN gateway text;

-- NOT VALID: every existing row is NULL, and checking them would hold the
-- table's lock for a scan of it; every row written from now on is checked.
ALTER TABLE requests ADD COLUMN input_sha256 text,
    ADD CONSTRAINT requests_input_sha256 CHECK (input_sha256 ~ '^[0-9a-f]{64}$') NOT VALID;

-- What a request's client was sent when the request ended: its status,
-- content type and bytes (standard base64, as received), or, past
-- --max-kept-answer-bytes, only their length and SHA-256. Written in the
-- transaction that ends the request; one per request.
CREATE TABLE answers (
    tenant       text NOT NULL,
    request_id   text NOT NULL,
    status       integer NOT NULL CHECK (status BETWEEN 100 AND 599),
    content_type text NOT NULL,
    kept         boolean NOT NULL,
    body_b64     text,
    bytes        bigint NOT NULL CHECK (bytes >= 0),
    sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, request_id),
    FOREIGN KEY (tenant, request_id) REFERENCES requests ON DELETE CASCADE,
    CHECK (kept = (body_b64 IS NOT NULL))
);
