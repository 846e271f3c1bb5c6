-- The instance running a background task when several share the store, and
-- when the task counts as orphaned unless that instance renews it.
ALTER TABLE tasks ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN expires TIMESTAMPTZ NOT NULL DEFAULT 'epoch';
CREATE INDEX tasks_owner ON tasks (owner, status);
