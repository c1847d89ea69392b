-- Tokens expire (NULL: never; the bootstrap admin token and agent tokens by default) and say when
-- they were last used (set when a server looks the token up, at most every few seconds a token).
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN last_used_at timestamptz;
