-- Metering (docs/chargeback.md): one row per GPU of each replica of a run, per span of one
-- price. Written by the transaction that takes a workload out of RUNNING and by the meter pass
-- (UsageStore::MeterRunning), never changed afterwards.
CREATE TABLE usage_records (
  workload_id           bigint      NOT NULL,
  attempt               integer     NOT NULL CHECK (attempt >= 1),
  replica               integer     NOT NULL CHECK (replica >= 0),
  tenant                text        NOT NULL,
  project               text        NOT NULL,
  workload_class        text        NOT NULL,
  cluster               text        NOT NULL,
  node                  text        NOT NULL,
  gpu_uuid              text        NOT NULL,
  gpu_model             text        NOT NULL,  -- '': the cluster no longer listed the GPU
  mig_profile           text        NOT NULL DEFAULT '',
  gpu_milli             integer     NOT NULL DEFAULT 0 CHECK (gpu_milli BETWEEN 0 AND 1000),
  capacity              text        NOT NULL CHECK (capacity IN ('on-demand', 'spot', 'committed')),
  started_at            timestamptz NOT NULL,
  ended_at              timestamptz NOT NULL CHECK (ended_at > started_at),
  -- The part of the GPU charged, num/den (1/1 a whole GPU, N/1000 a share, a MIG instance's
  -- fraction by the policy's basis).
  fraction_num          bigint      NOT NULL CHECK (fraction_num > 0),
  fraction_den          bigint      NOT NULL CHECK (fraction_den >= fraction_num),
  price_micros_per_hour bigint      CHECK (price_micros_per_hour >= 0),  -- NULL: unpriced
  profile_priced        boolean     NOT NULL DEFAULT false,
  cost_micros           bigint      NOT NULL CHECK (cost_micros >= 0),
  recorded_at           timestamptz NOT NULL DEFAULT now(),
  -- Nothing is metered twice: a span starts at most once per GPU of a replica of a run.
  PRIMARY KEY (workload_id, attempt, replica, gpu_uuid, started_at)
);
-- Reports read by window (and tenant).
CREATE INDEX usage_records_window_idx ON usage_records (started_at, ended_at);
CREATE INDEX usage_records_tenant_idx ON usage_records (tenant, started_at);

-- Reports read this, not the records: per UTC day and every report dimension, the sums of the
-- records that start that day. Kept by the statement that inserts records (the rows it inserted
-- only), in the same transaction, so it always equals the sums of usage_records; a month of
-- history is then thousands of rows, not millions.
CREATE TABLE usage_daily (
  day             timestamptz NOT NULL,
  tenant          text        NOT NULL,
  project         text        NOT NULL,
  cluster         text        NOT NULL,
  gpu_model       text        NOT NULL,
  mig_profile     text        NOT NULL,
  workload_class  text        NOT NULL,
  capacity        text        NOT NULL,
  gpu_us          bigint      NOT NULL,  -- sum of round(fraction x microseconds)
  unpriced_gpu_us bigint      NOT NULL,  -- of which the records without a price
  cost_micros     bigint      NOT NULL,
  records         bigint      NOT NULL,
  PRIMARY KEY (day, tenant, project, cluster, gpu_model, mig_profile, workload_class, capacity)
);

CREATE FUNCTION usage_records_refuse_change() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'usage_records is append-only (% refused)', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER usage_records_no_update_delete BEFORE UPDATE OR DELETE ON usage_records
  FOR EACH ROW EXECUTE FUNCTION usage_records_refuse_change();
CREATE TRIGGER usage_records_no_truncate BEFORE TRUNCATE ON usage_records
  FOR EACH STATEMENT EXECUTE FUNCTION usage_records_refuse_change();

-- A RUNNING workload's metering mark: metered up to here. Set when it starts RUNNING, moved by
-- each span recorded. The archive keeps the hot table's columns (0010).
ALTER TABLE workloads ADD COLUMN metered_until timestamptz;
ALTER TABLE workloads_archive ADD COLUMN metered_until timestamptz;
-- The meter pass looks for running workloads by mark.
CREATE INDEX workloads_metering ON workloads (metered_until) WHERE state = 'RUNNING';
-- Runs already going are metered from their start.
UPDATE workloads SET metered_until = started_at WHERE state = 'RUNNING';
