-- The audit trigger of 0023 joined the statement's new events to workloads, and the plan
-- PL/pgSQL caches for it could be a hash join over a sequential scan of every workload: each
-- group commit then read the whole table, so submitting cost more the more workloads there
-- were. Each event now reads its own workload by key (a LATERAL lookup with LIMIT 1 cannot be
-- flattened into a join), whatever the planner's statistics say.
CREATE OR REPLACE FUNCTION workload_events_audit() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit_pending (at, actor, tenant, project, action, object, outcome, reason, detail)
  SELECT now(), e.actor, w.tenant, w.project,
         CASE WHEN e.from_state IS NULL THEN 'workloads.submit'
              ELSE 'workloads.' || lower(e.to_state) END,
         'workload/' || e.workload_id, 'ok', e.reason,
         coalesce(e.from_state, '') || ' -> ' || e.to_state
  FROM new_events e
  CROSS JOIN LATERAL (SELECT x.tenant, x.project FROM workloads x
                      WHERE x.id = e.workload_id LIMIT 1) w
  ORDER BY e.id;
  RETURN NULL;
END $$;
