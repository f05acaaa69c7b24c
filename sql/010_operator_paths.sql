-- 010_operator_paths.sql — what the gate's sample and the operators' paths
-- record so that one event has at most one business effect.
--
-- The sample of approve_by_exception is drawn once per run from a CSPRNG
-- (never from anything the caller chooses, such as the key) and kept on the
-- run with the rate it was compared against: a retried or repaired output of
-- the same run finds the draw already there and cannot roll again, and
-- `explain` can say why a person was (or was not) asked. Runs decided
-- before this migration have neither. Owned by ledger.c.
ALTER TABLE workflow_runs
    ADD COLUMN sample_draw double precision
        CHECK (sample_draw >= 0 AND sample_draw < 1),
    ADD COLUMN sample_rate double precision
        CHECK (sample_rate >= 0 AND sample_rate <= 1);

-- A replay answers the original's open dead letter: the letter keeps its
-- evidence, counts the replay (replay_count) and names the run that now
-- carries the event, so nobody resumes the original's effect as well.
-- Owned by repair.c.
ALTER TABLE dead_letters
    ADD COLUMN replayed_as text;
