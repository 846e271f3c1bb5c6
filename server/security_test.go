package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// TestStartContextOnlyClientSettable: a client may preset at start only the
// variables the workflow marks client_settable, each of its declared type.
// Derived variables (the interview's, the key form's) and mistyped values
// are a 400 naming the variable, and no chat is created.
func TestStartContextOnlyClientSettable(t *testing.T) {
	e := newEnv(t)
	key := e.keys[scopeAda]
	for _, c := range []struct {
		body    string
		mention string
	}{
		{`{"context":{"interview_complete":true,"api_keys_collected":true}}`, "context.api_keys_collected"},
		{`{"context":{"interview_complete":true}}`, "context.interview_complete"},
		{`{"context":{"plan_name":"x"}}`, "context.plan_name"},
		{`{"context":{"concept_overview":5}}`, "context.concept_overview"},
		{`{"context":{"__secrets":{"OPENAI_API_KEY":"x"}}}`, "context.__secrets"},
	} {
		r := e.do(t, "POST", "/api/chats/acme/generator/start", key, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.errorMessage(), c.mention) {
			t.Errorf("start %s: %d %s, want 400 naming %s", c.body, r.status, r.body, c.mention)
		}
	}
	chats, err := e.store.ListChats(context.Background(), scopeAda, baton.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chats) != 0 {
		t.Fatalf("refused starts created %d chats", len(chats))
	}
	// The one client-settable variable, with its type, is taken.
	id := e.start(t, "generator", map[string]any{"context": map[string]any{"concept_overview": "triage my inbox"}})
	c := e.waitStatus(t, id, baton.ChatWaitingInput)
	var vars map[string]any
	if err := json.Unmarshal(c.Context, &vars); err != nil {
		t.Fatal(err)
	}
	if vars["concept_overview"] != "triage my inbox" || vars["interview_complete"] != false {
		t.Fatalf("context after start: %v", vars)
	}
}
