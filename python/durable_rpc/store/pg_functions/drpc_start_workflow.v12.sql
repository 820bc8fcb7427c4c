-- Migration 12: a start of a removed definition (`_removed`) is the general path's, which
-- refuses it with DEFINITION_REMOVED. The insert that reads the definition's fingerprint
-- reads its removal too: no statement more.
CREATE OR REPLACE FUNCTION drpc_start_workflow(
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
  v_removed bigint;
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
    RETURNING definition_fingerprint, (SELECT d.removed_at_ms FROM definitions d
      WHERE d.namespace = p_ns AND d.name = p_type AND d.version = p_version)
    INTO v_fingerprint, v_removed;
  IF v_removed IS NOT NULL THEN
    RAISE EXCEPTION 'the definition was removed' USING ERRCODE = 'DRFB1';
  END IF;
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
END $fn$
