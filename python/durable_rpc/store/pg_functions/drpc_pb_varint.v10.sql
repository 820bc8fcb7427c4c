-- Migration 10. A protobuf varint (non-negative values only: ids, times, counters).
CREATE FUNCTION drpc_pb_varint(v bigint) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
DECLARE
  out bytea := ''::bytea;
BEGIN
  IF v < 0 THEN
    RAISE EXCEPTION 'drpc_pb_varint: negative value %', v;
  END IF;
  LOOP
    IF v < 128 THEN
      RETURN out || set_byte('\x00'::bytea, 0, v::int);
    END IF;
    out := out || set_byte('\x00'::bytea, 0, ((v & 127) | 128)::int);
    v := v >> 7;
  END LOOP;
END $fn$
