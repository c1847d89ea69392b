-- GPU telemetry (docs/chargeback.md#telemetry): per GPU or MIG instance, per minute, the means of
-- the DCGM fields an agent sampled while a workload held it, attributed to that run. Kept for the
-- server's telemetry retention (MeteringStore::PruneTelemetry deletes older minutes); what each
-- minute measured is added to usage_daily by the same statement that keeps it, so reports keep it
-- after the minute is gone.
CREATE TABLE telemetry_minutes (
  cluster            text        NOT NULL,
  gpu_uuid           text        NOT NULL,
  mig_profile        text        NOT NULL DEFAULT '',
  mig_start          integer     NOT NULL DEFAULT 0 CHECK (mig_start BETWEEN 0 AND 7),
  minute             timestamptz NOT NULL,
  workload_id        bigint      NOT NULL,
  attempt            integer     NOT NULL CHECK (attempt >= 1),
  -- The report dimensions of the run's span the minute measured (usage_daily's key).
  tenant             text        NOT NULL,
  project            text        NOT NULL,
  workload_class     text        NOT NULL,
  gpu_model          text        NOT NULL,
  capacity           text        NOT NULL,
  covered_seconds    integer     NOT NULL CHECK (covered_seconds BETWEEN 1 AND 60),
  -- DCGM fields (NULL: not reported): 1001, 1002, 1003, 1004, 1005 (fractions), 203 (percent),
  -- 252 (MiB), 155 (W), 150 (degrees C).
  gr_engine_active   double precision,
  sm_active          double precision,
  sm_occupancy       double precision,
  pipe_tensor_active double precision,
  dram_active        double precision,
  gpu_util           double precision,
  fb_used_mib        double precision,
  power_watts        double precision,
  gpu_temp_celsius   double precision,
  -- What the minute measured (federation/telemetry.h).
  activity           double precision NOT NULL CHECK (activity BETWEEN 0 AND 1),
  activity_source    text        NOT NULL
    CHECK (activity_source IN ('none', 'sm_active', 'gr_engine_active', 'gpu_util')),
  measured_gpu_us    bigint      NOT NULL CHECK (measured_gpu_us >= 0),
  effective_gpu_us   bigint      NOT NULL CHECK (effective_gpu_us >= 0),
  coarse_gpu_us      bigint      NOT NULL CHECK (coarse_gpu_us >= 0),
  -- A minute counts once: an agent's repeat is ignored.
  PRIMARY KEY (cluster, gpu_uuid, mig_profile, mig_start, minute, workload_id)
);
-- A workload's minutes (ListTelemetry) and the retention's oldest-first deletes.
CREATE INDEX telemetry_minutes_workload_idx ON telemetry_minutes (workload_id, minute);
CREATE INDEX telemetry_minutes_minute_idx ON telemetry_minutes (minute);

-- The report sums of telemetry, in GPU-microseconds (federation/usage_report.h's UsageLine).
ALTER TABLE usage_daily
  ADD COLUMN measured_gpu_us  bigint NOT NULL DEFAULT 0,
  ADD COLUMN effective_gpu_us bigint NOT NULL DEFAULT 0,
  ADD COLUMN coarse_gpu_us    bigint NOT NULL DEFAULT 0;
