package natsbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/store/postgres"
)

// pgStore opens a store on a fresh schema of the test PostgreSQL (one pool
// per instance, like separate processes) and drops the schema at the end.
func pgStores(t *testing.T, n int) []*postgres.Store {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	schema := fmt.Sprintf("bridge_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), dsn); err == nil {
			_, _ = conn.Exec(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`)
			_ = conn.Close(context.Background())
		}
	})
	var out []*postgres.Store
	for i := 0; i < n; i++ {
		st, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

func startChat(t testing.TB, in *instance, workflow string) string {
	t.Helper()
	resp, err := http.Post(in.ts.URL+"/api/chats/acme/"+workflow+"/start", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		ChatID string `json:"chat_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("start on %s: %d %v", in.ts.URL, resp.StatusCode, err)
	}
	return body.ChatID
}

// watch reads a chat's envelopes from an instance over WebSocket until
// run_complete (or until stop says so), reconnecting with the last sequence
// whenever the server closes the stream (4000: replay). It returns the
// sequences seen, in order.
func watch(ctx context.Context, in *instance, chatID string, stop func(typ string) bool) ([]int64, error) {
	var seqs []int64
	last, _ := ctx.Value(lastKey{}).(int64)
	for {
		u := "ws" + strings.TrimPrefix(in.ts.URL, "http") + "/ws/acme/" + chatID + fmt.Sprint("?last_sequence=", last)
		conn, _, err := websocket.Dial(ctx, u, nil)
		if err != nil {
			return seqs, err
		}
		for {
			_, raw, err := conn.Read(ctx)
			if err != nil {
				conn.CloseNow()
				if websocket.CloseStatus(err) == server.CloseReconnect {
					break // reconnect and replay after last
				}
				return seqs, err
			}
			var env struct {
				Type string         `json:"type"`
				Data map[string]any `json:"data"`
			}
			_ = json.Unmarshal(raw, &env)
			if s, ok := env.Data["sequence"].(float64); ok {
				seqs = append(seqs, int64(s))
				last = int64(s)
			}
			if stop(env.Type) {
				conn.Close(websocket.StatusNormalClosure, "")
				return seqs, nil
			}
		}
	}
}

func inOrder(seqs []int64, n int) bool {
	if len(seqs) != n {
		return false
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			return false
		}
	}
	return true
}

// TestThreeInstances_ClientsOnOtherInstances: three instances on one
// PostgreSQL and the real NATS server, inputs routed through JetStream;
// 300 chats, each started through a random instance, driven by two
// messages sent through random instances, and watched over WebSocket from
// another instance than the one that started it: every client sees every
// event exactly once, in order, equal to the chat's history, and each chat
// recorded its two messages once, in order.
func TestThreeInstances_ClientsOnOtherInstances(t *testing.T) {
	natsURL := testenv.NATSURL(t)
	stores := pgStores(t, 3)
	ins := []*instance{
		newInstanceIn(t, "A", stores[0], natsURL, echoDir),
		newInstanceIn(t, "B", stores[1], natsURL, echoDir),
		newInstanceIn(t, "C", stores[2], natsURL, echoDir),
	}
	const chats = 300
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sem := make(chan struct{}, 30) // chats driven at once
	var wg sync.WaitGroup
	errs := make(chan error, chats)
	for i := 0; i < chats; i++ {
		starter := rand.IntN(3)
		watcher := (starter + 1 + rand.IntN(2)) % 3
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id := startChat(t, ins[starter], "echo")
			seen := make(chan []int64, 1)
			go func() {
				requests := 0 // the first, and one after each answer
				var types []string
				seqs, err := watch(ctx, ins[watcher], id, func(typ string) bool {
					types = append(types, typ)
					if typ == baton.TypeChatInputRequest {
						requests++
					}
					return requests == 3
				})
				if err != nil {
					errs <- fmt.Errorf("chat %s watched from %d: %v (saw %v: %v)", id, watcher, err, seqs, types)
				}
				seen <- seqs
			}()
			for k, text := range []string{"one", "two"} {
				// As a person would: answer once the chat asks.
				via := ins[rand.IntN(3)]
				if err := waitUserMessages(ctx, via, id, k); err != nil {
					errs <- fmt.Errorf("chat %s: %v", id, err)
					return
				}
				if err := submit(via, id, text); err != nil {
					errs <- fmt.Errorf("chat %s: submit %q via %s: %v", id, text, via.id, err)
					return
				}
			}
			seqs := <-seen
			want := historySeqs(t, ins[watcher], id)
			if fmt.Sprint(seqs) != fmt.Sprint(want) || !inOrder(seqs, len(want)) {
				errs <- fmt.Errorf("chat %s watched from %d: sequences %v, history %v", id, watcher, seqs, want)
			}
			if got := userMessages(t, ins[watcher], id); fmt.Sprint(got) != "[one two]" {
				errs <- fmt.Errorf("chat %s: user messages %q", id, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var routed, delivered int64
	for _, in := range ins {
		if n := in.eng.LeaseLosses(); n != 0 {
			t.Errorf("instance %s: %d runs lost their chat's lease with no instance stalled", in.id, n)
		}
		st := in.bridge.InputStats()
		routed += st.Routed
		delivered += st.Delivered
		if st.Local != 0 {
			t.Errorf("instance %s handled %d inputs without JetStream", in.id, st.Local)
		}
	}
	t.Logf("inputs routed through JetStream: %d, delivered to owners: %d", routed, delivered)
}

// submit sends a person's message to a chat through an instance's HTTP API.
func submit(in *instance, chatID, content string) error {
	body := strings.NewReader(fmt.Sprintf(`{"chat_id":%q,"app":"acme","content":%q}`, chatID, content))
	resp, err := http.Post(in.ts.URL+"/api/input/submit", "application/json", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// waitUserMessages waits until a chat recorded n messages of the person
// and waits for the next.
func waitUserMessages(ctx context.Context, in *instance, chatID string, n int) error {
	for {
		evs, err := in.store.Events(ctx, devScope, chatID, 0, 10000)
		if err != nil {
			return err
		}
		users, waiting := 0, false
		for _, ev := range evs {
			switch ev.Type {
			case baton.TypeChatText:
				if strings.Contains(string(ev.Payload), `"agent":"user"`) {
					users++
				}
				waiting = false
			case baton.TypeChatInputRequest:
				waiting = true
			}
		}
		if users >= n && waiting {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d user messages recorded, want %d: %w", users, n, ctx.Err())
		case <-time.After(10 * time.Millisecond): // polling the store
		}
	}
}

// TestNATSRestart_ClientsFillGapsFromTheStore: a client on instance B
// watches a chat run on instance A; NATS goes down while A records more of
// the chat; when NATS is back, B tells its streams to replay and the client
// gets every event exactly once, in order.
func TestNATSRestart_ClientsFillGapsFromTheStore(t *testing.T) {
	natsDir := t.TempDir()
	ns := runNATS(t, -1, natsDir)
	url := ns.ClientURL()
	stores := pgStores(t, 2)
	a := newInstanceOn(t, "A", stores[0], url)
	b := newInstanceOn(t, "B", stores[1], url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := startChat(t, a, "generator")

	firstPause := make(chan []int64, 1)
	done := make(chan []int64, 1)
	go func() {
		// Read until the interview question's input_request, then keep
		// reading across the outage until the secret form.
		var all []int64
		seqs, err := watch(ctx, b, id, func(typ string) bool { return typ == baton.TypeChatInputRequest })
		all = append(all, seqs...)
		firstPause <- append([]int64(nil), all...)
		if err != nil {
			done <- nil
			return
		}
		more, err := watchFrom(ctx, b, id, all[len(all)-1], func(typ string) bool { return typ == baton.TypeChatToolCall })
		if err != nil {
			t.Errorf("after the outage: %v", err)
		}
		done <- append(all, more...)
	}()
	before := <-firstPause
	ns.Shutdown() // NATS down
	ns.WaitForShutdown()
	body := strings.NewReader(fmt.Sprintf(`{"chat_id":%q,"app":"acme","content":"A weekly newsletter."}`, id))
	resp, err := http.Post(a.ts.URL+"/api/input/submit", "application/json", body)
	if err != nil || resp.StatusCode >= 300 {
		t.Fatalf("submit on A: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	waitStatus(t, a, id, baton.ChatWaitingSecret)
	runNATS(t, portOf(url), natsDir) // NATS back: the bridges reconnect, B's streams replay
	seqs := <-done
	// The client sees the filtered subsequence meant for people (invariant
	// 3): exactly the history endpoint's, up to where it stopped.
	want := historySeqs(t, b, id)
	for len(want) > 0 && want[len(want)-1] > seqs[len(seqs)-1] {
		want = want[:len(want)-1]
	}
	if len(before) == 0 || fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Fatalf("client sequences %v, history %v (first pause at %v)", seqs, want, before)
	}
}

// historySeqs returns the sequences of a chat's history as a client sees it.
func historySeqs(t *testing.T, in *instance, id string) []int64 {
	t.Helper()
	resp, err := http.Get(in.ts.URL + "/api/chats/acme/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Events []struct {
			Data map[string]any `json:"data"`
		} `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range page.Events {
		if s, ok := e.Data["sequence"].(float64); ok {
			out = append(out, int64(s))
		}
	}
	return out
}

func watchFrom(ctx context.Context, in *instance, chatID string, after int64, stop func(string) bool) ([]int64, error) {
	seqs, err := watch(withLast(ctx, after), in, chatID, stop)
	return seqs, err
}

type lastKey struct{}

func withLast(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, lastKey{}, n)
}

func waitStatus(t *testing.T, in *instance, id string, want baton.ChatStatus) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("chat %s to be %s", id, want), func() error {
		c, err := in.eng.Inspect(context.Background(), baton.Scope{App: "acme", User: server.DevUser}, id)
		if err != nil {
			return err
		}
		if c.Chat.Status != want {
			return fmt.Errorf("status %s", c.Chat.Status)
		}
		return nil
	})
}
