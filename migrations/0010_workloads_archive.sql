-- Finished workloads leave the hot table: the control loop moves those that ended more than
-- `archive_after` ago into workloads_archive, in batches (WorkloadStore::ArchiveFinished), so
-- that the table the scheduler, the submit path and List work on stays the size of what is live
-- and recent, however long history grows. Get still finds an archived workload by id; List and
-- idempotency keys see only the hot table (docs/storage.md#archive). workload_events stays
-- where it is: append-only, read by workload id through its index.
--
-- The archive has the hot table's columns in the same order (rows move with SELECT *): a
-- migration that adds a column to workloads adds it to workloads_archive too.
CREATE TABLE workloads_archive (LIKE workloads INCLUDING DEFAULTS);
ALTER TABLE workloads_archive ADD PRIMARY KEY (id);

-- What the archiver looks for: finished rows, oldest end first.
CREATE INDEX workloads_finished ON workloads (ended_at, id)
  WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'PREEMPTED', 'LOST');
