-- Every preemption, append-only (docs/quotas.md#preemption-records): written in the transaction
-- that marks its victims (PgStore::RequestPreemptions). `tenants` lists the preemptor's tenant
-- and every victim's, for the per-tenant listing; victims and shares are JSON arrays of
-- {"id", "tenant", "project", "gpu_milli"} and {"tenant", "before_milli", "after_milli"}.
CREATE TABLE preemptions (
  id               bigserial        PRIMARY KEY,
  at               timestamptz      NOT NULL,
  cause            text             NOT NULL
                                    CHECK (cause IN ('guarantee_reclaim', 'fair_share', 'priority')),
  preemptor        bigint           NOT NULL,
  tenant           text             NOT NULL,
  project          text             NOT NULL,
  resource         text             NOT NULL,
  cluster          text             NOT NULL,
  needed_milli     bigint           NOT NULL,
  evicted_milli    bigint           NOT NULL,
  gpu_seconds_lost double precision NOT NULL,
  tenants          text[]           NOT NULL,
  victims          jsonb            NOT NULL,
  shares           jsonb            NOT NULL
);
CREATE INDEX preemptions_tenants ON preemptions USING gin (tenants);

CREATE FUNCTION preemptions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'preemptions are append-only';
END $$;
CREATE TRIGGER preemptions_append_only BEFORE UPDATE OR DELETE ON preemptions
  FOR EACH ROW EXECUTE FUNCTION preemptions_append_only();
