-- MIG mode and layout per GPU, as agents report them (issue #3: GPU sharing and MIG).
--
-- mig_layout is the list of GPU instances that exist on a MIG-enabled GPU, as JSON:
-- [{"profile": "3g.40gb", "start": 0}, ...] (storage/json_codec.h, MigLayoutToJson). Rows of
-- version 1 get MIG off and no instances, which is what those agents reported.

ALTER TABLE gpus
  ADD COLUMN mig_enabled boolean NOT NULL DEFAULT false,
  ADD COLUMN mig_layout  jsonb   NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(mig_layout) = 'array');
