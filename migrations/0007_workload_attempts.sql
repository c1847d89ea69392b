-- Attempts: how many times each workload has been placed. A workload whose cluster is lost (or
-- whose node fails, or that is preempted) and whose retry policy allows it goes back to PENDING
-- and is placed again as attempt n + 1; statuses an agent sends about an older attempt change
-- nothing. Only the store writes it (+1 on every move to PLACED), so no CHECK: adding one would
-- scan the table while it is locked.
ALTER TABLE workloads ADD COLUMN attempts integer NOT NULL DEFAULT 0;

-- Workloads that hold capacity now are on their first attempt (ended ones keep 0: unknown).
UPDATE workloads SET attempts = 1 WHERE state IN ('PLACED', 'RUNNING');
