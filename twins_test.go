package baton_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// The checks and defaults below are shared by every store (mem, sqlite,
// postgres); store/storetest proves the stores use them, these pin the
// messages and defaults themselves.

func TestAPIKeyValidate(t *testing.T) {
	hash := strings.Repeat("a", 64)
	tests := []struct {
		name string
		k    baton.APIKey
		want string // substring of the error; "" for valid
	}{
		{"valid", baton.APIKey{Hash: hash, App: "app", User: "u"}, ""},
		{"short hash", baton.APIKey{Hash: "abc", App: "app", User: "u"}, "api key hash: want 64 hex characters"},
		{"no app", baton.APIKey{Hash: hash, User: "u"}, "api key app: required"},
		{"no user", baton.APIKey{Hash: hash, App: "app"}, "api key user: required"},
		{"bad scope", baton.APIKey{Hash: hash, App: "app\x00", User: "u"}, "api key "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, tt.k.Validate(), tt.want)
		})
	}
}

func TestChatStatsValidate(t *testing.T) {
	ok := baton.ChatStats{App: "a", Workflow: "w", ChatID: "c", Agents: []baton.AgentStats{{Agent: "x"}}}
	tests := []struct {
		name string
		edit func(*baton.ChatStats)
		want string
	}{
		{"valid", func(*baton.ChatStats) {}, ""},
		{"no app", func(d *baton.ChatStats) { d.App = "" }, "stats app: required"},
		{"no workflow", func(d *baton.ChatStats) { d.Workflow = "" }, "stats workflow: required"},
		{"no chat", func(d *baton.ChatStats) { d.ChatID = "" }, "stats chat_id: required"},
		{"unnamed agent", func(d *baton.ChatStats) { d.Agents = []baton.AgentStats{{}} }, "stats agent: name required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ok
			tt.edit(&d)
			checkErr(t, d.Validate(), tt.want)
		})
	}
}

func TestSumUsage(t *testing.T) {
	per := []baton.UsageTotal{
		{Agent: "a", Calls: 2, Usage: baton.Usage{PromptTokens: 10, CompletionTokens: 5, CachedTokens: 1, ReasoningTokens: 2}, Cost: 0.5},
		{Agent: "b", Calls: 1, Usage: baton.Usage{PromptTokens: 3, CompletionTokens: 4}, Cost: 0.25},
	}
	got := baton.SumUsage(per)
	want := baton.UsageTotal{Calls: 3, Usage: baton.Usage{PromptTokens: 13, CompletionTokens: 9, CachedTokens: 1, ReasoningTokens: 2}, Cost: 0.75}
	if got != want {
		t.Fatalf("SumUsage = %+v, want %+v", got, want)
	}
	if z := baton.SumUsage(nil); z != (baton.UsageTotal{}) {
		t.Fatalf("SumUsage(nil) = %+v, want zero", z)
	}
}

func TestChatPrepareCreate(t *testing.T) {
	scope := baton.Scope{App: "app", User: "u"}
	c := baton.Chat{Workflow: "w", LastSequence: 9, Deleted: true, App: "other", User: "other"}
	if err := c.PrepareCreate(scope); err != nil {
		t.Fatalf("PrepareCreate: %v", err)
	}
	if c.ID == "" || c.Status != baton.ChatRunning || c.CacheSeed == 0 {
		t.Errorf("defaults: id %q status %q seed %d, want an id, %q and a non-zero seed", c.ID, c.Status, c.CacheSeed, baton.ChatRunning)
	}
	if c.App != "app" || c.User != "u" || c.LastSequence != 0 || c.Deleted {
		t.Errorf("scope and state: %+v", c)
	}
	if string(c.Context) != "{}" {
		t.Errorf("context = %s, want {}", c.Context)
	}

	kept := baton.Chat{ID: "chat_1", Status: baton.ChatWaitingInput, CacheSeed: 7, Workflow: "w", Context: json.RawMessage(` {"k": 1} `)}
	if err := kept.PrepareCreate(scope); err != nil {
		t.Fatalf("PrepareCreate: %v", err)
	}
	if kept.ID != "chat_1" || kept.Status != baton.ChatWaitingInput || kept.CacheSeed != 7 || string(kept.Context) != `{"k":1}` {
		t.Errorf("given fields not kept: %+v (context %s)", kept, kept.Context)
	}

	bad := []struct {
		name  string
		scope baton.Scope
		c     baton.Chat
		want  string
	}{
		{"bad scope", baton.Scope{App: "a\x00"}, baton.Chat{}, ""},
		{"bad status", scope, baton.Chat{Status: "nope"}, `status: "nope" is not a chat status`},
		{"context not an object", scope, baton.Chat{Context: json.RawMessage(`[1]`)}, "context: not a JSON object"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.PrepareCreate(tt.scope)
			if err == nil {
				t.Fatalf("PrepareCreate accepted %+v in %+v", tt.c, tt.scope)
			}
			if !(baton.ErrorCode(err) == baton.EINVALID) {
				t.Errorf("error %v: want EINVALID", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if !(baton.ErrorCode(err) == baton.EINVALID) {
		t.Errorf("error %v: want EINVALID", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to contain %q", err, want)
	}
}
