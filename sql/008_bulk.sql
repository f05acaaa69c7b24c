-- 008_bulk.sql — bulk resume (SPEC 7.3 "Bulk"): the jobs of 006 get a kind,
-- so one job table, one numbering and one `oncegatectl stop JOB` serve bulk
-- replay and bulk resume alike.
--
-- A resume job is not one client's: its selection (effect or dead-letter
-- ids, or the dead letters a filter matched) may span clients, so its
-- client_id is NULL. Its items are effects, resolved from the ids given
-- when the job is created; the exact list is stored before the first item
-- runs, and each item is marked done in the transaction that resumes it
-- (src/lib/repair.c owns resume_job_items and the 'resume' rows of
-- replay_jobs; src/lib/replay.c runs the life cycle both kinds share:
-- take, stop, finish, counts).

ALTER TABLE replay_jobs
    ADD COLUMN kind text NOT NULL DEFAULT 'replay' CHECK (kind IN ('replay', 'resume'));
ALTER TABLE replay_jobs ALTER COLUMN client_id DROP NOT NULL;
ALTER TABLE replay_jobs
    ADD CONSTRAINT replay_jobs_client_check CHECK (kind = 'resume' OR client_id IS NOT NULL);

CREATE TABLE resume_job_items (
    job_id           bigint NOT NULL REFERENCES replay_jobs (id),
    seq              integer NOT NULL,            -- order of the selection
    effect_id        uuid NOT NULL REFERENCES effect_outbox (id),
    given_id         text NOT NULL,               -- as the operator named it
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'done', 'refused')),
    detail           text,
    done_at          timestamptz,
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, effect_id)
);
