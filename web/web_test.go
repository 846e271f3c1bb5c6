package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	tests := []struct {
		method, path string
		status       int
		ctype        string
		contains     string
	}{
		{"GET", "/", 200, "text/html", `<script type="module" src="app.js">`},
		{"GET", "/index.html", 200, "text/html", "<title>baton</title>"},
		{"GET", "/app.js", 200, "text/javascript", "DOMPurify.sanitize"},
		{"GET", "/style.css", 200, "text/css", ".thinking"},
		{"GET", "/vendor/marked.esm.js", 200, "text/javascript", "export{"},
		{"GET", "/vendor/purify.es.mjs", 200, "text/javascript", "DOMPurify"},
		{"GET", "/vendor/marked.LICENSE.md", 200, "", "MIT"},
		{"GET", "/vendor/dompurify.LICENSE", 200, "", "Apache"},
		{"HEAD", "/", 200, "text/html", ""},
		{"GET", "/nope.js", 404, "", ""},
		{"GET", "/vendor", 404, "", ""},
		{"GET", "/../web.go", 404, "", ""},
		{"POST", "/", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			if tt.status != http.StatusOK {
				return
			}
			if got := res.Header.Get("Content-Type"); !strings.HasPrefix(got, tt.ctype) {
				t.Errorf("Content-Type %q, want %q", got, tt.ctype)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if res.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no nosniff")
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("body does not contain %q", tt.contains)
			}
		})
	}
}

// TestNoRemoteAssets guards the rule that nothing is loaded from elsewhere
// at run time, and that no markup is written but through DOMPurify.
func TestNoRemoteAssets(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "style.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"http://", "https://", "//cdn", "insertAdjacentHTML", "outerHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}

// TestHTMLOnlyThroughDOMPurify: the script's one assignment of markup is
// DOMPurify's output; everything else is set as text.
func TestHTMLOnlyThroughDOMPurify(t *testing.T) {
	b, err := assets.ReadFile("app.js")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "innerHTML") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "container.innerHTML = DOMPurify.sanitize(") {
		t.Errorf("innerHTML assignments: %q, want only the sanitised markdown", lines)
	}
}
