-- Cost allocation and idle guarantees (docs/chargeback.md#cost-allocation,
-- docs/chargeback.md#idle-guarantees).

-- What each record's span costs at the whole GPU's price line: its cost, or for a record priced
-- by its MIG profile's own line, its fraction of the GPU's line. Records written before this
-- migration are taken as priced at the GPU's line (a profile's premium, if any, is not told
-- apart for them).
ALTER TABLE usage_records ADD COLUMN gpu_line_cost_micros bigint
  CHECK (gpu_line_cost_micros >= 0);
ALTER TABLE usage_records DISABLE TRIGGER usage_records_no_update_delete;
UPDATE usage_records SET gpu_line_cost_micros = cost_micros;
ALTER TABLE usage_records ENABLE TRIGGER usage_records_no_update_delete;
ALTER TABLE usage_records ALTER COLUMN gpu_line_cost_micros SET NOT NULL;

ALTER TABLE usage_daily ADD COLUMN gpu_line_cost_micros bigint NOT NULL DEFAULT 0;
UPDATE usage_daily SET gpu_line_cost_micros = cost_micros;

-- Guaranteed capacity per quota and UTC day: what the guarantee reserved and what of it the
-- tenant (or project) left unused, in units of the quota's resource x microseconds (a GPU for
-- an hour: 3,600,000,000). Added to by the active scheduler's meter pass.
CREATE TABLE guarantee_daily (
  day              timestamptz NOT NULL,
  tenant           text        NOT NULL,
  project          text        NOT NULL,  -- '': the tenant's own quota
  resource         text        NOT NULL,
  reserved_unit_us bigint      NOT NULL CHECK (reserved_unit_us >= 0),
  idle_unit_us     bigint      NOT NULL CHECK (idle_unit_us BETWEEN 0 AND reserved_unit_us),
  PRIMARY KEY (day, tenant, project, resource)
);
