package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// BenchmarkCallGo measures the registry's path around a trivial Go tool:
// validation, limits, timeout, event.
func BenchmarkCallGo(b *testing.B) {
	rec := &discard{}
	r, err := tool.New(wfDir, []tool.Spec{{Agent: "A", Function: "add"}}, tool.WithFuncs(addTool), tool.WithLogger(quiet), tool.WithPublisher(rec))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	add, _ := r.Tool(context.Background(), "A", "add")
	args := json.RawMessage(`{"a": 2, "b": 3}`)
	b.ReportAllocs()
	for b.Loop() {
		res, err := add.Call(context.Background(), callCtx("c"), args)
		if err != nil || res.Content != "5" {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkCallGoEffect adds the effect ledger (in memory), a new key per call.
func BenchmarkCallGoEffect(b *testing.B) {
	charge, _, _ := counted()
	r, err := tool.New(wfDir, []tool.Spec{{Agent: "A", Function: "charge", SideEffects: true}},
		tool.WithFuncs(charge), tool.WithLogger(quiet), tool.WithLedger(&memLedger{}))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ch, _ := r.Tool(context.Background(), "A", "charge")
	args := json.RawMessage(`{"amount": 1}`)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := ch.Call(context.Background(), callCtx(fmt.Sprint(i)), args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCallCommand measures a command tool: a process per call.
func BenchmarkCallCommand(b *testing.B) {
	r, err := tool.New(wfDir, []tool.Spec{{Agent: "A", Name: "echo", File: "echo.sh"}}, tool.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	echo, _ := r.Tool(context.Background(), "A", "echo")
	b.ReportAllocs()
	for b.Loop() {
		if res, err := echo.Call(context.Background(), callCtx("c"), json.RawMessage(`{"text":"x"}`)); err != nil || res.Status != "ok" {
			b.Fatal(res, err)
		}
	}
}

type discard struct{}

func (discard) Publish(context.Context, baton.Event) error { return nil }
