package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// workflowsDir is the repository's example workflows, run from disk so that
// command tools can be executed.
const workflowsDir = "../workflows"

var testScope = baton.Scope{App: "acme", User: "ada"}

// harness is one engine on a real SQLite file and a real bus.
type harness struct {
	t        *testing.T
	logs     *testenv.LogBuffer // everything the engine logged, at logLevel
	root     string
	toolOpts []tool.Option
	dbPath   string
	store    *sqlite.Store
	bus      *bus.Bus
	eng      *engine.Engine
	wfs      []*workflow.Workflow
	prov     engine.ProviderFunc
	wrap     func(baton.Recorder) baton.Recorder
	budget   engine.BudgetFunc
	tasks    map[string]engine.TaskFunc
	instance string        // engine.Config.InstanceID
	leaseTTL time.Duration // engine.Config.LeaseTTL
	wrapSt   func(*sqlite.Store) engine.Store
	logLevel slog.Level // of the engine's and the bus's logger; debug unless withLogLevel
}

type harnessOption func(*harness)

// withProvider replaces the scripted provider of the workflows.
func withProvider(p engine.ProviderFunc) harnessOption { return func(h *harness) { h.prov = p } }

// withWorkflows loads the workflows from root instead of the examples.
func withWorkflows(root string) harnessOption { return func(h *harness) { h.root = root } }

// withTools passes options (Go functions) to the tool registries.
func withTools(opts ...tool.Option) harnessOption {
	return func(h *harness) { h.toolOpts = append(h.toolOpts, opts...) }
}

// withRecorder wraps the recorder (to inject failures).
func withRecorder(wrap func(baton.Recorder) baton.Recorder) harnessOption {
	return func(h *harness) { h.wrap = wrap }
}

// faultyRecorder fails an append, before the store sees it, when fail
// returns an error; fail sees every append through the recorder, in order.
type faultyRecorder struct {
	baton.Recorder
	fail func(events []baton.Event) error
}

func (f *faultyRecorder) Record(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	if err := f.fail(events); err != nil {
		return nil, err
	}
	return f.Recorder.Record(ctx, scope, chatID, events, u)
}

// withFaults wraps the recorder in a faultyRecorder that fails an append
// when fail says so (to inject store failures at chosen points).
func withFaults(fail func(events []baton.Event) error) harnessOption {
	return withRecorder(func(r baton.Recorder) baton.Recorder { return &faultyRecorder{Recorder: r, fail: fail} })
}

// withTasks registers background task functions.
func withTasks(m map[string]engine.TaskFunc) harnessOption { return func(h *harness) { h.tasks = m } }

// withBudget sets the engine's budget hook.
func withBudget(f engine.BudgetFunc) harnessOption { return func(h *harness) { h.budget = f } }

// withInstance gives the engine an instance id and lease TTL, as one of
// several instances sharing the store.
func withInstance(id string, ttl time.Duration) harnessOption {
	return func(h *harness) { h.instance, h.leaseTTL = id, ttl }
}

// withStoreWrap gives the engine a wrapper of the store (to inject
// failures); the harness still reads the store itself.
func withStoreWrap(wrap func(*sqlite.Store) engine.Store) harnessOption {
	return func(h *harness) { h.wrapSt = wrap }
}

// withLogLevel sets the level the harness logs at (debug by default, so a
// test can read every line). Benchmarks log at info, as baton serve does:
// a debug line per tool event is a cost production does not pay.
func withLogLevel(l slog.Level) harnessOption { return func(h *harness) { h.logLevel = l } }

// withDB reuses a database file (a restart).
func withDB(path string) harnessOption { return func(h *harness) { h.dbPath = path } }

func scriptedProviders(wf *workflow.Workflow) (baton.Provider, error) {
	return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
}

func newHarness(t *testing.T, opts ...harnessOption) *harness {
	t.Helper()
	h := &harness{t: t, prov: scriptedProviders, root: workflowsDir, logLevel: slog.LevelDebug}
	for _, o := range opts {
		o(h)
	}
	if h.dbPath == "" {
		h.dbPath = filepath.Join(t.TempDir(), "baton.db")
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, h.dbPath)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	h.store = st
	h.logs = &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: h.logLevel}))
	h.bus = bus.New(bus.WithLogger(log))
	wfs, err := workflow.LoadAll(os.DirFS(h.root))
	if err != nil {
		t.Fatalf("load workflows: %v", err)
	}
	h.wfs = wfs
	var rec baton.Recorder = recorder.New(st, engine.ObserverPublisher{Bus: h.bus})
	if h.wrap != nil {
		rec = h.wrap(rec)
	}
	var est engine.Store = st
	if h.wrapSt != nil {
		est = h.wrapSt(st)
	}
	eng, err := engine.New(engine.Config{
		Store:        est,
		Recorder:     rec,
		Bus:          h.bus,
		Workflows:    wfs,
		WorkflowRoot: h.root,
		ToolOptions:  stubFuncs(wfs, h.toolOpts...),
		Providers:    h.prov,
		Logger:       log,
		SecretKey:    []byte("0123456789abcdef0123456789abcdef"),
		TimeoutSweep: 20 * time.Millisecond,
		Budget:       h.budget,
		Tasks:        h.tasks,
		InstanceID:   h.instance,
		LeaseTTL:     h.leaseTTL,
	})
	if err != nil {
		t.Fatalf("engine: %v", err)
	}
	h.eng = eng
	t.Cleanup(h.close)
	return h
}

// stubFuncs returns opts after a stand-in for the function of every go tool
// of wfs (but the engine's own) that fails when called. The engine binds every go tool by name when
// it starts, and a test loads a folder of workflows but registers only the
// functions of the one it runs; its own options come last and replace the
// stand-ins.
func stubFuncs(wfs []*workflow.Workflow, opts ...tool.Option) []tool.Option {
	var stubs []baton.Tool
	for _, wf := range wfs {
		for _, t := range wf.Tools {
			if t.Kind != workflow.KindGo || t.Function == engine.ToolGetEventInfo || t.Function == engine.ToolStartBackgroundTask {
				continue // the engine's own
			}
			name := t.Function
			stubs = append(stubs, tool.MustFunc(name, "A stand-in: this test registers no "+name+".",
				func(context.Context, *baton.CallContext, struct{}) (string, error) {
					return "", fmt.Errorf("go function %s is a stand-in in this test", name)
				}))
		}
	}
	return append([]tool.Option{tool.WithFuncs(stubs...)}, opts...)
}

// close stops the engine, the bus and the store, in that order. It is
// idempotent so that a test can "restart" by closing and making a new harness.
func (h *harness) close() {
	if h.bus == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.bus.Close(ctx); err != nil {
		h.t.Errorf("bus close: %v", err)
	}
	_ = h.eng.Close()
	if err := h.store.Close(); err != nil {
		h.t.Errorf("store close: %v", err)
	}
	h.bus = nil
}

// waitStatus waits until the chat reaches one of the statuses.
func (h *harness) waitStatus(chatID string, want ...baton.ChatStatus) baton.Chat {
	h.t.Helper()
	return h.waitStatusFor(10*time.Second, chatID, want...)
}

func (h *harness) waitStatusFor(d time.Duration, chatID string, want ...baton.ChatStatus) baton.Chat {
	h.t.Helper()
	var c baton.Chat
	testenv.Eventually(h.t, d, fmt.Sprintf("chat %s to reach one of %v with the bus settled", chatID, want), func() error {
		var err error
		if c, err = h.store.GetChat(context.Background(), testScope, chatID); err != nil {
			return err
		}
		if !slices.Contains(want, c.Status) || !h.settled() {
			return fmt.Errorf("status %q, settled %v", c.Status, h.settled())
		}
		return nil
	})
	return c
}

// events returns every recorded event of a chat.
func (h *harness) events(chatID string) []baton.Event {
	h.t.Helper()
	evs, err := h.store.Events(context.Background(), testScope, chatID, 0, 100000)
	if err != nil {
		h.t.Fatalf("events: %v", err)
	}
	return evs
}

// summary is a compact view of a recorded event for golden comparisons.
type summary struct {
	Seq    int64  `json:"seq"`
	Type   string `json:"type"`
	Agent  string `json:"agent,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func summarize(evs []baton.Event) []summary {
	out := make([]summary, 0, len(evs))
	for _, ev := range evs {
		var p map[string]any
		_ = json.Unmarshal(ev.Payload, &p)
		s := summary{Seq: ev.Sequence, Type: ev.Type}
		if a, ok := p["agent"].(string); ok {
			s.Agent = a
		}
		str := func(k string) string { v, _ := p[k].(string); return v }
		switch ev.Type {
		case baton.TypeChatText:
			s.Detail = str("content")
			if p["ui_hidden"] == true {
				s.Detail += " [hidden]"
			}
			if p["tool_only"] == true {
				s.Detail += " [tool_only]"
			}
		case baton.TypeChatSelectSpeaker:
			s.Detail = str("source")
		case baton.TypeChatToolCall:
			s.Detail = str("tool_name")
			if it := str("interaction_type"); it != "" {
				s.Detail += " (" + it + ")"
			}
			if p["awaiting_response"] == true {
				s.Detail += " awaiting"
			}
		case baton.TypeChatToolResponse:
			s.Detail = str("tool_name") + " " + str("status")
		case baton.TypeChatHandoff:
			s.Agent = ""
			s.Detail = str("from") + " -> " + str("to") + " " + str("transition_target") + " (" + str("handoff_type") + ")"
		case baton.TypeChatContextUpdated:
			b, _ := json.Marshal(p["variables"])
			s.Detail = string(b)
		case baton.TypeChatRunComplete, baton.TypeChatError:
			s.Detail = str("status") + str("code")
		}
		out = append(out, s)
	}
	return out
}

// checkSequences asserts invariant 2: 1, 2, 3, … with no gap or repeat.
func checkSequences(t *testing.T, evs []baton.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Sequence != int64(i+1) {
			t.Fatalf("event %d has sequence %d: gap or repeat", i, ev.Sequence)
		}
	}
}

// restart closes the harness and opens a new one on the same database: no
// in-memory object survives.
func (h *harness) restart() *harness {
	h.t.Helper()
	h.close()
	return newHarness(h.t, withDB(h.dbPath), withWorkflows(h.root), withProvider(h.prov), withTools(h.toolOpts...), withTasks(h.tasks), withBudget(h.budget))
}

// checkSpeakers asserts invariant 6: every text from a sender other than
// the previous text's sender is preceded, since that previous text, by a
// select_speaker for its sender ("system" for the resume signal).
func checkSpeakers(t *testing.T, evs []baton.Event) {
	t.Helper()
	last := ""
	selected := map[string]bool{}
	for _, ev := range evs {
		var p struct{ Agent, Content string }
		_ = json.Unmarshal(ev.Payload, &p)
		switch ev.Type {
		case baton.TypeChatSelectSpeaker:
			selected[p.Agent] = true
		case baton.TypeChatText:
			if last != "" && p.Agent != last && !selected[p.Agent] {
				t.Fatalf("invariant 6: text %d from %s (after %s) has no select_speaker for it", ev.Sequence, p.Agent, last)
			}
			last = p.Agent
			selected = map[string]bool{}
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// settled reports whether every event the bus accepted has been handled (or
// matched no rule): a precise "nothing in flight", unlike queue lengths.
func (h *harness) settled() bool {
	s := h.bus.Stats()
	return s.Published == s.Handled+s.Unmatched && h.eng.Active() == 0
}

// settle waits until the harness's bus has handled everything published.
func (h *harness) settle() {
	h.t.Helper()
	testenv.Eventually(h.t, 10*time.Second, "the bus to handle everything published and no run to be active", func() error {
		if !h.settled() {
			return fmt.Errorf("bus stats %+v, %d runs active", h.bus.Stats(), h.eng.Active())
		}
		return nil
	})
}
