package workflow_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// TestCheckStartContext: only client_settable variables, each with a value
// of its type (or null); derived and undeclared variables are refused by name.
func TestCheckStartContext(t *testing.T) {
	w := loadExampleWorkflow(t, "generator")
	for _, c := range []struct {
		ctx     string
		mention string // "" when accepted
	}{
		{`{}`, ""},
		{`{"audience": "a bot"}`, ""},
		{`{"audience": null}`, ""},
		{`{"audience": 5}`, "context.audience: must be a str"},
		{`{"audience": ["a"]}`, "context.audience"},
		{`{"interview_complete": true}`, "context.interview_complete: a derived variable"},
		{`{"api_keys_collected": true, "audience": "x"}`, "context.api_keys_collected"},
		{`{"nope": 1}`, "context.nope: not a variable"},
	} {
		var vars map[string]json.RawMessage
		if err := json.Unmarshal([]byte(c.ctx), &vars); err != nil {
			t.Fatal(err)
		}
		err := w.CheckStartContext(vars)
		switch {
		case c.mention == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.ctx, err)
		case c.mention != "" && (err == nil || !errors.Is(err, baton.ErrInvalid) || !strings.Contains(err.Error(), c.mention)):
			t.Errorf("%s: %v, want an invalid error naming %q", c.ctx, err, c.mention)
		}
	}
	// A declared variable the workflow does not mark client_settable.
	h := loadExampleWorkflow(t, "hello")
	if err := h.CheckStartContext(map[string]json.RawMessage{"time_told": json.RawMessage("true")}); err == nil {
		t.Fatal("hello: a client set the derived time_told")
	}
}

// FuzzStartContext decodes a start request's context as the server does and
// checks it: nothing panics, and whatever is accepted is client-settable and
// of its declared type.
func FuzzStartContext(f *testing.F) {
	w := loadExampleWorkflow(f, "generator")
	f.Add([]byte(`{"audience": "x"}`))
	f.Add([]byte(`{"interview_complete": true, "api_keys_collected": true}`))
	f.Add([]byte(`{"audience": 5}`))
	f.Add([]byte(`{"audience": null, "plan_name": {"a": 1}}`))
	f.Add([]byte(`{"__secrets": "x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var vars map[string]json.RawMessage
		if json.Unmarshal(data, &vars) != nil {
			return
		}
		err := w.CheckStartContext(vars)
		if err != nil {
			if !errors.Is(err, baton.ErrInvalid) || !strings.HasPrefix(baton.ErrorMessage(err), "context.") {
				t.Fatalf("unclear error: %v", err)
			}
			return
		}
		for k, raw := range vars {
			if k != "audience" {
				t.Fatalf("accepted %q, which is not client-settable", k)
			}
			var v any
			if json.Unmarshal(raw, &v) != nil {
				t.Fatalf("accepted invalid JSON %q", raw)
			}
			if _, ok := v.(string); !ok && v != nil {
				t.Fatalf("accepted %s for a str variable", raw)
			}
		}
	})
}
