-- Pending reasons as data (issue #8): the reason's code and figures next to its words.
--
-- pending_reason keeps the words (federation/pending_reason.h, RenderReason), so rows stay
-- readable with psql. pending_reason_code is the CamelCase name of the code ("GpusBusy",
-- "NoMatchingGpu", ...; '' when not pending); pending_reason_figures holds its figures as
-- {"name": number or string} (storage/json_codec.h, ReasonFiguresToJson). Rows written before
-- this migration keep an empty code: they read back as "Unclassified" with their words, and the
-- scheduler replaces them on its next cycle.

ALTER TABLE workloads
  ADD COLUMN pending_reason_code    text  NOT NULL DEFAULT '',
  ADD COLUMN pending_reason_figures jsonb NOT NULL DEFAULT '{}'
                                    CHECK (jsonb_typeof(pending_reason_figures) = 'object');
