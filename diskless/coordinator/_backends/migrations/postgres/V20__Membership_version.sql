-- The membership version and the fingerprint of the live set it was last moved for: rows that
-- exist, so that a registry step locks them before it reads every registration.
INSERT INTO meta VALUES ('membership_version', 0) ON CONFLICT (name) DO NOTHING;
INSERT INTO meta VALUES ('membership_set', 0) ON CONFLICT (name) DO NOTHING;
