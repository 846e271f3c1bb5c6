// Package web is baton's browser chat UI: a page, its script and styles, and
// the vendored libraries it renders model output with (marked for markdown,
// DOMPurify to sanitise it), embedded so that `baton serve` needs no build
// step and loads nothing from elsewhere at run time.
//
// The UI talks only to the API of docs/api.md: it lists workflows and
// chats, starts chats, and follows a chat over its WebSocket, replaying from
// the last sequence it saw when the connection drops. vendor/ is reproduced
// from package.json and package-lock.json with `npm ci --ignore-scripts &&
// npm run vendor`.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed index.html app.js style.css vendor
var assets embed.FS

// contentSecurityPolicy allows the page only its own scripts, styles and
// connections: even markup that got past the sanitiser could neither run
// an inline script nor load one from elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the UI: the page at "/" (also at "/index.html") and its
// assets; any other path is 404. Responses are revalidated on every load
// (no-cache) so a new binary's UI is picked up at once.
func Handler() http.Handler {
	files := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" || name == "index.html" {
			serveIndex(w, r)
			return
		}
		if st, err := fs.Stat(assets, name); err != nil || st.IsDir() {
			http.NotFound(w, r)
			return
		}
		setHeaders(w)
		files.ServeHTTP(w, r)
	})
}

// serveIndex writes the page itself (FileServer would redirect
// /index.html to /).
func serveIndex(w http.ResponseWriter, r *http.Request) {
	b, err := assets.ReadFile("index.html")
	if err != nil {
		http.Error(w, "index.html missing from the build", http.StatusInternalServerError)
		return
	}
	setHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

func setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}
