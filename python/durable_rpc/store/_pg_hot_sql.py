"""The PostgreSQL hot path's server-side functions (migration 10).

An activity completion carrying an inline decision (docs/engine.md, "Inline workflow
tasks") is two of a hello workflow's four durable commits. Sent as separate statements
it costs ~9 round trips, and on PostgreSQL the cost of a workflow is per statement
(docs/scale-out.md): driver work in the server, protocol work in the backend and a
context switch each way. ``drpc_complete_activity_inline`` runs the whole operation in
the backend as one autocommitted call: the fenced completion, the run lock, the checks,
the events, the activity rows (eagerly leased), the close, the ``NOTIFY``.

It covers only the common shape of that operation. Anything else — a lease that is not
live (late holders, duplicates), a closed run, a history that moved on, a workflow task
or update request pending, a used seq, a parent or open children when closing, a
decision past the history limit — raises SQLSTATE ``DRFB1`` before anything is kept
(the call's transaction rolls back whole), and the store runs the general path, which
answers every case. So the function never decides anything differently: it either does
exactly what the general path would have done, or nothing.

Events are built here because they carry the database time of the commit, which the
server cannot know before the call: the server serializes every part that does not
depend on it, the function adds the event id and the times in protobuf's field order, so
the bytes equal ``_logic.make_event``'s (tests/store/test_pg_hot_path.py compares them).
"""

from __future__ import annotations

#: SQLSTATE the hot-path function raises when the general path must run instead.
FALLBACK_SQLSTATE = "DRFB1"

# PL/pgSQL throughout: a chain of SQL-language helpers, not inlined when called from
# PL/pgSQL, measured ~50 us an event against ~2 us for these.
_HELPERS = (
    # A protobuf varint (non-negative values only: ids, times, counters).
    """CREATE FUNCTION drpc_pb_varint(v bigint) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
DECLARE
  out bytea := ''::bytea;
BEGIN
  IF v < 0 THEN
    RAISE EXCEPTION 'drpc_pb_varint: negative value %', v;
  END IF;
  LOOP
    IF v < 128 THEN
      RETURN out || set_byte('\\x00'::bytea, 0, v::int);
    END IF;
    out := out || set_byte('\\x00'::bytea, 0, ((v & 127) | 128)::int);
    v := v >> 7;
  END LOOP;
END $fn$""",
    # A varint field; proto3 leaves zero (and NULL) out.
    """CREATE FUNCTION drpc_pb_int(field int, v bigint) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF v IS NULL OR v = 0 THEN
    RETURN ''::bytea;
  END IF;
  RETURN drpc_pb_varint(field::bigint << 3) || drpc_pb_varint(v);
END $fn$""",
    # A length-delimited field (a message or bytes), always present.
    """CREATE FUNCTION drpc_pb_len(field int, b bytea) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN drpc_pb_varint((field::bigint << 3) | 2) || drpc_pb_varint(length(b)) || b;
END $fn$""",
    # google.protobuf.Timestamp of a time in ms (Timestamp.FromMilliseconds).
    """CREATE FUNCTION drpc_pb_timestamp(ms bigint) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN drpc_pb_int(1, ms / 1000) || drpc_pb_int(2, (ms % 1000) * 1000000);
END $fn$""",
    # A HistoryEvent: event_id (1, never 0), event_time (2: ``ts``, a Timestamp), then
    # the attributes' oneof field.
    """CREATE FUNCTION drpc_pb_event(event_id bigint, ts bytea, field int, attrs bytea)
    RETURNS bytea LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
BEGIN
  RETURN '\\x08'::bytea || drpc_pb_varint(event_id) || drpc_pb_len(2, ts)
    || drpc_pb_len(field, attrs);
END $fn$""",
)

# The general path's counterparts, step by step: record_outcome (the fence of
# ``_shared.FENCE``), open_run, the inline conditions of complete_activity_task_inline,
# _check_decision, _record_decision, _apply_command (schedule_activity, complete_workflow),
# close_run, _claim_eager_activities / _lease_activity, and the notes' NOTIFY.
_RECORD_DECISION = """CREATE FUNCTION drpc_record_decision(
  p_ns text, p_kind text, p_task bigint, p_worker text, p_token bigint,
  p_result_field bytea, p_completed_tail bytea,
  p_run text, p_run_queue text, p_last_seen bigint, p_marker_tail bytea,
  p_seqs bigint[], p_types text[], p_queues text[], p_inputs bytea[], p_options bytea[],
  p_scheduled bytea[], p_lease_ms bigint[], p_start_to_close_ms bigint[],
  p_schedule_to_close_ms bigint[], p_schedule_to_start_ms bigint[], p_traces text[],
  p_eager boolean[],
  p_close_attrs bytea, p_close_result bytea,
  p_max_events bigint, p_max_bytes bigint,
  p_channel text, p_notify text)
RETURNS TABLE (o_now bigint, o_run_id text, o_events bytea[], o_task_ids bigint[],
  o_expires bigint[], o_dues bigint[], o_workflow_id text, o_history_length bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now bigint := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint;
  v_run text;
  v_seq bigint;
  v_attempt int;
  v_claimed bigint;
  v_next bigint := p_last_seen + 1;
  r runs%ROWTYPE;
  v_events bytea[] := '{}';
  v_kinds text[] := '{}';
  v_size bigint := 0;
  v_ids bigint[] := '{}';
  v_expires bigint[] := '{}';
  v_dues bigint[] := '{}';
  n int := coalesce(array_length(p_seqs, 1), 0);
  i int;
  v_task bigint;
  v_close bigint;
  v_queue_deadline bigint;
  v_attempt_deadline bigint;
  v_expiry bigint;
  -- The notes as _pg_listen.encode writes them: the origin first (a replica skips its own
  -- payloads by that prefix), then the tasks (from the server), the closed run, the due.
  v_payload text := p_notify;
  v_ts bytea := drpc_pb_timestamp(v_now);
BEGIN
  UPDATE tasks SET state = 'completed', due_ms = NULL, outcome_token = fencing_token,
      outcome_kind = 'completed'
    WHERE task_id = p_task AND namespace = p_ns AND kind = p_kind AND state = 'leased'
      AND worker_id = p_worker AND fencing_token = p_token AND expires_at_ms > v_now
    RETURNING run_id, seq, attempt, claimed_at_ms INTO v_run, v_seq, v_attempt, v_claimed;
  IF NOT FOUND OR v_run <> coalesce(p_run, v_run) THEN
    RAISE EXCEPTION 'lease not live, or another run' USING ERRCODE = 'DRFB1';
  END IF;
  SELECT * INTO r FROM runs WHERE namespace = p_ns AND run_id = v_run FOR UPDATE;
  IF NOT FOUND OR r.status <> 'running' OR r.history_length <> p_last_seen
      OR r.pending_updates <> 0 OR r.task_queue <> coalesce(p_run_queue, r.task_queue) THEN
    RAISE EXCEPTION 'run not open as the decision saw it' USING ERRCODE = 'DRFB1';
  END IF;
  IF EXISTS (SELECT 1 FROM tasks WHERE namespace = p_ns AND run_id = v_run
      AND kind = 'workflow' AND state IN ('queued', 'leased', 'waiting'))
    OR (n > 0 AND EXISTS (SELECT 1 FROM tasks WHERE namespace = p_ns AND run_id = v_run
      AND seq = ANY (p_seqs)))
    OR (p_close_attrs IS NOT NULL AND (r.parent_run_id IS NOT NULL OR EXISTS (
      SELECT 1 FROM runs AS child WHERE child.namespace = p_ns
        AND child.parent_run_id = v_run AND child.status = 'running'))) THEN
    RAISE EXCEPTION 'a workflow task or used seq, or children' USING ERRCODE = 'DRFB1';
  END IF;

  IF p_kind = 'activity' THEN
    -- ActivityCompleted (13), then the inline decision's marker (11): its task saw that
    -- event, at the commit's time.
    v_events := v_events || drpc_pb_event(v_next, v_ts, 13,
      drpc_pb_int(1, v_seq) || p_result_field || drpc_pb_int(3, v_attempt)
      || p_completed_tail);
    v_kinds := v_kinds || 'activity_completed'::text;
    v_events := v_events || drpc_pb_event(v_next + 1, v_ts, 11,
      drpc_pb_int(1, v_next) || drpc_pb_len(2, v_ts) || p_marker_tail);
    v_next := v_next + 2;
  ELSE
    -- A workflow task's marker: what it saw, at its claim's time.
    v_events := v_events || drpc_pb_event(v_next, v_ts, 11,
      drpc_pb_int(1, p_last_seen) || drpc_pb_len(2, drpc_pb_timestamp(v_claimed))
      || p_marker_tail);
    v_next := v_next + 1;
  END IF;
  v_kinds := v_kinds || 'workflow_task_completed'::text;
  -- The command events: ActivityScheduled (12) each, or WorkflowCompleted (20).
  FOR i IN 1 .. n LOOP
    v_events := v_events || drpc_pb_event(v_next, v_ts, 12, p_scheduled[i]);
    v_kinds := v_kinds || 'activity_scheduled'::text;
    v_next := v_next + 1;
  END LOOP;
  IF p_close_attrs IS NOT NULL THEN
    v_events := v_events || drpc_pb_event(v_next, v_ts, 20, p_close_attrs);
    v_kinds := v_kinds || 'workflow_completed'::text;
  END IF;
  SELECT coalesce(sum(length(e)), 0) INTO v_size FROM unnest(v_events) AS e;
  IF p_close_attrs IS NULL AND (p_last_seen + array_length(v_events, 1) > p_max_events
      OR r.history_size_bytes + v_size > p_max_bytes) THEN
    RAISE EXCEPTION 'past the history limit' USING ERRCODE = 'DRFB1';
  END IF;
  INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, data)
    SELECT p_ns, v_run, p_last_seen + k, v_kinds[k], v_now, v_events[k]
    FROM generate_subscripts(v_events, 1) AS k;
  UPDATE runs SET history_length = p_last_seen + array_length(v_events, 1),
      history_size_bytes = history_size_bytes + v_size, wft_attempt = 1,
      last_wft_failure = NULL
    WHERE namespace = p_ns AND run_id = v_run;

  FOR i IN 1 .. n LOOP
    v_close := v_now + p_schedule_to_close_ms[i];
    -- least() skips NULLs, as _logic.earliest does.
    v_queue_deadline := least(v_close, v_now + p_schedule_to_start_ms[i]);
    IF v_queue_deadline IS NOT NULL THEN
      v_dues := v_dues || v_queue_deadline;
    END IF;
    IF p_eager[i] THEN
      -- Queued and leased at once: the row the general path's INSERT and claim leave.
      v_attempt_deadline := least(v_now + p_start_to_close_ms[i], v_close);
      v_expiry := least(v_now + p_lease_ms[i], v_attempt_deadline);
      INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, due_ms,
          expires_at_ms, claimed_at_ms, worker_id, attempt, fencing_token, seq,
          activity_type, input, options, lease_ms, start_to_close_ms,
          attempt_deadline_ms, schedule_to_close_deadline_ms, queue_deadline_ms,
          created_at_ms, trace_context)
        VALUES (p_ns, v_run, 'activity', coalesce(nullif(p_queues[i], ''), r.task_queue),
          'leased', v_now, v_expiry, v_expiry, v_now, p_worker, 1, 1, p_seqs[i],
          p_types[i], p_inputs[i], p_options[i], p_lease_ms[i], p_start_to_close_ms[i],
          v_attempt_deadline, v_close, NULL, v_now, p_traces[i])
        RETURNING task_id INTO v_task;
      -- _ops_leases.lease_check_at: the 250 ms grid of lease checks.
      v_dues := v_dues || (((v_expiry + 249) / 250) * 250);
    ELSE
      v_expiry := NULL;
      INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, due_ms,
          attempt, fencing_token, seq, activity_type, input, options, lease_ms,
          start_to_close_ms, schedule_to_close_deadline_ms, queue_deadline_ms,
          created_at_ms, trace_context)
        VALUES (p_ns, v_run, 'activity', coalesce(nullif(p_queues[i], ''), r.task_queue),
          'queued', v_now, v_now, 1, 0, p_seqs[i], p_types[i], p_inputs[i], p_options[i],
          p_lease_ms[i], p_start_to_close_ms[i], v_close, v_queue_deadline, v_now,
          p_traces[i])
        RETURNING task_id INTO v_task;
    END IF;
    v_ids := v_ids || v_task;
    v_expires := v_expires || v_expiry;
  END LOOP;

  IF p_close_attrs IS NOT NULL THEN
    UPDATE runs SET status = 'completed', close_time_ms = v_now, result = p_close_result,
        failure = NULL, deadline_ms = NULL, pending_updates = 0
      WHERE namespace = p_ns AND run_id = v_run;
    UPDATE tasks SET state = 'cancelled', due_ms = NULL, queue_deadline_ms = NULL,
        cancel_requested = 1
      WHERE namespace = p_ns AND run_id = v_run AND state IN ('queued', 'leased', 'waiting');
  END IF;

  -- The notes, as the store's COMMIT would NOTIFY them (``_pg_listen.encode``).
  IF p_close_attrs IS NOT NULL THEN
    v_payload := v_payload || ',"c":'
      || jsonb_build_array(jsonb_build_array(p_ns, v_run))::text;
  END IF;
  IF array_length(v_dues, 1) > 0 THEN
    v_payload := v_payload || ',"d":' || (SELECT min(d) FROM unnest(v_dues) AS d)::text;
  END IF;
  IF position(',' IN v_payload) > 0 THEN  -- anything past the origin
    PERFORM pg_notify(p_channel, v_payload || '}');
  END IF;
  RETURN QUERY SELECT v_now, v_run, v_events, v_ids, v_expires, v_dues, r.workflow_id,
    p_last_seen + array_length(v_events, 1);
END $fn$"""

# The general path's counterparts: start_workflow (record_start_request, open_run_of,
# create_run, refuse_input) and its folded claim (_lease_workflow_task with
# SERVED_BY_WORKER), for a start without memo, search attributes, timeouts or parent.
_START_WORKFLOW = """CREATE FUNCTION drpc_start_workflow(
  p_ns text, p_workflow_id text, p_type text, p_version text, p_queue text,
  p_request_id text, p_run text, p_started_head bytea, p_started_tail bytea,
  p_max_events bigint, p_max_bytes bigint,
  p_claim_worker text, p_lease_ms bigint,
  p_channel text, p_origin text)
RETURNS TABLE (o_now bigint, o_event bytea, o_task_id bigint, o_claimed boolean,
  o_token bigint, o_attempt int)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now bigint := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint;
  v_fingerprint text;
  v_event bytea;
  v_task bigint;
  v_token bigint;
  v_attempt int;
  v_claimed boolean := false;
  v_payload text := '{"o":' || to_json(p_origin)::text;
BEGIN
  INSERT INTO start_requests (namespace, workflow_id, request_id, run_id)
    VALUES (p_ns, p_workflow_id, p_request_id, p_run) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'an earlier start has this request id' USING ERRCODE = 'DRFB1';
  END IF;
  PERFORM 1 FROM runs WHERE namespace = p_ns AND workflow_id = p_workflow_id
    AND status = 'running' FOR UPDATE;
  IF FOUND THEN
    RAISE EXCEPTION 'the workflow id has an open run' USING ERRCODE = 'DRFB1';
  END IF;
  INSERT INTO runs (namespace, run_id, workflow_id, workflow_type, workflow_version,
      task_queue, status, start_time_ms, history_length, definition_fingerprint,
      cancel_requested, wft_attempt)
    VALUES (p_ns, p_run, p_workflow_id, p_type, p_version, p_queue, 'running', v_now, 0,
      COALESCE((SELECT fingerprint FROM definitions WHERE namespace = p_ns
        AND name = p_type AND version = p_version), ''), 0, 1)
    RETURNING definition_fingerprint INTO v_fingerprint;
  -- WorkflowStarted (10): the fingerprint (7) sits between input (6) and request_id (8).
  v_event := drpc_pb_event(1, drpc_pb_timestamp(v_now), 10, p_started_head
    || CASE WHEN v_fingerprint = '' THEN ''::bytea
       ELSE drpc_pb_len(7, convert_to(v_fingerprint, 'UTF8')) END
    || p_started_tail);
  IF 1 > p_max_events OR length(v_event) > p_max_bytes THEN
    RAISE EXCEPTION 'past the history limit' USING ERRCODE = 'DRFB1';
  END IF;
  INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, data)
    VALUES (p_ns, p_run, 1, 'workflow_started', v_now, v_event);
  UPDATE runs SET history_length = 1, history_size_bytes = length(v_event)
    WHERE namespace = p_ns AND run_id = p_run;
  INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, due_ms,
      attempt, fencing_token, created_at_ms, workflow_type, workflow_version)
    VALUES (p_ns, p_run, 'workflow', p_queue, 'queued', v_now, v_now, 1, 0, v_now, p_type,
      p_version)
    RETURNING task_id INTO v_task;
  IF p_claim_worker IS NOT NULL THEN
    UPDATE tasks SET state = 'leased', worker_id = p_claim_worker,
        fencing_token = fencing_token + 1,
        attempt = CASE WHEN state = 'leased' THEN attempt + 1 ELSE attempt END,
        claimed_at_ms = v_now, expires_at_ms = v_now + p_lease_ms,
        due_ms = v_now + p_lease_ms, outcome_token = NULL, outcome_kind = NULL
      WHERE task_id = v_task AND (NOT EXISTS (SELECT 1 FROM workers w
          WHERE w.namespace = p_ns AND w.worker_id = p_claim_worker)
        OR EXISTS (SELECT 1 FROM worker_definitions wd WHERE wd.namespace = p_ns
          AND wd.worker_id = p_claim_worker AND wd.name = p_type
          AND wd.version = p_version))
      RETURNING fencing_token, attempt INTO v_token, v_attempt;
    v_claimed := FOUND;
  END IF;
  IF v_claimed THEN
    UPDATE runs SET wft_attempt = v_attempt WHERE namespace = p_ns AND run_id = p_run;
    -- The poller it is claimed for needs no wake-up; its lease check on the 250 ms grid.
    v_payload := v_payload || ',"d":' || (((v_now + p_lease_ms + 249) / 250) * 250)::text;
  ELSE
    v_payload := v_payload || ',"t":'
      || jsonb_build_array(jsonb_build_array(p_ns, p_queue, 'workflow'))::text;
  END IF;
  PERFORM pg_notify(p_channel, v_payload || '}');
  RETURN QUERY SELECT v_now, v_event, v_task, v_claimed, v_token, v_attempt;
END $fn$"""

#: Migration 10 on PostgreSQL (SQLite's migration 10 is empty).
HOT_PATH_FUNCTIONS: tuple[str, ...] = (*_HELPERS, _RECORD_DECISION, _START_WORKFLOW)


def _patched(sql: str, *edits: tuple[str, str]) -> str:
    """``sql`` with each ``(old, new)`` applied; each ``old`` must occur exactly once (a
    later migration's function is written as its change to the released one)."""
    for old, new in edits:
        if sql.count(old) != 1:
            raise AssertionError(f"the released function has not exactly one {old!r}")
        sql = sql.replace(old, new)
    return sql


# Build-id pinning (``_build_pins``), as the general path does it: an inline decision
# (kind 'activity') on a run pinned to another build than the completing worker's is the
# general path's (the completion alone, then a workflow task for the pinned build); a
# decision on an undecided run (build_id NULL) records the deciding worker's registered
# build, or '' (stays unversioned). Both ride on statements the function already runs:
# an unversioned run never reads ``workers`` here, an undecided one once. No workflow
# task of the run is active (checked above), so no task row needs the new pin.
_RECORD_DECISION_V12 = _patched(
    _RECORD_DECISION,
    ("CREATE FUNCTION drpc_record_decision(", "CREATE OR REPLACE FUNCTION drpc_record_decision("),
    (
        """    RAISE EXCEPTION 'a workflow task or used seq, or children' USING ERRCODE = 'DRFB1';
  END IF;
""",
        """    RAISE EXCEPTION 'a workflow task or used seq, or children' USING ERRCODE = 'DRFB1';
  END IF;
  IF p_kind = 'activity' AND coalesce(r.build_id, '') <> '' AND r.build_id IS DISTINCT FROM
      (SELECT w.build_id FROM workers w WHERE w.namespace = p_ns AND w.worker_id = p_worker)
  THEN
    RAISE EXCEPTION 'the run is pinned to another build' USING ERRCODE = 'DRFB1';
  END IF;
""",
    ),
    (
        """      history_size_bytes = history_size_bytes + v_size, wft_attempt = 1,
      last_wft_failure = NULL
""",
        """      history_size_bytes = history_size_bytes + v_size, wft_attempt = 1,
      last_wft_failure = NULL,
      build_id = coalesce(build_id, (SELECT w.build_id FROM workers w
        WHERE w.namespace = p_ns AND w.worker_id = p_worker), '')
""",
    ),
)

# A start of a removed definition (``_removed``) is the general path's, which refuses it
# with DEFINITION_REMOVED. The insert that reads the definition's fingerprint reads its
# removal too: no statement more.
_START_WORKFLOW_V12 = _patched(
    _START_WORKFLOW,
    ("CREATE FUNCTION drpc_start_workflow(", "CREATE OR REPLACE FUNCTION drpc_start_workflow("),
    ("  v_fingerprint text;\n", "  v_fingerprint text;\n  v_removed bigint;\n"),
    (
        """    RETURNING definition_fingerprint INTO v_fingerprint;
""",
        """    RETURNING definition_fingerprint, (SELECT d.removed_at_ms FROM definitions d
      WHERE d.namespace = p_ns AND d.name = p_type AND d.version = p_version)
    INTO v_fingerprint, v_removed;
  IF v_removed IS NOT NULL THEN
    RAISE EXCEPTION 'the definition was removed' USING ERRCODE = 'DRFB1';
  END IF;
""",
    ),
)

#: Migration 12 on PostgreSQL: the hot path pins runs to builds and refuses removed
#: definitions (as the general path does).
BUILD_PIN_FUNCTIONS: tuple[str, ...] = (_RECORD_DECISION_V12, _START_WORKFLOW_V12)
