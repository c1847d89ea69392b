-- A resumed Watch catches up by reading the workloads changed since a point in time, in the
-- order of their last change (PgStore::ListChangedAfter), a page at a time.
CREATE INDEX workloads_changed ON workloads (updated_at, id);
-- Cost: updated_at changes on every update, so no update of workloads stays HOT any more
-- (pending-reason rewrites were the ones that did); not measured yet.
