-- Cluster declarations (docs/routing.md): what a platform admin declares about a cluster
-- (`gpufedctl apply`: provider, region, zone, jurisdiction, compliance labels, default capacity
-- type, price book, round-trip times), kept apart from what its agent reports. RegisterCluster
-- replaces the agent's attributes and never writes here, so a registering agent never changes a
-- declaration. One jsonb document per cluster (storage/json_codec.cc, ClusterDeclarationToJson):
-- read and replaced whole, never queried by field.
--
-- No foreign key to clusters: a declaration may exist before its cluster registers (and stays
-- when it never does). New table, so the name rule is a plain CHECK (0004_name_rules.sql).
CREATE TABLE cluster_declarations (
  cluster     text        PRIMARY KEY CHECK (cluster ~ '^[a-z][a-z0-9-]{0,62}$'),
  declaration jsonb       NOT NULL CHECK (jsonb_typeof(declaration) = 'object'),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
