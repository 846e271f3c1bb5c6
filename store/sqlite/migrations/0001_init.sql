CREATE TABLE chats (
	id            TEXT PRIMARY KEY,
	app           TEXT NOT NULL,
	user_id       TEXT NOT NULL,
	workflow      TEXT NOT NULL,
	status        TEXT NOT NULL,
	last_sequence INTEGER NOT NULL DEFAULT 0,
	context       TEXT NOT NULL DEFAULT '{}',
	turn_agent    TEXT NOT NULL DEFAULT '',
	cache_seed    INTEGER NOT NULL,
	created_at    INTEGER NOT NULL, -- Unix microseconds
	updated_at    INTEGER NOT NULL, -- last_updated_at, Unix microseconds
	deleted       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX chats_scope ON chats (app, user_id, created_at);
CREATE INDEX chats_status ON chats (status, created_at);

-- The events of a chat: sequence 1, 2, 3, … (the unique index forbids a
-- repeat; the single writer forbids a gap). Rows are stored in insertion
-- order (rowid), so a commit of events from many chats writes few pages; the
-- index on (chat_id, sequence) serves replay, and the one on (id, chat_id)
-- keeps event ids unique per chat while staying append-mostly (time-ordered
-- UUIDv7 ids). The metadata's named fields are columns; extra holds its
-- other keys as a JSON object, NULL when there are none. payload is verbatim.
CREATE TABLE events (
	rowid      INTEGER PRIMARY KEY,
	chat_id    TEXT NOT NULL,
	sequence   INTEGER NOT NULL,
	id         TEXT NOT NULL,
	type       TEXT NOT NULL,
	ts         INTEGER NOT NULL, -- the event's timestamp, Unix milliseconds
	agent_id   TEXT NOT NULL,
	agent_name TEXT NOT NULL,
	env_name   TEXT NOT NULL,
	source     TEXT NOT NULL,
	extra      TEXT,
	payload    TEXT
);
CREATE UNIQUE INDEX events_chat_sequence ON events (chat_id, sequence);
CREATE UNIQUE INDEX events_id_chat ON events (id, chat_id);

CREATE TABLE pending (
	ui_event_id  TEXT PRIMARY KEY,
	chat_id      TEXT NOT NULL,
	kind         TEXT NOT NULL,
	tool_call_id TEXT NOT NULL,
	tool_name    TEXT NOT NULL,
	agent        TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	resolved_at  INTEGER -- NULL while pending
);
CREATE INDEX pending_chat ON pending (chat_id, created_at);

CREATE TABLE effects (
	chat_id    TEXT NOT NULL,
	key        TEXT NOT NULL,
	done       INTEGER NOT NULL DEFAULT 0,
	result     TEXT,
	claimed_at INTEGER NOT NULL,
	PRIMARY KEY (chat_id, key)
) WITHOUT ROWID;

CREATE TABLE usage (
	id                INTEGER PRIMARY KEY,
	chat_id           TEXT NOT NULL,
	app               TEXT NOT NULL,
	workflow          TEXT NOT NULL,
	agent             TEXT NOT NULL,
	model             TEXT NOT NULL,
	prompt_tokens     INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	cached_tokens     INTEGER NOT NULL,
	reasoning_tokens  INTEGER NOT NULL,
	cost              REAL NOT NULL,
	at                INTEGER NOT NULL
);
CREATE INDEX usage_chat ON usage (chat_id, agent);

CREATE TABLE tasks (
	id         TEXT PRIMARY KEY,
	chat_id    TEXT NOT NULL,
	kind       TEXT NOT NULL,
	status     TEXT NOT NULL,
	input      TEXT,
	result     TEXT,
	error      TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE INDEX tasks_status ON tasks (status, created_at);
CREATE INDEX tasks_chat ON tasks (chat_id);

CREATE TABLE leases (
	chat_id TEXT PRIMARY KEY,
	owner   TEXT NOT NULL,
	token   INTEGER NOT NULL,
	expires INTEGER NOT NULL -- Unix microseconds
);
