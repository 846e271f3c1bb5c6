-- Rollups of each chat's activity per app and workflow (the seeds'
-- workflow_stats), written asynchronously by package metrics. A row with
-- agent '' is the chat's total; the others are its agents. Writes add.
CREATE TABLE workflow_stats (
	app               text NOT NULL,
	workflow          text NOT NULL,
	chat_id           text NOT NULL,
	agent             text NOT NULL,
	turns             bigint NOT NULL DEFAULT 0,
	tool_calls        bigint NOT NULL DEFAULT 0,
	calls             bigint NOT NULL DEFAULT 0,
	prompt_tokens     bigint NOT NULL DEFAULT 0,
	completion_tokens bigint NOT NULL DEFAULT 0,
	cached_tokens     bigint NOT NULL DEFAULT 0,
	reasoning_tokens  bigint NOT NULL DEFAULT 0,
	cost              double precision NOT NULL DEFAULT 0,
	updated_at        timestamptz NOT NULL,
	PRIMARY KEY (app, workflow, chat_id, agent)
);
CREATE INDEX workflow_stats_recent ON workflow_stats (app, workflow, updated_at);
