-- 005_operations.sql — the record of what operators did (SPEC 7.3): every
-- oncegatectl action that changes something writes one row here in the
-- same transaction as the change, with who, why and what it touched.
-- History is never edited in place: a repair is a new row here and a new
-- state (or a new run), never a rewritten old one.

CREATE TABLE operator_actions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts               timestamptz NOT NULL DEFAULT now(),
    operator         text NOT NULL CHECK (char_length(operator) BETWEEN 1 AND 200),
    action           text NOT NULL,          -- e.g. reconcile, resume, reject, replay
    reason           text NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 1000),
    client_id        bigint,
    idempotency_key  text,
    effect_id        uuid,
    approval_id      uuid,
    details          jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX operator_actions_run_idx ON operator_actions (client_id, idempotency_key, id);
CREATE INDEX operator_actions_effect_idx ON operator_actions (effect_id) WHERE effect_id IS NOT NULL;
