-- Migration 30: a start in a namespace with an admission policy stays on this path when
-- the policy admits it at once (_admission_start.admit_new_run's first case): with the
-- policy locked after the run's INSERT, no run waiting, room under the open-runs limit
-- and a token of the start rate, the bucket is written back one token lighter. Any other
-- case (a deferral, a refusal) is the general path's.
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
  v_policy namespace_admission%ROWTYPE;
  v_tokens float8;
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
  IF v_admission THEN
    -- The new run counts among the open ones (as after the general path's INSERT).
    SELECT * INTO v_policy FROM namespace_admission WHERE namespace = p_ns FOR UPDATE;
    IF FOUND THEN  -- else removed meanwhile
      IF EXISTS (SELECT 1 FROM runs WHERE namespace = p_ns AND admission IS NOT NULL) THEN
        RAISE EXCEPTION 'runs wait for admission' USING ERRCODE = 'DRFB1';
      END IF;
      IF v_policy.max_open_runs IS NOT NULL AND (SELECT count(*) FROM runs
          WHERE namespace = p_ns AND status = 'running') - 1 >= v_policy.max_open_runs THEN
        RAISE EXCEPTION 'the open-runs limit is reached' USING ERRCODE = 'DRFB1';
      END IF;
      v_tokens := 1;  -- no start rate: the bucket keeps 0 (_admission.save_bucket)
      IF v_policy.starts_per_period IS NOT NULL THEN
        -- _admission.bucket_tokens, in the same floating-point steps.
        v_tokens := least(v_policy.starts_per_period::float8, v_policy.tokens
          + greatest(0, v_now - v_policy.tokens_at_ms)::float8
            * v_policy.starts_per_period::float8 / v_policy.period_ms::float8);
        IF abs(v_tokens - round(v_tokens)) < 1e-9 THEN
          v_tokens := round(v_tokens);
        END IF;
        IF v_tokens < 1 THEN
          RAISE EXCEPTION 'no start token' USING ERRCODE = 'DRFB1';
        END IF;
      END IF;
      UPDATE namespace_admission SET tokens = v_tokens - 1, tokens_at_ms = v_now,
          next_admit_ms = NULL
        WHERE namespace = p_ns;
    END IF;
  END IF;
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
