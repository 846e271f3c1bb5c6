package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpTerminate is how long closing a stdio server waits for it to exit after
// its stdin closes, before it is signalled.
const mcpTerminate = 2 * time.Second

// mcpToolInfo is what a server says about one of its tools.
type mcpToolInfo struct {
	name, description string
	schema            json.RawMessage
}

// mcpConn is the one session of a registry with one MCP server. It starts on
// first use, is shared by every call, and is started again on the call after
// it ends (a crashed stdio server, a lost HTTP session).
type mcpConn struct {
	name string
	srv  MCPServer
	dir  string
	hc   *http.Client
	log  *slog.Logger

	mu     sync.Mutex
	sess   *mcp.ClientSession
	cmd    *exec.Cmd     // the stdio server's process, nil over HTTP
	ended  chan struct{} // closed when sess ends
	tools  []*mcpToolInfo
	closed bool
	wg     sync.WaitGroup // session watchers
}

func newMCPConn(name string, srv MCPServer, dir string, hc *http.Client, log *slog.Logger) *mcpConn {
	return &mcpConn{name: name, srv: srv, dir: dir, hc: hc, log: log.With(slog.String("mcp_server", name))}
}

// session returns the live session, connecting when there is none.
func (c *mcpConn) session(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, baton.ErrClosed
	}
	if c.sess != nil {
		select {
		case <-c.ended:
			c.log.Warn("mcp server session ended; restarting")
			c.dropLocked()
		default:
			return c.sess, nil
		}
	}
	t, cmd, err := c.transport()
	if err != nil {
		return nil, err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "baton", Version: "1"}, nil)
	sess, err := client.Connect(ctx, t, nil)
	if err != nil {
		if cmd != nil {
			_ = killGroup(cmd)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, baton.Errorf(baton.EUNAVAILABLE, "mcp server %s: connect: %w", c.name, err)
	}
	ended := make(chan struct{})
	c.sess, c.cmd, c.ended = sess, cmd, ended
	c.wg.Add(1)
	go func() { // owned by the session: returns when it ends or is closed
		defer c.wg.Done()
		_ = sess.Wait()
		close(ended)
	}()
	return sess, nil
}

func (c *mcpConn) transport() (mcp.Transport, *exec.Cmd, error) {
	if c.srv.Transport != nil {
		return c.srv.Transport(), nil, nil
	}
	if c.srv.Command == "" {
		// The same stance as http tools: public addresses only unless the
		// server allows private ones, and its headers go to its own
		// origin only, never along a redirect to another.
		var creds []string
		for h := range c.srv.Headers {
			creds = append(creds, h)
		}
		for h := range c.srv.HeadersFromEnv {
			creds = append(creds, h)
		}
		hc := guardedClient(c.hc, !c.srv.AllowPrivateNetwork, creds)
		hc.Transport = headerTransport{base: hc.Transport, headers: c.srv.Headers, fromEnv: c.srv.HeadersFromEnv, origin: origin(c.srv.URL)}
		return &mcp.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: hc, DisableStandaloneSSE: true}, nil, nil
	}
	path := c.srv.Command
	if strings.ContainsRune(path, filepath.Separator) && !filepath.IsAbs(path) {
		path = filepath.Join(c.dir, path)
	}
	cmd := exec.Command(path, c.srv.Args...)
	cmd.Dir = c.dir
	// The server gets what a command tool gets from baton's environment
	// and what the workflow declares, never the whole of it: baton's
	// environment holds the key that seals every tenant's secrets.
	cmd.Env = baseEnv(nil)
	for k, v := range c.srv.Env {
		v, err := expandEnv(v, nil)
		if err != nil {
			return nil, nil, baton.Errorf(baton.EINVALID, "mcp server %s: env %s: %w", c.name, k, err)
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = &syncWriter{w: &stderrLog{log: c.log}}
	startOwnGroup(cmd)
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: mcpTerminate}, cmd, nil
}

// dropLocked closes the current session and kills what is left of its
// server. c.mu is held.
func (c *mcpConn) dropLocked() {
	if c.sess == nil {
		return
	}
	_ = c.sess.Close() // the session is gone either way
	if c.cmd != nil {
		_ = killGroup(c.cmd)
	}
	c.sess, c.cmd, c.ended = nil, nil, nil
}

// reset drops sess if it is still the current session, so the next call
// starts a new one.
func (c *mcpConn) reset(sess *mcp.ClientSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == sess {
		c.dropLocked()
	}
}

func (c *mcpConn) close() error {
	c.mu.Lock()
	c.closed = true
	c.dropLocked()
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// listTools returns the server's tools, listed once per registry.
func (c *mcpConn) listTools(ctx context.Context) ([]*mcpToolInfo, error) {
	c.mu.Lock()
	if c.tools != nil {
		defer c.mu.Unlock()
		return c.tools, nil
	}
	c.mu.Unlock()
	sess, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	var out []*mcpToolInfo
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			c.reset(sess)
			return nil, baton.Errorf(baton.EUNAVAILABLE, "mcp server %s: list tools: %w", c.name, err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		out = append(out, &mcpToolInfo{name: t.Name, description: t.Description, schema: schema})
	}
	if out == nil {
		out = []*mcpToolInfo{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tools = out
	return out, nil
}

// mcpTool is one tool of an MCP server, under its (possibly prefixed) name.
type mcpTool struct {
	conn       *mcpConn
	remote     string
	name, desc string
	schema     json.RawMessage
}

func (t *mcpTool) Name() string                { return t.name }
func (t *mcpTool) Description() string         { return t.desc }
func (t *mcpTool) Parameters() json.RawMessage { return t.schema }

func (t *mcpTool) Call(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	sess, err := t.conn.session(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return baton.ToolResult{}, ctx.Err()
		}
		if errors.Is(err, baton.ErrClosed) {
			return baton.ToolResult{}, err
		}
		return errorResult("tool %s: %s", t.name, err.Error()), nil
	}
	params := &mcp.CallToolParams{Name: t.remote, Arguments: args}
	if cc.EffectKey != "" {
		params.Meta = mcp.Meta{"baton/effect_key": cc.EffectKey}
	}
	res, err := sess.CallTool(ctx, params)
	if err != nil {
		if ctx.Err() != nil {
			return baton.ToolResult{}, ctx.Err()
		}
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) {
			// The connection failed (a crashed server): this call is a
			// tool error, and the next call starts the server again.
			t.conn.log.Warn("mcp call failed; the session will be restarted", slog.String("tool", t.remote), slog.Any("err", err))
			t.conn.reset(sess)
		}
		return errorResult("tool %s: mcp server %s: %v", t.name, t.conn.name, err), nil
	}
	out := baton.ToolResult{Status: baton.ToolStatusOK, Content: contentText(res)}
	if res.IsError {
		out.Status = baton.ToolStatusError
	}
	return out, nil
}

// contentText renders an MCP result for the model: the text parts joined by
// newlines, other parts described, the structured content when there is no
// text.
func contentText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else if c.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource %s]", c.Resource.URI))
			}
		default:
			raw, _ := json.Marshal(c)
			parts = append(parts, string(raw))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		return string(raw)
	}
	return strings.Join(parts, "\n")
}

// headerTransport adds configured headers (with ${VAR} expanded) to every
// request to an MCP server over HTTP.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	fromEnv map[string]string
	origin  string // the server's; a request elsewhere (a redirect) gets no headers
}

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sameOrigin := origin(req.URL.String()) == h.origin // a redirect elsewhere gets no credentials
	if len(h.headers)+len(h.fromEnv) > 0 && sameOrigin || tracedContext(req.Context()) {
		req = req.Clone(req.Context())
		injectTrace(req.Context(), req.Header) // a tool call's W3C traceparent
	}
	if len(h.headers)+len(h.fromEnv) > 0 && sameOrigin {
		for k, v := range h.headers {
			v, err := expandEnv(v, nil)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", k, err)
			}
			req.Header.Set(k, v)
		}
		for k, name := range h.fromEnv {
			v, err := lookupSecret(name, nil)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", k, err)
			}
			req.Header.Set(k, v)
		}
	}
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  interface {
		Write([]byte) (int, error)
		flush()
	}
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
