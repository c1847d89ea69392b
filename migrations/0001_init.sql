-- gpufed schema, version 1.
--
-- Applied by storage/migrator.cc inside one transaction (with the migrator's advisory lock held),
-- which also records the row in schema_migrations. Never edit a migration that has shipped:
-- add NNNN_next.sql instead.
--
-- Conventions: names are the keys (tenants, projects, clusters are few and referenced by name
-- everywhere, so the hot workloads table needs no joins to be read); timestamps are timestamptz;
-- state names are the ones federation/types.cc prints.

CREATE TABLE schema_migrations (
  version    bigint      PRIMARY KEY,
  name       text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);

-- Microseconds since the Unix epoch <-> timestamptz, so C++ exchanges exact integers with the
-- database instead of parsing timestamp text.
CREATE FUNCTION epoch_us(ts timestamptz) RETURNS bigint
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT (extract(epoch FROM ts) * 1000000)::bigint $$;

CREATE FUNCTION from_epoch_us(us bigint) RETURNS timestamptz
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT timestamptz 'epoch' + us * interval '1 microsecond' $$;

-- ---------------------------------------------------------------------------------------------
-- Tenancy

CREATE TABLE tenants (
  name         text        PRIMARY KEY CHECK (name <> '' AND char_length(name) <= 128),
  display_name text        NOT NULL DEFAULT '',
  created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
  tenant     text        NOT NULL REFERENCES tenants (name),
  name       text        NOT NULL CHECK (name <> '' AND char_length(name) <= 128),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, name)
);

-- Only a hash of each secret is stored (looked up on every authenticated call).
CREATE TABLE api_tokens (
  id         bigserial   PRIMARY KEY,
  token_hash text        NOT NULL UNIQUE CHECK (token_hash <> ''),
  subject    text        NOT NULL CHECK (subject <> ''),
  role       text        NOT NULL CHECK (role IN ('platform-admin', 'tenant-admin', 'tenant-user',
                                                  'viewer', 'agent')),
  tenant     text        REFERENCES tenants (name),  -- tenant roles
  cluster    text,        -- agent role; the cluster may register after its token is made
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

-- ---------------------------------------------------------------------------------------------
-- Inventory (reported by agents; replaced wholesale on registration)

CREATE TABLE clusters (
  name              text        PRIMARY KEY
                                CHECK (name ~ '^[a-z0-9-]{1,63}$'),
  provider          text        NOT NULL DEFAULT '',
  region            text        NOT NULL DEFAULT '',
  zone              text        NOT NULL DEFAULT '',
  jurisdiction      text        NOT NULL DEFAULT '',
  compliance_labels text[]      NOT NULL DEFAULT '{}',
  state             text        NOT NULL DEFAULT 'ready'
                                CHECK (state IN ('ready', 'degraded', 'unreachable', 'draining')),
  -- Fences stale agents: bumped when the cluster is declared unreachable.
  epoch             bigint      NOT NULL DEFAULT 1 CHECK (epoch >= 1),
  last_heartbeat    timestamptz,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
  cluster     text    NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
  name        text    NOT NULL CHECK (name <> ''),
  rack        text    NOT NULL DEFAULT '',
  block       text    NOT NULL DEFAULT '',
  cpu_millis  bigint  NOT NULL DEFAULT 0 CHECK (cpu_millis >= 0),
  memory_mib  bigint  NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
  labels      jsonb   NOT NULL DEFAULT '{}',
  schedulable boolean NOT NULL DEFAULT true,
  PRIMARY KEY (cluster, name)
);

CREATE TABLE gpus (
  cluster       text    NOT NULL,
  node          text    NOT NULL,
  uuid          text    NOT NULL CHECK (uuid <> ''),
  index         integer NOT NULL CHECK (index >= 0),  -- node-local CUDA ordinal
  model         text    NOT NULL,
  memory_mib    bigint  NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
  nvlink_domain text    NOT NULL DEFAULT '',  -- unique within the cluster; '': no NVLink peers
  numa_node     integer NOT NULL DEFAULT 0,
  pcie_switch   text    NOT NULL DEFAULT '',
  mig_capable   boolean NOT NULL DEFAULT false,
  healthy       boolean NOT NULL DEFAULT true,
  PRIMARY KEY (cluster, node, index),
  UNIQUE (cluster, uuid),
  FOREIGN KEY (cluster, node) REFERENCES nodes (cluster, name) ON DELETE CASCADE
);

-- ---------------------------------------------------------------------------------------------
-- Workloads: the hot table. One row per workload holding its current state only; history goes
-- to workload_events. fillfactor leaves room on each page so that updates which touch no
-- indexed column (pending_reason, version, ...) stay HOT.

CREATE TABLE workloads (
  id               bigserial   PRIMARY KEY,
  tenant           text        NOT NULL,
  project          text        NOT NULL,
  name             text        NOT NULL CHECK (name <> ''),
  idempotency_key  text        CHECK (idempotency_key <> ''),  -- NULL: no deduplication
  spec             jsonb       NOT NULL,  -- the full WorkloadSpec (storage/json_codec.cc)
  priority         integer     NOT NULL DEFAULT 0,
  state            text        NOT NULL DEFAULT 'PENDING'
                               CHECK (state IN ('PENDING', 'ADMITTED', 'PLACED', 'RUNNING',
                                                'SUCCEEDED', 'FAILED', 'CANCELLED', 'PREEMPTED',
                                                'LOST')),
  pending_reason   text        NOT NULL DEFAULT '',
  -- Set on PLACED (cluster and cluster_epoch duplicate the assignment for indexing/fencing);
  -- cleared when the workload returns to PENDING.
  cluster          text,
  cluster_epoch    bigint,
  assignment       jsonb,
  cancel_requested boolean     NOT NULL DEFAULT false,
  exit_code        integer     NOT NULL DEFAULT 0,
  message          text        NOT NULL DEFAULT '',
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  started_at       timestamptz,
  ended_at         timestamptz,
  version          bigint      NOT NULL DEFAULT 1,
  FOREIGN KEY (tenant, project) REFERENCES projects (tenant, name),
  CHECK ((assignment IS NULL) = (cluster IS NULL))
) WITH (fillfactor = 90);

-- Idempotent submission: one workload per tenant and key.
CREATE UNIQUE INDEX workloads_idempotency_key ON workloads (tenant, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

-- The scheduler's queue, in scheduling order. Small: only PENDING rows.
CREATE INDEX workloads_pending ON workloads (priority DESC, id) WHERE state = 'PENDING';

-- Workloads holding capacity, per cluster (pool rebuild, cluster loss, agent resync).
CREATE INDEX workloads_active ON workloads (cluster, id) WHERE state IN ('PLACED', 'RUNNING');

-- A tenant's listing, newest first (List with a tenant filter; keyset on id).
CREATE INDEX workloads_tenant ON workloads (tenant, id);

-- ---------------------------------------------------------------------------------------------
-- History: one row per committed state change, append-only. No foreign key to workloads so
-- that history can later be partitioned by time and rolled up without touching the hot table.

CREATE TABLE workload_events (
  id          bigserial   PRIMARY KEY,
  workload_id bigint      NOT NULL,
  at          timestamptz NOT NULL DEFAULT now(),
  from_state  text,       -- NULL for the submission
  to_state    text        NOT NULL,
  actor       text        NOT NULL DEFAULT '',
  reason      text        NOT NULL DEFAULT ''
);

CREATE INDEX workload_events_workload ON workload_events (workload_id, id);

CREATE FUNCTION workload_events_append_only() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  RAISE EXCEPTION 'workload_events is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER workload_events_append_only
  BEFORE UPDATE OR DELETE ON workload_events
  FOR EACH ROW EXECUTE FUNCTION workload_events_append_only();
