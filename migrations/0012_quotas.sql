-- Quotas (docs/quotas.md): per tenant, or per project inside it (project ''), and resource
-- (`gpu`, a GPU model, or a MIG profile), what is guaranteed and the most that may be held by
-- borrowing (NULL: no borrowing), in thousandths of a GPU or an instance, across all clusters.
-- A write takes a transaction-scoped advisory lock on its resource, so that the check that the
-- guarantees fit the pool sees every other write to that resource committed or not started.
CREATE TABLE quotas (
  tenant           text        NOT NULL REFERENCES tenants (name),
  project          text        NOT NULL DEFAULT '',
  resource         text        NOT NULL CHECK (resource <> '' AND char_length(resource) <= 64),
  guaranteed_milli bigint      NOT NULL CHECK (guaranteed_milli >= 0),
  limit_milli      bigint      CHECK (limit_milli IS NULL OR limit_milli >= guaranteed_milli),
  overcommitted    boolean     NOT NULL DEFAULT false,
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, project, resource)
);
CREATE INDEX quotas_resource ON quotas (resource);
