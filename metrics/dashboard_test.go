package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestDashboardSeries checks the Grafana dashboard in docs/grafana against
// the series the collector exports after a generator run and an HTTP
// request: it is valid JSON, every baton_* series an expression names
// exists (a renamed series breaks the test, not the dashboard), and the
// exported series pass promlint.
func TestDashboardSeries(t *testing.T) {
	h := newHarness(t, config{})
	h.driveGenerator()
	h.waitObserved(1)
	h.col.ObserveHTTP("GET", "/api/chats/{app}", 200, time.Millisecond)
	mfs, err := h.col.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
	}

	raw, err := os.ReadFile("../docs/grafana/baton.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana/baton.json: %v", err)
	}
	series := regexp.MustCompile(`baton_[a-z0-9_]+`)
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			for _, name := range series.FindAllString(tg.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && exported[b] {
						base = b
					}
				}
				if !exported[base] {
					t.Errorf("panel %q: %s is not a series baton exports", p.Title, name)
				}
			}
		}
	}
	if exprs < 10 {
		t.Errorf("the dashboard has %d queries", exprs)
	}
}
