package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

func start(t *testing.T, h *harness, wf string) string {
	t.Helper()
	c, err := h.eng.Start(context.Background(), testScope, wf, baton.StartOptions{})
	if err != nil {
		t.Fatalf("start %s: %v", wf, err)
	}
	return c.ID
}

func TestHello_RunsToCompletionWithoutInput(t *testing.T) {
	h := newHarness(t)
	id := start(t, h, "hello")
	c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed)
	evs := h.events(id)
	checkSequences(t, evs)
	got := summarize(evs)
	want := []string{
		"chat.text user What time is it in UTC? [hidden]",
		"chat.handoff  user -> Greeter AgentTarget (start)",
		"chat.select_speaker Greeter native",
		"chat.text Greeter Action completed (Tool Call: get_time) [tool_only]",
		"chat.tool_call Greeter get_time",
		"chat.usage_summary Greeter ",
		"chat.tool_response Greeter get_time ok",
		`chat.context_updated Greeter {"time_told":true}`,
		"chat.text Greeter Hello! I checked the clock in UTC for you. Have a wonderful day!",
		"chat.usage_summary Greeter ",
		"chat.handoff  Greeter ->  TerminateTarget (after_work)",
		"chat.run_complete  success",
	}
	compareSummary(t, got, want)
	if c.Status != baton.ChatCompleted || c.LastSequence != int64(len(evs)) {
		t.Fatalf("chat %+v", c)
	}
	// The tool really ran: its result is the command's output.
	for _, ev := range evs {
		if ev.Type == baton.TypeChatToolResponse {
			var p struct{ Content string }
			_ = json.Unmarshal(ev.Payload, &p)
			if !strings.Contains(p.Content, "UTC") {
				t.Fatalf("get_time returned %q", p.Content)
			}
		}
	}
}

func compareSummary(t *testing.T, got []summary, want []string) {
	t.Helper()
	lines := make([]string, len(got))
	for i, s := range got {
		lines[i] = strings.TrimRight(fmt.Sprintf("%s %s %s", s.Type, s.Agent, s.Detail), " ")
	}
	for i := range want {
		want[i] = strings.TrimRight(want[i], " ")
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded events:\n%s\n\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
