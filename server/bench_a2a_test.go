package server

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
)

// BenchmarkA2AStream runs one turn of the bench workflow (one agent
// streaming a long answer) per op over A2A message/stream with the a2a-go
// client, from the start message to the final status update, and reports
// the process's CPU per turn. The client runs in this process, so
// cpu-ms/turn is the server's and the client's together (BenchmarkWS runs
// its clients in a child process); compare it with a WebSocket run of the
// same workflow as an upper bound of the server's share.
func BenchmarkA2AStream(b *testing.B) {
	e := newEnv(b, withWorkflows(benchDir), withConfig(func(c *Config) { c.MaxStreamsPerKey = -1 }))
	c, _ := e.a2aClientTB(b, "acme", "bench", e.keys[scopeAda])
	ctx := context.Background()
	events := 0
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		msg := &a2a.Message{ID: "bench-" + strconv.Itoa(i), Role: a2a.MessageRoleUser, Parts: a2a.ContentParts{a2a.TextPart{Text: "Tell me a story."}}}
		final := false
		for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: msg}) {
			if err != nil {
				b.Fatal(err)
			}
			events++
			if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && su.Final {
				final = su.Status.State == a2a.TaskStateCompleted
			}
		}
		if !final {
			b.Fatal("the turn did not complete")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/turn")
	b.ReportMetric(float64(events)/float64(b.N), "events/turn")
}
