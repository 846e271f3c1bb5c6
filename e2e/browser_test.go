//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's Chromium unless BATON_CHROMIUM names another.
func chromiumPath() string {
	if p := os.Getenv("BATON_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// observerJS runs in the page before its own scripts and records what a
// test cannot see by polling: every thinking bubble added and removed, the
// most ever shown at once, and each state a streaming message went through.
const observerJS = `
window.__obs = {added: [], removed: [], maxThinking: 0, streams: {}};
new MutationObserver((records) => {
  const o = window.__obs;
  for (const r of records) {
    for (const n of r.addedNodes) {
      if (n.nodeType === 1 && n.classList.contains("thinking")) o.added.push(n.dataset.agent);
    }
    for (const n of r.removedNodes) {
      if (n.nodeType === 1 && n.classList.contains("thinking")) o.removed.push(n.dataset.agent);
    }
  }
  o.maxThinking = Math.max(o.maxThinking, document.querySelectorAll(".msg.thinking").length);
  for (const m of document.querySelectorAll(".msg.streaming")) {
    const id = m.dataset.messageId;
    const text = m.querySelector(".body").textContent;
    const seen = o.streams[id] || (o.streams[id] = []);
    if (seen[seen.length - 1] !== text) seen.push(text);
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
`

// browser is a Chromium tab with the observer installed and its console
// collected.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string // uncaught exceptions and console errors
}

// newBrowser starts Chromium with a fresh profile. The flags keep it from
// reaching the network (the machine has none; without them it stalls).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath()); err != nil {
		t.Fatalf("chromium: %v (apt-get install chromium, or set BATON_CHROMIUM)", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath()),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			// The developer panel asks /metrics/perf/chats/{id} for totals
			// and falls back to its own sum when the server has no metrics
			// (this one has none): that 404 is expected.
			if strings.Contains(m.URL, "/metrics/perf/chats/") {
				continue
			}
			if m.IsException() || m.Type == "error" {
				b.mu.Lock()
				b.problems = append(b.problems, m.String()+" "+m.URL)
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
		<-done
	})
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: observerJS}); err != nil {
		t.Fatalf("install observer: %v", err)
	}
	return b
}

// do runs actions or fails the test.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls a JavaScript predicate until it is true.
func (b *browser) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, b.text(t, "document.body.innerText"))
	}
}

// eval evaluates an expression in the page.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (b *browser) text(t *testing.T, expr string) string {
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return v
}

// shot saves a screenshot of the viewport under e2e/screenshots/.
func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll("screenshots", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("screenshots", name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// noProblems fails the test if the page threw or logged an error, except
// for the expected ones containing one of allowed.
func (b *browser) noProblems(t *testing.T, allowed ...string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
next:
	for _, p := range b.problems {
		for _, a := range allowed {
			if strings.Contains(p, a) {
				continue next
			}
		}
		t.Errorf("browser console: %s", p)
	}
}

// messagesSeqs returns the sequences of the messages shown, failing on a
// duplicate: a recorded event is shown at most once.
func messageSeqs(t *testing.T, b *browser) []float64 {
	t.Helper()
	seqs := eval[[]float64](t, b, `[...document.querySelectorAll("#messages .msg[data-seq]")].map(n => Number(n.dataset.seq))`)
	seen := map[float64]bool{}
	for _, s := range seqs {
		if seen[s] {
			t.Errorf("message with sequence %v shown twice: %v", s, seqs)
		}
		seen[s] = true
	}
	return seqs
}
