package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/postgres"
	"github.com/jackc/pgx/v5"
)

// TestAppendPlansUseTheChatKey checks the plans PostgreSQL makes for the
// statements that find one chat by its id (see inScope in misc.go): with no
// statistics, one tenant's 2,000 chats and the scope compared as
// app = … AND user_id = …, the append and scope-check plans went through
// the scope index (app, user_id, created_at) and so through all of the
// tenant's chats. Generic plans are forced: those are what pgx's prepared
// statements end up with.
func TestAppendPlansUseTheChatKey(t *testing.T) {
	dsn, schema := freshSchema(t)
	s := open(t, dsn, schema)
	ctx := context.Background()
	scope := baton.Scope{App: "plan", User: "one-user-many-chats"}
	if _, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Many more chats of the same tenant, as rows: quicker than the API.
	if _, err := conn.Exec(ctx, `INSERT INTO chats (id, app, user_id, workflow, status, cache_seed, created_at, updated_at)
		SELECT 'chat-' || g, $1, $2, 'w', 'running', g, now(), now() FROM generate_series(1, 2000) g`, scope.App, scope.User); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, sql string
		params    int
	}{
		{"merged append", postgres.MergedSQL, 16},
		{"append", postgres.AppendSQL, 28},
		{"in scope", "SELECT 1 WHERE " + postgres.InScope, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "_")
			sql := tc.sql
			if tc.params == 3 { // nothing else gives these their types
				sql = strings.Replace(sql, "$1", "$1::text", 1)
				sql = strings.Replace(sql, "$2", "$2::text", 1)
				sql = strings.Replace(sql, "$3", "$3::text", 1)
			}
			if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+sql); err != nil {
				t.Fatal(err)
			}
			args := strings.TrimSuffix(strings.Repeat("NULL, ", tc.params), ", ")
			rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+"("+args+")")
			if err != nil {
				t.Fatal(err)
			}
			var plan strings.Builder
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan.WriteString(line + "\n")
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if p := plan.String(); strings.Contains(p, "chats_scope") {
				t.Errorf("the plan finds the chat through the tenant's chats:\n%s", p)
			}
		})
	}
}
