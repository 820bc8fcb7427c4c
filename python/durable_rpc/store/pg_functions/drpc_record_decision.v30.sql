-- Migration 30: flow control that does not bind stays on this path. An eager activity
-- on a queue with a concurrency limit takes one of the queue's free slots (the limit row
-- locked, the leased attempts counted), one under a rate limit of its type takes a token
-- of its bucket (GCRA, the row updated only when a token is there): either one short
-- leaves the activity queued for the polls, as a claim that finds no room does. An
-- activity completed on a limited queue wakes that queue's polls when a claim was
-- deferred since the last wake-up (_queue_limits.slot_freed: the row locked first). A
-- close in a namespace with an admission policy locks the policy and goes on when no run
-- waits for admission (there is nobody to admit). The queues whose polls the commit
-- wakes are the function's answer (o_wake), and the claims it deferred, by reason.
-- Returns new columns: the migration drops the previous version first.
CREATE OR REPLACE FUNCTION drpc_record_decision(
  p_ns text, p_kind text, p_task bigint, p_worker text, p_token bigint,
  p_result_field bytea, p_completed_tail bytea,
  p_run text, p_run_queue text, p_last_seen bigint, p_marker_tail bytea,
  p_seqs bigint[], p_types text[], p_queues text[], p_inputs bytea[], p_options bytea[],
  p_scheduled bytea[], p_lease_ms bigint[], p_start_to_close_ms bigint[],
  p_schedule_to_close_ms bigint[], p_schedule_to_start_ms bigint[], p_traces text[],
  p_eager boolean[],
  p_close_attrs bytea, p_close_result bytea,
  p_max_events bigint, p_max_bytes bigint,
  p_channel text, p_origin text, p_wake text[])
RETURNS TABLE (o_now bigint, o_run_id text, o_events bytea[], o_task_ids bigint[],
  o_expires bigint[], o_dues bigint[], o_workflow_id text, o_history_length bigint,
  o_wake text[], o_deferred_by_limit int, o_deferred_by_rate int)
LANGUAGE plpgsql
-- Generic plans: a custom plan pruned by this call's values (the probe's, planned anew
-- each call at 0.24 ms) costs a planning each call and wins nothing.
SET plan_cache_mode = force_generic_plan
-- Every statement here reads rows by key. A generic plan is made once per connection, on
-- the first call: made while the tables were small (a new database), it would scan them
-- whole for as long as the connection lives (measured: 4 ms a call at 2,000 runs).
SET enable_seqscan = off
AS $fn$
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
  -- payloads by that prefix), then the tasks, the closed run, the due.
  v_payload text := '{"o":' || to_json(p_origin)::text;
  -- The queues whose activity polls the commit wakes: the server's, a freed slot's, and
  -- the run's when an eager claim was deferred.
  v_wake text[] := coalesce(p_wake, '{}');
  v_done_queue text;
  v_slot_freed boolean;
  v_limit int;
  v_free bigint;
  v_rate_on boolean;
  v_lease_it boolean;
  v_deferred_by_limit int := 0;
  v_deferred_by_rate int := 0;
  v_ts bytea := drpc_pb_timestamp(v_now);
  v_eager boolean := coalesce(true = ANY (p_eager), false);
  v_closing boolean := p_close_attrs IS NOT NULL;
  v_event bytea;
  v_min_due bigint;
  v_busy boolean;
  v_pinned boolean;
  v_outranked boolean;
  v_admission boolean;
  v_budget boolean;
BEGIN
  UPDATE tasks SET state = 'completed', due_ms = NULL, outcome_token = fencing_token,
      outcome_kind = 'completed'
    WHERE task_id = p_task AND namespace = p_ns AND kind = p_kind AND state = 'leased'
      AND worker_id = p_worker AND fencing_token = p_token AND expires_at_ms > v_now
    RETURNING run_id, seq, attempt, claimed_at_ms, task_queue, (SELECT 1 FROM
        task_queue_limits l WHERE l.namespace = p_ns AND l.task_queue = tasks.task_queue)
        IS NOT NULL
      INTO v_run, v_seq, v_attempt, v_claimed, v_done_queue, v_slot_freed;
  IF NOT FOUND OR v_run <> coalesce(p_run, v_run) THEN
    RAISE EXCEPTION 'lease not live, or another run' USING ERRCODE = 'DRFB1';
  END IF;
  IF p_kind = 'activity' AND v_slot_freed THEN
    -- A limited queue's slot is free: its polls are woken when a claim was deferred since
    -- the last wake-up, with the row locked first (as the general path, before the run).
    SELECT claim_deferred = 1 INTO v_slot_freed FROM task_queue_limits
      WHERE namespace = p_ns AND task_queue = v_done_queue FOR UPDATE;
    IF v_slot_freed THEN
      UPDATE task_queue_limits SET claim_deferred = 0
        WHERE namespace = p_ns AND task_queue = v_done_queue;
    END IF;
  ELSE
    v_slot_freed := false;
  END IF;
  SELECT * INTO r FROM runs WHERE namespace = p_ns AND run_id = v_run FOR UPDATE;
  IF NOT FOUND OR r.status <> 'running' OR r.history_length <> p_last_seen
      OR r.pending_updates <> 0 OR r.task_queue <> coalesce(p_run_queue, r.task_queue) THEN
    RAISE EXCEPTION 'run not open as the decision saw it' USING ERRCODE = 'DRFB1';
  END IF;
  IF r.priority <> 3 OR r.fairness_key IS NOT NULL THEN
    RAISE EXCEPTION 'the run has a priority or fairness key' USING ERRCODE = 'DRFB1';
  END IF;
  -- Every probe of what the general path must decide, in one statement (AND evaluates a
  -- probe only when the cheap condition before it holds).
  SELECT
      EXISTS (SELECT 1 FROM tasks WHERE namespace = p_ns AND run_id = v_run
          AND kind = 'workflow' AND state IN ('queued', 'leased', 'waiting'))
        OR (n > 0 AND EXISTS (SELECT 1 FROM tasks WHERE namespace = p_ns AND run_id = v_run
          AND seq = ANY (p_seqs)))
        OR (v_closing AND (r.parent_run_id IS NOT NULL OR EXISTS (
          SELECT 1 FROM runs AS child WHERE child.namespace = p_ns
            AND child.parent_run_id = v_run AND child.status = 'running'))),
      p_kind = 'activity' AND coalesce(r.build_id, '') <> '' AND r.build_id IS DISTINCT FROM
        (SELECT w.build_id FROM workers w WHERE w.namespace = p_ns AND w.worker_id = p_worker),
      v_eager AND EXISTS (SELECT 1 FROM tasks h WHERE h.namespace = p_ns
        AND h.kind = 'activity' AND h.task_queue = r.task_queue AND h.state = 'queued'
        AND h.priority < 3),
      v_eager AND EXISTS (SELECT 1 FROM rate_limits rl WHERE rl.namespace = p_ns),
      CASE WHEN v_eager THEN (SELECT l.max_concurrent_activities FROM task_queue_limits l
        WHERE l.namespace = p_ns AND l.task_queue = r.task_queue) END,
      v_closing AND EXISTS (SELECT 1 FROM namespace_admission a WHERE a.namespace = p_ns),
      v_closing AND EXISTS (
        SELECT 1 FROM budget_reservations b WHERE b.namespace = p_ns AND b.run_id = v_run)
    INTO v_busy, v_pinned, v_outranked, v_rate_on, v_limit, v_admission, v_budget;
  IF v_busy THEN
    RAISE EXCEPTION 'a workflow task or used seq, or children' USING ERRCODE = 'DRFB1';
  END IF;
  IF v_pinned THEN
    RAISE EXCEPTION 'the run is pinned to another build' USING ERRCODE = 'DRFB1';
  END IF;
  IF v_outranked THEN
    RAISE EXCEPTION 'a more urgent activity is queued' USING ERRCODE = 'DRFB1';
  END IF;
  IF v_admission THEN
    -- The close frees room: with the policy locked (starts and closes of the namespace
    -- serialize on it), a run waiting for admission is the general path's to admit.
    PERFORM 1 FROM namespace_admission WHERE namespace = p_ns FOR UPDATE;
    IF EXISTS (SELECT 1 FROM runs WHERE namespace = p_ns AND admission IS NOT NULL) THEN
      RAISE EXCEPTION 'runs wait for admission' USING ERRCODE = 'DRFB1';
    END IF;
  END IF;
  IF v_budget THEN
    RAISE EXCEPTION 'the run has a budget reservation' USING ERRCODE = 'DRFB1';
  END IF;

  IF p_kind = 'activity' THEN
    -- ActivityCompleted (13), then the inline decision's marker (11): its task saw that
    -- event, at the commit's time.
    v_event := drpc_pb_event(v_next, v_ts, 13,
      drpc_pb_int(1, v_seq) || p_result_field || drpc_pb_int(3, v_attempt)
      || p_completed_tail);
    v_events := v_events || v_event;
    v_size := v_size + length(v_event);
    v_kinds := v_kinds || 'activity_completed'::text;
    v_event := drpc_pb_event(v_next + 1, v_ts, 11,
      drpc_pb_int(1, v_next) || drpc_pb_len(2, v_ts) || p_marker_tail);
    v_events := v_events || v_event;
    v_size := v_size + length(v_event);
    v_next := v_next + 2;
  ELSE
    -- A workflow task's marker: what it saw, at its claim's time.
    v_event := drpc_pb_event(v_next, v_ts, 11,
      drpc_pb_int(1, p_last_seen) || drpc_pb_len(2, drpc_pb_timestamp(v_claimed))
      || p_marker_tail);
    v_events := v_events || v_event;
    v_size := v_size + length(v_event);
    v_next := v_next + 1;
  END IF;
  v_kinds := v_kinds || 'workflow_task_completed'::text;
  -- The command events: ActivityScheduled (12) each, or WorkflowCompleted (20).
  FOR i IN 1 .. n LOOP
    v_event := drpc_pb_event(v_next, v_ts, 12, p_scheduled[i]);
    v_events := v_events || v_event;
    v_size := v_size + length(v_event);
    v_kinds := v_kinds || 'activity_scheduled'::text;
    v_next := v_next + 1;
  END LOOP;
  IF v_closing THEN
    v_event := drpc_pb_event(v_next, v_ts, 20, p_close_attrs);
    v_events := v_events || v_event;
    v_size := v_size + length(v_event);
    v_kinds := v_kinds || 'workflow_completed'::text;
  END IF;
  IF NOT v_closing AND (p_last_seen + array_length(v_events, 1) > p_max_events
      OR r.history_size_bytes + v_size > p_max_bytes) THEN
    RAISE EXCEPTION 'past the history limit' USING ERRCODE = 'DRFB1';
  END IF;
  INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, data)
    SELECT p_ns, v_run, p_last_seen + k, v_kinds[k], v_now, v_events[k]
    FROM generate_subscripts(v_events, 1) AS k;
  -- The run closes (when the decision closes it) in the same UPDATE.
  UPDATE runs SET history_length = p_last_seen + array_length(v_events, 1),
      history_size_bytes = history_size_bytes + v_size, wft_attempt = 1,
      last_wft_failure = NULL,
      build_id = coalesce(build_id, (SELECT w.build_id FROM workers w
        WHERE w.namespace = p_ns AND w.worker_id = p_worker), ''),
      status = CASE WHEN v_closing THEN 'completed' ELSE status END,
      close_time_ms = CASE WHEN v_closing THEN v_now ELSE close_time_ms END,
      result = CASE WHEN v_closing THEN p_close_result ELSE result END,
      failure = CASE WHEN v_closing THEN NULL ELSE failure END,
      deadline_ms = CASE WHEN v_closing THEN NULL ELSE deadline_ms END,
      pending_updates = CASE WHEN v_closing THEN 0 ELSE pending_updates END
    WHERE namespace = p_ns AND run_id = v_run;

  IF v_limit IS NOT NULL THEN
    -- The eager claims take the queue's free slots (_queue_limits.free_slots): the limit
    -- row locked, so concurrent claims on the queue count each other's leases.
    SELECT l.max_concurrent_activities INTO v_limit FROM task_queue_limits l
      WHERE l.namespace = p_ns AND l.task_queue = r.task_queue FOR UPDATE;
    IF v_limit IS NOT NULL THEN  -- else removed meanwhile
      v_free := greatest(0, v_limit - (SELECT count(*) FROM tasks WHERE namespace = p_ns
        AND kind = 'activity' AND task_queue = r.task_queue AND due_ms IS NOT NULL
        AND state = 'leased'));
    END IF;
  END IF;
  FOR i IN 1 .. n LOOP
    v_close := v_now + p_schedule_to_close_ms[i];
    -- An eager claim is a claim: a free slot first, then a token, in command order
    -- (_ops_workflow_tasks._claim_eager_activities); short of either, it stays queued.
    v_lease_it := p_eager[i];
    IF v_lease_it AND v_free IS NOT NULL THEN
      IF v_free <= 0 THEN
        v_lease_it := false;
        v_deferred_by_limit := v_deferred_by_limit + 1;
      ELSE
        v_free := v_free - 1;
      END IF;
    END IF;
    IF v_lease_it AND v_rate_on THEN
      -- _rate_limits.take_token: GCRA, a token when tat - (burst - 1) * interval <= now.
      UPDATE rate_limits
        SET tat_us = greatest(tat_us, v_now * 1000) + interval_us,
          next_token_ms = ceil((greatest(tat_us, v_now * 1000) + interval_us
            - (burst - 1) * interval_us)::float8 / 1000)::bigint
        WHERE namespace = p_ns AND scope = 'activity_type' AND name = p_types[i]
          AND tat_us - (burst - 1) * interval_us <= v_now * 1000;
      IF NOT FOUND AND EXISTS (SELECT 1 FROM rate_limits WHERE namespace = p_ns
          AND scope = 'activity_type' AND name = p_types[i]) THEN
        v_lease_it := false;
        v_deferred_by_rate := v_deferred_by_rate + 1;
      END IF;
    END IF;
    IF p_eager[i] AND NOT v_lease_it AND NOT r.task_queue = ANY (v_wake) THEN
      v_wake := v_wake || r.task_queue;  -- its polls take it when there is room
    END IF;
    -- least() skips NULLs, as _logic.earliest does.
    v_queue_deadline := least(v_close, v_now + p_schedule_to_start_ms[i]);
    IF v_queue_deadline IS NOT NULL THEN
      v_dues := v_dues || v_queue_deadline;
      v_min_due := least(v_min_due, v_queue_deadline);
    END IF;
    IF v_lease_it THEN
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
      v_min_due := least(v_min_due, ((v_expiry + 249) / 250) * 250);
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

  IF v_closing THEN
    UPDATE tasks SET state = 'cancelled', due_ms = NULL, queue_deadline_ms = NULL,
        cancel_requested = 1
      WHERE namespace = p_ns AND run_id = v_run AND state IN ('queued', 'leased', 'waiting');
  END IF;

  IF v_slot_freed AND NOT v_done_queue = ANY (v_wake) THEN
    v_wake := v_wake || v_done_queue;  -- _queue_limits.slot_freed
  END IF;

  -- The notes, as the store's COMMIT would NOTIFY them (``_pg_listen.encode``).
  IF cardinality(v_wake) > 0 THEN
    v_payload := v_payload || ',"t":' || (SELECT jsonb_agg(jsonb_build_array(p_ns, q,
      'activity')) FROM unnest(v_wake) AS q)::text;
  END IF;
  IF v_closing THEN
    v_payload := v_payload || ',"c":'
      || jsonb_build_array(jsonb_build_array(p_ns, v_run))::text;
  END IF;
  IF v_min_due IS NOT NULL THEN
    v_payload := v_payload || ',"d":' || v_min_due::text;
  END IF;
  IF position(',' IN v_payload) > 0 THEN  -- anything past the origin
    PERFORM pg_notify(p_channel, v_payload || '}');
  END IF;
  o_now := v_now;
  o_run_id := v_run;
  o_events := v_events;
  o_task_ids := v_ids;
  o_expires := v_expires;
  o_dues := v_dues;
  o_workflow_id := r.workflow_id;
  o_history_length := p_last_seen + array_length(v_events, 1);
  o_wake := v_wake;
  o_deferred_by_limit := v_deferred_by_limit;
  o_deferred_by_rate := v_deferred_by_rate;
  RETURN NEXT;
END $fn$
