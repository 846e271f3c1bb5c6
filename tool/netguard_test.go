package tool_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton/tool"
)

// TestHTTPTool_PrivateAddressesRefused: without allow_private_network an
// http tool reaches no loopback, link-local or private address — not by
// IP, not by a name that resolves to one — and the server gets nothing;
// with it, the same tool works.
func TestHTTPTool_PrivateAddressesRefused(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		io.WriteString(w, "internal data")
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Name: "loop", URL: srv.URL + "/x", TimeoutSeconds: 5},
		{Agent: "A", Name: "name", URL: "http://localhost" + port + "/x", TimeoutSeconds: 5},
		{Agent: "A", Name: "metadata", URL: "http://169.254.169.254/latest/meta-data/", TimeoutSeconds: 5},
		{Agent: "A", Name: "private", URL: "http://10.0.0.5/", TimeoutSeconds: 5},
		{Agent: "A", Name: "mapped", URL: "http://[::ffff:127.0.0.1]" + port + "/x", TimeoutSeconds: 5},
		{Agent: "A", Name: "allowed", URL: srv.URL + "/x", TimeoutSeconds: 5, AllowPrivateNetwork: true},
	})
	for _, name := range []string{"loop", "name", "metadata", "private", "mapped"} {
		res := mustCall(t, lookup(t, r, "A", name), callCtx(name), `{}`)
		if res.Status != "error" || !strings.Contains(res.Content, "allow_private_network") {
			t.Errorf("%s: %+v, want refused naming allow_private_network", name, res)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the internal server got %d requests", n)
	}
	if res := mustCall(t, lookup(t, r, "A", "allowed"), callCtx("ok"), `{}`); res.Status != "ok" || res.Content != "internal data" {
		t.Fatalf("with allow_private_network: %+v", res)
	}
}

// TestHTTPTool_RedirectDropsCredentials: a redirect to another host
// carries none of the tool's headers (X-Api-Key, Authorization), while a
// redirect on the same host keeps them.
func TestHTTPTool_RedirectDropsCredentials(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]http.Header{}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen["other"] = req.Header.Clone()
		mu.Unlock()
		io.WriteString(w, "other")
	}))
	defer other.Close()
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) // another host name
	var srvURL string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen[req.URL.Path] = req.Header.Clone()
		mu.Unlock()
		switch req.URL.Path {
		case "/away":
			http.Redirect(w, req, otherURL+"/stolen", http.StatusTemporaryRedirect)
		case "/here":
			http.Redirect(w, req, srvURL+"/final", http.StatusTemporaryRedirect)
		default:
			io.WriteString(w, "same")
		}
	}))
	defer srv.Close()
	srvURL = srv.URL
	t.Setenv("ORDERS_TOKEN", "tok-123")
	spec := func(name, path string) tool.Spec {
		return tool.Spec{Agent: "A", Name: name, URL: srv.URL + path, Headers: map[string]string{"Authorization": "Bearer ${ORDERS_TOKEN}"},
			HeadersFromEnv: map[string]string{"X-Api-Key": "ORDERS_TOKEN"}, TimeoutSeconds: 5, AllowPrivateNetwork: true}
	}
	r := newRegistry(t, []tool.Spec{spec("away", "/away"), spec("here", "/here")})
	if res := mustCall(t, lookup(t, r, "A", "away"), callCtx("a"), `{}`); res.Content != "other" {
		t.Fatalf("away: %+v", res)
	}
	if res := mustCall(t, lookup(t, r, "A", "here"), callCtx("h"), `{}`); res.Content != "same" {
		t.Fatalf("here: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if h := seen["other"]; h == nil || h.Get("X-Api-Key") != "" || h.Get("Authorization") != "" {
		t.Errorf("the other host got the tool's credentials: %v", h)
	}
	if h := seen["/final"]; h == nil || h.Get("X-Api-Key") != "tok-123" || h.Get("Authorization") != "Bearer tok-123" {
		t.Errorf("a redirect on the same host lost the tool's headers: %v", h)
	}
}

// redirector answers every request to a public address with a redirect
// to a loopback one, as a hostile endpoint would.
type redirector struct{ to string }

func (r redirector) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Hostname() == "203.0.113.10" {
		return &http.Response{StatusCode: http.StatusTemporaryRedirect, Header: http.Header{"Location": {r.to}},
			Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestHTTPTool_RedirectToPrivateRefused: a public endpoint that redirects
// to a loopback address does not get the tool there.
func TestHTTPTool_RedirectToPrivateRefused(t *testing.T) {
	var hits atomic.Int64
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		io.WriteString(w, "internal data")
	}))
	defer inner.Close()
	r := newRegistry(t, []tool.Spec{{Agent: "A", Name: "hop", URL: "http://203.0.113.10/start", TimeoutSeconds: 5}},
		tool.WithHTTPClient(&http.Client{Transport: redirector{to: inner.URL + "/x"}}))
	res := mustCall(t, lookup(t, r, "A", "hop"), callCtx("r"), `{}`)
	if res.Status != "error" || !strings.Contains(res.Content, "allow_private_network") || hits.Load() != 0 {
		t.Fatalf("redirect to loopback: %+v (internal hits %d)", res, hits.Load())
	}
}

// TestHTTPTool_SecretCannotChooseTheHost: a secret in the url's host, port
// or user info fails the call before any request is made.
func TestHTTPTool_SecretCannotChooseTheHost(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Name: "host", URL: "http://${ACCOUNT}/x", TimeoutSeconds: 5, AllowPrivateNetwork: true},
		{Agent: "A", Name: "sub", URL: "http://a${ACCOUNT}.example.com/x", TimeoutSeconds: 5, AllowPrivateNetwork: true},
		{Agent: "A", Name: "user", URL: "http://${ACCOUNT}@" + host + "/x", TimeoutSeconds: 5, AllowPrivateNetwork: true},
	})
	for _, name := range []string{"host", "sub", "user"} {
		cc := callCtx(name)
		cc.Secrets = map[string]string{"ACCOUNT": host}
		res, err := lookup(t, r, "A", name).Call(context.Background(), cc, nil)
		if err != nil || res.Status != "error" || !strings.Contains(res.Content, "may not choose") {
			t.Errorf("%s: %+v %v, want refused", name, res, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the server got %d requests", hits.Load())
	}
}
