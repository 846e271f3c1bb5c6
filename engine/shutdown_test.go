package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/tool"
)

// TestShutdown_ToolFinishingDuringDrainIsCounted: a tool that is still
// running when the shutdown's drain begins (bus.Close) and finishes during
// it publishes its tool.executed: the metrics count it and nothing logs a
// failed publish. Before, the closed bus refused it ("publish tool event"
// warnings) and the metrics undercounted.
func TestShutdown_ToolFinishingDuringDrainIsCounted(t *testing.T) {
	entered := make(chan struct{})
	finish := make(chan struct{})
	slow := tool.WithFuncs(tool.MustFunc("lookup", "Look a word up.", func(_ context.Context, _ *baton.CallContext, in struct {
		Word string `json:"word"`
	}) (string, error) {
		close(entered)
		<-finish // runs on while the drain begins
		return "a short stick passed in a relay", nil
	}))
	h := newHarness(t, withWorkflows(loopDir), withTools(slow), turnProvider())
	col, err := metrics.New(metrics.Options{Bus: h.bus, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "What is a baton?", "api"); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- h.bus.Close(ctx) }()
	// Wait until the drain has begun: an input from outside is refused.
	testenv.Eventually(t, 20*time.Second, "the drain to begin (an input from outside refused)", func() error {
		err := h.bus.Publish(ctx, baton.NewInput(testScope, "probe.shutdown", "probe-chat", nil))
		if errors.Is(err, baton.ErrClosed) {
			return nil
		}
		return fmt.Errorf("publish = %v", err)
	})
	close(finish)
	if err := <-closed; err != nil {
		t.Fatalf("bus close: %v", err)
	}
	if err := col.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := toolCalls(t, col, "lookup"); n != 1 {
		t.Fatalf("tool calls counted: %v, want 1", n)
	}
	if strings.Contains(h.logs.String(), "publish tool event") {
		t.Fatalf("a tool event was refused during the drain:\n%s", h.logs.String())
	}
}

// toolCalls reads baton_tool_calls_total of a tool from the collector's registry.
func toolCalls(t *testing.T, col *metrics.Collector, name string) float64 {
	t.Helper()
	mfs, err := col.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "baton_tool_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" && l.GetValue() == name {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
