-- The audit trail (docs/security.md#audit): append-only rows chained by a keyed hash.
-- id is the order of the chain, handed out by the writer under audit_head's row lock (not a
-- sequence: a sequence leaves gaps on rollback, and a gap must mean a deleted row).
CREATE TABLE audit_events (
  id bigint PRIMARY KEY CHECK (id > 0),
  at timestamptz NOT NULL,
  actor text NOT NULL,
  tenant text NOT NULL DEFAULT '',   -- the scope the row belongs to: '' the platform's
  project text NOT NULL DEFAULT '',  -- a project of tenant; '' the tenant's own
  action text NOT NULL,
  object text NOT NULL,
  outcome text NOT NULL,
  reason text NOT NULL DEFAULT '',
  detail text NOT NULL DEFAULT '',
  prev_hash text NOT NULL,
  hash text NOT NULL
);
-- gpufedctl audit list: a tenant's rows, one actor's, one object's, newest first.
CREATE INDEX audit_events_tenant_idx ON audit_events (tenant, project, id);
CREATE INDEX audit_events_actor_idx ON audit_events (actor, id);
CREATE INDEX audit_events_object_idx ON audit_events (object, id);
CREATE INDEX audit_events_at_idx ON audit_events (at);

-- The head of the chain: the last id appended and its hash. Every append locks this row
-- FOR UPDATE, so appends are serialized and ids have no gaps. Verify compares the table's last
-- row with it (rows past it were never appended by a server).
-- key_check identifies the key that seals the chain (a keyed hash of a fixed text; '' until the
-- first seal): a server holding another key refuses to seal rather than chain rows that would
-- all read as edited.
CREATE TABLE audit_head (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  last_id bigint NOT NULL,
  last_hash text NOT NULL,
  key_check text NOT NULL DEFAULT ''
);
INSERT INTO audit_head (singleton, last_id, last_hash) VALUES (true, 0, '');

-- Append-only: rows are never changed or removed through the server's role (or any role that
-- does not first disable the trigger, which takes ownership of the table).
CREATE FUNCTION audit_events_refuse_change() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_events is append-only (% refused)', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER audit_events_no_update_delete BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();

-- Rows recorded and not yet chained. A state change writes its row here in its own transaction
-- (so the two commit together); the sealer (PgAuditLog::Seal) moves rows from here into
-- audit_events, oldest first, under audit_head's lock, deleting them as it chains them.
CREATE TABLE audit_pending (
  seq bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  actor text NOT NULL,
  tenant text NOT NULL DEFAULT '',
  project text NOT NULL DEFAULT '',
  action text NOT NULL,
  object text NOT NULL,
  outcome text NOT NULL,
  reason text NOT NULL DEFAULT '',
  detail text NOT NULL DEFAULT ''
);

-- Every workload state change is audited in the transaction that makes it: each statement that
-- writes workload_events (submissions, transitions, cancellations, a lost cluster's requeues)
-- records one audit row per event. The submission's event is workloads.submit; a transition's
-- is workloads.<state it reached>, e.g. workloads.placed.
CREATE FUNCTION workload_events_audit() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit_pending (at, actor, tenant, project, action, object, outcome, reason, detail)
  SELECT now(), e.actor, w.tenant, w.project,
         CASE WHEN e.from_state IS NULL THEN 'workloads.submit'
              ELSE 'workloads.' || lower(e.to_state) END,
         'workload/' || e.workload_id, 'ok', e.reason,
         coalesce(e.from_state, '') || ' -> ' || e.to_state
  FROM new_events e JOIN workloads w ON w.id = e.workload_id
  ORDER BY e.id;
  RETURN NULL;
END $$;

CREATE TRIGGER workload_events_audit AFTER INSERT ON workload_events
  REFERENCING NEW TABLE AS new_events
  FOR EACH STATEMENT EXECUTE FUNCTION workload_events_audit();
