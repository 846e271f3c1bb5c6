-- API keys: only the SHA-256 of each key is kept, with the scope it grants.
CREATE TABLE api_keys (
	hash       TEXT PRIMARY KEY,
	app        TEXT NOT NULL,
	user_id    TEXT NOT NULL,
	name       TEXT NOT NULL DEFAULT '',
	created_at TIMESTAMPTZ NOT NULL,
	revoked    BOOLEAN NOT NULL DEFAULT FALSE
);
