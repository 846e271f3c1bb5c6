-- Each chat's inbox: the inputs it accepted (a person's message, a UI tool
-- response), stored before the client's acknowledgement and marked taken in
-- the transaction that records them. Taken rows stay, so that a retried
-- input (the same id) is recognised and kept once.
CREATE TABLE inputs (
	seq         bigserial PRIMARY KEY,
	chat_id     text NOT NULL,
	id          text NOT NULL,
	type        text NOT NULL,
	event       text NOT NULL, -- the input event as JSON
	accepted_at timestamptz NOT NULL,
	consumed_at timestamptz   -- NULL while it waits
);
CREATE UNIQUE INDEX inputs_chat_id ON inputs (chat_id, id);
CREATE INDEX inputs_waiting ON inputs (chat_id, seq) WHERE consumed_at IS NULL;
