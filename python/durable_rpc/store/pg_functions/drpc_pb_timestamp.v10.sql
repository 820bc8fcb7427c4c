-- Migration 10. google.protobuf.Timestamp of a time in ms (Timestamp.FromMilliseconds).
CREATE FUNCTION drpc_pb_timestamp(ms bigint) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN drpc_pb_int(1, ms / 1000) || drpc_pb_int(2, (ms % 1000) * 1000000);
END $fn$
