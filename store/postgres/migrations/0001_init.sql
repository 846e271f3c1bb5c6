CREATE TABLE chats (
	id            text PRIMARY KEY,
	app           text NOT NULL,
	user_id       text NOT NULL,
	workflow      text NOT NULL,
	status        text NOT NULL,
	last_sequence bigint NOT NULL DEFAULT 0,
	context       jsonb NOT NULL DEFAULT '{}',
	turn_agent    text NOT NULL DEFAULT '',
	cache_seed    bigint NOT NULL,
	created_at    timestamptz NOT NULL,
	updated_at    timestamptz NOT NULL, -- last_updated_at
	deleted       boolean NOT NULL DEFAULT false
);
CREATE INDEX chats_scope ON chats (app, user_id, created_at);
CREATE INDEX chats_status ON chats (status, created_at);

-- The events of a chat: sequence 1, 2, 3, …. The primary key forbids a
-- repeat; appends take their sequences from chats.last_sequence under the
-- chat row's lock, which forbids a gap. Event ids are unique per chat; the
-- index leads with the (time-ordered) id so it grows at its end. The
-- metadata's named fields are columns; extra holds its other keys as a JSON
-- object, NULL when there are none. payload is verbatim text.
CREATE TABLE events (
	chat_id    text NOT NULL,
	sequence   bigint NOT NULL,
	id         text NOT NULL,
	type       text NOT NULL,
	ts         bigint NOT NULL, -- the event's timestamp, Unix milliseconds
	agent_id   text NOT NULL,
	agent_name text NOT NULL,
	env_name   text NOT NULL,
	source     text NOT NULL,
	extra      text,
	payload    text,
	PRIMARY KEY (chat_id, sequence)
);
CREATE UNIQUE INDEX events_id_chat ON events (id, chat_id);

CREATE TABLE pending (
	ui_event_id  text PRIMARY KEY,
	chat_id      text NOT NULL,
	kind         text NOT NULL,
	tool_call_id text NOT NULL,
	tool_name    text NOT NULL,
	agent        text NOT NULL,
	created_at   timestamptz NOT NULL,
	resolved_at  timestamptz -- NULL while pending
);
CREATE INDEX pending_chat ON pending (chat_id, created_at);

CREATE TABLE effects (
	chat_id    text NOT NULL,
	key        text NOT NULL,
	done       boolean NOT NULL DEFAULT false,
	result     text,
	claimed_at timestamptz NOT NULL,
	PRIMARY KEY (chat_id, key)
);

CREATE TABLE usage (
	id                bigserial PRIMARY KEY,
	chat_id           text NOT NULL,
	app               text NOT NULL,
	workflow          text NOT NULL,
	agent             text NOT NULL,
	model             text NOT NULL,
	prompt_tokens     bigint NOT NULL,
	completion_tokens bigint NOT NULL,
	cached_tokens     bigint NOT NULL,
	reasoning_tokens  bigint NOT NULL,
	cost              double precision NOT NULL,
	at                timestamptz NOT NULL
);
CREATE INDEX usage_chat ON usage (chat_id, agent);

CREATE TABLE tasks (
	id         text PRIMARY KEY,
	chat_id    text NOT NULL,
	kind       text NOT NULL,
	status     text NOT NULL,
	input      text,
	result     text,
	error      text NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE INDEX tasks_status ON tasks (status, created_at);
CREATE INDEX tasks_chat ON tasks (chat_id);

CREATE TABLE leases (
	chat_id text PRIMARY KEY,
	owner   text NOT NULL,
	token   bigint NOT NULL,
	expires timestamptz NOT NULL
);
