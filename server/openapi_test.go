package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPI_ListsExactlyTheRoutes compares the paths and methods of
// /api/openapi.json with the routes the server registers.
func TestOpenAPI_ListsExactlyTheRoutes(t *testing.T) {
	e := newEnv(t, withoutEngine())
	r := e.do(t, "GET", "/api/openapi.json", "", nil)
	if r.status != 200 {
		t.Fatalf("openapi: %d", r.status)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi version %q", doc.OpenAPI)
	}
	var documented, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	for _, rt := range e.srv.routes {
		served = append(served, rt.method+" "+rt.pattern)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("openapi.json and the routes differ:\n documented %v\n served     %v", documented, served)
	}
	// Every served route answers (not the catch-all 404 of an unknown path).
	for _, rt := range e.srv.routes {
		p := strings.NewReplacer("{app}", "acme", "{workflow}", "hello", "{chat_id}", "c1", "{id}", "c1").Replace(rt.pattern)
		r := e.do(t, rt.method, p, "", nil)
		if strings.Contains(r.errorMessage(), "no such endpoint") {
			t.Errorf("%s %s is not served", rt.method, rt.pattern)
		}
	}
}
