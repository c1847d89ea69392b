-- Evictions: the server asked a workload's agent to stop its attempt, which ends by this cause
-- once the agent confirms the stop ('preemption' for a drain's eviction, 'node_failure' for a
-- failed node or GPU); the retry policy then requeues or ends it. NULL: no eviction pending.
-- Cleared whenever the workload leaves PLACED/RUNNING.
ALTER TABLE workloads ADD COLUMN evicting text
  CHECK (evicting IN ('cluster_lost', 'preemption', 'node_failure'));
