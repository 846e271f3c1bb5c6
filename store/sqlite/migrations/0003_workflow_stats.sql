-- Rollups of each chat's activity per app and workflow (the seeds'
-- workflow_stats), written asynchronously by package metrics. A row with
-- agent '' is the chat's total; the others are its agents. Writes add.
CREATE TABLE workflow_stats (
	app               TEXT NOT NULL,
	workflow          TEXT NOT NULL,
	chat_id           TEXT NOT NULL,
	agent             TEXT NOT NULL,
	turns             INTEGER NOT NULL DEFAULT 0,
	tool_calls        INTEGER NOT NULL DEFAULT 0,
	calls             INTEGER NOT NULL DEFAULT 0,
	prompt_tokens     INTEGER NOT NULL DEFAULT 0,
	completion_tokens INTEGER NOT NULL DEFAULT 0,
	cached_tokens     INTEGER NOT NULL DEFAULT 0,
	reasoning_tokens  INTEGER NOT NULL DEFAULT 0,
	cost              REAL NOT NULL DEFAULT 0,
	updated_at        INTEGER NOT NULL, -- Unix microseconds
	PRIMARY KEY (app, workflow, chat_id, agent)
) WITHOUT ROWID;
CREATE INDEX workflow_stats_recent ON workflow_stats (app, workflow, updated_at);
