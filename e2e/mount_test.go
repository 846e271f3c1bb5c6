//go:build e2e

package e2e

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestServer_MountsUI: with Config.UI the server serves the page and its
// assets, while unknown API paths keep their JSON 404.
func TestServer_MountsUI(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	tests := []struct {
		method, path string
		status       int
		ctype, body  string
	}{
		{"GET", "/", 200, "text/html", "<title>baton</title>"},
		{"HEAD", "/", 200, "text/html", ""},
		{"GET", "/app.js", 200, "text/javascript", "DOMPurify"},
		{"GET", "/vendor/purify.es.mjs", 200, "text/javascript", "DOMPurify"},
		{"GET", "/nope.css", 404, "", ""},
		{"GET", "/api/nope", 404, "application/json", `"not_found"`},
		{"GET", "/ws/nope", 404, "application/json", `"not_found"`},
		{"POST", "/", 404, "application/json", `"not_found"`},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, be.url()+strings.TrimPrefix(tt.path, "/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tt.status || !strings.HasPrefix(res.Header.Get("Content-Type"), tt.ctype) || !strings.Contains(string(body), tt.body) {
			t.Errorf("%s %s: %d %q %.80q, want %d %q containing %q", tt.method, tt.path, res.StatusCode, res.Header.Get("Content-Type"), body, tt.status, tt.ctype, tt.body)
		}
	}
}
