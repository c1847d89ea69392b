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
CREATE TABLE audit_head (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  last_id bigint NOT NULL,
  last_hash text NOT NULL
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
