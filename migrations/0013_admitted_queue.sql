-- The scheduler's queue holds ADMITTED workloads too (quota granted, waiting for capacity):
-- PgStore::ListPending reads both states in scheduling order.
CREATE INDEX workloads_waiting ON workloads (priority DESC, id)
  WHERE state IN ('PENDING', 'ADMITTED');
DROP INDEX workloads_pending;
