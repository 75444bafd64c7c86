-- The leader epoch committed with each group offset (KIP-320).
ALTER TABLE group_offsets ADD COLUMN leader_epoch INTEGER NOT NULL DEFAULT -1;
