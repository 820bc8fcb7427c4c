-- Migration 29: the same start in fewer statements (each statement the backend runs
-- costs more than most statements' own work: docs/scale-out.md). What the run row, the
-- fall-backs and the folded claim read is one SELECT before the run's INSERT, which then
-- writes the history's length and size itself; a start claimed for a waiting poller
-- inserts its workflow task leased (the row a queued INSERT and the claim's UPDATE left,
-- attempt 1 and token 1, so the run's wft_attempt stays 1); the row is returned without
-- a query. Its plans never scan a table whole (enable_seqscan off).
CREATE OR REPLACE FUNCTION drpc_start_workflow(
  p_ns text, p_workflow_id text, p_type text, p_version text, p_queue text,
  p_request_id text, p_run text, p_started_head bytea, p_started_tail bytea,
  p_max_events bigint, p_max_bytes bigint,
  p_claim_worker text, p_lease_ms bigint,
  p_channel text, p_origin text)
RETURNS TABLE (o_now bigint, o_event bytea, o_task_id bigint, o_claimed boolean,
  o_token bigint, o_attempt int)
LANGUAGE plpgsql
-- Generic plans: a custom plan pruned by this call's values costs a planning each call.
SET plan_cache_mode = force_generic_plan
-- Every statement here reads rows by key: no plan made while the tables were small may
-- scan them whole later (see drpc_record_decision).
SET enable_seqscan = off
AS $fn$
DECLARE
  v_now bigint := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint;
  v_fingerprint text;
  v_removed bigint;
  v_admission boolean;
  v_event bytea;
  v_task bigint;
  v_expiry bigint;
  v_claimed boolean;
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
  SELECT COALESCE(d.fingerprint, ''), d.removed_at_ms,
      EXISTS (SELECT 1 FROM namespace_admission a WHERE a.namespace = p_ns),
      -- The claim's filter: a worker with no registration, or one that registered this
      -- definition.
      p_claim_worker IS NOT NULL AND (NOT EXISTS (SELECT 1 FROM workers w
          WHERE w.namespace = p_ns AND w.worker_id = p_claim_worker)
        OR EXISTS (SELECT 1 FROM worker_definitions wd WHERE wd.namespace = p_ns
          AND wd.worker_id = p_claim_worker AND wd.name = p_type
          AND wd.version = p_version))
    INTO v_fingerprint, v_removed, v_admission, v_claimed
    FROM (SELECT 1) AS one LEFT JOIN definitions d
      ON d.namespace = p_ns AND d.name = p_type AND d.version = p_version;
  IF v_admission THEN
    RAISE EXCEPTION 'the namespace has an admission policy' USING ERRCODE = 'DRFB1';
  END IF;
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
  INSERT INTO runs (namespace, run_id, workflow_id, workflow_type, workflow_version,
      task_queue, status, start_time_ms, history_length, history_size_bytes,
      definition_fingerprint, cancel_requested, wft_attempt)
    VALUES (p_ns, p_run, p_workflow_id, p_type, p_version, p_queue, 'running', v_now, 1,
      length(v_event), v_fingerprint, 0, 1);
  INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, data)
    VALUES (p_ns, p_run, 1, 'workflow_started', v_now, v_event);
  IF v_claimed THEN
    v_expiry := v_now + p_lease_ms;
    INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, due_ms,
        expires_at_ms, claimed_at_ms, worker_id, attempt, fencing_token, created_at_ms,
        workflow_type, workflow_version)
      VALUES (p_ns, p_run, 'workflow', p_queue, 'leased', v_now, v_expiry, v_expiry, v_now,
        p_claim_worker, 1, 1, v_now, p_type, p_version)
      RETURNING task_id INTO v_task;
    -- The poller it is claimed for needs no wake-up; its lease check on the 250 ms grid.
    v_payload := v_payload || ',"d":' || (((v_expiry + 249) / 250) * 250)::text;
    o_token := 1;
    o_attempt := 1;
  ELSE
    INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, due_ms,
        attempt, fencing_token, created_at_ms, workflow_type, workflow_version)
      VALUES (p_ns, p_run, 'workflow', p_queue, 'queued', v_now, v_now, 1, 0, v_now, p_type,
        p_version)
      RETURNING task_id INTO v_task;
    v_payload := v_payload || ',"t":'
      || jsonb_build_array(jsonb_build_array(p_ns, p_queue, 'workflow'))::text;
  END IF;
  PERFORM pg_notify(p_channel, v_payload || '}');
  o_now := v_now;
  o_event := v_event;
  o_task_id := v_task;
  o_claimed := v_claimed;
  RETURN NEXT;
END $fn$
