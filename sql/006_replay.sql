-- 006_replay.sql — controlled replay (SPEC 7.3): the links between a run and
-- the runs that correct it, and bulk replay jobs that can be stopped and
-- resumed. The original run is never touched by a replay, which is why the
-- link lives in its own table instead of a column of workflow_runs: writing
-- "replayed as" into the original would edit its history.

-- One row per replay: the new run (replay_key) is a correction of the
-- original. A run is the replay of at most one original; an original may
-- be corrected several times. Both directions are indexed, so the status
-- API, `explain` and dead-letter views can answer "replay of" and
-- "replayed as" alike.
CREATE TABLE run_replays (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id        bigint NOT NULL,
    original_key     text NOT NULL,
    replay_key       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    operator         text NOT NULL,
    reason           text NOT NULL,
    -- 'original': the original's stored payload; 'corrected': --payload FILE
    payload_source   text NOT NULL CHECK (payload_source IN ('original', 'corrected')),
    payload_hash     text NOT NULL,
    -- what the new run started as: awaiting_human (the original's output
    -- carried to a fresh approval) or failed_retryable (the workflow must
    -- draft again under the new key)
    start_state      text NOT NULL CHECK (start_state IN ('awaiting_human', 'failed_retryable')),
    job_id           bigint,                      -- bulk replay job, if any
    UNIQUE (client_id, replay_key),
    CHECK (original_key <> replay_key),
    FOREIGN KEY (client_id, original_key)
        REFERENCES workflow_runs (client_id, idempotency_key),
    FOREIGN KEY (client_id, replay_key)
        REFERENCES workflow_runs (client_id, idempotency_key)
);

CREATE INDEX run_replays_original_idx ON run_replays (client_id, original_key);

-- Bulk replay (`oncegatectl replay --map FILE`): the explicit selection is
-- stored as items before the first one runs, so a stop (oncegatectl stop
-- JOB, SIGINT, a crash) leaves a list that says exactly what was done, and
-- `replay --resume JOB` continues with the items still pending. An item is
-- marked done in the same transaction as its replay: it can never be done
-- twice.
CREATE TABLE replay_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at       timestamptz NOT NULL DEFAULT now(),
    operator         text NOT NULL,
    reason           text NOT NULL,
    source           text NOT NULL,               -- the map file's name
    client_id        bigint NOT NULL,
    rate_per_second  numeric NOT NULL CHECK (rate_per_second > 0),
    state            text NOT NULL DEFAULT 'running'
                     CHECK (state IN ('running', 'stopped', 'completed')),
    -- set by `oncegatectl stop JOB`; the runner checks it before each item
    stop_requested_at timestamptz,
    stop_requested_by text,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE replay_job_items (
    job_id           bigint NOT NULL REFERENCES replay_jobs (id),
    seq              integer NOT NULL,            -- line order in the map file
    original_key     text NOT NULL,
    replay_key       text NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'done', 'refused')),
    detail           text,
    done_at          timestamptz,
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, replay_key)
);
