-- Migration 10. A length-delimited field (a message or bytes), always present.
CREATE FUNCTION drpc_pb_len(field int, b bytea) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN drpc_pb_varint((field::bigint << 3) | 2) || drpc_pb_varint(length(b)) || b;
END $fn$
