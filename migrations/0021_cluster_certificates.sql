-- Certificates the cluster CA issued (gpufedctl clusters enroll): an agent's client certificate
-- speaks for its cluster only while its serial is here for that cluster and not revoked. No
-- foreign key to clusters: a cluster is enrolled before its agent first registers it.
CREATE TABLE cluster_certificates (
  serial      text PRIMARY KEY CHECK (serial ~ '^[0-9A-F]{1,40}$'),
  cluster     text NOT NULL CHECK (cluster <> ''),
  not_before  timestamptz NOT NULL,
  not_after   timestamptz NOT NULL,
  issued_at   timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz,
  CHECK (not_before < not_after)
);
CREATE INDEX cluster_certificates_live ON cluster_certificates (cluster) WHERE revoked_at IS NULL;
