-- 007: every change to api_tokens is announced. ledgerd keeps the hashes
-- of the live tokens in memory, so that a made-up token is refused without
-- a query (api/service/tokens.c), and reads them again when this trigger
-- says they changed: one notification on the channel ledger_tokens per
-- statement that inserts, updates, deletes or truncates, delivered to the
-- listeners when its transaction commits (ledger/store/token_watch.c). The
-- payload is empty: a listener reads the table again, so nothing of a
-- token travels on a channel any session may listen to.
--
-- Additive: an older ledgerd does not listen and never reads what this
-- adds; its `ledgerd token` commands fire the trigger like this one's.

CREATE FUNCTION api_tokens_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ledger_tokens', '');
    RETURN NULL;
END $$;

CREATE TRIGGER api_tokens_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION api_tokens_changed();
