-- Cordons: an operator's "no new placements here", on a whole cluster or on one node. Kept apart
-- from what the agent reports, since its inventory replaces the nodes at every registration: a
-- cordoned cluster stays `draining` when its agent registers again, and a cordoned node reads
-- as not schedulable whatever the agent says.
ALTER TABLE clusters ADD COLUMN cordoned boolean NOT NULL DEFAULT false;

CREATE TABLE node_cordons (
  cluster text NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
  node text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (cluster, node)
);
