-- What a broker needs to rewrite a transaction version 1 producer's batches.
ALTER TABLE txn_registrations ADD COLUMN client_epoch INTEGER NOT NULL DEFAULT -1;
ALTER TABLE txn_registrations ADD COLUMN sequence_base INTEGER NOT NULL DEFAULT 0;
