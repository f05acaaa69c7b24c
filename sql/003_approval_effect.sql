-- 003_approval_effect.sql — each challenge carries the effect its approval
-- enqueues and the run's decision callback, so the decision reads one row
-- (the challenge) instead of two before its transaction. Written once, when
-- the challenge is created; the run's own copy stays the record.

ALTER TABLE approvals
    ADD COLUMN effect       jsonb,
    ADD COLUMN callback_url text;
