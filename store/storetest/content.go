package storetest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// testContent: both stores accept and refuse the same text. What one of them
// cannot keep (PostgreSQL: invalid UTF-8 and NUL in text, \u0000 and unpaired
// surrogate escapes in jsonb) is EINVALID, naming the field, in both, and
// writes nothing; what both can keep comes back with the same value.
func testContent(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")

	withPayload := func(p string) baton.Event { e := TextEvent("A", "x"); e.Payload = json.RawMessage(p); return e }
	withMeta := func(f func(*baton.Metadata)) baton.Event { e := TextEvent("A", "x"); f(&e.Metadata); return e }
	badEvents := []struct {
		name, field string
		e           baton.Event
	}{
		{"invalid UTF-8 in payload", "payload", withPayload("{\"content\":\"\xff\xfe\"}")},
		{"NUL in agent name", "metadata.trigger_agent_name", withMeta(func(m *baton.Metadata) { m.TriggerAgentName = "a\x00b" })},
		{"NUL in agent id", "metadata.trigger_agent_id", withMeta(func(m *baton.Metadata) { m.TriggerAgentID = "\x00" })},
		{"invalid UTF-8 in env name", "metadata.env_name", withMeta(func(m *baton.Metadata) { m.EnvName = "\xff\xfe" })},
		{"invalid UTF-8 in extra metadata", "metadata.x", withMeta(func(m *baton.Metadata) { m.Extra = map[string]json.RawMessage{"x": json.RawMessage("\"\xff\"")} })},
	}
	for _, tc := range badEvents {
		_, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "ok"), tc.e}, nil)
		wantInvalid(t, tc.name, err, tc.field)
	}
	badContext := []struct{ name, field, key, value string }{
		{"\\u0000 in a context value", "context.k", "k", `"a\u0000b"`},
		{"\\u0000 in a nested key", "context.k", "k", `{"a\u0000":1}`},
		{"lone high surrogate", "context.k", "k", `"\ud83d"`},
		{"high surrogate then text", "context.k", "k", `"\ud83dx"`},
		{"lone low surrogate", "context.k", "k", `["\ude00"]`},
		{"invalid UTF-8 in a context value", "context.k", "k", "\"\xff\""},
		{"NUL in a context key", "context key", "a\x00b", `1`},
		{"invalid UTF-8 in a context key", "context key", "a\xffb", `1`},
	}
	for _, tc := range badContext {
		_, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "ok")}, &baton.ChatUpdate{Context: map[string]json.RawMessage{tc.key: json.RawMessage(tc.value)}})
		wantInvalid(t, "Append: "+tc.name, err, tc.field)
		_, err = s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{Context: map[string]json.RawMessage{tc.key: json.RawMessage(tc.value)}})
		wantInvalid(t, "UpdateChat: "+tc.name, err, tc.field)
	}
	_, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{TurnAgent: ptr("a\x00")})
	wantInvalid(t, "NUL in turn agent", err, "turn_agent")
	_, err = s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{AddPending: []baton.PendingRequest{{UIEventID: baton.NewID(), Kind: baton.PendingUITool, ToolName: "\xff"}}})
	wantInvalid(t, "invalid UTF-8 in a pending tool name", err, "pending.tool_name")
	got, err := s.GetChat(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastSequence != 0 || got.TurnAgent != "" || len(got.Pending) != 0 || string(got.Context) != "{}" {
		t.Fatalf("refused writes changed the chat: %+v %s", got, got.Context)
	}
	for _, bad := range []struct {
		name, field string
		c           baton.Chat
	}{
		{"\\u0000 in the context", "context", baton.Chat{Workflow: "w", Context: json.RawMessage(`{"k":"a\u0000b"}`)}},
		{"NUL in the workflow", "workflow", baton.Chat{Workflow: "w\x00"}},
		{"invalid UTF-8 in the speaker", "turn_agent", baton.Chat{Workflow: "w", TurnAgent: "\xff"}},
		{"NUL in a pending agent", "pending.agent", baton.Chat{Workflow: "w", Pending: []baton.PendingRequest{{UIEventID: baton.NewID(), Kind: baton.PendingInput, Agent: "\x00"}}}},
	} {
		_, err := s.CreateChat(ctx, scope, bad.c)
		wantInvalid(t, "CreateChat: "+bad.name, err, bad.field)
	}
	_, err = s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k\x00"})
	wantInvalid(t, "NUL in a task kind", err, "task.kind")
	_, err = s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k", Input: json.RawMessage("\"\xff\"")})
	wantInvalid(t, "invalid UTF-8 in a task input", err, "task input")
	task, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateTask(ctx, scope, task.ID, baton.TaskFailed, nil, "boom\x00")
	wantInvalid(t, "NUL in a task error", err, "task error")
	if tk, _ := s.GetTask(ctx, scope, task.ID); tk.Status != baton.TaskQueued {
		t.Fatalf("a refused UpdateTask changed the task: %+v", tk)
	}
	_, err = s.ClaimEffect(ctx, scope, c.ID, "k\x00", baton.EffectHolder{})
	wantInvalid(t, "NUL in an effect key", err, "effect key")
	err = s.RecordUsage(ctx, scope, baton.UsageRecord{ChatID: c.ID, Agent: "\xff"})
	wantInvalid(t, "invalid UTF-8 in a usage agent", err, "usage.agent")
	if total, _, _ := s.ChatUsage(ctx, scope, c.ID); total.Calls != 0 {
		t.Fatalf("a refused RecordUsage wrote %d rows", total.Calls)
	}

	// What both can keep, kept with its value: escapes that are not a NUL
	// (a backslash before u0000, a control character, a surrogate pair),
	// numbers in any form, and a payload's \u0000 (text, not jsonb).
	okContext := map[string]json.RawMessage{
		"escaped backslash": json.RawMessage(`"\\u0000"`),
		"control":           json.RawMessage(`"\u0001\t"`),
		"pair":              json.RawMessage(`"\ud83d\ude00 \uD83D\uDE00"`),
		"number":            json.RawMessage(`1e2`),
		"escaped":           json.RawMessage(`"\u00e9<&>"`),
	}
	payload := json.RawMessage(`{"kind":"text","content":"a\u0000b \ud83d"}`)
	e := TextEvent("A", "x")
	e.Payload = payload
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{e}, &baton.ChatUpdate{Context: okContext}); err != nil {
		t.Fatalf("Append of text both stores can keep: %v", err)
	}
	evs, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil || len(evs) != 1 || string(evs[0].Payload) != string(payload) {
		t.Fatalf("payload with \\u0000 = %v, %v; want %s verbatim", evs, err, payload)
	}
	got, err = s.GetChat(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	for k, v := range okContext {
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			t.Fatal(err)
		}
		want[k] = x
	}
	if m := contextMap(t, got.Context); !reflect.DeepEqual(m, want) {
		t.Fatalf("context = %v, want %v (%s)", m, want, got.Context)
	}
}

// wantInvalid fails unless err is EINVALID and its message names field.
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	if baton.ErrorCode(err) != baton.EINVALID {
		t.Errorf("%s: error %v (code %q), want %q", what, err, baton.ErrorCode(err), baton.EINVALID)
		return
	}
	if !strings.Contains(err.Error(), field) {
		t.Errorf("%s: error %q does not name %s", what, err, field)
	}
}
