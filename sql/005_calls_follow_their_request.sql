-- 005: a tool call's request is held by the statements that write it, not
-- by a foreign key. Every statement that inserts a tool call creates or
-- locks its request in the same transaction (ledger/store/fast.c, batch.c,
-- rows.c), so the key's check, a lookup and a row lock on the request for
-- every call inserted, only repeated it: it cost one tool call in eight.
-- What the key's ON DELETE CASCADE did for retention, the trigger below
-- does, for this ledgerd and for older ones alike.

ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_tenant_request_id_fkey;

CREATE FUNCTION requests_delete_calls() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tool_calls c USING gone g
    WHERE c.tenant = g.tenant AND c.request_id = g.request_id;
    RETURN NULL;
END $$;
CREATE TRIGGER requests_delete_calls AFTER DELETE ON requests
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION requests_delete_calls();
