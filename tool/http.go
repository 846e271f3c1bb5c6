package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/batonhq/baton"
)

// httpTool POSTs the arguments JSON to a URL. The URL and headers come from
// tools.json with ${VAR} replaced by the call's secret or the environment
// variable VAR, so secrets never live in the file. Every request carries
// Content-Type: application/json, Idempotency-Key (the call's effect key)
// and X-Baton-Chat-Id, X-Baton-Workflow, X-Baton-Agent and
// X-Baton-Tool-Call-Id. The response body, up to the registry's output cap,
// is the result (see output.go); a 4xx or 5xx status is a tool error
// carrying the status and the start of the body.
type httpTool struct {
	reg        *Registry
	name, desc string
	url        string
	headers    map[string]string
	fromEnv    map[string]string
	params     json.RawMessage
	// client connects only to public addresses unless the spec allows
	// private ones, and drops the tool's headers on a redirect to another
	// origin (netguard.go).
	client *http.Client
}

func newHTTPTool(r *Registry, s *Spec) (*httpTool, error) {
	if s.URL == "" {
		return nil, baton.Errorf(baton.EINVALID, "http tool needs a url")
	}
	creds := make([]string, 0, len(s.Headers)+len(s.HeadersFromEnv))
	for h := range s.Headers {
		creds = append(creds, h)
	}
	for h := range s.HeadersFromEnv {
		creds = append(creds, h)
	}
	return &httpTool{
		reg: r, name: s.toolName(), desc: s.Description, url: s.URL, headers: s.Headers, fromEnv: s.HeadersFromEnv,
		params: paramsOrAny(s.Parameters), client: guardedClient(r.opts.httpClient, !s.AllowPrivateNetwork, creds),
	}, nil
}

func (t *httpTool) Name() string                { return t.name }
func (t *httpTool) Description() string         { return t.desc }
func (t *httpTool) Parameters() json.RawMessage { return t.params }

func (t *httpTool) Call(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	// A secret is the person's text: in the URL it is escaped, so it can
	// add no path segment, query parameter or fragment, and it may not
	// choose the host. The operator's own variables (a base URL, say) are
	// used as they are.
	url, err := requestURL(t.url, cc.Secrets)
	if err != nil {
		return errorResult("tool %s: url: %s", t.name, baton.ErrorMessage(err)), nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(args))
	if err != nil {
		return errorResult("tool %s: bad url: %v", t.name, err), nil
	}
	for k, v := range t.headers {
		v, err := expandEnv(v, cc.Secrets)
		if err != nil {
			return errorResult("tool %s: header %s: %s", t.name, k, baton.ErrorMessage(err)), nil
		}
		req.Header.Set(k, v)
	}
	for k, name := range t.fromEnv {
		v, err := lookupSecret(name, cc.Secrets)
		if err != nil {
			return errorResult("tool %s: header %s: %s", t.name, k, baton.ErrorMessage(err)), nil
		}
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.1")
	set := func(k, v string) {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	set("Idempotency-Key", cc.EffectKey)
	set("X-Baton-Chat-Id", cc.ChatID)
	set("X-Baton-Workflow", cc.Workflow)
	set("X-Baton-Agent", cc.Agent)
	set("X-Baton-Tool-Call-Id", cc.ToolCallID)
	injectTrace(ctx, req.Header) // W3C traceparent: the call's execute_tool span

	resp, err := t.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return baton.ToolResult{}, ctx.Err()
		}
		// Unreachable endpoints are the tool's failure, not the registry's.
		return errorResult("tool %s: request failed: %v", t.name, redact(err, url)), nil
	}
	defer resp.Body.Close()
	body := &capWriter{max: t.reg.opts.maxOutput}
	// Read a bounded amount past the cap only to count it; a larger body is
	// cut off without reading the rest.
	if _, err := io.Copy(body, io.LimitReader(resp.Body, int64(t.reg.opts.maxOutput)+1)); err != nil {
		if ctx.Err() != nil {
			return baton.ToolResult{}, ctx.Err()
		}
		return errorResult("tool %s: reading the response: %v", t.name, err), nil
	}
	if resp.StatusCode >= 400 {
		return errorResult("tool %s: HTTP %s: %s", t.name, resp.Status, capText(strings.TrimSpace(string(body.buf)), 2048)), nil
	}
	res := parseOutput(body.buf, body.total)
	if body.total > int64(len(body.buf)) {
		res.Content = strings.Replace(res.Content, fmt.Sprintf("of %d bytes shown", body.total), "bytes shown, more not read", 1)
	}
	return res, nil
}

// redact keeps a URL's secrets (expanded from ${VAR}) out of an error.
func redact(err error, url string) string {
	return strings.ReplaceAll(err.Error(), url, "the tool's url")
}
