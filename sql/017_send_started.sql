-- 017_send_started.sql — whether the send of a claimed effect had started,
-- so that a dispatcher that dies leaves `unknown` only what may have reached
-- the provider.
--
-- effect_outbox.send_started, written by the dispatcher only while the
-- effect is `sending` under its lease:
--   false  claimed by a dispatcher that marks its sends; the send has not
--          started. When the lease runs out the effect goes back to
--          `pending` (nothing can have reached the provider).
--   true   the dispatcher committed this right before it called the
--          provider. When the lease runs out the effect becomes `unknown`.
--   NULL   no lease of such a dispatcher (every effect that is not
--          `sending`, and one claimed by an earlier version that did not
--          mark): a lease that runs out makes it `unknown`, as before.
-- Every statement that ends a lease sets it back to NULL, so a value of
-- false is only ever the current claim's.
-- Owned by the outbox (src/lib/outbox.c).

ALTER TABLE effect_outbox ADD COLUMN send_started boolean;

-- The dispatcher writes it (the column is also covered by the table grant of
-- sql/015_roles.sql; named here so a narrower grant keeps it).
GRANT SELECT (send_started), UPDATE (send_started) ON effect_outbox TO oncegate_dispatch;
