-- 009_provider_key.sql — the provider idempotency key names one effect of
-- one API client.
--
-- From this version on a new effect's provider_key is computed by the outbox
-- (outbox.c) from (API client, run key, effect type, target, slot) and
-- stored on the row when it is inserted; every attempt, the SMTP Message-ID
-- and every reconciliation look-up use the stored value. Two clients that
-- use the same run key no longer share a key at a provider.
--
-- Effects that already exist keep the key they were created with
-- ("<run key>/<type>"): this migration never rewrites provider_key, since an
-- effect may already have been sent under it and the provider knows it by
-- that key alone.

-- The slot tells apart effects of one kind to one target in one run (one
-- notification per challenge); every effect so far has slot 0, which is
-- part of the keys computed from now on, so giving later effects other
-- slots changes no existing key.
ALTER TABLE effect_outbox
    ADD COLUMN slot integer NOT NULL DEFAULT 0 CHECK (slot >= 0);

-- One row per (run, effect type, target, slot); the run ledger is per
-- client, so the client is part of it.
ALTER TABLE effect_outbox
    DROP CONSTRAINT effect_outbox_client_id_idempotency_key_effect_type_target_key,
    ADD CONSTRAINT effect_outbox_one_effect
        UNIQUE (client_id, idempotency_key, effect_type, target, slot);
