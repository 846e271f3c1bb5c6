// Package e2e holds baton's browser tests: the web UI of package web, served
// by the real server and engine on a real SQLite store, driven in Chromium
// through the DevTools protocol (github.com/chromedp/chromedp). They are
// behind the build tag e2e:
//
//	go test -race -count=1 -tags e2e ./e2e/
//
// Chromium is /usr/bin/chromium (Debian's package; BATON_CHROMIUM overrides).
// Screenshots of every step are written to e2e/screenshots/.
package e2e
