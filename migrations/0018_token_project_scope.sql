-- A token may be bound to one project of its tenant (project scope): it then reads, submits and
-- administers only inside that project. NULL: bound to the whole tenant (or the platform).
ALTER TABLE api_tokens ADD COLUMN project text;
ALTER TABLE api_tokens
  ADD CONSTRAINT api_tokens_project_fkey FOREIGN KEY (tenant, project)
    REFERENCES projects (tenant, name);
ALTER TABLE api_tokens
  ADD CONSTRAINT api_tokens_project_has_tenant CHECK (project IS NULL OR tenant IS NOT NULL);
