-- Names follow the one rule of federation/validation.h (issue #8, point 6). Tenants, projects
-- and clusters: IsName, 1..63 of [a-z0-9-] starting with a letter. Nodes: IsLabel, 1..63 of
-- [a-z0-9-] starting with a letter or digit. Version 1 allowed tenant and project names of up
-- to 128 characters with no rule for the first one, cluster names starting with a digit or
-- '-', and any non-empty node name.
--
-- Rows stored before are not checked. A database written by an earlier build may hold a name
-- that the API has refused since (tenant "1acme", a 100-character project, cluster "1dc"):
-- validating them would fail this migration, and with it the server's start, over data nobody
-- can create any more. Such rows stay readable; no new one can be written.
--
-- Tenants, projects and nodes: CHECK ... NOT VALID. Their rows are never updated (nodes are
-- replaced wholesale on registration), so the rule binds every row written from now on. To
-- look for old rows that break it:
--   ALTER TABLE tenants VALIDATE CONSTRAINT tenants_name_rule;  -- fails naming the first one
-- (likewise projects_name_rule, nodes_name_rule); with none left it makes the constraint valid.
--
-- Clusters: a trigger on INSERT and on UPDATE OF name instead. A NOT VALID CHECK is checked on
-- every UPDATE of a row, so an old cluster "1dc" (whose agent can no longer register) could not
-- be marked unreachable any more, and the scheduler would go on placing work there. Cluster
-- rows are updated for heartbeats and states, never renamed.

ALTER TABLE tenants ADD CONSTRAINT tenants_name_rule
  CHECK (name ~ '^[a-z][a-z0-9-]{0,62}$') NOT VALID;

ALTER TABLE projects ADD CONSTRAINT projects_name_rule
  CHECK (name ~ '^[a-z][a-z0-9-]{0,62}$') NOT VALID;

ALTER TABLE nodes ADD CONSTRAINT nodes_name_rule
  CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$') NOT VALID;

CREATE FUNCTION clusters_name_rule() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF NEW.name !~ '^[a-z][a-z0-9-]{0,62}$' THEN
    RAISE EXCEPTION 'cluster name "%" must be 1..63 of [a-z0-9-] starting with a letter',
      NEW.name USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER clusters_name_rule
  BEFORE INSERT OR UPDATE OF name ON clusters
  FOR EACH ROW EXECUTE FUNCTION clusters_name_rule();
