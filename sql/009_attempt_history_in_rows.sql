-- 009: an attempt's happy path keeps its history in the attempt's own row,
-- as 004 did for a tool call's. An attempt begun on a new request,
-- delivered and finished used to add four rows to the history
-- (attempt_created, first_delta, attempt_finished, request_status), each
-- with two index entries; the one-statement paths of
-- ledger/store/attempt_fast.c now write them as columns of the attempts
-- row they describe (their seq drawn from the history's own sequence, so
-- the order is the same), and `events` reads them there. Every other
-- attempt event, and every one the locked path writes, stays a row of
-- event_log.
--
-- Additive: a ledgerd of schema 8 reads `events` and writes event_log as
-- before, and never touches these columns; the guards of a tool call's
-- events are the same checks, fired by fewer statements.

-- Each written once, by the statement that records its event, and never
-- changed after: the trigger below holds that. Each event's time and
-- detail are columns of their own (the attempt_created event's time is the
-- row's created_at, written once too), so the row's other columns go on
-- changing as the locked path decides.
ALTER TABLE attempts
    ADD COLUMN created_seq        bigint,
    ADD COLUMN created_detail     jsonb,
    ADD COLUMN first_delta_seq    bigint,
    ADD COLUMN first_delta_at     timestamptz,
    ADD COLUMN first_delta_tokens bigint,
    ADD COLUMN finished_seq       bigint,
    ADD COLUMN finished_at        timestamptz,
    ADD COLUMN finished_detail    jsonb,
    ADD COLUMN completed_seq      bigint;

-- The whole history: 008's view, and the four events an attempt's row may
-- carry. Each detail is the object the locked path writes for the same
-- event (ledger/store/attempts.c).
CREATE OR REPLACE VIEW events AS
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
           || CASE WHEN result_sha256 IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('result_kept', false, 'result_bytes', result_bytes,
                                           'result_sha256', result_sha256) END
    FROM tool_calls WHERE completed_seq IS NOT NULL
    UNION ALL
    SELECT created_seq, tenant, request_id, created_at, 'attempt_created'::text, attempt_id,
           NULL::text, created_detail
    FROM attempts WHERE created_seq IS NOT NULL
    UNION ALL
    SELECT first_delta_seq, tenant, request_id, first_delta_at, 'first_delta'::text, attempt_id,
           NULL::text, jsonb_build_object('delivered_output_tokens', first_delta_tokens)
    FROM attempts WHERE first_delta_seq IS NOT NULL
    UNION ALL
    SELECT finished_seq, tenant, request_id, finished_at, 'attempt_finished'::text, attempt_id,
           NULL::text, finished_detail
    FROM attempts WHERE finished_seq IS NOT NULL
    UNION ALL
    SELECT completed_seq, tenant, request_id, finished_at, 'request_status'::text, attempt_id,
           NULL::text, jsonb_build_object('status', 'completed')
    FROM attempts WHERE completed_seq IS NOT NULL;
ALTER VIEW events ALTER COLUMN at SET DEFAULT clock_timestamp();
ALTER VIEW events ALTER COLUMN detail SET DEFAULT '{}';

-- The events a row carries are append-only: once written, they do not
-- change, and the row is deleted only by retention. Each event's guard
-- names its columns (UPDATE OF): PostgreSQL prepares a trigger's WHEN for
-- every statement that may fire it, so a statement that sets none of an
-- event's columns pays nothing for its guard, and one that does pays for
-- a small one.
CREATE FUNCTION attempts_history_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('ledger.retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only (% of an attempt''s history refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER attempts_created_kept
    AFTER UPDATE OF created_seq, created_detail, created_at, tenant, request_id, attempt_id
    ON attempts FOR EACH ROW
    WHEN (OLD.created_seq IS NOT NULL
          AND (NEW.created_seq, NEW.created_detail::text, NEW.created_at, NEW.tenant,
               NEW.request_id, NEW.attempt_id)
              IS DISTINCT FROM (OLD.created_seq, OLD.created_detail::text, OLD.created_at,
                                OLD.tenant, OLD.request_id, OLD.attempt_id))
    EXECUTE FUNCTION attempts_history_kept();
CREATE TRIGGER attempts_first_delta_kept
    AFTER UPDATE OF first_delta_seq, first_delta_at, first_delta_tokens, tenant, request_id,
        attempt_id
    ON attempts FOR EACH ROW
    WHEN (OLD.first_delta_seq IS NOT NULL
          AND (NEW.first_delta_seq, NEW.first_delta_at, NEW.first_delta_tokens, NEW.tenant,
               NEW.request_id, NEW.attempt_id)
              IS DISTINCT FROM (OLD.first_delta_seq, OLD.first_delta_at,
                                OLD.first_delta_tokens, OLD.tenant, OLD.request_id,
                                OLD.attempt_id))
    EXECUTE FUNCTION attempts_history_kept();
CREATE TRIGGER attempts_finished_kept
    AFTER UPDATE OF finished_seq, finished_at, finished_detail, completed_seq, tenant,
        request_id, attempt_id
    ON attempts FOR EACH ROW
    WHEN (OLD.finished_seq IS NOT NULL
          AND (NEW.finished_seq, NEW.finished_at, NEW.finished_detail::text, NEW.completed_seq,
               NEW.tenant, NEW.request_id, NEW.attempt_id)
              IS DISTINCT FROM (OLD.finished_seq, OLD.finished_at, OLD.finished_detail::text,
                                OLD.completed_seq, OLD.tenant, OLD.request_id,
                                OLD.attempt_id))
    EXECUTE FUNCTION attempts_history_kept();
CREATE TRIGGER attempts_history_deleted AFTER DELETE ON attempts FOR EACH ROW
    WHEN (OLD.created_seq IS NOT NULL OR OLD.first_delta_seq IS NOT NULL
          OR OLD.finished_seq IS NOT NULL)
    EXECUTE FUNCTION attempts_history_kept();
CREATE TRIGGER attempts_no_truncate BEFORE TRUNCATE ON attempts
    FOR EACH STATEMENT EXECUTE FUNCTION attempts_history_kept();

-- A tool call's guards (sql/004, sql/008) the same way: a completion no
-- longer prepares the claim's guard, a renewal neither.
DROP TRIGGER tool_calls_claim_kept ON tool_calls;
CREATE TRIGGER tool_calls_claim_kept
    AFTER UPDATE OF claimed_seq, claimed_detail, tool, args_sha256, tool_dedupes, tenant,
        request_id, tool_call_id
    ON tool_calls FOR EACH ROW
    WHEN (OLD.claimed_seq IS NOT NULL
          AND (NEW.claimed_seq, NEW.claimed_detail::text, NEW.tool, NEW.args_sha256,
               NEW.tool_dedupes, NEW.tenant, NEW.request_id, NEW.tool_call_id)
              IS DISTINCT FROM (OLD.claimed_seq, OLD.claimed_detail::text, OLD.tool,
                                OLD.args_sha256, OLD.tool_dedupes, OLD.tenant,
                                OLD.request_id, OLD.tool_call_id))
    EXECUTE FUNCTION tool_calls_history_kept();
DROP TRIGGER tool_calls_completion_kept ON tool_calls;
CREATE TRIGGER tool_calls_completion_kept
    AFTER UPDATE OF completed_seq, outcome, completed_token, attempt_id, result_bytes,
        result_sha256, tenant, request_id, tool_call_id
    ON tool_calls FOR EACH ROW
    WHEN (OLD.completed_seq IS NOT NULL
          AND (NEW.completed_seq, NEW.outcome, NEW.completed_token, NEW.attempt_id,
               NEW.result_bytes, NEW.result_sha256, NEW.tenant, NEW.request_id,
               NEW.tool_call_id)
              IS DISTINCT FROM (OLD.completed_seq, OLD.outcome, OLD.completed_token,
                                OLD.attempt_id, OLD.result_bytes, OLD.result_sha256,
                                OLD.tenant, OLD.request_id, OLD.tool_call_id))
    EXECUTE FUNCTION tool_calls_history_kept();
