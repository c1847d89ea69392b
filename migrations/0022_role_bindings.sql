-- Members and their roles (docs/security.md#members-and-role-bindings): a subject (a person or a
-- program, by name) holds one role at one scope: the platform (tenant NULL), a tenant (project
-- NULL) or one project of it. Tokens made for a bound subject at that scope may not rank above the
-- binding; removing the binding revokes them. Bindings go with their project or tenant.
CREATE TABLE role_bindings (
  subject    text        NOT NULL CHECK (subject <> ''),
  role       text        NOT NULL CHECK (role IN ('platform-admin', 'tenant-admin', 'tenant-user',
                                                  'viewer')),
  tenant     text        REFERENCES tenants (name) ON DELETE CASCADE,
  project    text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (tenant, project) REFERENCES projects (tenant, name) ON DELETE CASCADE,
  CHECK (project IS NULL OR tenant IS NOT NULL),
  CHECK (tenant IS NOT NULL OR role IN ('platform-admin', 'viewer')),
  CHECK (tenant IS NULL OR role <> 'platform-admin'),
  UNIQUE NULLS NOT DISTINCT (tenant, project, subject)
);
