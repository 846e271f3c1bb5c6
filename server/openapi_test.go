package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton"
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

// TestOpenAPI_DocumentsEveryStatus drives every route into the answers it
// can give — without a key, with a key, with the key's bucket empty, with
// the store down, in dev mode without a key — and checks that each status
// seen is among the operation's documented responses.
func TestOpenAPI_DocumentsEveryStatus(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	path := func(pattern string) string {
		return strings.NewReplacer("{app}", "acme", "{workflow}", "bench", "{chat_id}", "c1", "{id}", "c1").Replace(pattern)
	}
	check := func(what string, rt route, status int) {
		t.Helper()
		if _, ok := doc.Paths[rt.pattern][strings.ToLower(rt.method)].Responses[strconv.Itoa(status)]; !ok {
			t.Errorf("%s %s %s answers %d, which openapi.json does not list", what, rt.method, rt.pattern, status)
		}
	}
	limited := newEnv(t, withWorkflows(benchDir), withMetrics(), withConfig(func(c *Config) { c.RateLimit, c.RateBurst = 0.0001, 1 }))
	down := newEnv(t, withWorkflows(benchDir), withMetrics())
	if err := down.store.Close(); err != nil {
		t.Fatal(err)
	}
	dev := newEnv(t, withWorkflows(benchDir), withMetrics(), withConfig(func(c *Config) { c.Dev = true }))
	for _, rt := range limited.srv.routes {
		p := path(rt.pattern)
		if r := limited.do(t, rt.method, p, "", nil); r.status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s without a key: 401 without WWW-Authenticate", rt.method, rt.pattern)
		} else {
			check("without a key", rt, r.status)
		}
		key, hash, err := NewKey() // a bucket of its own
		if err != nil {
			t.Fatal(err)
		}
		if _, err := limited.store.CreateKey(context.Background(), baton.APIKey{Hash: hash, App: "acme", User: "ada", Name: rt.pattern}); err != nil {
			t.Fatal(err)
		}
		check("with a key", rt, limited.do(t, rt.method, p, key, nil).status)
		check("with an empty bucket", rt, limited.do(t, rt.method, p, key, nil).status)
		check("with the store down", rt, down.do(t, rt.method, p, down.keys[scopeAda], nil).status)
		check("in dev mode", rt, dev.do(t, rt.method, p, "", nil).status)
		check("in dev mode with ?app=", rt, dev.do(t, rt.method, p+"?app=acme", "", nil).status)
		check("from a foreign origin", rt, limited.do(t, rt.method, p, key, nil, "Origin", "https://elsewhere.example").status)
	}
}
