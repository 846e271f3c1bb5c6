package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

// BenchmarkCheckClientArgsPatterns measures the worst check of a client
// tool call's arguments the bounds allow that we know of: a string of
// about MaxClientArgsBytes against four patterns of `.*i#` alternatives
// (about 800 bytes and 820 instructions together), each run along the
// whole string.
func BenchmarkCheckClientArgsPatterns(b *testing.B) {
	alts := make([]string, 40)
	for i := range alts {
		alts[i] = fmt.Sprintf(".*%d#", i)
	}
	re, _ := json.Marshal("(" + strings.Join(alts, "|") + ")")
	var all []string
	for range 4 {
		all = append(all, fmt.Sprintf(`{"pattern":%s}`, re))
	}
	ct := baton.ClientTool{Name: "slow", Parameters: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","allOf":[` + strings.Join(all, ",") + `]}}}`)}
	if err := tool.CheckClientTools([]baton.ClientTool{ct}); err != nil {
		b.Fatal(err)
	}
	args, _ := json.Marshal(map[string]string{"s": strings.Repeat("x", tool.MaxClientArgsBytes-16) + "0#"})
	b.SetBytes(int64(len(args)))
	for b.Loop() {
		if msg := tool.CheckClientArgs(ct, args); msg != "" {
			b.Fatal(msg)
		}
	}
}
