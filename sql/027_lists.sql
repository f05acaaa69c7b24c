-- 027_lists.sql — the order the API's lists page in.
--
-- GET /v1/runs and GET /v1/approvals page a client's rows oldest first by
-- (created_at, key or challenge id), each page continuing after the last
-- row of the one before; these indexes answer such a page without a sort.
-- created_at never changes after the row is written, so a row keeps its
-- place while a client pages.
CREATE INDEX workflow_runs_client_created_idx
    ON workflow_runs (client_id, created_at, idempotency_key);
CREATE INDEX approvals_client_created_idx ON approvals (client_id, created_at, (id::text));
