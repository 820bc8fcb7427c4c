-- Migration 10. A HistoryEvent: event_id (1, never 0), event_time (2: `ts`, a Timestamp),
-- then the attributes' oneof field.
CREATE FUNCTION drpc_pb_event(event_id bigint, ts bytea, field int, attrs bytea)
    RETURNS bytea LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN '\x08'::bytea || drpc_pb_varint(event_id) || drpc_pb_len(2, ts)
    || drpc_pb_len(field, attrs);
END $fn$
