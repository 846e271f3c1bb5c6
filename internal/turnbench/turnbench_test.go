package turnbench

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// checkTurns runs a few turns of t and checks what the model saw: two
// calls per turn (the tool call, then the reply).
func checkTurns(t *testing.T, m *Model, tr Turner, turns, concurrency int) Result {
	t.Helper()
	before := m.Requests()
	r, err := Run(t.Context(), tr, turns, concurrency, nil)
	if err != nil {
		t.Fatalf("%s: %v", tr.Name(), err)
	}
	if got := m.Requests() - before; got != int64(2*turns) {
		t.Fatalf("%s: %d model calls for %d turns; want two a turn", tr.Name(), got, turns)
	}
	if r.Turns != turns || len(r.Latency) != turns || r.CPU <= 0 || r.TurnsPerSec() <= 0 {
		t.Fatalf("%s: result %+v", tr.Name(), r)
	}
	if len(r.FirstToken) != turns {
		t.Fatalf("%s: first token seen in %d of %d turns", tr.Name(), len(r.FirstToken), turns)
	}
	return r
}

func startModel(t *testing.T) *Model {
	t.Helper()
	m, err := StartModel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestFloor(t *testing.T) {
	m := startModel(t)
	checkTurns(t, m, NewFloor(m.URL, "bench", ModelName, 4), 8, 4)
}

// TestEmbeddedTurnIsRecorded runs turns on SQLite and checks the stored
// chats: each paused after the reply, whose text is the model's 20 words,
// after the echo tool's call and response.
func TestEmbeddedTurnIsRecorded(t *testing.T) {
	m := startModel(t)
	e := openEmbedded(t, m, "sqlite", "sqlite:"+filepath.Join(t.TempDir(), "baton.db"))
	defer func() {
		if err := e.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if r := checkTurns(t, m, e, 6, 3); r.Commits == 0 {
		t.Error("SQLite's commits were not counted")
	}
	chats, err := e.Runtime().Store().ListChats(t.Context(), Scope, baton.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chats) != 6 {
		t.Fatalf("%d chats stored; want one a turn (6)", len(chats))
	}
	for _, c := range chats {
		if c.Status != baton.ChatWaitingInput {
			t.Errorf("chat %s: status %s; want waiting for input", c.ID, c.Status)
		}
		var types []string
		var text string
		for ev, err := range baton.EventsAfter(t.Context(), e.Runtime().Store(), Scope, c.ID, 0, 0) {
			if err != nil {
				t.Fatal(err)
			}
			types = append(types, ev.Type)
			if ev.Type == baton.TypeChatText {
				p, _ := baton.DecodePayload[baton.TextPayload](&ev)
				if p.Agent == AgentName && !p.ToolOnly {
					text = p.Content
				}
			}
		}
		got := strings.Join(types, " ")
		for _, want := range []string{baton.TypeChatToolCall, baton.TypeChatToolResponse, baton.TypeChatInputRequest} {
			if !strings.Contains(got, want) {
				t.Errorf("chat %s: no %s in %s", c.ID, want, got)
			}
		}
		if text != Reply() {
			t.Errorf("chat %s: reply %q; want the model's %q", c.ID, text, Reply())
		}
	}
}

func TestEmbeddedMem(t *testing.T) {
	m := startModel(t)
	e := openEmbedded(t, m, "mem", "mem:")
	defer func() { _ = e.Close(context.Background()) }()
	checkTurns(t, m, e, 6, 3)
}

// TestServed runs turns through a server in a child process and reads its
// CPU and heap.
func TestServed(t *testing.T) {
	m := startModel(t)
	// The metrics' rollups are written once an hour here, not each second:
	// every commit counted is a turn's.
	s := spawnServed(t, m, "sqlite:"+filepath.Join(t.TempDir(), "baton.db"), 3, func(c *ServerConfig) { c.MetricsFlush = time.Hour })
	defer func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	// One at a time, so that no two turns share a commit.
	r := checkTurns(t, m, s, 6, 1)
	if r.ServerCPU <= 0 {
		t.Fatalf("server CPU %v; want the child's", r.ServerCPU)
	}
	// A served turn commits five times at most: the start, the message's
	// inbox write, what the run records before each of its two model
	// calls, and the reply.
	if want := uint64(5 * r.Turns); r.Commits == 0 || r.Commits > want {
		t.Errorf("the server's SQLite committed %d times in %d turns; want at most %d (five a turn)", r.Commits, r.Turns, want)
	}
	// And it reads the store six times: the API key twice (the start, the
	// WebSocket's handshake), the chat twice (the handshake's scope check,
	// the message's status check), the replay (one query for a new chat)
	// and the inbox, when the run takes the message. A read costs about a
	// fifth of a commit here, more after a commit on a read connection: a
	// new one on this path is a decision, not an accident. (Besides those,
	// the messages re-check the key, which the server caches for
	// KeyCacheTTL, 5 s: a read every 5 s.)
	rechecks := 1 + uint64(r.Elapsed/(5*time.Second))
	if want := uint64(6*r.Turns) + rechecks; r.Reads == 0 || r.Reads > want {
		t.Errorf("the server's SQLite read %d times in %d turns; want at most %d (six a turn)", r.Reads, r.Turns, want)
	}
	if h, err := s.ServerHeap(t.Context()); err != nil || h == 0 {
		t.Fatalf("server heap: %d, %v", h, err)
	}
}

// TestServedCPUProfile: with BATON_BENCH_SERVER_CPUPROFILE set, the server
// process writes a CPU profile (pprof's gzipped format) to PREFIX.<test>,
// complete once it has shut down.
func TestServedCPUProfile(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "server")
	t.Setenv("BATON_BENCH_SERVER_CPUPROFILE", prefix)
	m := startModel(t)
	s := spawnServed(t, m, "sqlite:"+filepath.Join(t.TempDir(), "baton.db"), 2)
	checkTurns(t, m, s, 4, 2)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(prefix + "." + t.Name())
	if err != nil {
		t.Fatalf("no profile from the server: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the profile is not gzipped, as pprof writes it: %v", err)
	}
	n, err := io.Copy(io.Discard, zr)
	if err != nil || n == 0 {
		t.Fatalf("the profile: %d bytes, %v", n, err)
	}
}
