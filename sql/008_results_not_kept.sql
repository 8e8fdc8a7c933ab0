-- 008: a tool call's result may be kept as its length and SHA-256 only.
-- A completion whose result is over --max-result-bytes, or that sends
-- result_not_kept instead of its result, is stored with result NULL and
-- result_bytes and result_sha256 set; a later claim of the key is answered
-- 409 result_not_kept (docs/api.md, "Results not kept").
--
-- Not additive. A ledgerd of an older schema reads a final row with a
-- NULL result as a result of no bytes at all: it would replay the call with
-- a body whose "result" has no value, and compare a repeated completion
-- against nothing. It must not serve a database that may hold such a row,
-- so every older ledgerd refuses this schema (it exits at start, and its
-- /readyz answers 503 schema_mismatch); stop the older processes before
-- this migration runs (docs/operations.md, "The order of a rolling
-- upgrade").
-- oldest-binary-schema: 8

ALTER TABLE tool_calls
    ADD COLUMN result_bytes  bigint CHECK (result_bytes >= 0),
    ADD COLUMN result_sha256 text CHECK (result_sha256 ~ '^[0-9a-f]{64}$');

-- A final call has its outcome and either its result or its digest, never
-- both; a digest is its length and its SHA-256 together. NOT VALID: every
-- existing row satisfies the constraint dropped here, which these imply
-- for rows whose new columns are NULL, and checking them would hold the
-- table's lock for a scan of it; every row written from now on is checked.
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_check,
    ADD CONSTRAINT tool_calls_final_has_result CHECK (
        (state IN ('succeeded', 'failed'))
        = (outcome IS NOT NULL AND (result IS NOT NULL OR result_sha256 IS NOT NULL))) NOT VALID,
    ADD CONSTRAINT tool_calls_result_or_digest CHECK (
        result IS NULL OR result_sha256 IS NULL) NOT VALID,
    ADD CONSTRAINT tool_calls_digest_whole CHECK (
        (result_bytes IS NULL) = (result_sha256 IS NULL)) NOT VALID;

-- The holder's completion read from its row (sql/004) says, as the general
-- path's event does (ledger/store/event.c), that its result was not kept.
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
    FROM tool_calls WHERE completed_seq IS NOT NULL;

-- The completion a row carries now includes its digest: it may not change either.
DROP TRIGGER tool_calls_completion_kept ON tool_calls;
CREATE TRIGGER tool_calls_completion_kept AFTER UPDATE ON tool_calls FOR EACH ROW
    WHEN (OLD.completed_seq IS NOT NULL
          AND (NEW.completed_seq, NEW.outcome, NEW.completed_token, NEW.attempt_id,
               NEW.result_bytes, NEW.result_sha256, NEW.tenant, NEW.request_id,
               NEW.tool_call_id)
              IS DISTINCT FROM (OLD.completed_seq, OLD.outcome, OLD.completed_token,
                                OLD.attempt_id, OLD.result_bytes, OLD.result_sha256,
                                OLD.tenant, OLD.request_id, OLD.tool_call_id))
    EXECUTE FUNCTION tool_calls_history_kept();
