-- Fair-share weights (docs/quotas.md#fair-share) of tenants (project '') and of projects inside
-- them. A tenant or project without a row weighs 1.
CREATE TABLE share_weights (
  tenant     text        NOT NULL REFERENCES tenants (name),
  project    text        NOT NULL DEFAULT '',
  weight     bigint      NOT NULL CHECK (weight BETWEEN 1 AND 1000000),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, project)
);
