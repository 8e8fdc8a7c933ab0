-- 004: the happy path's history is kept in the tool call's own row. A key
-- claimed the first time and completed by its holder used to add two rows
-- to the history, each with two index entries; now the claim's event and
-- the holder's completion are columns of the tool_calls row they describe
-- (their seq drawn from the history's own sequence, so the order is the
-- same), and `events` is a view that reads both. Every other event (a
-- refusal, a reclaim, a release, a late completion, a resolution, every
-- attempt event) stays a row of its own, in event_log.
--
-- Additive: a ledgerd of schema 3 still reads `events` and writes to it;
-- the view's triggers put what it writes into event_log.

ALTER TABLE events RENAME TO event_log;
ALTER INDEX events_request RENAME TO event_log_request;
ALTER SEQUENCE events_seq_seq RENAME TO event_seq;

-- Written once, with the row (claimed_*) or by the holder's completion
-- (completed_seq), and never changed after: the triggers below hold that.
-- claimed_detail keeps only what the row cannot give back (the first
-- holder's lease_ms and owner, which a reclaim replaces); the rest of each
-- event's detail is the row's own columns, which ledgerd never changes.
ALTER TABLE tool_calls
    ADD COLUMN claimed_seq    bigint,
    ADD COLUMN claimed_detail jsonb,
    ADD COLUMN completed_seq  bigint;

-- The whole history: the rows of event_log, the claim of every key whose
-- first claim is in its row ('claimed' at created_at, with token 1 and no
-- attempt: the statements that write it serve only requests without
-- attempts) and the holder's completion where the row carries it
-- ('completed' at completed_at, by the attempt the call was held under).
-- Each detail is the object the general path writes for the same event.
CREATE VIEW events AS
    SELECT seq, tenant, request_id, at, type, attempt_id, tool_call_id, detail
    FROM event_log
    UNION ALL
    SELECT claimed_seq, tenant, request_id, created_at, 'claimed'::text, NULL::text,
           tool_call_id,
           jsonb_build_object('fencing_token', 1)
           || jsonb_strip_nulls(jsonb_build_object(
                  'tool', nullif(tool, ''), 'args_sha256', args_sha256,
                  'tool_dedupes', CASE WHEN tool_dedupes THEN true END))
           || claimed_detail
    FROM tool_calls WHERE claimed_seq IS NOT NULL
    UNION ALL
    SELECT completed_seq, tenant, request_id, completed_at, 'completed'::text, attempt_id,
           tool_call_id, jsonb_build_object('outcome', outcome, 'fencing_token', completed_token)
    FROM tool_calls WHERE completed_seq IS NOT NULL;
ALTER VIEW events ALTER COLUMN at SET DEFAULT clock_timestamp();
ALTER VIEW events ALTER COLUMN detail SET DEFAULT '{}';

-- What is written to the view goes to event_log; updating or deleting
-- through it is refused as event_log refuses it (retention may delete).
CREATE FUNCTION events_view_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO event_log (tenant, request_id, at, type, attempt_id, tool_call_id, detail)
        VALUES (NEW.tenant, NEW.request_id, coalesce(NEW.at, clock_timestamp()), NEW.type,
                NEW.attempt_id, NEW.tool_call_id, coalesce(NEW.detail, '{}'))
        RETURNING seq, at INTO NEW.seq, NEW.at;
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' AND current_setting('ledger.retention', true) = 'on' THEN
        -- An event kept in a tool call's row goes with the row.
        DELETE FROM event_log WHERE seq = OLD.seq;
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER events_view_write INSTEAD OF INSERT OR UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_view_write();

-- The events a row carries are append-only too: once written they do not
-- change, and the row is deleted only by retention. (Their times are the
-- row's created_at and completed_at, which ledgerd never changes either.)
-- AFTER triggers whose WHEN is false cost nothing; a BEFORE trigger would
-- lock every row a completion updates, one more WAL record per call.
CREATE FUNCTION tool_calls_history_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('ledger.retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only (% of a tool call''s history refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER tool_calls_claim_kept AFTER UPDATE ON tool_calls FOR EACH ROW
    WHEN (OLD.claimed_seq IS NOT NULL
          AND (NEW.claimed_seq, NEW.claimed_detail::text, NEW.tool, NEW.args_sha256,
               NEW.tool_dedupes, NEW.tenant, NEW.request_id, NEW.tool_call_id)
              IS DISTINCT FROM (OLD.claimed_seq, OLD.claimed_detail::text, OLD.tool,
                                OLD.args_sha256, OLD.tool_dedupes, OLD.tenant,
                                OLD.request_id, OLD.tool_call_id))
    EXECUTE FUNCTION tool_calls_history_kept();
CREATE TRIGGER tool_calls_completion_kept AFTER UPDATE ON tool_calls FOR EACH ROW
    WHEN (OLD.completed_seq IS NOT NULL
          AND (NEW.completed_seq, NEW.outcome, NEW.completed_token, NEW.attempt_id,
               NEW.tenant, NEW.request_id, NEW.tool_call_id)
              IS DISTINCT FROM (OLD.completed_seq, OLD.outcome, OLD.completed_token,
                                OLD.attempt_id, OLD.tenant, OLD.request_id,
                                OLD.tool_call_id))
    EXECUTE FUNCTION tool_calls_history_kept();
CREATE TRIGGER tool_calls_history_deleted AFTER DELETE ON tool_calls FOR EACH ROW
    WHEN (OLD.claimed_seq IS NOT NULL OR OLD.completed_seq IS NOT NULL)
    EXECUTE FUNCTION tool_calls_history_kept();
CREATE TRIGGER tool_calls_no_truncate BEFORE TRUNCATE ON tool_calls
    FOR EACH STATEMENT EXECUTE FUNCTION tool_calls_history_kept();
