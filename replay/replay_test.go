package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"iter"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
)

func TestMatch(t *testing.T) {
	got := `{"workflow":{"name":"W","phases":[{"name":"a"},{"name":"b"}],"n":90},"ok":true,"none":null}`
	for _, tc := range []struct {
		want string
		ok   bool
		path string
	}{
		{`{}`, true, ""},
		{`{"workflow":{"name":"W"}}`, true, ""},
		{`{"workflow":{"n":90.0}}`, true, ""},
		{`{"workflow":{"phases":[{"name":"a"},{}]}}`, true, ""},
		{`{"ok":true,"none":null}`, true, ""},
		{`{"workflow":{"name":"X"}}`, false, `$.workflow.name: want "X", got "W"`},
		{`{"workflow":{"phases":[{"name":"a"}]}}`, false, "$.workflow.phases: want an array of 1"},
		{`{"missing":1}`, false, "$.missing: missing"},
		{`{"ok":"true"}`, false, `$.ok: want "true", got true`},
		{`[1]`, false, "$: want an array of 1"},
	} {
		ok, path := Match(json.RawMessage(tc.want), json.RawMessage(got))
		if ok != tc.ok || path != tc.path {
			t.Errorf("Match(%s): %v %q, want %v %q", tc.want, ok, path, tc.ok, tc.path)
		}
	}
}

func textEvent(seq int64, agent, content string) baton.Event {
	ev := baton.NewChatEvent(baton.TypeChatText, "c", agent, baton.TextPayload{Kind: "text", Agent: agent, Content: content})
	ev.Sequence = seq
	return ev
}

// TestDiff_FirstDivergence: a changed text is reported as the first
// divergence with both sides' sequences; a step only the replay has is
// an addition; equal sequences have no divergence.
func TestDiff_FirstDivergence(t *testing.T) {
	want := Steps([]baton.Event{textEvent(1, "A", "hi"), textEvent(2, "B", "one"), textEvent(3, "C", "end")})
	got := Steps([]baton.Event{textEvent(1, "A", "hi"), textEvent(2, "B", "two"), textEvent(3, "X", "extra"), textEvent(4, "C", "end")})
	if Diverged(Diff(want, want)) {
		t.Fatal("a sequence diverges from itself")
	}
	ops := Diff(want, got)
	var b bytes.Buffer
	WriteDiff(&b, ops)
	for _, s := range []string{
		"first divergence:\n  expected #2 text B: one\n  got      #2 text B: two\n",
		"  #1          text A: hi\n- #2          text B: one\n+       #2    text B: two\n+       #3    text X: extra\n  #3          text C: end",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("diff lacks\n%s\nin\n%s", s, b.String())
		}
	}
}

type fixed struct{ text string }

func (f fixed) Stream(context.Context, *baton.Request) iter.Seq2[baton.Delta, error] {
	return func(yield func(baton.Delta, error) bool) {
		yield(baton.Delta{Kind: baton.DeltaText, Text: f.text}, nil)
	}
}

func text(p baton.Provider, req *baton.Request) string {
	var s strings.Builder
	for d, err := range p.Stream(context.Background(), req) {
		if err == nil && d.Kind == baton.DeltaText {
			s.WriteString(d.Text)
		}
	}
	return s.String()
}

// TestRecorded_SwitchesOnce: the recorded replies answer while the agent
// and the request digest match; the first mismatch hands every later call
// to the fallback, even one that would match again.
func TestRecorded_SwitchesOnce(t *testing.T) {
	req := func(agent, content string) *baton.Request {
		return &baton.Request{Agent: agent, Messages: []baton.Message{{Role: baton.RoleSystem, Content: content}}}
	}
	calls := []chatlog.Call{
		{Agent: "A", Text: "a1", Digest: baton.RequestDigest(req("A", "p"))},
		{Agent: "B", Text: "b1", Digest: baton.RequestDigest(req("B", "p"))},
		{Agent: "A", Text: "a2"}, // no digest recorded: the agent alone decides
	}
	p := NewRecorded(calls, fixed{"live"})
	if got := text(p, req("A", "p")); got != "a1" {
		t.Fatalf("first call: %q", got)
	}
	if got := text(p, req("B", "edited")); got != "live" {
		t.Fatalf("an edited prompt: %q, want the fallback's", got)
	}
	d := p.Diverged()
	if d == nil || d.Call != 1 || d.Agent != "B" || !strings.Contains(d.Reason, "request differs") {
		t.Fatalf("divergence %+v", d)
	}
	if got := text(p, req("A", "anything")); got != "live" || p.Served() != 1 {
		t.Fatalf("after the divergence: %q, %d served", got, p.Served())
	}
}

// TestRequestDigest: the digest follows what the model is asked and
// ignores the ids that differ from chat to chat.
func TestRequestDigest(t *testing.T) {
	base := func() *baton.Request {
		return &baton.Request{ChatID: "c1", MessageID: "m1", Agent: "A", Messages: []baton.Message{
			{Role: baton.RoleSystem, Content: "sys"},
			{Role: baton.RoleAssistant, Name: "A", ToolCalls: []baton.ToolCall{{ID: "call_1", Name: "t", Arguments: "{}"}}},
			{Role: baton.RoleTool, ToolCallID: "call_1", Content: `{"status":"success","ui_event_id":"ui_1","data":{"x":1}}`},
		}}
	}
	d := baton.RequestDigest(base())
	other := base()
	other.ChatID, other.MessageID = "c2", "m2"
	other.Messages[1].ToolCalls[0].ID, other.Messages[2].ToolCallID = "call_2", "call_2"
	other.Messages[2].Content = `{"status":"success","ui_event_id":"ui_2","data":{"x":1}}`
	if baton.RequestDigest(other) != d {
		t.Error("ids changed the digest")
	}
	edited := base()
	edited.Messages[0].Content = "sys!"
	answer := base()
	answer.Messages[2].Content = `{"status":"success","ui_event_id":"ui_1","data":{"x":2}}`
	if baton.RequestDigest(edited) == d || baton.RequestDigest(answer) == d {
		t.Error("a changed prompt or tool result kept the digest")
	}
}
