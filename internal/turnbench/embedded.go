package turnbench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/llm/openai"
	batonrt "github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/workflow"
	"github.com/google/uuid"
)

// Scope is the app and user every benchmark chat belongs to.
var Scope = baton.Scope{App: "default", User: "bench"}

// EmbeddedConfig configures an embedded variant.
type EmbeddedConfig struct {
	// Name names the variant in results (default: "embedded").
	Name string
	// StoreURL is the store: sqlite:PATH (synchronous=FULL, the default),
	// mem: or postgres://….
	StoreURL string
	// BaseURL, APIKey and Model are the model endpoint (the fake Model's
	// URL, or a real one), the key sent to it and the model asked for.
	BaseURL, APIKey, Model string
	// Logger receives the runtime's log; nil: info and above, formatted as
	// `baton serve` formats them and thrown away.
	Logger *slog.Logger
}

// Embedded is baton in this process, as a program that embeds it runs it:
// runtime.Open with the store, the workflow built in Go, the echo tool, the
// real llm/openai provider; each turn starts a new chat with the person's
// message and ends at its pause. Every event of the chat — recorded ones
// and stream deltas — is consumed the way the server's hub consumes them:
// one bus subscription for all chats fanned out by chat (bus.Fanout), the
// envelope filter applied and the envelope encoded for each.
type Embedded struct {
	name string
	rt   *batonrt.Runtime
	wf   *workflow.Workflow
	fan  bus.Fanout
	feed *bus.Feed
	stop context.CancelFunc
	done chan error // the feed's Run

	mu      sync.Mutex
	waiting map[string]chan error // turns in flight by chat id: told when the feed lost events
	buf     []byte                // envelope buffer; used on the feed's goroutine only
}

// OpenEmbedded opens baton with cfg and starts its consumer. Close it.
func OpenEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.StoreURL == "" {
		return nil, errors.New("embedded: no store URL")
	}
	if cfg.Name == "" {
		cfg.Name = "embedded"
	}
	if cfg.Model == "" {
		cfg.Model = ModelName
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	wf, err := Workflow(cfg.Model)
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	provider := newProvider(cfg.BaseURL, cfg.APIKey, log)
	rt, err := batonrt.Open(ctx, batonrt.Config{
		StoreURL:  cfg.StoreURL,
		Workflows: []*workflow.Workflow{wf},
		Funcs:     []baton.Tool{Echo},
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return provider, nil },
		SecretKey: secret,
		Logger:    log,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	e := &Embedded{name: cfg.Name, rt: rt, wf: rt.Engine().Workflow(WorkflowName), waiting: map[string]chan error{}, done: make(chan error, 1)}
	if e.wf == nil {
		e.wf = wf
	}
	// The hub's subscription: every chat.* and stream.* event, its buffer
	// (server.Config.HubBuffer's default).
	e.feed, err = e.fan.Feed(rt.Bus(), []string{"chat.*", "stream.*"}, bus.Buffer(65536))
	if err != nil {
		_ = rt.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("embedded: subscribe: %w", err)
	}
	fctx, stop := context.WithCancel(context.Background())
	e.stop = stop
	go func() { e.done <- e.feed.Run(fctx, e.lost) }()
	return e, nil
}

// newProvider is the llm/openai provider as `baton serve` builds it for a
// workflow whose OPENAI_BASE_URL and OPENAI_API_KEY are set.
func newProvider(baseURL, apiKey string, log *slog.Logger) baton.Provider {
	opts := []openai.Option{openai.WithLogger(log)}
	if apiKey != "" {
		opts = append(opts, openai.WithAPIKey(apiKey))
	}
	if baseURL != "" {
		opts = append(opts, openai.WithBaseURL(baseURL))
	}
	return openai.New(opts...)
}

// Name names the variant.
func (e *Embedded) Name() string { return e.name }

// Runtime returns the runtime the variant runs.
func (e *Embedded) Runtime() *batonrt.Runtime { return e.rt }

// lost is called when the bus dropped the feed as too slow: the turns in
// flight missed events and fail (a benchmark whose consumer falls behind
// measures nothing).
func (e *Embedded) lost() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ch := range e.waiting {
		select {
		case ch <- errors.New("embedded: the consumer fell behind and the bus dropped its subscription"):
		default:
		}
	}
}

// Turn starts a new chat with the person's message and waits for its pause.
func (e *Embedded) Turn(ctx context.Context) (Timing, error) {
	t0 := time.Now()
	var firstToken atomic.Int64 // written by the watcher, read here
	id := uuid.Must(uuid.NewV7()).String()
	end := make(chan error, 1)
	e.mu.Lock()
	e.waiting[id] = end
	e.mu.Unlock()
	stop := e.fan.Watch(id, func(ev *baton.Event) {
		// On the feed's goroutine, one event at a time: e.buf is its own.
		var ok bool
		if e.buf, ok = server.AppendEnvelope(e.buf[:0], e.wf, ev); !ok {
			return
		}
		if ev.Type == baton.TypeStreamText && firstToken.Load() == 0 {
			firstToken.Store(int64(time.Since(t0)))
		}
		if batonrt.EndsSegment(ev) {
			var err error
			if ev.Type == baton.TypeChatError {
				p, _ := baton.DecodePayload[baton.ErrorPayload](ev)
				err = fmt.Errorf("chat %s: chat.error: %s", id, p.Message)
			}
			select {
			case end <- err:
			default:
			}
		}
	})
	defer func() {
		stop()
		e.mu.Lock()
		delete(e.waiting, id)
		e.mu.Unlock()
	}()
	if _, err := e.rt.Engine().Start(ctx, Scope, WorkflowName, baton.StartOptions{ChatID: id, Message: UserMessage}); err != nil {
		return Timing{}, fmt.Errorf("embedded: start: %w", err)
	}
	select {
	case err := <-end:
		return Timing{FirstToken: time.Duration(firstToken.Load()), Total: time.Since(t0)}, err
	case <-ctx.Done():
		return Timing{}, context.Cause(ctx)
	}
}

// Commits returns how many transactions the runtime's store has committed
// (0 for a store that does not count them).
func (e *Embedded) Commits(context.Context) (uint64, error) {
	return uint64(storeStats(e.rt.Store()).Commits), nil
}

// Reads returns how many read queries the runtime's store has run (0 for
// a store that does not count them).
func (e *Embedded) Reads(context.Context) (uint64, error) {
	return uint64(storeStats(e.rt.Store()).Reads), nil
}

// Close stops the consumer and closes the runtime.
func (e *Embedded) Close(ctx context.Context) error {
	e.stop()
	err := <-e.done
	return errors.Join(err, e.rt.Close(ctx))
}
