-- The instance running a background task when several share the store, and
-- when the task counts as orphaned unless that instance renews it.
ALTER TABLE tasks ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN expires INTEGER NOT NULL DEFAULT 0; -- Unix microseconds; 0 without an owner
CREATE INDEX tasks_owner ON tasks (owner, status);
