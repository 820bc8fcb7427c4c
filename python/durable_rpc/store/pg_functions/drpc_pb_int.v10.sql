-- Migration 10. A varint field; proto3 leaves zero (and NULL) out.
CREATE FUNCTION drpc_pb_int(field int, v bigint) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF v IS NULL OR v = 0 THEN
    RETURN ''::bytea;
  END IF;
  RETURN drpc_pb_varint(field::bigint << 3) || drpc_pb_varint(v);
END $fn$
