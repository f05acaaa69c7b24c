-- 028_context.sql — what a person needs to judge a draft, kept beside it:
-- the context a workflow hands in with a model's output (the customer's
-- message, the subject of the ticket it answers, the customer). It is
-- shown on the approval card and named in the inbox and the notices; it is
-- never part of the effect, its payload or any hash, and never sent to a
-- target. Free text: retention removes it with the run's other free text.
--
-- Written by the responder with the output (src/lib/ledger.c); the shape
-- and the limits per member are checked there first (docs/api.md), the
-- database keeps the outer bounds.
ALTER TABLE workflow_runs ADD COLUMN context jsonb
    CONSTRAINT workflow_runs_context_shape
    CHECK (context IS NULL
           OR (jsonb_typeof(context) = 'object' AND octet_length(context::text) <= 131072));
