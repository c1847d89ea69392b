-- Fair-share usage (docs/quotas.md#fair-share): the active scheduler's decayed GPU-seconds per
-- tenant (project '') and project, as of one moment, saved now and then and replaced as a whole,
-- so that a newly active scheduler goes on from them instead of from nothing. Advisory: no
-- foreign keys (a holder deleted since decays away).
CREATE TABLE fair_share_usage (
  tenant      text             NOT NULL,
  project     text             NOT NULL DEFAULT '',
  gpu_seconds double precision NOT NULL CHECK (gpu_seconds >= 0),
  as_of       timestamptz      NOT NULL,
  PRIMARY KEY (tenant, project)
);
