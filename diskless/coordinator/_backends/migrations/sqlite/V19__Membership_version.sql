-- The membership version and the fingerprint of the live set it was last moved for.
INSERT OR IGNORE INTO meta VALUES ('membership_version', 0);
INSERT OR IGNORE INTO meta VALUES ('membership_set', 0);
