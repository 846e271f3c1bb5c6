package turnbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/coder/websocket"
	"github.com/google/uuid"
)

// ServedConfig configures a served variant.
type ServedConfig struct {
	// Name names the variant in results (default: "served").
	Name string
	// URL is the server's base URL (http://host:port).
	URL string
	// APIKey authenticates every request; empty for a --dev server.
	APIKey string
	// App is the app in the routes (default "default").
	App string
	// Workflow is the workflow each chat starts (default WorkflowName).
	Workflow string
	// Concurrency sizes the HTTP client's idle connections.
	Concurrency int
	// Server, when set, is the spawned server process behind URL: the
	// variant reads its CPU time and heap.
	Server *ServerProcess
}

// Served runs each turn as a client of a baton server does: `POST
// /api/chats/{app}/{workflow}/start`, a WebSocket on the chat (the real
// coder/websocket client), the person's message once the chat asks for it,
// every envelope read until the chat asks again.
type Served struct {
	cfg    ServedConfig
	base   *url.URL
	client *http.Client
}

// NewServed returns the served variant for cfg.
func NewServed(cfg ServedConfig) (*Served, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://host:port or https://host:port", cfg.URL)
	}
	if cfg.Name == "" {
		cfg.Name = "served"
	}
	if cfg.App == "" {
		cfg.App = "default"
	}
	if cfg.Workflow == "" {
		cfg.Workflow = WorkflowName
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(cfg.Concurrency, 2)
	return &Served{cfg: cfg, base: u, client: &http.Client{Transport: tr}}, nil
}

// Name names the variant.
func (s *Served) Name() string { return s.cfg.Name }

// ServerCPU reads the spawned server's CPU time; it is an error without one.
func (s *Served) ServerCPU(ctx context.Context) (time.Duration, error) {
	n, err := s.ask(ctx, "cpu")
	return time.Duration(n), err
}

// ServerHeap reads the spawned server's live heap; it is an error without one.
func (s *Served) ServerHeap(ctx context.Context) (uint64, error) { return s.ask(ctx, "heap") }

// Commits returns how many transactions the spawned server's store has
// committed.
func (s *Served) Commits(ctx context.Context) (uint64, error) { return s.ask(ctx, "commits") }

// Reads returns how many read queries the spawned server's store has run.
func (s *Served) Reads(ctx context.Context) (uint64, error) { return s.ask(ctx, "reads") }

// ask asks the spawned server (ServerProcess's line protocol); it is
// ErrNoProcess for a server elsewhere.
func (s *Served) ask(ctx context.Context, cmd string) (uint64, error) {
	if s.cfg.Server == nil {
		return 0, ErrNoProcess
	}
	return s.cfg.Server.ask(ctx, cmd)
}

// ErrNoProcess is what ServerCPU and ServerHeap return for a server this
// process did not spawn.
var ErrNoProcess = errors.New("served: the server is not a process this one spawned: its CPU and heap are not readable here")

// Turn starts a chat, opens its WebSocket, sends the message when the chat
// asks for it, and reads every envelope until the chat asks again.
func (s *Served) Turn(ctx context.Context) (Timing, error) {
	t0 := time.Now()
	var tm Timing
	chatID, err := s.start(ctx)
	if err != nil {
		return tm, err
	}
	ws := *s.base
	ws.Scheme = map[string]string{"http": "ws", "https": "wss"}[s.base.Scheme]
	ws.Path = "/ws/" + url.PathEscape(s.cfg.App) + "/" + url.PathEscape(chatID)
	conn, _, err := websocket.Dial(ctx, ws.String(), &websocket.DialOptions{HTTPClient: s.client, HTTPHeader: s.header()})
	if err != nil {
		return tm, fmt.Errorf("served: chat %s: websocket: %w", chatID, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(4 << 20)
	asked := 0 // chat.input_request envelopes seen
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return tm, fmt.Errorf("served: chat %s: read: %w", chatID, err)
		}
		var env struct {
			Type string `json:"type"`
			Data struct {
				Message string `json:"message"`
			} `json:"data"`
		}
		if err := json.Unmarshal(msg, &env); err != nil {
			return tm, fmt.Errorf("served: chat %s: a message that is not JSON: %w", chatID, err)
		}
		switch env.Type {
		case baton.TypeStreamText:
			if tm.FirstToken == 0 && asked > 0 {
				tm.FirstToken = time.Since(t0)
			}
		case baton.TypeChatInputRequest:
			asked++
			if asked == 2 {
				tm.Total = time.Since(t0)
				_ = conn.Close(websocket.StatusNormalClosure, "")
				return tm, nil
			}
			submit, _ := json.Marshal(map[string]string{"type": "user.input.submit", "chat_id": chatID, "content": UserMessage, "id": uuid.NewString()})
			if err := conn.Write(ctx, websocket.MessageText, submit); err != nil {
				return tm, fmt.Errorf("served: chat %s: send the message: %w", chatID, err)
			}
		case baton.TypeChatError, "error":
			return tm, fmt.Errorf("served: chat %s: %s: %s", chatID, env.Type, env.Data.Message)
		case baton.TypeChatRunComplete:
			return tm, fmt.Errorf("served: chat %s: the run completed instead of pausing", chatID)
		}
	}
}

func (s *Served) header() http.Header {
	h := http.Header{}
	if s.cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+s.cfg.APIKey)
	}
	return h
}

// start creates a chat and returns its id.
func (s *Served) start(ctx context.Context) (string, error) {
	u := s.base.JoinPath("api", "chats", s.cfg.App, s.cfg.Workflow, "start")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader([]byte(`{}`)))
	if err != nil {
		return "", err
	}
	req.Header = s.header()
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("served: start: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("served: start: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("served: start: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	var out struct {
		ChatID string `json:"chat_id"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.ChatID == "" {
		return "", fmt.Errorf("served: start: no chat_id in %s", body)
	}
	return out.ChatID, nil
}

// Close closes idle connections and stops the spawned server, if any.
func (s *Served) Close(ctx context.Context) error {
	s.client.CloseIdleConnections()
	if s.cfg.Server != nil {
		return s.cfg.Server.Close(ctx)
	}
	return nil
}
